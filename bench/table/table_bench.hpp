// `dynemb bench table`: HKV's hash-table benchmark on the backend-neutral Table interface.
#pragma once

#include <iosfwd>
#include <string>

#include "bench/table/config.hpp"
#include "bench/table/results.hpp"

namespace dynemb::bench {

// Runs every (dim, load factor) of `config` (validated first): the dynemb table, then on CPU
// the peers on the same keys, one table alive at a time. Progress goes to `progress`.
TableBenchReport run_table_bench(const TableBenchConfig& config, std::ostream& progress);

// bench/results/table-<backend>[-hybrid]-<machine>[-quick].json under the source tree this
// program was built from (or the working directory if that tree is gone).
std::string default_json_path(const TableBenchReport& report);

// Runs the benchmark, prints the tables to `out`, writes the JSON (config.json_path or the
// default) and the optional markdown file; returns the JSON path written.
std::string run_and_report(const TableBenchConfig& config, std::ostream& out,
                           std::ostream& progress);

}  // namespace dynemb::bench

// The two renderings of a run: HKV-layout tables (stdout, markdown file) and the JSON record.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "bench/table/results.hpp"

namespace dynemb::bench {

// Markdown tables in HKV's layout: per dim, rows = load factors, columns = operations; dynemb
// in B-KV/s and M-KV/s, each peer in M-KV/s, the dynemb/peer ratios, and on CUDA the HKV
// anchors with the dynemb/HKV ratios.
std::string render_tables(const TableBenchReport& report);

// The result file: machine, GPU (or null), commit, date, every parameter, every figure, ratios.
nlohmann::json to_json(const TableBenchReport& report);

}  // namespace dynemb::bench

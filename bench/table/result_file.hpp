// The parts every benchmark result file shares: where it goes, and the machine and GPU it names.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "bench/table/bench_clock.hpp"
#include "bench/table/results.hpp"

namespace dynemb::bench {

// {"hostname", "cpu_model", "cores", "memory_bytes"} of `m`.
nlohmann::json machine_json(const MachineInfo& m);

// {"name", "memory_bytes", "compute_capability", "multiprocessors"} of `gpu`; null without one.
nlohmann::json gpu_json(const std::optional<GpuInfo>& gpu);

// The machine's label in result file names: $DYNEMB_BENCH_MACHINE when set (e.g. `h100`, `vm`;
// lent machines all call themselves `vm`), else `hostname`.
std::string machine_label(const std::string& hostname);

// `source_dir`/bench/results/`stem`-<machine_label(hostname)>.json: a stable name, so a new run
// of a benchmark on a machine replaces its current result (bench/results/README.md).
std::string default_result_path(const std::string& source_dir, const std::string& stem,
                                const std::string& hostname);

// Writes `text` to `path`, creating its directory first; throws Error when it cannot.
void write_text_file(const std::string& path, const std::string& text);

// write_text_file of `j`, indented.
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace dynemb::bench

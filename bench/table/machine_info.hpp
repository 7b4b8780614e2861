// Provenance of a result file: the machine, the commit and the date.
#pragma once

#include <string>
#include <vector>

#include "bench/table/results.hpp"

namespace dynemb::bench {

// Hostname, CPU model (/proc/cpuinfo), hardware threads and physical memory of this machine.
MachineInfo query_machine_info();

// The 1, 5 and 15 minute load averages of /proc/loadavg (empty where unreadable).
std::vector<double> load_averages();

// $DYNEMB_GIT_COMMIT when set (a build run from a copy without .git), else `git rev-parse --short
// HEAD` run in `directory` at run time; "unknown" outside a checkout.
std::string git_commit(const std::string& directory);

// The current UTC time as ISO 8601 ("2025-01-31T12:00:00Z").
std::string utc_now_iso8601();

}  // namespace dynemb::bench

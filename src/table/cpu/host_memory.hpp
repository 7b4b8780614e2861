// The host memory the CPU backend's tables may map: the machine's physical memory, or the
// cgroup's limit where that is lower. The tables' arrays are mapped lazily, so without this
// account a process whose tables add up to more than the machine has would be killed by the
// kernel long after creating them; with it, the table that would pass the limit is refused.
#pragma once

#include <cstddef>
#include <string>

namespace dynemb::table::cpu {

// Bytes the process's CPU tables hold mapped now (LargeArray's mappings).
size_t mapped_table_bytes();
// Bytes the CPU tables may map in all: physical memory, or the cgroup limit where lower.
size_t host_memory_limit();
// Throws OutOfMemory "<what>: needs <bytes> of host memory; ..." when mapping `bytes` more would
// take the tables past host_memory_limit(). A check, not a reservation: storages created at the
// same moment on several threads may pass it together.
void require_host_memory(size_t bytes, const std::string& what);
// Replaces host_memory_limit() (0: the machine's again), for tests.
void set_host_memory_limit_for_testing(size_t bytes);

// Called by map_zeroed / unmap.
void count_mapped(size_t bytes);
void count_unmapped(size_t bytes);

}  // namespace dynemb::table::cpu

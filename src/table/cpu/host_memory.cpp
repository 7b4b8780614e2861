#include "cpu/host_memory.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>

#include "dynemb/core/error.hpp"

namespace dynemb::table::cpu {
namespace {

std::atomic<size_t> mapped{0};
std::atomic<size_t> limit_override{0};

// The cgroup v2 memory limit of this process, or 0 when there is none.
size_t cgroup_limit() {
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  try {
    return static_cast<size_t>(std::stoull(text));
  } catch (...) {
    return 0;
  }
}

size_t machine_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  size_t physical =
      pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : ~size_t{0};
  const size_t cgroup = cgroup_limit();
  return cgroup != 0 && cgroup < physical ? cgroup : physical;
}

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

}  // namespace

size_t mapped_table_bytes() {
  return mapped.load(std::memory_order_relaxed);
}

size_t host_memory_limit() {
  const size_t forced = limit_override.load(std::memory_order_relaxed);
  if (forced != 0) return forced;
  static const size_t limit = machine_limit();
  return limit;
}

void require_host_memory(size_t bytes, const std::string& what) {
  const size_t held = mapped_table_bytes();
  const size_t limit = host_memory_limit();
  if (bytes <= limit && held <= limit - bytes) return;
  throw OutOfMemory(what + ": needs " + gib(bytes) + " of host memory; dynemb's CPU tables hold " +
                    gib(held) + " of the " + gib(limit) +
                    " this process may use (physical memory or its cgroup's limit)");
}

void set_host_memory_limit_for_testing(size_t bytes) {
  limit_override.store(bytes, std::memory_order_relaxed);
}

void count_mapped(size_t bytes) {
  mapped.fetch_add(bytes, std::memory_order_relaxed);
}

void count_unmapped(size_t bytes) {
  mapped.fetch_sub(bytes, std::memory_order_relaxed);
}

}  // namespace dynemb::table::cpu

#include "bench/table/config.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <sstream>
#include <thread>

#include "dynemb/core/error.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::bench {
namespace {

constexpr const char* kWhere = "dynemb bench table";
constexpr uint32_t kMaxDim = 4096;
constexpr uint64_t kMaxBatch = uint64_t{1} << 26;
constexpr uint64_t kMaxCapacity = uint64_t{1} << 36;
constexpr uint32_t kMaxRepeats = 100;
constexpr uint32_t kMaxThreads = 1024;

std::string str(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

TableBenchConfig quick_table_bench_config() {
  TableBenchConfig config;
  config.dims = {32};
  config.capacity = uint64_t{1} << 16;
  config.batch = uint64_t{1} << 14;
  config.quick = true;
  return config;
}

uint64_t table_capacity(const TableBenchConfig& config, uint32_t dim) {
  if (config.capacity) return *config.capacity;
  if (config.backend == Backend::kCpu) return uint64_t{1} << 23;
  if (dim <= 32) return uint64_t{1} << 27;
  // 64M slots at dim 64 (16 GiB of values); the same value bytes for larger dims.
  const uint64_t slots = (uint64_t{1} << 26) * 64 / dim;
  return std::max<uint64_t>(std::bit_floor(slots), uint64_t{1} << 20);
}

uint32_t effective_threads(const TableBenchConfig& config) {
  if (config.threads > 0) return config.threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

void validate(const TableBenchConfig& c) {
  require(!c.dims.empty(), kWhere, "--dims", "(empty)", "give at least one dim");
  for (uint32_t dim : c.dims) {
    require(dim >= 1 && dim <= kMaxDim, kWhere, "--dims", std::to_string(dim),
            "each must be in [1, " + std::to_string(kMaxDim) + "]");
  }
  require(!c.load_factors.empty(), kWhere, "--load-factors", "(empty)",
          "give at least one load factor");
  for (double lf : c.load_factors) {
    require(std::isfinite(lf) && lf > 0.0 && lf <= 1.0, kWhere, "--load-factors", str(lf),
            "each must be in (0, 1]");
  }
  require(c.batch >= 1 && c.batch <= kMaxBatch, kWhere, "--batch", std::to_string(c.batch),
          "must be in [1, " + std::to_string(kMaxBatch) + "]");
  require(c.repeats >= 1 && c.repeats <= kMaxRepeats, kWhere, "--repeats",
          std::to_string(c.repeats), "must be in [1, " + std::to_string(kMaxRepeats) + "]");
  require(c.threads <= kMaxThreads, kWhere, "--threads", std::to_string(c.threads),
          "must be in [0, " + std::to_string(kMaxThreads) + "] (0 = all hardware threads)");
  require(!c.ops.empty(), kWhere, "--ops", "(empty)", "give at least one of " + op_names_list());
  if (c.capacity) {
    const uint64_t cap = *c.capacity;
    require(cap >= kBenchBucketCapacity && cap % kBenchBucketCapacity == 0 && cap <= kMaxCapacity,
            kWhere, "--capacity", std::to_string(cap),
            "must be a multiple of " + std::to_string(kBenchBucketCapacity) + " in [" +
                std::to_string(kBenchBucketCapacity) + ", 2^36]");
  }
  const double min_lf = *std::min_element(c.load_factors.begin(), c.load_factors.end());
  for (uint32_t dim : c.dims) {
    const uint64_t cap = table_capacity(c, dim);
    const double present = std::ceil(kPresentFraction * static_cast<double>(c.batch));
    const double stored = std::floor(min_lf * static_cast<double>(cap));
    require(present <= stored, kWhere, "--batch", std::to_string(c.batch),
            "its 60% present keys (" + str(present) +
                ") must not exceed the keys stored at load "
                "factor " +
                str(min_lf) + " of capacity " + std::to_string(cap) + " (" + str(stored) +
                "): lower --batch or raise --capacity");
  }
  if (c.backend == Backend::kCpu) {
    require(!c.hbm_budget_gb, kWhere, "--hbm-budget-gb", str(c.hbm_budget_gb.value_or(0)),
            "only valid with --backend cuda");
  } else {
    if (c.hbm_budget_gb) {
      require(std::isfinite(*c.hbm_budget_gb) && *c.hbm_budget_gb > 0 &&
                  *c.hbm_budget_gb <= 1024 * 1024,
              kWhere, "--hbm-budget-gb", str(*c.hbm_budget_gb), "must be in (0, 1048576]");
    }
    if (!cuda_backend_available()) {
      throw NotAvailable(std::string(kWhere) +
                         ": --backend = cuda, but this binary has no CUDA backend or no CUDA "
                         "device is visible");
    }
  }
}

}  // namespace dynemb::bench

// Timing of one table call on a backend: steady_clock on CPU, CUDA events on a created stream.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "dynemb/core/options.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::bench {

// Measures the time between start() and stop() of the work issued on stream().
class BenchClock {
 public:
  virtual ~BenchClock() = default;
  // The stream every table call of the benchmark is issued on (nullptr on CPU).
  virtual StreamHandle stream() const = 0;
  // Marks the start of the timed region.
  virtual void start() = 0;
  // Marks its end, waits for the work issued in between, and returns its seconds.
  virtual double stop() = 0;
  // Waits until all work issued on stream() is done.
  virtual void synchronize() = 0;
};

// User + system CPU seconds this process has used so far (all threads; getrusage).
double process_cpu_seconds();

// A clock for `backend` (the CUDA one creates its own stream on `device`).
std::unique_ptr<BenchClock> make_bench_clock(Backend backend, int device = 0);

// The CUDA clock (bench/table/cuda_support.cpp); NotAvailable in builds without CUDA.
std::unique_ptr<BenchClock> make_cuda_bench_clock(int device);

// A GPU as the result file names it.
struct GpuInfo {
  std::string name;
  uint64_t memory_bytes = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessors = 0;
};

// The properties of CUDA device `device`, or nullopt where there is no CUDA backend or device.
std::optional<GpuInfo> query_gpu_info(int device);

}  // namespace dynemb::bench

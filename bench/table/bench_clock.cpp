#include "bench/table/bench_clock.hpp"

#include <sys/resource.h>

#include <chrono>

namespace dynemb::bench {
namespace {

// Wall-clock time of synchronous CPU calls.
class SteadyClock final : public BenchClock {
 public:
  StreamHandle stream() const override { return nullptr; }
  void start() override { begin_ = std::chrono::steady_clock::now(); }
  double stop() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin_).count();
  }
  void synchronize() override {}

 private:
  std::chrono::steady_clock::time_point begin_{};
};

}  // namespace

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::unique_ptr<BenchClock> make_bench_clock(Backend backend, int device) {
  if (backend == Backend::kCuda) return make_cuda_bench_clock(device);
  return std::make_unique<SteadyClock>();
}

}  // namespace dynemb::bench

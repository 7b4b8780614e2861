// The CUDA parts of the table benchmark: event timing on a created stream, device properties.
#include "bench/table/bench_clock.hpp"
#include "bench/table/pcie_floor.hpp"
#include "bench/table/random_rows.hpp"
#include "dynemb/core/error.hpp"

#include <algorithm>
#include <cstdlib>

#if defined(DYNEMB_WITH_CUDA)
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#endif

namespace dynemb::bench {

#if defined(DYNEMB_WITH_CUDA)
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw CudaError(std::string("dynemb bench table: ") + what + ": " + cudaGetErrorName(status) +
                    ": " + cudaGetErrorString(status));
  }
}

// Times the work between two events recorded on its own stream.
class CudaEventClock final : public BenchClock {
 public:
  explicit CudaEventClock(int device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreate(&begin_), "cudaEventCreate");
    check(cudaEventCreate(&end_), "cudaEventCreate");
  }
  ~CudaEventClock() override {
    cudaEventDestroy(begin_);
    cudaEventDestroy(end_);
    cudaStreamDestroy(stream_);
  }
  StreamHandle stream() const override { return stream_; }
  void start() override {
    if (profile_timed_) check(cudaProfilerStart(), "cudaProfilerStart");
    check(cudaEventRecord(begin_, stream_), "cudaEventRecord");
  }
  double stop() override {
    check(cudaEventRecord(end_, stream_), "cudaEventRecord");
    check(cudaEventSynchronize(end_), "cudaEventSynchronize");
    if (profile_timed_) check(cudaProfilerStop(), "cudaProfilerStop");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, begin_, end_), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e-3;
  }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t begin_ = nullptr;
  cudaEvent_t end_ = nullptr;
  // DYNEMB_BENCH_PROFILE_TIMED set: the timed calls alone are profiled (ncu or nsys started
  // with profiling off from the start), not the fill and restore calls around them.
  bool profile_timed_ = std::getenv("DYNEMB_BENCH_PROFILE_TIMED") != nullptr;
};

}  // namespace

std::unique_ptr<BenchClock> make_cuda_bench_clock(int device) {
  return std::make_unique<CudaEventClock>(device);
}

std::optional<PcieBandwidth> measure_pcie_bandwidth(
    int device, const std::map<uint32_t, size_t>& host_regions) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device >= count) return std::nullopt;
  check(cudaSetDevice(device), "cudaSetDevice");
  constexpr size_t kBytes = size_t{1} << 30;
  void* host = nullptr;
  void* dev = nullptr;
  check(cudaHostAlloc(&host, kBytes, cudaHostAllocDefault), "cudaHostAlloc (1 GiB)");
  if (cudaMalloc(&dev, kBytes) != cudaSuccess) {
    cudaFreeHost(host);
    return std::nullopt;
  }
  CudaEventClock clock(device);
  auto best = [&](void* dst, const void* src, cudaMemcpyKind kind) {
    double seconds = 1e30;
    for (int i = 0; i < 3; ++i) {
      clock.start();
      check(cudaMemcpyAsync(dst, src, kBytes, kind, static_cast<cudaStream_t>(clock.stream())),
            "cudaMemcpyAsync");
      seconds = std::min(seconds, clock.stop());
    }
    return static_cast<double>(kBytes) / seconds;
  };
  PcieBandwidth b;
  b.host_to_device = best(dev, host, cudaMemcpyHostToDevice);
  b.device_to_host = best(host, dev, cudaMemcpyDeviceToHost);
  cudaFree(dev);
  cudaFreeHost(host);
  for (const auto& [dim, bytes] : host_regions)
    b.random_rows[dim] = measure_random_rows(dim, bytes);
  return b;
}

std::optional<GpuInfo> query_gpu_info(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device >= count) return std::nullopt;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return std::nullopt;
  GpuInfo info;
  info.name = prop.name;
  info.memory_bytes = prop.totalGlobalMem;
  info.compute_capability_major = prop.major;
  info.compute_capability_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  return info;
}

#else

std::unique_ptr<BenchClock> make_cuda_bench_clock(int) {
  throw NotAvailable("dynemb bench table: --backend = cuda, but this build has no CUDA backend");
}

std::optional<GpuInfo> query_gpu_info(int) {
  return std::nullopt;
}

std::optional<PcieBandwidth> measure_pcie_bandwidth(int, const std::map<uint32_t, size_t>&) {
  return std::nullopt;
}

#endif

}  // namespace dynemb::bench

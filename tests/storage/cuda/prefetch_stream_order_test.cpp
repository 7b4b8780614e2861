// A prefetch on the CUDA fast tier reads its keys after the work issued on the stream it is
// given, the default stream (nullptr) included. Here that stream writes the next batch's keys
// late (a host function that sleeps, then an asynchronous copy), while the buffer still holds
// the last batch's keys, which are all in the fast tier: a prefetch that read the buffer early
// would find nothing to bring up, report every key up, and the next step's lookup (which trusts
// it and reads nothing back) would find none of its keys. Over a private store the prefetch is
// staged on the device; over a shared one it takes the host path: both read the keys on the
// table's own stream.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "dynemb/storage/host_storage.hpp"

namespace dynemb::testing {
namespace {

using K = int64_t;

void cuda_ok(cudaError_t status) {
  ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
}

// Device or pinned memory freed at scope exit.
struct DeviceMemory {
  void* p = nullptr;
  bool pinned = false;
  ~DeviceMemory() {
    if (p != nullptr) pinned ? cudaFreeHost(p) : cudaFree(p);
  }
};

void sleep_on_stream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
}

// (staged over a private store, keys written on the default stream)
class CachedPrefetchOrder : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(CachedPrefetchOrder, KeysWrittenLateOnTheGivenStreamAreTheOnesBroughtUp) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const auto [staged, default_stream] = GetParam();
  TestRng rng;
  constexpr uint32_t dim = 4;
  constexpr size_t n = 96;
  constexpr int kSteps = 6, kLateFrom = 3;  // steps before kLateFrom warm every buffer up
  TableOptions fo;
  fo.dim = dim;
  fo.init_capacity = fo.max_capacity = 4096;  // every batch fits: nothing is evicted
  fo.bucket_capacity = 32;
  fo.max_load_factor = 1.0;
  fo.score_policy = ScorePolicy::kStep;
  fo.initializer.kind = InitializerKind::kUniform;
  fo.initializer.seed = rng.next();
  auto lower = std::make_shared<storage::HostStorage>(storage::HostStorageOptions{dim});
  storage::CachedTable<K> cached(Backend::kCuda, fo, lower,
                                 storage::CachingOptions{staged, 16, staged});
  TableOptions bo = fo;
  bo.init_capacity = bo.max_capacity = 1 << 14;
  auto initial = make_table<K>(Backend::kCpu, bo);  // the rows new keys must get
  cudaStream_t stream = nullptr;
  if (!default_stream) cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Batch b: n fresh keys; kept in device buffer b % 2, copied from pinned buffer b % 2.
  const K first = static_cast<K>(rng.uniform(1, uint64_t{1} << 40));
  const auto batch = [&](int b) {
    std::vector<K> keys(n);
    for (size_t j = 0; j < n; ++j) keys[j] = first + static_cast<K>(b * n + (j * 37) % n);
    return keys;
  };
  DeviceMemory dkeys[2], hkeys[2], dptrs, dfound;
  for (int b = 0; b < 2; ++b) {
    cuda_ok(cudaMalloc(&dkeys[b].p, n * sizeof(K)));
    cuda_ok(cudaHostAlloc(&hkeys[b].p, n * sizeof(K), cudaHostAllocDefault));
    hkeys[b].pinned = true;
  }
  cuda_ok(cudaMalloc(&dptrs.p, n * sizeof(float*)));
  cuda_ok(cudaMalloc(&dfound.p, n * sizeof(bool)));
  const std::vector<K> b0 = batch(0);
  for (int b = 0; b < 2; ++b)  // both hold batch 0 (one of them: the stale keys of step 1)
    cuda_ok(cudaMemcpy(dkeys[b].p, b0.data(), n * sizeof(K), cudaMemcpyHostToDevice));
  int sleep_ms = 100;
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<K> keys = batch(step);
    auto* use = static_cast<K*>(dkeys[step % 2].p);
    cached.find_or_insert_pointers(n, use, static_cast<float**>(dptrs.p),
                                   static_cast<bool*>(dfound.p), nullptr, stream);
    cuda_ok(cudaStreamSynchronize(stream));
    std::vector<float*> ptrs(n);
    std::unique_ptr<bool[]> found(new bool[n]);
    cuda_ok(cudaMemcpy(ptrs.data(), dptrs.p, n * sizeof(float*), cudaMemcpyDeviceToHost));
    cuda_ok(cudaMemcpy(found.get(), dfound.p, n, cudaMemcpyDeviceToHost));
    std::vector<float> want(n * dim), row(dim);
    initial->find_or_insert(n, keys.data(), want.data(), nullptr);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NE(ptrs[i], nullptr) << "key " << keys[i] << " got no row";
      EXPECT_FALSE(found[i]) << "key " << keys[i] << " is new";
      cuda_ok(cudaMemcpy(row.data(), ptrs[i], dim * sizeof(float), cudaMemcpyDeviceToHost));
      for (uint32_t c = 0; c < dim; ++c) ASSERT_EQ(row[c], want[i * dim + c]) << "key " << keys[i];
    }
    if (step + 1 == kSteps) break;
    // The next batch goes into the buffer holding the last batch's keys, on `stream`; from
    // kLateFrom on it lands only after the stream sleeps, long after the prefetch is issued.
    const std::vector<K> next = batch(step + 1);
    std::copy(next.begin(), next.end(), static_cast<K*>(hkeys[(step + 1) % 2].p));
    if (step + 1 >= kLateFrom) cuda_ok(cudaLaunchHostFunc(stream, sleep_on_stream, &sleep_ms));
    cuda_ok(cudaMemcpyAsync(dkeys[(step + 1) % 2].p, hkeys[(step + 1) % 2].p, n * sizeof(K),
                            cudaMemcpyHostToDevice, stream));
    if (step + 1 < kLateFrom) cuda_ok(cudaStreamSynchronize(stream));
    cached.prefetch_step(n, static_cast<const K*>(dkeys[(step + 1) % 2].p), stream);
    cached.advance_step();
  }
  const storage::CachingStats s = cached.caching_stats();
  std::cout << "staged " << s.staged_prefetches << ", fell back " << s.staged_fallbacks
            << ", unsynchronized calls " << s.unsynced_calls << ", unserved " << s.unserved
            << std::endl;
  EXPECT_EQ(s.unserved, 0u);
  EXPECT_EQ(s.unsynced_calls, static_cast<uint64_t>(kSteps - 1)) << "every prefetch trusted";
  EXPECT_EQ(s.staged_prefetches, staged ? static_cast<uint64_t>(kSteps - 1) : 0u);
  EXPECT_EQ(s.staged_fallbacks, 0u);
  EXPECT_EQ(cached.size(), static_cast<size_t>(kSteps) * n);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Paths, CachedPrefetchOrder,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<bool, bool>>& info) {
                           return std::string(std::get<0>(info.param) ? "Staged" : "HostPath") +
                                  (std::get<1>(info.param) ? "DefaultStream" : "OwnStream");
                         });

}  // namespace
}  // namespace dynemb::testing

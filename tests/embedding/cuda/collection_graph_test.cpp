// EmbeddingCollection's host-sync-free training step captured once into a CUDA graph and replayed
// on new batches (copied into the captured input buffers) gives the same pooled outputs, rows and
// counts, bit for bit, as a twin collection stepped eagerly with the synchronizing step, in every
// value type. The graph's STEP score stays the captured step's (scores are not compared).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding_collection.hpp"

namespace dynemb {
namespace {

using K = int64_t;

void check(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

// Captures the work issued on `stream` between construction and end(); a capture an exception
// leaves open is ended (and its graph dropped) by the destructor, so later tests see no open
// capture.
class Capture {
 public:
  explicit Capture(cudaStream_t stream) : stream_(stream) {
    open_ = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) == cudaSuccess;
  }
  ~Capture() {
    if (!open_) return;
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
  bool opened() const { return open_; }
  // Ends the capture; the graph (owned by the caller) or null when the capture failed.
  cudaGraph_t end() {
    cudaGraph_t graph = nullptr;
    open_ = false;
    if (cudaStreamEndCapture(stream_, &graph) != cudaSuccess) return nullptr;
    return graph;
  }

 private:
  cudaStream_t stream_;
  bool open_ = false;
};

template <class T>
std::vector<T> download(const BackendBuffer<T>& b, size_t n) {
  std::vector<T> out(n);
  if (n > 0) copy_from_backend(Backend::kCuda, out.data(), b.data(), n * sizeof(T));
  return out;
}

// Rows (and found flags) a table holds for `keys`.
std::vector<float> rows_of(Table<K>& table, const std::vector<K>& keys) {
  const uint32_t d = table.dim();
  BackendBuffer<K> k(Backend::kCuda, keys.size());
  k.upload(keys.data(), keys.size());
  BackendBuffer<float> rows(Backend::kCuda, keys.size() * d);
  BackendBuffer<bool> found(Backend::kCuda, keys.size());
  table.find(keys.size(), k.data(), rows.data(), found.data(), nullptr, nullptr);
  backend_synchronize(Backend::kCuda);
  std::vector<float> out = download(rows, keys.size() * d);
  const std::vector<bool> f = [&] {
    std::vector<uint8_t> raw(keys.size());
    copy_from_backend(Backend::kCuda, raw.data(), found.data(), raw.size());
    return std::vector<bool>(raw.begin(), raw.end());
  }();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!f[i]) out[i * d] = -12345.0f;  // a row not stored differs from any stored one
  }
  return out;
}

TEST(EmbeddingCollectionGraph, ReplaysMatchEagerSteps) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (const ValueType type : {ValueType::kFloat32, ValueType::kBFloat16, ValueType::kFloat16}) {
    SCOPED_TRACE(to_string(type));
    constexpr size_t kTables = 3, kBags = 700, kPerBag = 6;
    const uint32_t dim = 32;
    std::vector<EmbeddingOptions> options;
    for (size_t t = 0; t < kTables; ++t) {
      EmbeddingOptions o;
      o.dim = dim;
      o.value_type = type;
      o.table.init_capacity = o.table.max_capacity = 1 << 15;
      o.table.score_policy = ScorePolicy::kStep;
      // Captured calls read no state back: one stream (no cross-stream events), a fixed capacity,
      // and no ERROR check (which reads the call's state on the host).
      o.table.thread_safe = false;
      o.table.safe_check = SafeCheck::kWarning;
      o.table.initializer.kind = InitializerKind::kUniform;
      o.table.initializer.seed = rng();
      o.optimizer.kind = OptimizerKind::kAdam;
      o.optimizer.learning_rate = 0.02f;
      options.push_back(o);
    }
    EmbeddingCollection<K> eager(Backend::kCuda, options);
    EmbeddingCollection<K> graphed(Backend::kCuda, options);
    graphed.set_host_sync_free(true, 18);

    // The captured inputs: fixed buffers, refilled before every step.
    const size_t ids = kBags * kPerBag;
    std::vector<BackendBuffer<K>> keys;
    std::vector<int64_t> host_offsets(kBags + 1);
    for (size_t b = 0; b <= kBags; ++b) host_offsets[b] = static_cast<int64_t>(b * kPerBag);
    BackendBuffer<int64_t> offsets(Backend::kCuda, kBags + 1);
    offsets.upload(host_offsets.data(), host_offsets.size());
    std::vector<EmbeddingBatch<K>> batches;
    for (size_t t = 0; t < kTables; ++t) {
      keys.emplace_back(Backend::kCuda, ids);
      batches.push_back({keys[t].data(), ids, offsets.data(), kBags, nullptr, PoolingMode::kSum});
    }
    BackendBuffer<float> grad(Backend::kCuda, kTables * kBags * dim);
    BackendBuffer<float> out(Backend::kCuda, kTables * kBags * dim);
    BackendBuffer<float> eager_out(Backend::kCuda, kTables * kBags * dim);
    std::vector<std::set<K>> seen(kTables);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    auto load = [&] {
      for (size_t t = 0; t < kTables; ++t) {
        std::vector<K> k(ids);
        for (auto& key : k) {
          key = rng() % 3 == 0 ? static_cast<K>(rng() % 16) : static_cast<K>(rng() % 200000);
          seen[t].insert(key);
        }
        keys[t].upload(k.data(), k.size());
      }
      std::vector<float> g(kTables * kBags * dim);
      for (auto& x : g) x = normal(rng);
      grad.upload(g.data(), g.size());
    };

    cudaStream_t created = nullptr;
    check(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "stream");
    const std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> owned(created,
                                                                           &cudaStreamDestroy);
    cudaStream_t stream = owned.get();
    auto eager_step = [&] {
      eager.forward(batches, eager_out.data(), dim, true);
      eager.backward(grad.data(), dim);
    };
    // Step 0 warms both (buffers grown, the graphed one's step issued once without capture).
    load();
    eager_step();
    graphed.forward(batches, out.data(), dim, true, stream);
    graphed.backward(grad.data(), dim, stream);
    check(cudaStreamSynchronize(stream), "warm-up");

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    {
      Capture capture(stream);
      ASSERT_TRUE(capture.opened());
      graphed.forward(batches, out.data(), dim, true, stream);
      graphed.backward(grad.data(), dim, stream);
      graph = capture.end();
    }
    ASSERT_NE(graph, nullptr) << "the step could not be captured";
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");

    for (int step = 1; step <= 4; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      load();
      eager_step();
      check(cudaGraphLaunch(exec, stream), "launch");
      check(cudaStreamSynchronize(stream), "replay");
      backend_synchronize(Backend::kCuda);
      EXPECT_EQ(download(out, kTables * kBags * dim), download(eager_out, kTables * kBags * dim));
      const EmbeddingCollectionStats a = graphed.stats(), b = eager.stats();
      EXPECT_EQ(a.refused_batches, 0u);
      for (size_t t = 0; t < kTables; ++t) {
        SCOPED_TRACE("table " + std::to_string(t));
        const std::vector<K> all(seen[t].begin(), seen[t].end());
        EXPECT_EQ(rows_of(graphed.table(t), all), rows_of(eager.table(t), all));
        EXPECT_EQ(a.tables[t].lookups, b.tables[t].lookups);
        EXPECT_EQ(a.tables[t].unique_lookups, b.tables[t].unique_lookups);
        EXPECT_EQ(a.tables[t].rows_created, b.tables[t].rows_created);
        EXPECT_EQ(graphed.table(t).size(), eager.table(t).size());
      }
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

}  // namespace
}  // namespace dynemb

// Two Embeddings trained at the same time, each on its own host thread and CUDA stream, end with
// the same rows and produce the same outputs, bit for bit, as the same two trained one after the
// other on the default stream: they share no mutable state (no common scratch, counters or
// read-back words), and each synchronizes only its own stream.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "embedding/concurrent_training.hpp"

namespace dynemb {
namespace {

using embedding_test::make_training_run;
using embedding_test::outputs_of;
using embedding_test::rows_of;
using embedding_test::same_rows;
using embedding_test::train;
using embedding_test::training_options;
using embedding_test::TrainingRun;

TEST(EmbeddingStreams, TablesOnTheirOwnThreadsAndStreamsMatchASequentialRun) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Backend gpu = Backend::kCuda;
  constexpr int kTables = 3;
  const OptimizerKind kinds[kTables] = {OptimizerKind::kAdam, OptimizerKind::kRowWiseAdaGrad,
                                        OptimizerKind::kFtrl};
  const uint32_t dims[kTables] = {128, 12, 36};
  const PoolingMode modes[kTables] = {PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kSum};
  std::vector<EmbeddingOptions> options;
  std::vector<TrainingRun> runs;
  for (int t = 0; t < kTables; ++t) {
    options.push_back(training_options(dims[t], kinds[t], rng()));
    // 3000 bags of up to 12 ids: hot keys of several gradient chunks.
    runs.push_back(make_training_run(gpu, rng, 15, 3000, dims[t], modes[t], t == 1));
  }
  std::vector<std::vector<std::vector<float>>> outputs;
  std::vector<std::map<int64_t, std::vector<float>>> rows;
  for (int t = 0; t < kTables; ++t) {
    Embedding<int64_t> e(gpu, options[t]);
    train(e, runs[t], nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    outputs.push_back(outputs_of(runs[t]));
    rows.push_back(rows_of(e));
  }

  std::vector<std::unique_ptr<Embedding<int64_t>>> tables;
  cudaStream_t streams[kTables];
  for (int t = 0; t < kTables; ++t) {
    tables.push_back(std::make_unique<Embedding<int64_t>>(gpu, options[t]));
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[t], cudaStreamNonBlocking), cudaSuccess);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kTables; ++t) {
    threads.emplace_back([&, t] {
      train(*tables[t], runs[t], streams[t]);
      cudaStreamSynchronize(streams[t]);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kTables; ++t) {
    SCOPED_TRACE("table " + std::to_string(t));
    EXPECT_TRUE(same_rows(rows_of(*tables[t]), rows[t]));
    EXPECT_EQ(outputs_of(runs[t]), outputs[t]);
    ASSERT_EQ(cudaStreamDestroy(streams[t]), cudaSuccess);
  }
}

}  // namespace
}  // namespace dynemb

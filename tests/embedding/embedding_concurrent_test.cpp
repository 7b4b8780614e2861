// Two Embeddings trained at the same time on two threads end with the same rows and produce the
// same outputs, bit for bit, as the same two trained one after the other: they share no mutable
// state (CPU; tests/embedding/cuda/ does the same on two CUDA streams).
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

TEST(EmbeddingConcurrent, TwoTablesOnTwoThreadsMatchASequentialRun) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Backend cpu = Backend::kCpu;
  const EmbeddingOptions a_options = training_options(16, OptimizerKind::kAdam, rng());
  const EmbeddingOptions b_options = training_options(12, OptimizerKind::kRowWiseAdaGrad, rng());
  TrainingRun a_run = make_training_run(cpu, rng, 20, 300, 16, PoolingMode::kSum, true);
  TrainingRun b_run = make_training_run(cpu, rng, 20, 200, 12, PoolingMode::kMean, false);

  Embedding<int64_t> a_seq(cpu, a_options), b_seq(cpu, b_options);
  train(a_seq, a_run, nullptr);
  const auto a_out = outputs_of(a_run);
  train(b_seq, b_run, nullptr);
  const auto b_out = outputs_of(b_run);

  Embedding<int64_t> a(cpu, a_options), b(cpu, b_options);
  std::thread other([&] { train(b, b_run, nullptr); });
  train(a, a_run, nullptr);
  other.join();
  EXPECT_TRUE(same_rows(rows_of(a), rows_of(a_seq)));
  EXPECT_TRUE(same_rows(rows_of(b), rows_of(b_seq)));
  EXPECT_EQ(outputs_of(a_run), a_out);
  EXPECT_EQ(outputs_of(b_run), b_out);
  EXPECT_EQ(a.stats().unique_lookups, a_seq.stats().unique_lookups);
  EXPECT_EQ(b.stats().rows_created, b_seq.stats().rows_created);
}

}  // namespace
}  // namespace dynemb

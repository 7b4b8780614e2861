// The synthetic stream generated on the GPU against the host stream: the same keys, offsets,
// labels and true probabilities at any position, for fresh seeds and stream shapes (the double
// pow / exp of the GPU may round differently at a rare boundary: at most 1 in 10^4 may differ).
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/table/table.hpp"
#include "train/gpu_synthetic_stream.hpp"

namespace dynemb::train {
namespace {

struct Agreement {
  size_t ids = 0, ids_differ = 0, labels = 0, labels_differ = 0, probs_differ = 0;
};

// Draws `count` samples from `position` on both and counts the differences.
Agreement compare(const SyntheticOptions& options, bool eval, uint64_t position, size_t count) {
  SyntheticStream host(options, eval);
  GpuSyntheticStream gpu(options, eval);
  host.skip(position);
  gpu.skip(position);
  SampleBatch expected;
  host.next(expected, count);
  DeviceBatch batch;
  EXPECT_EQ(gpu.next(batch, count), count);
  EXPECT_EQ(gpu.position(), host.position());
  const DeviceBatchView v = batch.view();
  EXPECT_EQ(v.num_samples, count);
  EXPECT_EQ(v.num_ids, expected.num_ids());
  EXPECT_EQ(v.values, nullptr);  // every synthetic value is 1
  std::vector<uint64_t> keys(v.num_ids);
  std::vector<int64_t> offsets(count + 1);
  std::vector<float> labels(count), true_probs(count);
  copy_from_backend(Backend::kCuda, keys.data(), v.keys, keys.size() * sizeof(uint64_t));
  copy_from_backend(Backend::kCuda, offsets.data(), v.offsets, offsets.size() * sizeof(int64_t));
  copy_from_backend(Backend::kCuda, labels.data(), v.labels, count * sizeof(float));
  copy_from_backend(Backend::kCuda, true_probs.data(), batch.true_probs(), count * sizeof(float));
  EXPECT_EQ(offsets, expected.offsets);
  EXPECT_EQ(batch.host_labels, labels);
  Agreement a;
  a.ids = keys.size();
  a.labels = count;
  for (size_t i = 0; i < keys.size(); ++i) a.ids_differ += keys[i] != expected.keys[i];
  for (size_t s = 0; s < count; ++s) {
    a.labels_differ += labels[s] != expected.labels[s];
    a.probs_differ += std::abs(true_probs[s] - expected.true_probs[s]) > 1e-6f;
  }
  return a;
}

void expect_agreement(const Agreement& a) {
  EXPECT_LE(a.ids_differ * 10000, a.ids) << a.ids_differ << " of " << a.ids << " ids differ";
  EXPECT_LE(a.labels_differ * 10000, a.labels)
      << a.labels_differ << " of " << a.labels << " labels differ";
  EXPECT_LE(a.probs_differ * 10000, a.labels)
      << a.probs_differ << " of " << a.labels << " true probabilities differ";
}

class TrainGpuSyntheticStream : public testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA GPU";
  }
};

TEST_F(TrainGpuSyntheticStream, DefaultShapeMatchesTheHostStream) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  SyntheticOptions o;
  o.seed = rng();
  o.horizon = 200'000;  // the vocabulary grows over the positions drawn below
  for (int round = 0; round < 3; ++round) {
    const uint64_t position = rng() % 300'000;
    SCOPED_TRACE("position " + std::to_string(position));
    expect_agreement(compare(o, false, position, 40'000));
  }
  expect_agreement(compare(o, true, rng() % 1'000'000, 40'000));
}

TEST_F(TrainGpuSyntheticStream, RandomShapesMatchTheHostStream) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 4; ++round) {
    SyntheticOptions o;
    o.seed = rng();
    o.cardinalities.clear();
    const size_t fields = 1 + rng() % 40;
    for (size_t f = 0; f < fields; ++f)
      o.cardinalities.push_back(1 + rng() % (uint64_t{1} << (rng() % 36)));
    o.zipf_alpha = 1.01 + 1.5 * std::uniform_real_distribution<double>(0, 1)(rng);
    o.active_ids = 1 + static_cast<uint32_t>(rng() % 500);
    o.true_dim = 1 + static_cast<uint32_t>(rng() % 12);
    o.start_vocab = 0.01 + 0.99 * std::uniform_real_distribution<double>(0, 1)(rng);
    o.horizon = 1 + rng() % 100'000;
    o.bias = -2.0f + 2.0f * std::uniform_real_distribution<float>(0, 1)(rng);
    SCOPED_TRACE("round " + std::to_string(round) + ": " + std::to_string(fields) +
                 " fields, alpha " + std::to_string(o.zipf_alpha));
    expect_agreement(compare(o, round % 2 == 1, rng() % 200'000, 20'000));
  }
}

}  // namespace
}  // namespace dynemb::train

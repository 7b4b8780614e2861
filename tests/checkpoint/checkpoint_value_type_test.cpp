// Checkpoints of float16 / bfloat16 rows: the value dtype is in the manifest and the values
// files' headers, rows round-trip word for word, and a load into another value type is refused
// unless asked to convert, when each element is the source's rounded to nearest even.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint_test_util.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/embedding/embedding.hpp"
#include "embedding/value_type_training.hpp"

namespace dynemb::testing {
namespace {

using checkpoint::CheckpointError;
using checkpoint::named;

EmbeddingOptions typed_options(uint32_t dim, ValueType type, uint64_t seed) {
  EmbeddingOptions o;
  o.dim = dim;
  o.value_type = type;
  o.table.init_capacity = o.table.max_capacity = 1 << 12;
  o.table.score_policy = ScorePolicy::kStep;
  o.table.initializer.kind = InitializerKind::kNormal;
  o.table.initializer.stddev = 0.1f;
  o.table.initializer.seed = seed;
  o.optimizer.kind = OptimizerKind::kAdam;
  o.optimizer.learning_rate = 0.01f;
  return o;
}

// An embedding of `type` trained a few steps (rows with non-zero Adam state).
std::unique_ptr<Embedding<int64_t>> trained(uint32_t dim, ValueType type, uint64_t seed) {
  auto e = std::make_unique<Embedding<int64_t>>(Backend::kCpu, typed_options(dim, type, seed));
  std::vector<float> out;
  for (const auto& b : value_type_test::make_batches(dim, 3, 64, 500, seed))
    value_type_test::run_step(*e, b, dim, out);
  return e;
}

TEST(CheckpointValueType, EachTypeRoundTripsWordForWord) {
  TestRng rng;
  TempDir dir;
  for (ValueType type : {ValueType::kFloat32, ValueType::kFloat16, ValueType::kBFloat16}) {
    const uint32_t dim = static_cast<uint32_t>(rng.uniform(1, 20));
    SCOPED_TRACE(to_string(type) + " dim " + std::to_string(dim));
    auto source = trained(dim, type, rng.next());
    checkpoint::DumpOptions d;
    d.overwrite = true;
    const auto report = checkpoint::dump(dir / "ckpt", {named("t", *source)}, d);
    ASSERT_EQ(report.manifest.tables.size(), 1u);
    EXPECT_EQ(report.manifest.tables[0].value_dtype, checkpoint::dtype_of(type));
    // The values file holds dim elements of the type per row, after the 64-byte header.
    const auto& shard = report.manifest.tables[0].shards.at(0);
    EXPECT_EQ(shard.values.bytes, 64 + shard.rows * dim * (type == ValueType::kFloat32 ? 4 : 2));

    Embedding<int64_t> target(Backend::kCpu, typed_options(dim, type, 1));
    const auto loaded = checkpoint::load(dir / "ckpt", {named("t", target)});
    EXPECT_EQ(loaded.rows_loaded, source->table().size());
    EXPECT_EQ(value_type_test::table_words(target), value_type_test::table_words(*source));
  }
}

TEST(CheckpointValueType, AnotherTypeIsRefusedUnlessConverting) {
  TestRng rng;
  TempDir dir;
  const ValueType types[] = {ValueType::kFloat32, ValueType::kFloat16, ValueType::kBFloat16};
  for (ValueType from : types) {
    for (ValueType to : types) {
      if (from == to) continue;
      const uint32_t dim = static_cast<uint32_t>(rng.uniform(1, 20));
      SCOPED_TRACE(to_string(from) + " -> " + to_string(to) + " dim " + std::to_string(dim));
      auto source = trained(dim, from, rng.next());
      checkpoint::DumpOptions d;
      d.overwrite = true;
      checkpoint::dump(dir / "ckpt", {named("t", *source)}, d);

      Embedding<int64_t> target(Backend::kCpu, typed_options(dim, to, 1));
      try {
        checkpoint::load(dir / "ckpt", {named("t", target)});
        ADD_FAILURE() << "no exception";
      } catch (const CheckpointError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(to_string(from)), std::string::npos) << m;
        EXPECT_NE(m.find(to_string(to)), std::string::npos) << m;
        EXPECT_NE(m.find("convert_value_type"), std::string::npos) << m;
      }
      EXPECT_EQ(target.table().size(), 0u) << "the refused load changed the table";

      checkpoint::LoadOptions convert;
      convert.convert_value_type = true;
      checkpoint::load(dir / "ckpt", {named("t", target)}, convert);
      const auto src = value_type_test::table_words(*source);
      const auto dst = value_type_test::table_words(target);
      ASSERT_EQ(src.size(), dst.size());
      const uint32_t src_words = value_words(from, dim), dst_words = value_words(to, dim);
      for (const auto& [k, s] : src) {
        const auto it = dst.find(k);
        ASSERT_NE(it, dst.end()) << "key " << k;
        const std::vector<uint32_t>& t = it->second;
        const float* sf = reinterpret_cast<const float*>(s.data());
        const float* tf = reinterpret_cast<const float*>(t.data());
        for (uint32_t j = 0; j < dim; ++j) {
          // The source element, rounded to nearest even in the target's type.
          float want = load_value(from, sf, j);
          std::vector<float> word(1, 0.0f);
          store_value(to, word.data(), 0, want);
          want = load_value(to, word.data(), 0);
          ASSERT_EQ(std::bit_cast<uint32_t>(load_value(to, tf, j)), std::bit_cast<uint32_t>(want))
              << "key " << k << " element " << j;
        }
        if (to != ValueType::kFloat32 && dim % 2 == 1) EXPECT_EQ(t[dim / 2] >> 16, 0u);
        // The optimizer state comes across unchanged (the padding after it may differ in length:
        // zeros either way).
        const size_t state = optimizer_state_dim(OptimizerKind::kAdam, dim);
        ASSERT_GE(s.size(), src_words + state);
        ASSERT_GE(t.size(), dst_words + state);
        for (size_t w = 0; w < state; ++w)
          ASSERT_EQ(s[src_words + w], t[dst_words + w]) << "key " << k << " state word " << w;
        for (size_t w = dst_words + state; w < t.size(); ++w) ASSERT_EQ(t[w], 0u);
      }
    }
  }
}

}  // namespace
}  // namespace dynemb::testing

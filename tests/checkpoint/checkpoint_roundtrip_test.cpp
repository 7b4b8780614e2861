// Round trips: dump -> load gives identical keys, values, scores and optimizer state, for every
// score policy, plain tables and embeddings, subsets, 1 -> 2 -> 3 ranks and CPU <-> GPU.
#include <gtest/gtest.h>

#include "checkpoint/checkpoint_test_util.hpp"
#include "core/warning_capture.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/embedding/embedding.hpp"

namespace dynemb::testing {
namespace {

using checkpoint::CheckpointError;
using checkpoint::LoadOptions;
using checkpoint::named;

template <class K>
class CheckpointRoundTrip : public ::testing::Test {};
using KeyTypes = ::testing::Types<int64_t, uint64_t>;
TYPED_TEST_SUITE(CheckpointRoundTrip, KeyTypes);

// STEP, LFU and CUSTOMIZED scores come back exactly; so do rows and the table clock.
TYPED_TEST(CheckpointRoundTrip, ExactForEveryExactPolicy) {
  using K = TypeParam;
  TestRng rng;
  TempDir dir;
  for (ScorePolicy policy : {ScorePolicy::kStep, ScorePolicy::kLfu, ScorePolicy::kCustomized}) {
    SCOPED_TRACE(to_string(policy));
    const uint32_t dim = static_cast<uint32_t>(rng.uniform(1, 40));
    auto source = make_table<K>(Backend::kCpu, small_table_options(dim, policy));
    fill_random(*source, rng, rng.uniform(0, 3000), true);
    const uint64_t clock = rng.uniform(1, 1u << 30);
    if (policy != ScorePolicy::kLfu) source->set_score(clock);
    checkpoint::DumpOptions dump_options;
    dump_options.chunk_slots = rng.uniform(1, 5000);  // chunks of every size, 1 included
    dump_options.direct_io = rng.chance(0.5);
    dump_options.overwrite = true;  // one path for every policy
    const auto report = checkpoint::dump(dir / "ckpt", {named("t", *source)}, dump_options);
    EXPECT_EQ(report.rows, source->size());

    auto target = make_table<K>(Backend::kCpu, small_table_options(dim, policy));
    fill_random(*target, rng, 50, true);  // replaced by the load
    LoadOptions load_options;
    load_options.chunk_rows = rng.uniform(1, 5000);
    load_options.verify = rng.chance(0.5) ? checkpoint::VerifyMode::kWhileLoading
                                          : checkpoint::VerifyMode::kBeforeLoading;
    const auto loaded = checkpoint::load(dir / "ckpt", {named("t", *target)}, load_options);
    EXPECT_EQ(loaded.rows_loaded, source->size());
    EXPECT_EQ(loaded.rows_dropped, 0u);
    EXPECT_EQ(snapshot(*target), snapshot(*source));
    if (policy != ScorePolicy::kLfu) EXPECT_EQ(target->score(), clock);
  }
}

// TIMESTAMP scores are restored as ages: now - (dump time - stored score).
TYPED_TEST(CheckpointRoundTrip, TimestampScoresKeepTheirAge) {
  using K = TypeParam;
  TestRng rng;
  TempDir dir;
  const uint32_t dim = static_cast<uint32_t>(rng.uniform(1, 16));
  auto source = make_table<K>(Backend::kCpu, small_table_options(dim, ScorePolicy::kTimestamp));
  fill_random(*source, rng, rng.uniform(1, 2000), false);
  // Age some rows: scores up to an hour in the past.
  const uint64_t now = checkpoint::host_now_ns();
  const Snapshot<K> before_ages = snapshot(*source);
  std::vector<K> keys;
  std::vector<uint64_t> scores;
  for (const auto& [k, row] : before_ages) {
    keys.push_back(k);
    scores.push_back(now - rng.uniform(0, 3600ull * 1000000000ull));
  }
  source->assign_scores(keys.size(), keys.data(), scores.data());
  const Snapshot<K> original = snapshot(*source);
  const auto report = checkpoint::dump(dir / "ckpt", {named("t", *source)});
  const uint64_t dump_time = report.manifest.dump_time_ns;

  auto target = make_table<K>(Backend::kCpu, small_table_options(dim, ScorePolicy::kTimestamp));
  const uint64_t load_begin = checkpoint::host_now_ns();
  checkpoint::load(dir / "ckpt", {named("t", *target)});
  const uint64_t load_end = checkpoint::host_now_ns();
  const Snapshot<K> restored = snapshot(*target);
  ASSERT_EQ(restored.size(), original.size());
  for (const auto& [k, row] : original) {
    const auto it = restored.find(k);
    ASSERT_NE(it, restored.end());
    EXPECT_EQ(it->second.value, row.value);
    const uint64_t age = dump_time - row.score;
    EXPECT_GE(it->second.score, load_begin - age);
    EXPECT_LE(it->second.score, load_end - age);
  }
}

// An embedding's rows [embedding | optimizer state] come back exactly; without state the values
// load alone; a different optimizer skips the state with a warning.
TYPED_TEST(CheckpointRoundTrip, EmbeddingWithAndWithoutOptimizerState) {
  using K = TypeParam;
  TestRng rng;
  TempDir dir;
  EmbeddingOptions eo;
  eo.dim = static_cast<uint32_t>(rng.uniform(1, 24));
  eo.table = small_table_options(0, ScorePolicy::kStep);
  eo.optimizer.kind = OptimizerKind::kAdam;
  Embedding<K> source(Backend::kCpu, eo);
  const uint32_t row_dim = source.row_dim();
  ASSERT_EQ(row_dim, embedding_row_dim(eo));  // dim + Adam state, padded (align_rows)
  fill_random(source.table(), rng, rng.uniform(1, 2000), true);
  source.table().set_score(rng.uniform(1, 1000));
  checkpoint::dump(dir / "full", {named("emb", source)});

  // Same optimizer: every float of every row comes back.
  Embedding<K> same(Backend::kCpu, eo);
  checkpoint::load(dir / "full", {named("emb", same)});
  EXPECT_EQ(snapshot(same.table()), snapshot(source.table()));

  // A plain table of the embedding dim (serving) gets the embeddings only.
  auto serving = make_table<K>(Backend::kCpu, small_table_options(eo.dim, ScorePolicy::kStep));
  checkpoint::load(dir / "full", {named("emb", *serving)});
  const Snapshot<K> full = snapshot(source.table());
  const Snapshot<K> served = snapshot(*serving);
  ASSERT_EQ(served.size(), full.size());
  for (const auto& [k, row] : full) {
    const StoredRow& s = served.at(k);
    EXPECT_EQ(s.score, row.score);
    EXPECT_EQ(s.value, std::vector<float>(row.value.begin(), row.value.begin() + eo.dim));
  }

  // A dump without state: the values files alone; loading it keeps state at 0 for new rows.
  checkpoint::DumpOptions no_state;
  no_state.optimizer_state = false;
  const auto report = checkpoint::dump(dir / "values_only", {named("emb", source)}, no_state);
  EXPECT_FALSE(report.manifest.tables.at(0).has_optimizer_state);
  Embedding<K> fresh(Backend::kCpu, eo);
  const auto loaded = checkpoint::load(dir / "values_only", {named("emb", fresh)});
  EXPECT_EQ(loaded.state_skipped, std::vector<std::string>{"emb"});
  for (const auto& [k, row] : snapshot(fresh.table())) {
    const StoredRow& want = full.at(k);
    EXPECT_EQ(std::vector<float>(row.value.begin(), row.value.begin() + eo.dim),
              std::vector<float>(want.value.begin(), want.value.begin() + eo.dim));
    for (uint32_t j = eo.dim; j < row_dim; ++j) EXPECT_EQ(row.value[j], 0.0f);
  }

  // Another optimizer: values load, state is skipped with a warning naming both optimizers.
  EmbeddingOptions other = eo;
  other.optimizer.kind = OptimizerKind::kAdaGrad;
  Embedding<K> adagrad(Backend::kCpu, other);
  WarningCapture warnings;
  const auto skipped = checkpoint::load(dir / "full", {named("emb", adagrad)});
  EXPECT_EQ(skipped.state_skipped, std::vector<std::string>{"emb"});
  ASSERT_EQ(warnings.messages().size(), 1u);
  EXPECT_NE(warnings.messages()[0].find("adam"), std::string::npos);
  EXPECT_NE(warnings.messages()[0].find("adagrad"), std::string::npos);
  const Snapshot<K> got = snapshot(adagrad.table());
  ASSERT_EQ(got.size(), full.size());
  for (const auto& [k, row] : got) {
    const StoredRow& want = full.at(k);
    EXPECT_EQ(std::vector<float>(row.value.begin(), row.value.begin() + eo.dim),
              std::vector<float>(want.value.begin(), want.value.begin() + eo.dim));
    for (uint32_t j = eo.dim; j < adagrad.row_dim(); ++j) EXPECT_EQ(row.value[j], 0.0f);
  }
}

// A chosen subset of tables is dumped; load takes a subset of what the checkpoint holds.
TYPED_TEST(CheckpointRoundTrip, SubsetsOfTables) {
  using K = TypeParam;
  TestRng rng;
  TempDir dir;
  auto a = make_table<K>(Backend::kCpu, small_table_options(4, ScorePolicy::kLfu));
  auto b = make_table<K>(Backend::kCpu, small_table_options(7, ScorePolicy::kLfu));
  auto c = make_table<K>(Backend::kCpu, small_table_options(3, ScorePolicy::kLfu));
  fill_random(*a, rng, 300, true);
  fill_random(*b, rng, 200, true);
  fill_random(*c, rng, 100, true);
  checkpoint::DumpOptions only_ab;
  only_ab.only = {"a", "b"};
  const auto report =
      checkpoint::dump(dir / "ckpt", {named("a", *a), named("b", *b), named("c", *c)}, only_ab);
  ASSERT_EQ(report.manifest.tables.size(), 2u);

  auto b2 = make_table<K>(Backend::kCpu, small_table_options(7, ScorePolicy::kLfu));
  checkpoint::load(dir / "ckpt", {named("b", *b2)});
  EXPECT_EQ(snapshot(*b2), snapshot(*b));
  auto c2 = make_table<K>(Backend::kCpu, small_table_options(3, ScorePolicy::kLfu));
  EXPECT_THROW(checkpoint::load(dir / "ckpt", {named("c", *c2)}), CheckpointError);
  EXPECT_EQ(c2->size(), 0u);
}

// 1 rank -> 2 ranks -> 3 ranks: each rank keeps exactly its keys, the union is the original.
TYPED_TEST(CheckpointRoundTrip, ReRoutesAcrossRankCounts) {
  using K = TypeParam;
  TestRng rng;
  TempDir dir;
  const uint32_t dim = static_cast<uint32_t>(rng.uniform(1, 12));
  auto source = make_table<K>(Backend::kCpu, small_table_options(dim, ScorePolicy::kStep));
  fill_random(*source, rng, rng.uniform(100, 3000), true);
  source->set_score(77);
  const Snapshot<K> original = snapshot(*source);
  checkpoint::dump(dir / "w1", {named("t", *source)});

  auto load_ranks = [&](const std::filesystem::path& path, uint32_t world) {
    std::vector<std::unique_ptr<Table<K>>> ranks;
    for (uint32_t r = 0; r < world; ++r) {
      ranks.push_back(make_table<K>(Backend::kCpu, small_table_options(dim, ScorePolicy::kStep)));
      LoadOptions o;
      o.rank = r;
      o.world_size = world;
      o.chunk_rows = rng.uniform(1, 700);
      checkpoint::load(path, {named("t", *ranks.back())}, o);
      EXPECT_EQ(ranks.back()->score(), 77u);
    }
    Snapshot<K> merged;
    for (uint32_t r = 0; r < world; ++r) {
      for (const auto& [k, row] : snapshot(*ranks[r])) {
        EXPECT_EQ(rank_of_key_bits(key_bits(k), world), r) << "key " << k << " on rank " << r;
        EXPECT_TRUE(merged.emplace(k, row).second);
      }
    }
    EXPECT_EQ(merged, original);
    return ranks;
  };
  auto two = load_ranks(dir / "w1", 2);
  checkpoint::dump_sharded(dir / "w2", {{named("t", *two[0])}, {named("t", *two[1])}});
  EXPECT_EQ(checkpoint::read_manifest(dir / "w2").world_size, 2u);
  auto same = load_ranks(dir / "w2", 2);
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(snapshot(*same[r]), snapshot(*two[r]));
  auto three = load_ranks(dir / "w2", 3);
  checkpoint::dump_sharded(
      dir / "w3", {{named("t", *three[0])}, {named("t", *three[1])}, {named("t", *three[2])}});
  auto one = load_ranks(dir / "w3", 1);
  EXPECT_EQ(snapshot(*one[0]), original);
}

// CPU -> CUDA -> CPU through checkpoints (skips without a GPU).
TYPED_TEST(CheckpointRoundTrip, CpuToGpuAndBack) {
  using K = TypeParam;
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA backend or device";
  TestRng rng;
  TempDir dir;
  for (ScorePolicy policy : {ScorePolicy::kStep, ScorePolicy::kLfu, ScorePolicy::kCustomized}) {
    SCOPED_TRACE(to_string(policy));
    const uint32_t dim = static_cast<uint32_t>(rng.uniform(1, 64));
    auto cpu = make_table<K>(Backend::kCpu, small_table_options(dim, policy));
    fill_random(*cpu, rng, rng.uniform(1, 3000), true);
    const std::string name = to_string(policy);  // one checkpoint per policy: dumps never overwrite
    checkpoint::dump(dir / ("from_cpu_" + name), {named("t", *cpu)});
    auto gpu = make_table<K>(Backend::kCuda, small_table_options(dim, policy));
    checkpoint::load(dir / ("from_cpu_" + name), {named("t", *gpu)});
    EXPECT_EQ(snapshot(*gpu), snapshot(*cpu));
    overwrite_random(*gpu, rng, std::vector<K>{snapshot(*gpu).begin()->first});
    checkpoint::dump(dir / ("from_gpu_" + name), {named("t", *gpu)});
    auto back = make_table<K>(Backend::kCpu, small_table_options(dim, policy));
    checkpoint::load(dir / ("from_gpu_" + name), {named("t", *back)});
    EXPECT_EQ(snapshot(*back), snapshot(*gpu));
  }
}

}  // namespace
}  // namespace dynemb::testing

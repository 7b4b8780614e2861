// Checkpoints written by every rank at once and loaded at another world size (and router):
// the rows each rank then owns are the one-process reference's.
#include <gtest/gtest.h>

#include <filesystem>

#include "dist/mpi/mpi_main.hpp"
#include "dist/sharded_check.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/dist/mpi_communicator.hpp"
#include "dynemb/dist/sharded_checkpoint.hpp"

namespace dynemb::dist::testing {
namespace {

// A fresh directory made by rank 0, known to every rank; removed at the end.
class SharedDir {
 public:
  SharedDir() {
    std::string p;
    if (world().rank() == 0) {
      p = (std::filesystem::temp_directory_path() /
           ("dynemb-dist-ckpt-" + std::to_string(::getpid())))
              .string();
      std::filesystem::remove_all(p);
      std::filesystem::create_directories(p);
    }
    path_ = broadcast_string(world(), p);
  }
  ~SharedDir() {
    world().barrier();
    if (world().rank() == 0) std::filesystem::remove_all(path_);
  }
  std::filesystem::path path() const { return path_; }

 private:
  std::filesystem::path path_;
};

TEST(DistMpiCheckpoint, DumpEveryRankLoadAtFewerRanksAndAnotherRouter) {
  if (world().world_size() < 2) GTEST_SKIP() << "needs two ranks or more";
  Communicator& comm = world();
  const uint32_t rank = comm.rank(), W = comm.world_size();
  const uint64_t seed = shared_seed();
  SharedDir dir;
  const std::vector<std::string> names{"users", "items"};
  TrainCase c;
  c.weighted = true;
  const auto options = test_tables(c.tables, c.dim, c.optimizer);
  ShardedEmbeddingCollection<int64_t> sharded(comm, options);
  EmbeddingCollection<int64_t> reference(Backend::kCpu, options);
  train_and_compare(comm, c, seed, &sharded, &reference);

  const auto full = dump_sharded(sharded, dir.path() / "full", names);
  EXPECT_EQ(full.manifest.world_size, W);
  ASSERT_EQ(full.manifest.tables.size(), 2u);
  for (size_t t = 0; t < 2; ++t) {
    EXPECT_EQ(full.manifest.tables[t].shards.size(), W);
    EXPECT_EQ(full.manifest.tables[t].optimizer, "adam");  // stored as an embedding
    EXPECT_EQ(full.manifest.tables[t].rows, reference.table(t).size());
    // This rank's shard holds exactly its rows.
    EXPECT_EQ(full.manifest.tables[t].shards[rank].rows, sharded.local().table(t).size());
  }
  // More steps, then a delta of the rows they touched.
  const uint64_t since = *full.manifest.tables[0].next_min_score;
  train_and_compare(comm, c, seed + 1, &sharded, &reference);
  checkpoint::DumpOptions delta_options;
  delta_options.min_score = since;
  const auto delta = dump_sharded(sharded, dir.path() / "delta", names, delta_options);
  EXPECT_TRUE(delta.manifest.delta);

  // Ranks 0 .. W-2 load the full checkpoint and the delta: the rows of the reference.
  auto fewer = split_mpi_communicator(comm, rank + 1 < W ? 0 : -1);
  EXPECT_EQ(fewer != nullptr, rank + 1 < W);
  if (fewer) {
    ShardedEmbeddingCollection<int64_t> smaller(*fewer, options);
    const auto loaded = load_sharded(smaller, dir.path() / "full", names);
    EXPECT_EQ(loaded.rows_dropped, 0u);
    load_sharded(smaller, dir.path() / "delta", names);
    expect_same_rows(smaller, reference);
    EXPECT_EQ(smaller.global_sizes(),
              (std::vector<uint64_t>{reference.table(0).size(), reference.table(1).size()}));
  }
  // Every rank, at the dump's world size but routing key % world: rows move to their new owners.
  ShardedEmbeddingCollection<int64_t> modulo(comm, options, KeyRouter::modulo());
  load_sharded(modulo, dir.path() / "full", names);
  load_sharded(modulo, dir.path() / "delta", names);
  expect_same_rows(modulo, reference);
  EXPECT_EQ(modulo.global_sizes(),
            (std::vector<uint64_t>{reference.table(0).size(), reference.table(1).size()}));
  // And training goes on from the loaded rows in step with the reference.
  train_and_compare(comm, c, seed + 2, &modulo, &reference);
}

TEST(DistMpiCheckpoint, FailuresThrowOnEveryRankAndKeepThePreviousCheckpoint) {
  if (world().world_size() < 2) GTEST_SKIP() << "needs two ranks or more";
  Communicator& comm = world();
  SharedDir dir;
  const auto options = test_tables(2, 8);
  ShardedEmbeddingCollection<int64_t> sharded(comm, options);
  train_and_compare(comm, TrainCase{}, shared_seed(), &sharded, nullptr);
  const auto first = dump_sharded(sharded, dir.path() / "ckpt", {"a", "b"});
  // One rank names its tables differently: every rank throws; the checkpoint stays.
  std::vector<std::string> names{"a", comm.rank() == 0 ? "b" : "c"};
  EXPECT_THROW(dump_sharded(sharded, dir.path() / "ckpt", names), Error);
  EXPECT_EQ(checkpoint::read_manifest(dir.path() / "ckpt").dump_time_ns,
            first.manifest.dump_time_ns);
  // Loading a table the checkpoint lacks: every rank throws.
  EXPECT_THROW(load_sharded(sharded, dir.path() / "ckpt", {"a", "zzz"}), Error);
  EXPECT_THROW(dump_sharded(sharded, dir.path() / "ckpt", {"only-one"}), Error);
}

TEST(DistRankShards, EncodeDecodeRoundTrip) {
  checkpoint::RankShards s;
  s.rank = 3;
  for (int i = 0; i < 2; ++i) {
    checkpoint::ShardEntry e;
    e.rank = 3;
    e.rows = 10 + i;
    e.min_score = 1;
    e.max_score = 99;
    e.keys = {"t/rank-00003.keys", 123, 0xdeadbeef};
    e.values = {"t/rank-00003.values", 456, 7};
    e.scores = {"t/rank-00003.scores", 789, 8};
    if (i == 1) e.optimizer_state = checkpoint::FileEntry{"t/x", 1, 2};
    s.tables.push_back("t" + std::to_string(i));
    s.shards.push_back(e);
    s.scores.push_back(40 + i);
  }
  const auto back = decode_rank_shards(encode_rank_shards(s));
  EXPECT_EQ(back.rank, 3u);
  EXPECT_EQ(back.tables, s.tables);
  EXPECT_EQ(back.scores, s.scores);
  EXPECT_EQ(back.shards[0].keys.crc32c, 0xdeadbeefu);
  EXPECT_EQ(back.shards[1].rows, 11u);
  EXPECT_FALSE(back.shards[0].optimizer_state.has_value());
  EXPECT_EQ(back.shards[1].optimizer_state->path, "t/x");
  const std::string bytes = encode_rank_shards(s);
  EXPECT_THROW(decode_rank_shards(bytes.substr(0, bytes.size() - 3)), Error);
}

}  // namespace
}  // namespace dynemb::dist::testing

// The sharded collection at world size 1 (the one-rank communicator on each backend, and NCCL
// through its file rendezvous) against one EmbeddingCollection on the same stream. The
// multi-rank runs are tests/dist/mpi.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dist/sharded_check.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/dist/nccl_communicator.hpp"

namespace dynemb::dist {
namespace {

using dynemb::testing::BackendTest;

class DistShardedWorldOne : public BackendTest {};

TEST_P(DistShardedWorldOne, SameRowsAsOneCollection) {
  auto comm = make_local_communicator(GetParam());
  for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone}) {
    SCOPED_TRACE(to_string(mode));
    testing::TrainCase c;
    c.mode = mode;
    c.weighted = mode != PoolingMode::kNone;
    dynemb::testing::TestRng rng;
    testing::train_and_compare(*comm, c, rng.seed());
  }
}

TEST_P(DistShardedWorldOne, PooledOnOwnerSameRowsAsOneCollection) {
  auto comm = make_local_communicator(GetParam());
  for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
    SCOPED_TRACE(to_string(mode));
    testing::TrainCase c;
    c.mode = mode;
    c.weighted = true;
    c.exchange = ShardedExchange::kPooledOnOwner;
    dynemb::testing::TestRng rng;
    testing::train_and_compare(*comm, c, rng.seed());
  }
  // NONE has no pooling to do on the owner: refused, nothing changed.
  ShardedEmbeddingCollection<int64_t> sharded(*comm, testing::test_tables(1, 8), KeyRouter::hash(),
                                              ShardedExchange::kPooledOnOwner);
  std::vector<testing::HostBatch> host(1);
  host[0].keys = {1, 2};
  host[0].offsets = {0, 2};
  testing::BackendBatches none(GetParam(), host, PoolingMode::kNone);
  BackendBuffer<float> out(GetParam(), 64);
  EXPECT_THROW(sharded.forward(none.batches, out.data(), 8, true), InvalidArgument);
  EXPECT_EQ(sharded.global_sizes(), (std::vector<uint64_t>{0}));
}

TEST_P(DistShardedWorldOne, BadInputThrowsAndChangesNothing) {
  auto comm = make_local_communicator(GetParam());
  const auto options = testing::test_tables(2, 8);
  ShardedEmbeddingCollection<int64_t> sharded(*comm, options);
  std::vector<testing::HostBatch> host(1);
  host[0].keys = {1, 2};
  host[0].offsets = {0, 2};
  testing::BackendBatches one(GetParam(), host, PoolingMode::kSum);
  BackendBuffer<float> out(GetParam(), 64);
  EXPECT_THROW(sharded.forward(one.batches, out.data(), 8, true), InvalidArgument);  // 1 of 2
  host.resize(2);
  host[1].keys = {3};
  host[1].offsets = {0, 4};  // past the ids
  testing::BackendBatches bad(GetParam(), host, PoolingMode::kSum);
  EXPECT_THROW(sharded.forward(bad.batches, out.data(), 8, true), InvalidArgument);
  EXPECT_EQ(sharded.global_sizes(), (std::vector<uint64_t>{0, 0}));
  EXPECT_THROW(sharded.backward(out.data(), 8), InvalidArgument);
  EXPECT_THROW(ShardedEmbeddingCollection<int64_t>(*comm, {}), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, DistShardedWorldOne, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

// The NCCL communicator at world size 1 under the sharded collection: the code path of many
// GPUs (unique id through a file, grouped send / receive). Skips without NCCL or a GPU.
TEST(DistShardedNccl, WorldOneSameRowsAsOneCollection) {
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  dynemb::testing::TestRng rng;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dynemb-nccl-sharded-" + std::to_string(rng.seed()));
  std::filesystem::create_directories(dir);
  {
    auto ex = make_file_id_exchanger(dir / "id");
    auto comm = make_nccl_communicator(0, 1, *ex, 0);
    testing::TrainCase c;
    c.weighted = true;
    testing::train_and_compare(*comm, c, rng.seed());
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dynemb::dist

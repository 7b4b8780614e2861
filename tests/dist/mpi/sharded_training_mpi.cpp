// Sharded training over the mpirun job against one process training on the same stream; empty
// batches; bad batches and mismatched tables failing on every rank without a hang.
#include <gtest/gtest.h>

#include "dist/mpi/mpi_main.hpp"
#include "dist/sharded_check.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/dist/mpi_communicator.hpp"
#include "dynemb/dist/nccl_communicator.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::dist::testing {
namespace {

// Every collective of `comm` against a host model (buffers staged in the communicator's memory).
void check_collectives(Communicator& comm) {
  const uint32_t rank = comm.rank(), W = comm.world_size();
  std::mt19937_64 rng(shared_seed());
  // counts[s][d]: what rank s sends rank d (some zero); element i of it is s * 1e6 + d * 1e3 + i.
  std::vector<std::vector<size_t>> counts(W, std::vector<size_t>(W));
  for (auto& row : counts) {
    for (auto& n : row) n = rng() % 3 == 0 ? 0 : rng() % 40;
  }
  std::vector<size_t> sc(W), sd(W), rc(W), rd(W);
  size_t ns = 0, nr = 0;
  for (uint32_t r = 0; r < W; ++r) {
    sc[r] = counts[rank][r];
    sd[r] = ns;
    ns += sc[r];
    rc[r] = counts[r][rank];
    rd[r] = nr;
    nr += rc[r];
  }
  std::vector<int64_t> send(ns), recv(nr, -1);
  for (uint32_t d = 0; d < W; ++d) {
    for (size_t i = 0; i < sc[d]; ++i) send[sd[d] + i] = rank * 1000000 + d * 1000 + i;
  }
  if (comm.backend() == Backend::kCpu) {
    comm.all_to_all_v(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                      DataType::kInt64);
  } else {
    BackendBuffer<int64_t> dsend(comm.backend(), ns + 1, comm.device());
    BackendBuffer<int64_t> drecv(comm.backend(), nr + 1, comm.device());
    dsend.upload(send.data(), ns);
    comm.all_to_all_v(dsend.data(), sc.data(), sd.data(), drecv.data(), rc.data(), rd.data(),
                      DataType::kInt64);
    backend_synchronize(comm.backend());
    drecv.download(recv.data(), nr);
  }
  for (uint32_t s = 0; s < W; ++s) {
    for (size_t i = 0; i < rc[s]; ++i) {
      EXPECT_EQ(recv[rd[s] + i], static_cast<int64_t>(s * 1000000 + rank * 1000 + i));
    }
  }
  const std::vector<double> mine{rank + 0.5, -1.0 * rank};
  const auto sum = all_reduce_values<double>(comm, mine);
  EXPECT_DOUBLE_EQ(sum[0], W * (W - 1) / 2.0 + 0.5 * W);
  EXPECT_DOUBLE_EQ(sum[1], -(W * (W - 1) / 2.0));
  const uint64_t id = rank * 7 + 1;
  const auto gathered = all_gather_values<uint64_t>(comm, {&id, 1});
  for (uint32_t r = 0; r < W; ++r) EXPECT_EQ(gathered[r], r * 7 + 1);
  EXPECT_EQ(broadcast_string(comm, rank == W - 1 ? "from the last" : "", W - 1), "from the last");
  const auto strings = all_gather_strings(comm, std::string(rank, 'x'));
  for (uint32_t r = 0; r < W; ++r) EXPECT_EQ(strings[r], std::string(r, 'x'));
  EXPECT_EQ(all_ranks_ok(comm, true), true);
  EXPECT_EQ(all_ranks_ok(comm, rank != W - 1), false);
  comm.barrier();
}

TEST(DistMpiCollectives, AgreeWithAHostModel) {
  check_collectives(world());
}

struct Named {
  const char* name;
  TrainCase c;
};

void PrintTo(const Named& n, std::ostream* os) {
  *os << n.name;
}

class DistMpiTraining : public ::testing::TestWithParam<Named> {};

TEST_P(DistMpiTraining, SameRowsAsOneProcess) {
  train_and_compare(world(), GetParam().c, shared_seed());
}

TrainCase with(PoolingMode mode, bool weighted, KeyRouter router, OptimizerKind opt,
               uint32_t empty = ~0u, ShardedExchange exchange = ShardedExchange::kRows) {
  TrainCase c;
  c.exchange = exchange;
  c.mode = mode;
  c.weighted = weighted;
  c.router = std::move(router);
  c.optimizer = opt;
  c.empty_rank = empty;
  return c;
}

// The cases both suites run (MPI on the CPU, NCCL on GPUs).
const std::vector<Named> kTrainingCases{
    Named{"sum_hash_adam", with(PoolingMode::kSum, false, KeyRouter::hash(), OptimizerKind::kAdam)},
    Named{"weighted_mean_modulo_adagrad",
          with(PoolingMode::kMean, true, KeyRouter::modulo(), OptimizerKind::kAdaGrad)},
    Named{"none_custom_sgd", with(PoolingMode::kNone, false,
                                  KeyRouter::custom("by-table",
                                                    [](uint32_t t, uint64_t k, uint32_t w) {
                                                      return static_cast<uint32_t>((k / 7 + t) % w);
                                                    }),
                                  OptimizerKind::kSgd)},
    Named{"rank1_empty", with(PoolingMode::kSum, true, KeyRouter::hash(), OptimizerKind::kAdam, 1)},
    Named{"rank0_empty",
          with(PoolingMode::kSum, false, KeyRouter::hash(), OptimizerKind::kRowWiseAdaGrad, 0)},
    Named{"pooled_on_owner_sum_adam",
          with(PoolingMode::kSum, false, KeyRouter::hash(), OptimizerKind::kAdam, ~0u,
               ShardedExchange::kPooledOnOwner)},
    Named{"pooled_on_owner_weighted_mean_modulo_rank1_empty",
          with(PoolingMode::kMean, true, KeyRouter::modulo(), OptimizerKind::kAdaGrad, 1,
               ShardedExchange::kPooledOnOwner)}};

std::string case_name(const ::testing::TestParamInfo<Named>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Cases, DistMpiTraining, ::testing::ValuesIn(kTrainingCases), case_name);

// Tables of `tables` x `dim` on `comm`'s device.
std::vector<EmbeddingOptions> tables_on(const Communicator& comm, uint32_t tables, uint32_t dim) {
  auto options = test_tables(tables, dim);
  for (EmbeddingOptions& o : options) o.table.device = comm.device();
  return options;
}

// Creations that differ between ranks throw InvalidArgument on every rank, naming what differs;
// the communicator stays usable.
void check_mismatches_fail_everywhere(Communicator& comm) {
  const uint32_t rank = comm.rank();
  auto test_tables = [&](uint32_t tables, uint32_t dim) { return tables_on(comm, tables, dim); };
  // The last rank has another dim: every rank throws, naming it.
  auto tables = test_tables(2, 8);
  if (rank == comm.world_size() - 1) tables[1].dim = 16;
  try {
    ShardedEmbeddingCollection<int64_t> sharded(comm, tables);
    ADD_FAILURE() << "created with mismatched dims";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank " + std::to_string(comm.world_size() - 1)), std::string::npos)
        << what;
    EXPECT_NE(what.find("dim 16"), std::string::npos) << what;
  }
  // Another number of tables on rank 0, and another router on rank 1.
  auto fewer = test_tables(rank == 0 ? 1 : 2, 8);
  EXPECT_THROW(ShardedEmbeddingCollection<int64_t>(comm, fewer), InvalidArgument);
  EXPECT_THROW(ShardedEmbeddingCollection<int64_t>(
                   comm, test_tables(2, 8), rank == 1 ? KeyRouter::modulo() : KeyRouter::hash()),
               InvalidArgument);
  // Exchanges differ.
  EXPECT_THROW(ShardedEmbeddingCollection<int64_t>(
                   comm, test_tables(2, 8), KeyRouter::hash(),
                   rank == 0 ? ShardedExchange::kPooledOnOwner : ShardedExchange::kRows),
               InvalidArgument);
  // Key types differ.
  if (rank == 0) {
    EXPECT_THROW(ShardedEmbeddingCollection<uint64_t>(comm, test_tables(2, 8)), InvalidArgument);
  } else {
    EXPECT_THROW(ShardedEmbeddingCollection<int64_t>(comm, test_tables(2, 8)), InvalidArgument);
  }
  // Invalid options on one rank (dim 0) still fail everywhere, not hang.
  auto invalid = test_tables(2, 8);
  if (rank == 0) invalid[0].dim = 0;
  EXPECT_THROW(ShardedEmbeddingCollection<int64_t>(comm, invalid), InvalidArgument);
  // And the communicator is still in step: a collection made alike works.
  train_and_compare(comm, TrainCase{}, shared_seed());
}

TEST(DistMpiConfig, MismatchedTablesFailOnEveryRank) {
  if (world().world_size() < 2) GTEST_SKIP() << "needs two ranks or more";
  check_mismatches_fail_everywhere(world());
}

TEST(DistMpiConfig, BadBatchOnOneRankFailsEverywhereAndChangesNothing) {
  if (world().world_size() < 2) GTEST_SKIP() << "needs two ranks or more";
  Communicator& comm = world();
  const uint32_t rank = comm.rank();
  const uint64_t seed = shared_seed();
  const auto options = test_tables(2, 8);
  ShardedEmbeddingCollection<int64_t> sharded(comm, options);
  EmbeddingCollection<int64_t> reference(Backend::kCpu, options);
  std::mt19937_64 rng(seed ^ 1);
  GlobalStep g = draw_step(rng, comm.world_size(), 2, PoolingMode::kSum, false, ~0u);
  std::vector<HostBatch> mine = g.batches[rank];
  if (rank == 0) {
    mine[1].keys = {1, 2, 3};
    mine[1].offsets = {0, 5};  // past the ids
  }
  std::vector<float> out(64 * 8 * 8);
  if (rank == 0) {
    EXPECT_THROW(sharded.forward(views(mine, PoolingMode::kSum), out.data(), 8, true),
                 InvalidArgument);
  } else {
    EXPECT_THROW(sharded.forward(views(mine, PoolingMode::kSum), out.data(), 8, true), Error);
  }
  EXPECT_EQ(sharded.global_sizes(), (std::vector<uint64_t>{0, 0}));
  // backward without a pending forward: refused on every rank.
  EXPECT_THROW(sharded.backward(out.data(), 8), Error);
  // Training goes on from there, in step with one process.
  TrainCase c;
  train_and_compare(comm, c, seed, &sharded, &reference);
}

}  // namespace
}  // namespace dynemb::dist::testing

namespace dynemb::dist::testing {
namespace {

TEST(DistMpiBootstrap, MpiExchangerSharesRankZerosBytes) {
  Communicator& comm = world();
  std::mt19937_64 rng(shared_seed());
  auto exchanger = make_mpi_id_exchanger();
  for (int round = 0; round < 3; ++round) {
    std::vector<uint8_t> bytes(rng() % 200);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    EXPECT_EQ(exchanger->share(comm.rank(), comm.rank() == 0 ? bytes : std::vector<uint8_t>{}),
              bytes);
  }
}

// NCCL bootstrapped over MPI, one GPU per rank (scripts/gpu_check_multi.sh runs 1 and 2 ranks on
// a 2-GPU machine): the MPI suite's collectives, training cases and mismatches over NCCL, each
// sharded step checked against one GPU training on the whole stream (and, once, the CPU).
bool nccl_runnable() {
  return nccl_world() != nullptr;
}

// The NCCL world (call after nccl_runnable()).
Communicator& nccl() {
  return *nccl_world();
}

constexpr const char* kNcclSkip = "needs NCCL and one CUDA device per rank";

TEST(DistNcclCollectives, AgreeWithAHostModel) {
  if (!nccl_runnable()) GTEST_SKIP() << kNcclSkip;
  check_collectives(nccl());
}

class DistNcclTraining : public ::testing::TestWithParam<Named> {};

TEST_P(DistNcclTraining, SameRowsAsOneGpu) {
  if (!nccl_runnable()) GTEST_SKIP() << kNcclSkip;
  TrainCase c = GetParam().c;
  c.reference_backend = Backend::kCuda;
  train_and_compare(nccl(), c, shared_seed());
}

INSTANTIATE_TEST_SUITE_P(Cases, DistNcclTraining, ::testing::ValuesIn(kTrainingCases), case_name);

TEST(DistNcclTraining, SameRowsAsOneCpuProcess) {
  if (!nccl_runnable()) GTEST_SKIP() << kNcclSkip;
  TrainCase c;
  c.weighted = true;
  c.exchange = ShardedExchange::kPooledOnOwner;
  c.mode = PoolingMode::kMean;
  train_and_compare(nccl(), c, shared_seed());
}

TEST(DistNcclConfig, MismatchedTablesFailOnEveryRank) {
  if (!nccl_runnable() || world().world_size() < 2) GTEST_SKIP() << kNcclSkip << ", two or more";
  check_mismatches_fail_everywhere(nccl());
}

TEST(DistNcclConfig, TablesOnAnotherDeviceThanTheCommunicatorsFailEverywhere) {
  if (!nccl_runnable()) GTEST_SKIP() << kNcclSkip;
  Communicator& comm = nccl();
  auto tables = tables_on(comm, 2, 8);
  // The last rank puts its tables on another device: every rank refuses, naming it.
  if (comm.rank() == comm.world_size() - 1) {
    for (EmbeddingOptions& o : tables) o.table.device = comm.device() + 1;
  }
  try {
    ShardedEmbeddingCollection<int64_t> sharded(comm, tables);
    ADD_FAILURE() << "created with tables off the communicator's device";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    if (comm.rank() == comm.world_size() - 1) {
      EXPECT_NE(what.find("the communicator's device " + std::to_string(comm.device())),
                std::string::npos)
          << what;
    }
  }
  train_and_compare(comm, TrainCase{}, shared_seed());
}

}  // namespace
}  // namespace dynemb::dist::testing

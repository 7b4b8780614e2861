// Every memory type and location at 2 and 3 ranks: the partition, direct access to every part,
// gather and scatter (every executor the machine has) against the reference contents.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "dynemb/core/error.hpp"
#include "wholememory/mpi/wm_main.hpp"
#include "wholememory/wm_test_support.hpp"

namespace dynemb::wholememory::testing {
namespace {

struct Kind {
  MemoryType type;
  MemoryLocation location;
  Executor executor;
};

std::string kind_name(const ::testing::TestParamInfo<Kind>& info) {
  return to_string(info.param.type) + "_" + to_string(info.param.location) + "_" +
         to_string(info.param.executor);
}

class WholeTensorMpi : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (cuda_missing(GetParam().location, GetParam().executor)) GTEST_SKIP() << "no CUDA device";
  }
  TensorOptions options(uint64_t rows, uint64_t cols) const {
    TensorOptions o;
    o.shape = {rows, cols};
    o.type = GetParam().type;
    o.location = GetParam().location;
    return o;
  }
};

// Fills every row with its reference: rank r scatters the rows i with i % world == r, in a
// shuffled order (disjoint writes), then waits for the others.
void fill_reference(WholeTensor& t, uint64_t seed, Executor executor, std::mt19937_64& rng) {
  dist::Communicator& comm = t.memory().communicator();
  std::vector<int64_t> mine;
  for (uint64_t i = comm.rank(); i < t.rows(); i += comm.world_size())
    mine.push_back(static_cast<int64_t>(i));
  std::shuffle(mine.begin(), mine.end(), rng);
  scatter_host(t, reference_rows(seed, mine, 0, t.cols()), mine, executor);
  comm.barrier();
}

TEST_P(WholeTensorMpi, PartsGatherScatterAgainstReference) {
  const Kind kind = GetParam();
  dist::Communicator& comm = world();
  const uint64_t seed = shared_seed();
  std::mt19937_64 shared(seed);  // the same draws on every rank
  std::mt19937_64 mine(seed ^ (0x1234567ull * (comm.rank() + 1)));
  const uint64_t rows =
      std::uniform_int_distribution<uint64_t>(comm.world_size() * 40, 6000)(shared);
  const uint64_t cols = std::uniform_int_distribution<uint64_t>(1, 40)(shared);
  WholeTensor t(comm, options(rows, cols));
  const WholeMemory& m = t.memory();
  const Partition& p = m.partition();
  SCOPED_TRACE(m.describe());

  // The partition covers every row once, in rank order.
  uint64_t covered = 0;
  for (uint32_t r = 0; r < comm.world_size(); ++r) {
    EXPECT_EQ(p.first_row(r), std::min<uint64_t>(covered, rows));
    covered += p.rows_of(r);
  }
  EXPECT_EQ(covered, rows);
  EXPECT_EQ(m.local_bytes(), p.rows_of(comm.rank()) * cols * sizeof(float));

  fill_reference(t, seed, kind.executor, mine);

  // Host location: every part this rank maps holds the reference, read directly.
  if (kind.location == MemoryLocation::kHost) {
    for (uint32_t r = 0; r < comm.world_size(); ++r) {
      if (kind.type == MemoryType::kDistributed && r != comm.rank()) {
        EXPECT_THROW(m.part_data(r), StateError);
        continue;
      }
      const float* part =
          static_cast<const float*>(r == comm.rank() ? m.local_data() : m.part_data(r));
      for (uint64_t i = 0; i < p.rows_of(r); ++i) {
        for (uint64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(part[i * cols + c], reference_value(seed, p.first_row(r) + i, c))
              << "rank " << r << "'s row " << i;
        }
      }
      if (kind.type == MemoryType::kContinuous && p.rows_of(r) > 0) {
        EXPECT_EQ(static_cast<const char*>(m.data()) + p.offset_of(r), m.part_data(r));
      }
    }
  }
  if (kind.type != MemoryType::kContinuous) EXPECT_THROW(m.data(), StateError);

  // Random gathers (repeats, a different count on every rank, sometimes none).
  const size_t n = std::uniform_int_distribution<size_t>(0, 4)(mine) == 0
                       ? 0
                       : std::uniform_int_distribution<size_t>(1, 3000)(mine);
  std::vector<int64_t> ask(n);
  for (auto& i : ask)
    i = static_cast<int64_t>(std::uniform_int_distribution<uint64_t>(0, rows - 1)(mine));
  EXPECT_EQ(gather_host(t, ask, kind.executor), reference_rows(seed, ask, 0, cols));

  // A column range.
  const uint64_t first = std::uniform_int_distribution<uint64_t>(0, cols - 1)(shared);
  const uint64_t count = std::uniform_int_distribution<uint64_t>(1, cols - first)(shared);
  EXPECT_EQ(gather_host(t, ask, kind.executor, {first, count}),
            reference_rows(seed, ask, first, count));

  // Scatter into a column range of other rows, then read whole rows back.
  comm.barrier();
  std::vector<int64_t> changed;
  for (uint64_t i = comm.rank(); i < rows; i += 7 * comm.world_size())
    changed.push_back(static_cast<int64_t>(i));
  std::vector<float> fresh(changed.size() * count);
  for (size_t i = 0; i < fresh.size(); ++i) fresh[i] = -1.0f - static_cast<float>(i);
  scatter_host(t, fresh, changed, kind.executor, {first, count});
  comm.barrier();
  std::vector<float> expect = reference_rows(seed, changed, 0, cols);
  for (size_t i = 0; i < changed.size(); ++i) {
    for (uint64_t c = 0; c < count; ++c) expect[i * cols + first + c] = fresh[i * count + c];
  }
  EXPECT_EQ(gather_host(t, changed, kind.executor), expect);
  comm.barrier();
}

// 4 MiB per rank (256-byte rows): every rank holds a part even under 2 MiB VMM granules, so
// gathers cross every part.
TEST_P(WholeTensorMpi, EveryRankHoldsAPart) {
  const Kind kind = GetParam();
  dist::Communicator& comm = world();
  const uint64_t seed = shared_seed();
  std::mt19937_64 rng(seed + comm.rank());
  const uint64_t cols = 64;
  const uint64_t rows = comm.world_size() * ((4ull << 20) / (cols * sizeof(float)));
  WholeTensor t(comm, options(rows, cols));
  for (uint32_t r = 0; r < comm.world_size(); ++r) {
    EXPECT_GT(t.memory().partition().rows_of(r), 0u)
        << "rank " << r << ": " << t.memory().describe();
  }
  fill_reference(t, seed, kind.executor, rng);
  std::vector<int64_t> ask(20000);
  for (auto& i : ask) i = static_cast<int64_t>(rng() % rows);
  EXPECT_EQ(gather_host(t, ask, kind.executor), reference_rows(seed, ask, 0, cols));
  comm.barrier();
}

TEST_P(WholeTensorMpi, IndexOutOfRangeThrowsAndCopiesNothing) {
  const Kind kind = GetParam();
  dist::Communicator& comm = world();
  const uint64_t seed = shared_seed();
  std::mt19937_64 rng(seed + comm.rank());
  const uint64_t rows = 97 * comm.world_size();
  WholeTensor t(comm, options(rows, 3));
  fill_reference(t, seed, kind.executor, rng);
  // The last rank passes one index past the end among good ones.
  const bool bad_here = comm.rank() + 1 == comm.world_size();
  std::vector<int64_t> ask = {0, static_cast<int64_t>(rows - 1), 5};
  if (bad_here) ask[1] = static_cast<int64_t>(rows);
  std::vector<float> junk(ask.size() * 3, 7.0f);
  const bool collective = kind.type == MemoryType::kDistributed;
  if (bad_here || collective) {
    EXPECT_THROW(scatter_host(t, junk, ask, kind.executor), InvalidArgument);
    EXPECT_THROW(gather_host(t, ask, kind.executor), InvalidArgument);
    ask[1] = -1;
    EXPECT_THROW(gather_host(t, ask, kind.executor), InvalidArgument);
  }
  comm.barrier();
  // Nothing was written.
  std::vector<int64_t> all(rows);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(gather_host(t, all, kind.executor), reference_rows(seed, all, 0, 3));
  comm.barrier();
}

TEST_P(WholeTensorMpi, OneDimensionalInt64) {
  const Kind kind = GetParam();
  dist::Communicator& comm = world();
  const uint64_t seed = shared_seed();
  const uint64_t rows = 1000 + seed % 5000;
  TensorOptions o = options(rows, 1);
  o.shape = {rows};
  o.dtype = dist::DataType::kInt64;
  WholeTensor t(comm, o);
  EXPECT_EQ(t.cols(), 1u);
  std::vector<int64_t> mine;
  for (uint64_t i = comm.rank(); i < rows; i += comm.world_size())
    mine.push_back(static_cast<int64_t>(i));
  std::vector<int64_t> values(mine.size());
  for (size_t i = 0; i < mine.size(); ++i)
    values[i] = mine[i] * 1000003 + static_cast<int64_t>(seed % 1000);
  auto run_scatter = [&](const std::vector<int64_t>& v, const std::vector<int64_t>& idx) {
    if (kind.executor == Backend::kCpu) {
      scatter(t, v.data(), idx.data(), idx.size(), kind.executor);
      return;
    }
    BackendBuffer<int64_t> dv(Backend::kCuda, v.size(), t.memory().device());
    BackendBuffer<int64_t> di(Backend::kCuda, idx.size(), t.memory().device());
    dv.upload(v.data(), v.size());
    di.upload(idx.data(), idx.size());
    scatter(t, dv.data(), di.data(), idx.size(), kind.executor);
    t.memory().synchronize();
  };
  run_scatter(values, mine);
  comm.barrier();
  std::vector<int64_t> all(rows);
  std::iota(all.begin(), all.end(), 0);
  std::reverse(all.begin(), all.end());
  std::vector<int64_t> got(rows);
  if (kind.executor == Backend::kCpu) {
    gather(t, all.data(), rows, got.data(), kind.executor);
  } else {
    BackendBuffer<int64_t> di(Backend::kCuda, rows, t.memory().device());
    BackendBuffer<int64_t> dout(Backend::kCuda, rows, t.memory().device());
    di.upload(all.data(), rows);
    gather(t, di.data(), rows, dout.data(), kind.executor);
    t.memory().synchronize();
    dout.download(got.data(), rows);
  }
  for (uint64_t i = 0; i < rows; ++i) {
    ASSERT_EQ(got[i], all[i] * 1000003 + static_cast<int64_t>(seed % 1000)) << "row " << all[i];
  }
  comm.barrier();
}

std::vector<Kind> every_kind() {
  std::vector<Kind> kinds;
  for (MemoryType type :
       {MemoryType::kContinuous, MemoryType::kChunked, MemoryType::kDistributed}) {
    kinds.push_back({type, MemoryLocation::kHost, Backend::kCpu});
    kinds.push_back({type, MemoryLocation::kHost, Backend::kCuda});
    kinds.push_back({type, MemoryLocation::kDevice, Backend::kCuda});
  }
  return kinds;
}

INSTANTIATE_TEST_SUITE_P(Kinds, WholeTensorMpi, ::testing::ValuesIn(every_kind()), kind_name);

}  // namespace
}  // namespace dynemb::wholememory::testing

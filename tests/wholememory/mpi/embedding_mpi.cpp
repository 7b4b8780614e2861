// The WholeMemory embedding at 2 and 3 ranks, every type and location and the sparse
// optimizers, against one process's Embedding (the dynamic-table embedding of the embedding
// part, on the same backend) trained on every rank's batches.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "dynemb/core/error.hpp"
#include "dynemb/embedding/embedding.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "dynemb/wholememory/embedding.hpp"
#include "wholememory/mpi/wm_main.hpp"
#include "wholememory/wm_test_support.hpp"

namespace dynemb::wholememory::testing {
namespace {

struct Case {
  MemoryType type;
  MemoryLocation location;
  OptimizerKind optimizer;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return to_string(info.param.type) + "_" + to_string(info.param.location) + "_" +
         to_string(info.param.optimizer);
}

class WholeEmbeddingMpi : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (cuda_missing(GetParam().location, Backend::kCpu)) GTEST_SKIP() << "no CUDA device";
  }
};

// Host vectors in and out of `backend` memory.
template <class T>
BackendBuffer<T> to_backend(Backend backend, const std::vector<T>& v, int device) {
  BackendBuffer<T> b(backend, std::max<size_t>(1, v.size()), device);
  if (!v.empty()) b.upload(v.data(), v.size());
  return b;
}

// The rows of `ids` as `reference` holds them (evaluation forward: one id per bag).
std::vector<float> reference_rows_of(Embedding<int64_t>& reference, Backend backend, int device,
                                     const std::vector<int64_t>& ids, uint32_t dim) {
  std::vector<int64_t> offsets(ids.size() + 1);
  std::iota(offsets.begin(), offsets.end(), 0);
  auto d_ids = to_backend(backend, ids, device);
  auto d_offsets = to_backend(backend, offsets, device);
  BackendBuffer<float> out(backend, std::max<size_t>(1, ids.size() * dim), device);
  EmbeddingBatch<int64_t> batch{d_ids.data(), ids.size(), d_offsets.data(), ids.size()};
  reference.forward(batch, out.data(), dim, false);
  std::vector<float> host(ids.size() * dim);
  out.download(host.data(), host.size());
  return host;
}

TEST_P(WholeEmbeddingMpi, TrainsLikeOneProcessEmbedding) {
  const Case c = GetParam();
  dist::Communicator& comm = world();
  const uint64_t seed = shared_seed();
  std::mt19937_64 shared(seed);
  const uint32_t world_size = comm.world_size();
  const Backend backend = default_executor(c.location);

  WholeEmbeddingOptions o;
  o.rows = std::uniform_int_distribution<uint64_t>(world_size * 50, 5000)(shared);
  const uint32_t dims[] = {1, 4, 8, 13, 32};
  o.dim = dims[std::uniform_int_distribution<size_t>(0, 4)(shared)];
  o.optimizer.kind = c.optimizer;
  o.optimizer.learning_rate = 0.05f;
  o.initializer.kind = InitializerKind::kUniform;
  o.initializer.seed = seed;
  o.type = c.type;
  o.location = c.location;
  const double ratios[] = {0.0, 0.1, 0.5, 1.0};
  o.cache_ratio = ratios[std::uniform_int_distribution<size_t>(0, 3)(shared)];
  o.cache_executor = backend;
  WholeEmbedding whole(comm, o);
  SCOPED_TRACE("dim " + std::to_string(o.dim) + ", cache ratio " + std::to_string(o.cache_ratio));
  // The WholeEmbedding's buffers on its device; the reference on device 0, the device current
  // in this process (the Embedding runs on the current device).
  const int device = std::max(0, whole.tensor().memory().device());
  constexpr int kReferenceDevice = 0;
  EXPECT_EQ(whole.row_floats(), o.dim + optimizer_state_dim(c.optimizer, o.dim));

  EmbeddingOptions eo;
  eo.dim = o.dim;
  eo.table.dim = o.dim;
  eo.table.init_capacity = 16384;
  eo.table.max_capacity = 16384;
  eo.table.initializer = o.initializer;
  eo.optimizer = o.optimizer;
  eo.table.device = kReferenceDevice;
  Embedding<int64_t> reference(backend, eo);

  std::set<int64_t> touched;
  const int steps = 3;
  for (int step = 0; step < steps; ++step) {
    // Every rank draws every rank's batch (the shared engine): a skewed draw, so ids repeat
    // within a batch and across ranks.
    std::vector<std::vector<int64_t>> ids(world_size);
    std::vector<std::vector<float>> grads(world_size);
    for (uint32_t r = 0; r < world_size; ++r) {
      const size_t n = std::uniform_int_distribution<size_t>(0, 400)(shared);
      for (size_t i = 0; i < n; ++i) {
        const double u = std::uniform_real_distribution<double>(0, 1)(shared);
        ids[r].push_back(static_cast<int64_t>(std::pow(u, 3.0) * static_cast<double>(o.rows - 1)));
        touched.insert(ids[r].back());
      }
      for (size_t i = 0; i < n * o.dim; ++i) {
        grads[r].push_back(std::uniform_real_distribution<float>(-1, 1)(shared));
      }
    }
    // This rank's part of the step.
    const auto& mine = ids[comm.rank()];
    auto d_ids = to_backend(backend, mine, device);
    auto d_grads = to_backend(backend, grads[comm.rank()], device);
    {
      // A lookup first: it fills the cache, which the step must then keep coherent.
      BackendBuffer<float> seen(backend, std::max<size_t>(1, mine.size() * o.dim), device);
      whole.lookup(d_ids.data(), mine.size(), seen.data(), backend);
    }
    whole.apply_gradients(d_ids.data(), mine.size(), d_grads.data(), backend);
    // The reference: one process, every rank's batch in rank order as one batch.
    std::vector<int64_t> all_ids;
    std::vector<float> all_grads;
    for (uint32_t r = 0; r < world_size; ++r) {
      all_ids.insert(all_ids.end(), ids[r].begin(), ids[r].end());
      all_grads.insert(all_grads.end(), grads[r].begin(), grads[r].end());
    }
    std::vector<int64_t> offsets(all_ids.size() + 1);
    std::iota(offsets.begin(), offsets.end(), 0);
    auto r_ids = to_backend(backend, all_ids, kReferenceDevice);
    auto r_offsets = to_backend(backend, offsets, kReferenceDevice);
    auto r_grads = to_backend(backend, all_grads, kReferenceDevice);
    BackendBuffer<float> out(backend, std::max<size_t>(1, all_ids.size() * o.dim),
                             kReferenceDevice);
    EmbeddingBatch<int64_t> batch{r_ids.data(), all_ids.size(), r_offsets.data(), all_ids.size()};
    reference.forward(batch, out.data(), o.dim, true);
    reference.backward(r_grads.data(), o.dim);
    reference.end_step();
  }
  backend_synchronize(backend);

  // Every touched row within float32 of the reference.
  const std::vector<int64_t> rows(touched.begin(), touched.end());
  const std::vector<float> expect =
      reference_rows_of(reference, backend, kReferenceDevice, rows, o.dim);
  std::vector<float> got(rows.size() * o.dim);
  {
    auto d_rows = to_backend(backend, rows, device);
    BackendBuffer<float> d_got(backend, std::max<size_t>(1, got.size()), device);
    whole.lookup(d_rows.data(), rows.size(), d_got.data(), backend);
    whole.tensor().memory().synchronize();
    if (!got.empty()) d_got.download(got.data(), got.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], expect[i], 2e-5 + 2e-5 * std::fabs(expect[i]))
        << "row " << rows[i / o.dim] << " element " << i % o.dim << ", dim " << o.dim;
  }
  // Read again: the same rows, and with a whole-table cache every one a hit.
  {
    const WholeEmbeddingCacheStats before = whole.cache_stats();
    auto d_rows = to_backend(backend, rows, device);
    BackendBuffer<float> d_again(backend, std::max<size_t>(1, got.size()), device);
    whole.lookup(d_rows.data(), rows.size(), d_again.data(), backend);
    whole.tensor().memory().synchronize();
    std::vector<float> again(got.size());
    if (!again.empty()) d_again.download(again.data(), again.size());
    EXPECT_EQ(again, got);
    const WholeEmbeddingCacheStats after = whole.cache_stats();
    if (o.cache_ratio == 1.0) {
      EXPECT_EQ(after.hits - before.hits, rows.size());
      EXPECT_GT(after.invalidated, 0u);
    }
    if (o.cache_ratio == 0.0) EXPECT_EQ(after.hits + after.misses, 0u);
  }
  // An untouched row is still the initializer's row of its id.
  int64_t untouched = -1;
  for (int64_t r = static_cast<int64_t>(o.rows) - 1; r >= 0 && untouched < 0; --r) {
    if (!touched.count(r)) untouched = r;
  }
  if (untouched >= 0) {
    std::vector<float> init(o.dim);
    InitializerOptions io = o.initializer;
    io.width = o.dim;
    fill_initial_rows<int64_t>(Backend::kCpu, 1, &untouched, nullptr, true, io, init.data(), o.dim,
                               o.dim);
    auto d_row = to_backend(backend, std::vector<int64_t>{untouched}, device);
    BackendBuffer<float> d_got(backend, o.dim, device);
    whole.lookup(d_row.data(), 1, d_got.data(), backend);
    whole.tensor().memory().synchronize();
    std::vector<float> row(o.dim);
    d_got.download(row.data(), o.dim);
    EXPECT_EQ(row, init) << "untouched row " << untouched;
  }

  // A bad id on one rank: every rank throws, no row changes.
  std::vector<int64_t> bad = {0};
  if (comm.rank() == 0) bad[0] = static_cast<int64_t>(o.rows);
  auto d_bad = to_backend(backend, bad, device);
  auto d_bad_grad = to_backend(backend, std::vector<float>(o.dim, 1.0f), device);
  EXPECT_THROW(whole.apply_gradients(d_bad.data(), 1, d_bad_grad.data(), backend), InvalidArgument);
  std::vector<float> after(rows.size() * o.dim);
  {
    auto d_rows = to_backend(backend, rows, device);
    BackendBuffer<float> d_got(backend, std::max<size_t>(1, after.size()), device);
    whole.lookup(d_rows.data(), rows.size(), d_got.data(), backend);
    whole.tensor().memory().synchronize();
    if (!after.empty()) d_got.download(after.data(), after.size());
  }
  EXPECT_EQ(after, got);
  comm.barrier();
}

std::vector<Case> every_case() {
  std::vector<Case> cases;
  for (MemoryLocation location : {MemoryLocation::kHost, MemoryLocation::kDevice}) {
    for (MemoryType type :
         {MemoryType::kContinuous, MemoryType::kChunked, MemoryType::kDistributed}) {
      for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdaGrad,
                                 OptimizerKind::kRmsProp, OptimizerKind::kRowWiseAdaGrad}) {
        cases.push_back({type, location, kind});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, WholeEmbeddingMpi, ::testing::ValuesIn(every_case()), case_name);

}  // namespace
}  // namespace dynemb::wholememory::testing

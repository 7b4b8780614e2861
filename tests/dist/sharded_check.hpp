// Trains a ShardedEmbeddingCollection on this rank's share of a global stream and one
// EmbeddingCollection (the reference) on all of it, and checks outputs and rows agree.
#pragma once

#include <gtest/gtest.h>

#include <map>

#include "dist/sharded_reference.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/dist/sharded_collection.hpp"

namespace dynemb::dist::testing {

struct TrainCase {
  KeyRouter router = KeyRouter::hash();
  PoolingMode mode = PoolingMode::kSum;
  bool weighted = false;
  uint32_t empty_rank = ~0u;  // this rank passes empty batches every step
  uint32_t tables = 2;
  uint32_t dim = 8;
  uint32_t steps = 6;
  OptimizerKind optimizer = OptimizerKind::kAdam;
  ShardedExchange exchange = ShardedExchange::kRows;
  // Where the one-process reference trains: the CPU, or (on a CUDA communicator) one GPU, the
  // rank's own, on the whole stream.
  Backend reference_backend = Backend::kCpu;
};

// Checks every stored row of `sharded` (this rank's shard) against `reference`: the key is
// owned here and the full row (embedding and optimizer state) agrees within float32.
inline void expect_same_rows(ShardedEmbeddingCollection<int64_t>& sharded,
                             EmbeddingCollection<int64_t>& reference) {
  const uint32_t rank = sharded.communicator().rank();
  for (size_t t = 0; t < sharded.num_tables(); ++t) {
    size_t rows = 0, wrong_owner = 0, missing = 0, different = 0;
    const uint32_t row_dim = sharded.local().row_dim();
    // The reference's rows, read the same way on every backend.
    std::map<int64_t, std::vector<float>> reference_rows;
    reference.table(t).for_each([&](int64_t key, std::span<const float> row, uint64_t) {
      reference_rows[key].assign(row.begin(), row.end());
    });
    sharded.local().table(t).for_each([&](int64_t key, std::span<const float> row, uint64_t) {
      ++rows;
      if (sharded.owner(static_cast<uint32_t>(t), key) != rank) ++wrong_owner;
      const auto found = reference_rows.find(key);
      if (found == reference_rows.end()) {
        ++missing;
        return;
      }
      const std::vector<float>& expect = found->second;
      for (uint32_t i = 0; i < row_dim; ++i) {
        if (!close(row[i], expect[i])) {
          if (different++ < 3) {
            ADD_FAILURE() << "table " << t << " key " << key << " element " << i << ": sharded "
                          << row[i] << ", one process " << expect[i];
          }
        }
      }
    });
    EXPECT_EQ(wrong_owner, 0u) << "table " << t;
    EXPECT_EQ(missing, 0u) << "table " << t;
    EXPECT_EQ(different, 0u) << "table " << t << " (" << rows << " rows)";
  }
}

// Host batches copied into `backend`'s memory (views of the host ones on the CPU).
struct BackendBatches {
  std::vector<BackendBuffer<int64_t>> keys, offsets;
  std::vector<BackendBuffer<float>> weights;
  std::vector<EmbeddingBatch<int64_t>> batches;
  BackendBatches(Backend backend, const std::vector<HostBatch>& host, PoolingMode mode,
                 int device = 0) {
    batches = views(host, mode);
    if (backend == Backend::kCpu) return;
    for (size_t t = 0; t < host.size(); ++t) {
      keys.emplace_back(backend, host[t].keys.size() + 1, device);
      keys.back().upload(host[t].keys.data(), host[t].keys.size());
      offsets.emplace_back(backend, host[t].offsets.size(), device);
      offsets.back().upload(host[t].offsets.data(), host[t].offsets.size());
      weights.emplace_back(backend, host[t].weights.size() + 1, device);
      weights.back().upload(host[t].weights.data(), host[t].weights.size());
      batches[t].keys = keys.back().data();
      batches[t].offsets = offsets.back().data();
      batches[t].weights = host[t].weights.empty() ? nullptr : weights.back().data();
    }
  }
};

// Runs `c` for `steps` training steps and one evaluation step on `comm`, checking each
// forward's output and, at the end, every row. Every rank must call it with the same seed.
inline void train_and_compare(Communicator& comm, const TrainCase& c, uint64_t seed,
                              ShardedEmbeddingCollection<int64_t>* keep = nullptr,
                              EmbeddingCollection<int64_t>* keep_reference = nullptr) {
  std::mt19937_64 rng(seed);
  const uint32_t rank = comm.rank(), world = comm.world_size();
  auto options = test_tables(c.tables, c.dim, c.optimizer);
  const Backend backend = comm.backend();
  const int device = comm.device();
  if (backend != Backend::kCpu) {
    for (EmbeddingOptions& o : options) o.table.device = device;
  }
  std::unique_ptr<ShardedEmbeddingCollection<int64_t>> own;
  std::unique_ptr<EmbeddingCollection<int64_t>> own_reference;
  ShardedEmbeddingCollection<int64_t>* sharded = keep;
  EmbeddingCollection<int64_t>* reference = keep_reference;
  if (sharded == nullptr) {
    own =
        std::make_unique<ShardedEmbeddingCollection<int64_t>>(comm, options, c.router, c.exchange);
    sharded = own.get();
  }
  if (reference == nullptr) {
    own_reference = std::make_unique<EmbeddingCollection<int64_t>>(c.reference_backend, options);
    reference = own_reference.get();
  }
  const uint32_t D = c.dim;
  size_t output_mismatches = 0;
  for (uint32_t step = 0; step <= c.steps; ++step) {
    const bool training = step < c.steps;
    const GlobalStep g = draw_step(rng, world, c.tables, c.mode, c.weighted, c.empty_rank);
    const std::vector<HostBatch> all = concatenated(g);
    size_t global_units = 0;
    for (const HostBatch& b : all) global_units += units(b, c.mode);
    std::vector<float> ref_out(global_units * D, -1.0f);
    const Backend ref_backend = reference->backend();
    const bool ref_on_host = ref_backend == Backend::kCpu;
    BackendBatches ref_batches(ref_backend, all, c.mode, device);
    BackendBuffer<float> ref_device_out(ref_backend, ref_on_host ? 0 : ref_out.size() + 1, device);
    reference->forward(ref_batches.batches, ref_on_host ? ref_out.data() : ref_device_out.data(), D,
                       training);
    if (!ref_on_host) {
      backend_synchronize(ref_backend);
      ref_device_out.download(ref_out.data(), ref_out.size());
    }
    const std::vector<size_t> map = global_rows_of(g, rank);
    std::vector<float> out(map.size() * D, -2.0f);
    BackendBatches mine_batches(backend, g.batches[rank], c.mode, device);
    BackendBuffer<float> device_out(backend, backend == Backend::kCpu ? 0 : out.size() + 1, device);
    float* out_ptr = backend == Backend::kCpu ? out.data() : device_out.data();
    sharded->forward(mine_batches.batches, out_ptr, D, training);
    if (backend != Backend::kCpu) {
      backend_synchronize(backend);
      device_out.download(out.data(), out.size());
    }
    for (size_t i = 0; i < map.size(); ++i) {
      for (uint32_t d = 0; d < D; ++d) {
        if (!close(out[i * D + d], ref_out[map[i] * D + d]) && output_mismatches++ < 3) {
          ADD_FAILURE() << "step " << step << " output row " << i << " element " << d
                        << ": sharded " << out[i * D + d] << ", one process "
                        << ref_out[map[i] * D + d];
        }
      }
    }
    if (!training) break;
    std::vector<float> grad(global_units * D);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : grad) x = u(rng);
    BackendBuffer<float> ref_grad(ref_backend, ref_on_host ? 0 : grad.size() + 1, device);
    if (!ref_on_host) ref_grad.upload(grad.data(), grad.size());
    reference->backward(ref_on_host ? grad.data() : ref_grad.data(), D);
    std::vector<float> mine(map.size() * D);
    for (size_t i = 0; i < map.size(); ++i) {
      std::copy_n(grad.begin() + map[i] * D, D, mine.begin() + i * D);
    }
    BackendBuffer<float> device_grad(backend, backend == Backend::kCpu ? 0 : mine.size() + 1,
                                     device);
    if (backend != Backend::kCpu) device_grad.upload(mine.data(), mine.size());
    sharded->backward(backend == Backend::kCpu ? mine.data() : device_grad.data(), D);
    backend_synchronize(backend);
    if (!ref_on_host) backend_synchronize(ref_backend);
    reference->end_step();
    sharded->end_step();
  }
  EXPECT_EQ(output_mismatches, 0u);
  (void)keep_reference;
  std::vector<uint64_t> expected_sizes;
  for (size_t t = 0; t < c.tables; ++t) expected_sizes.push_back(reference->table(t).size());
  EXPECT_EQ(sharded->global_sizes(), expected_sizes);
  expect_same_rows(*sharded, *reference);
}

}  // namespace dynemb::dist::testing

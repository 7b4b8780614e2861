// A global stream of batches, split over ranks, and the one-process reference it is checked
// against: the sharded collection on rank r must give what one EmbeddingCollection gives on
// every rank's batches concatenated.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "dynemb/embedding/embedding_collection.hpp"

namespace dynemb::dist::testing {

// One rank's batch of one table (host memory).
struct HostBatch {
  std::vector<int64_t> keys;
  std::vector<int64_t> offsets{0};
  std::vector<float> weights;  // empty: unweighted
  size_t bags() const { return offsets.size() - 1; }
};

// Output rows of a batch: bags, or ids for NONE.
inline size_t units(const HostBatch& b, PoolingMode mode) {
  return mode == PoolingMode::kNone ? b.keys.size() : b.bags();
}

// One step of the stream: batches[rank][table].
struct GlobalStep {
  std::vector<std::vector<HostBatch>> batches;
  PoolingMode mode = PoolingMode::kSum;
};

// Draws a step: up to `max_bags` bags of 0-4 ids per rank and table; half the keys from a hot
// range shared by every rank, half spread over 60 bits; `empty_rank` (if < world) gets none.
inline GlobalStep draw_step(std::mt19937_64& rng, uint32_t world, uint32_t tables, PoolingMode mode,
                            bool weighted, uint32_t empty_rank, uint32_t max_bags = 12) {
  GlobalStep g;
  g.mode = mode;
  g.batches.assign(world, std::vector<HostBatch>(tables));
  for (uint32_t r = 0; r < world; ++r) {
    for (uint32_t t = 0; t < tables; ++t) {
      HostBatch& b = g.batches[r][t];
      const uint32_t bags = r == empty_rank ? 0 : static_cast<uint32_t>(rng() % (max_bags + 1));
      for (uint32_t i = 0; i < bags; ++i) {
        const uint32_t len = static_cast<uint32_t>(rng() % 5);
        for (uint32_t j = 0; j < len; ++j) {
          b.keys.push_back(rng() % 2 ? static_cast<int64_t>(rng() % 48)
                                     : static_cast<int64_t>(rng() >> 4));
          if (weighted) b.weights.push_back(0.5f + static_cast<float>(rng() % 1000) / 1000.0f);
        }
        b.offsets.push_back(static_cast<int64_t>(b.keys.size()));
      }
    }
  }
  return g;
}

// Every rank's batches of each table concatenated (rank order).
inline std::vector<HostBatch> concatenated(const GlobalStep& g) {
  const size_t tables = g.batches.front().size();
  std::vector<HostBatch> all(tables);
  for (const auto& rank : g.batches) {
    for (size_t t = 0; t < tables; ++t) {
      const HostBatch& b = rank[t];
      const int64_t shift = static_cast<int64_t>(all[t].keys.size());
      all[t].keys.insert(all[t].keys.end(), b.keys.begin(), b.keys.end());
      all[t].weights.insert(all[t].weights.end(), b.weights.begin(), b.weights.end());
      for (size_t i = 1; i < b.offsets.size(); ++i) all[t].offsets.push_back(b.offsets[i] + shift);
    }
  }
  return all;
}

// EmbeddingBatch views of host batches.
inline std::vector<EmbeddingBatch<int64_t>> views(const std::vector<HostBatch>& batches,
                                                  PoolingMode mode) {
  std::vector<EmbeddingBatch<int64_t>> v;
  for (const HostBatch& b : batches) {
    v.push_back({b.keys.data(), b.keys.size(), b.offsets.data(), b.bags(),
                 b.weights.empty() ? nullptr : b.weights.data(), mode});
  }
  return v;
}

// Where rank r's output row i of the step lies in the concatenated output: a map of local
// row -> global row.
inline std::vector<size_t> global_rows_of(const GlobalStep& g, uint32_t rank) {
  const size_t tables = g.batches.front().size();
  std::vector<size_t> map;
  size_t global_first = 0;
  for (size_t t = 0; t < tables; ++t) {
    size_t before = 0, total = 0;
    for (size_t r = 0; r < g.batches.size(); ++r) {
      const size_t n = units(g.batches[r][t], g.mode);
      if (r < rank) before += n;
      total += n;
    }
    for (size_t i = 0; i < units(g.batches[rank][t], g.mode); ++i) {
      map.push_back(global_first + before + i);
    }
    global_first += total;
  }
  return map;
}

// |a - b| <= 1e-5 + 1e-4 |b|: float32 sums in another order.
inline bool close(float a, float b) {
  return std::fabs(a - b) <= 1e-5f + 1e-4f * std::fabs(b);
}

// Options of `tables` Adam tables of `dim`, STEP scores, room for every key of the tests.
inline std::vector<EmbeddingOptions> test_tables(uint32_t tables, uint32_t dim,
                                                 OptimizerKind optimizer = OptimizerKind::kAdam) {
  std::vector<EmbeddingOptions> all;
  for (uint32_t t = 0; t < tables; ++t) {
    EmbeddingOptions o;
    o.dim = dim;
    o.table.init_capacity = 1024;
    o.table.max_capacity = 1 << 16;
    o.table.score_policy = ScorePolicy::kStep;
    o.table.initializer.kind = InitializerKind::kUniform;
    o.table.initializer.seed = 1000 + t;
    o.optimizer.kind = optimizer;
    o.optimizer.learning_rate = 0.05f;
    all.push_back(o);
  }
  return all;
}

}  // namespace dynemb::dist::testing

// Training several Embeddings at the same time (one host thread, and on CUDA one stream, each)
// against training them one after another: the pieces the CPU test and the CUDA streams test
// share. Everything a run reads is in backend memory before it starts, so a run allocates and
// synchronizes nothing of its own.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding.hpp"

namespace dynemb::embedding_test {

// A sequence of training steps for one table: keys (Zipf-like, so rows repeat within and across
// steps), bag offsets, optional weights, and the gradient of each step's pooled output.
struct TrainingRun {
  uint32_t dim = 0;
  PoolingMode mode = PoolingMode::kSum;
  size_t bags = 0;
  std::vector<BackendBuffer<int64_t>> keys, offsets;
  std::vector<BackendBuffer<float>> weights, grads, outputs;
  std::vector<size_t> num_ids;
};

inline TrainingRun make_training_run(Backend backend, std::mt19937_64& rng, int steps, size_t bags,
                                     uint32_t dim, PoolingMode mode, bool weighted) {
  TrainingRun run;
  run.dim = dim;
  run.mode = mode;
  run.bags = bags;
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<float> normal;
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> keys, offsets{0};
    std::vector<float> weights;
    for (size_t b = 0; b < bags; ++b) {
      const int len = 1 + static_cast<int>(rng() % 12);
      for (int j = 0; j < len; ++j) {
        // Both signs (the sort covers all 64 bits), none of the reserved keys -16 .. -1.
        int64_t k = static_cast<int64_t>(std::pow(u(rng), 3) * 5000) - 100;
        if (k < 0) k -= 16;
        keys.push_back(k);
        weights.push_back(normal(rng));
      }
      offsets.push_back(static_cast<int64_t>(keys.size()));
    }
    std::vector<float> grad(bags * dim);
    for (auto& g : grad) g = normal(rng);
    auto upload = [&](const auto& host) {
      using T = typename std::decay_t<decltype(host)>::value_type;
      BackendBuffer<T> b(backend, host.size() + 1);
      b.upload(host.data(), host.size());
      return b;
    };
    run.keys.push_back(upload(keys));
    run.offsets.push_back(upload(offsets));
    run.weights.push_back(upload(weights));
    run.grads.push_back(upload(grad));
    run.outputs.emplace_back(backend, bags * dim);
    run.num_ids.push_back(keys.size());
    if (!weighted) run.weights.back() = BackendBuffer<float>();
  }
  return run;
}

inline EmbeddingOptions training_options(uint32_t dim, OptimizerKind kind, uint64_t seed) {
  EmbeddingOptions o;
  o.dim = dim;
  o.table.init_capacity = 1 << 12;
  o.table.max_capacity = 1 << 14;
  o.table.score_policy = ScorePolicy::kStep;
  o.table.initializer.kind = InitializerKind::kUniform;
  o.table.initializer.seed = seed;
  o.optimizer.kind = kind;
  o.optimizer.learning_rate = 0.02f;
  o.optimizer.eps = 1e-6f;
  return o;
}

// Runs every step of `run` on `emb` (forward into the step's output, backward, end_step), its
// work issued on `stream`.
inline void train(Embedding<int64_t>& emb, TrainingRun& run, StreamHandle stream) {
  for (size_t s = 0; s < run.keys.size(); ++s) {
    const EmbeddingBatch<int64_t> batch{run.keys[s].data(),    run.num_ids[s],
                                        run.offsets[s].data(), run.bags,
                                        run.weights[s].data(), run.mode};
    emb.forward(batch, run.outputs[s].data(), run.dim, true, stream);
    emb.backward(run.grads[s].data(), run.dim, stream);
    emb.end_step();
  }
}

// Every step's output, on the host.
inline std::vector<std::vector<float>> outputs_of(const TrainingRun& run) {
  std::vector<std::vector<float>> out;
  for (const auto& o : run.outputs) {
    out.emplace_back(run.bags * run.dim);
    o.download(out.back().data(), out.back().size());
  }
  return out;
}

// The table's keys and rows.
inline std::map<int64_t, std::vector<float>> rows_of(Embedding<int64_t>& emb) {
  std::map<int64_t, std::vector<float>> rows;
  emb.table().for_each([&](int64_t k, std::span<const float> row, uint64_t) {
    rows[k].assign(row.begin(), row.end());
  });
  return rows;
}

// Whether two dumps hold the same keys with bit-identical rows.
inline bool same_rows(const std::map<int64_t, std::vector<float>>& a,
                      const std::map<int64_t, std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
    if (i->first != j->first || i->second.size() != j->second.size() ||
        std::memcmp(i->second.data(), j->second.data(), i->second.size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace dynemb::embedding_test

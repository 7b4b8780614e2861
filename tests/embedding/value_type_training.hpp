// A small regression task for the value-type tests: every key has a hidden target vector, a bag's
// target is the mean of its keys' targets, and the gradient of a bag's output is (output -
// target) (half the squared error's). Batches are drawn on the host; run_step uploads them for the
// CUDA backend.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding.hpp"

namespace dynemb::value_type_test {

struct Batch {
  std::vector<int64_t> keys, offsets;
  std::vector<float> target;  // bags x dim
};

// `steps` batches of `bags` mean-pooled bags of 1..6 keys from [0, key_range) (skewed to small
// keys), with their targets.
inline std::vector<Batch> make_batches(uint32_t dim, size_t steps, size_t bags, int64_t key_range,
                                       uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::uniform_real_distribution<double> u(0, 1);
  std::map<int64_t, std::vector<float>> truth;
  std::vector<Batch> out(steps);
  for (Batch& b : out) {
    b.offsets.push_back(0);
    b.target.assign(bags * dim, 0.0f);
    for (size_t bag = 0; bag < bags; ++bag) {
      const int len = 1 + static_cast<int>(rng() % 6);
      for (int j = 0; j < len; ++j) {
        const auto k = static_cast<int64_t>(std::pow(u(rng), 2) * static_cast<double>(key_range));
        b.keys.push_back(k);
        auto [it, fresh] = truth.try_emplace(k);
        if (fresh) {
          it->second.resize(dim);
          for (float& v : it->second) v = normal(rng);
        }
        for (uint32_t d = 0; d < dim; ++d) b.target[bag * dim + d] += it->second[d] / len;
      }
      b.offsets.push_back(static_cast<int64_t>(b.keys.size()));
    }
  }
  return out;
}

// One training step of `emb` on `b`: forward (output copied to `out` on the host, decoded to
// float32 when the embedding's output_type is 16-bit), gradient on the host (output - target,
// rounded to nearest even to the output type), backward, end_step. Returns the batch's mean
// squared error.
inline double run_step(Embedding<int64_t>& emb, const Batch& b, uint32_t dim,
                       std::vector<float>& out) {
  const size_t bags = b.offsets.size() - 1;
  const ValueType type = emb.options().output_type;
  const uint32_t words = value_words(type, dim);  // a bag's output row, in 32-bit words
  out.assign(bags * dim, 0.0f);
  std::vector<float> out_words(bags * words, 0.0f), grad_words(bags * words, 0.0f);
  const Backend backend = emb.backend();
  BackendBuffer<int64_t> keys(backend, b.keys.size()), offsets(backend, b.offsets.size());
  BackendBuffer<float> dout(backend, out_words.size()), dgrad(backend, grad_words.size());
  keys.upload(b.keys.data(), b.keys.size());
  offsets.upload(b.offsets.data(), b.offsets.size());
  const EmbeddingBatch<int64_t> batch{keys.data(), b.keys.size(), offsets.data(),
                                      bags,        nullptr,       PoolingMode::kMean};
  emb.forward(batch, dout.data(), words, true);
  backend_synchronize(backend);
  dout.download(out_words.data(), out_words.size());
  double loss = 0;
  for (size_t bag = 0; bag < bags; ++bag) {
    for (uint32_t j = 0; j < dim; ++j) {
      const size_t i = bag * dim + j;
      out[i] = load_value(type, &out_words[bag * words], j);
      const float grad = out[i] - b.target[i];
      store_value(type, &grad_words[bag * words], j, grad);
      loss += static_cast<double>(grad) * grad;
    }
  }
  dgrad.upload(grad_words.data(), grad_words.size());
  emb.backward(dgrad.data(), words);
  backend_synchronize(backend);
  emb.end_step();
  return loss / static_cast<double>(out.size());
}

// Every row of the table (its raw 32-bit words), by key.
inline std::map<int64_t, std::vector<uint32_t>> table_words(Embedding<int64_t>& emb) {
  std::map<int64_t, std::vector<uint32_t>> rows;
  emb.table().for_each([&](int64_t k, std::span<const float> row, uint64_t) {
    auto& r = rows[k];
    r.resize(row.size());
    std::memcpy(r.data(), row.data(), row.size() * sizeof(float));
  });
  return rows;
}

// Every row's embedding as float32 (decoded from the embedding's value type), by key.
inline std::map<int64_t, std::vector<float>> embeddings(Embedding<int64_t>& emb) {
  const uint32_t dim = emb.options().dim;
  const ValueType type = emb.options().value_type;
  std::map<int64_t, std::vector<float>> rows;
  emb.table().for_each([&](int64_t k, std::span<const float> row, uint64_t) {
    auto& r = rows[k];
    for (uint32_t j = 0; j < dim; ++j) r.push_back(load_value(type, row.data(), j));
  });
  return rows;
}

}  // namespace dynemb::value_type_test

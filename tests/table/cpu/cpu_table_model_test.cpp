// Randomized comparison of the CPU table against a std::unordered_map model: inserts, updates,
// accumulations, erases and lookups with growth, on one thread and on the pool.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "dynemb/table/table.hpp"

namespace dynemb {
namespace {

struct Row {
  std::vector<double> v;
};

// A random key of a small space (signed keys straddle zero), never a reserved one.
template <class K>
K draw_key(std::mt19937_64& rng, uint64_t key_space) {
  for (;;) {
    K k = static_cast<K>(rng() % key_space);
    if constexpr (std::is_signed_v<K>) k -= static_cast<K>(key_space / 2);
    if (!is_reserved_key(k)) return k;
  }
}

template <class K>
void run_model(uint32_t threads, size_t batch, uint64_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " threads " + std::to_string(threads));
  std::printf("cpu_table_model seed=%llu threads=%u batch=%zu\n",
              static_cast<unsigned long long>(seed), threads, batch);
  std::mt19937_64 rng(seed);
  TableOptions o;
  o.dim = 1 + static_cast<uint32_t>(rng() % 9);
  o.bucket_capacity = 16u << (rng() % 3);
  o.init_capacity = o.bucket_capacity * 2;
  o.max_capacity = o.bucket_capacity * 4096;
  o.max_load_factor = 0.5 + 0.5 * static_cast<double>(rng() % 100) / 100.0;
  o.num_threads = threads;
  o.score_policy = ScorePolicy::kLfu;
  o.initializer.kind = InitializerKind::kDebug;
  auto table = make_table<K>(Backend::kCpu, o);
  std::unordered_map<K, Row> model;
  std::unordered_map<K, uint64_t> lfu;
  const uint64_t key_space = 20000;
  const uint32_t dim = o.dim;
  for (int round = 0; round < 40; ++round) {
    std::vector<K> keys(batch);
    std::unordered_map<K, int> seen;
    // Distinct keys per batch so any execution order gives the model's result.
    for (auto& k : keys) {
      do {
        k = draw_key<K>(rng, key_space);
      } while (seen[k]++ != 0);
    }
    std::vector<float> values(batch * dim);
    for (auto& x : values) x = static_cast<float>(rng() % 1000) / 8.0f;
    const int op = static_cast<int>(rng() % 5);
    if (op == 0) {
      table->insert_or_assign(batch, keys.data(), values.data());
      for (size_t i = 0; i < batch; ++i) {
        model[keys[i]].v.assign(values.begin() + i * dim, values.begin() + (i + 1) * dim);
        lfu[keys[i]] += 1;
      }
    } else if (op == 1) {
      table->accum_or_assign(batch, keys.data(), values.data());
      for (size_t i = 0; i < batch; ++i) {
        auto it = model.find(keys[i]);
        if (it == model.end()) {
          model[keys[i]].v.assign(values.begin() + i * dim, values.begin() + (i + 1) * dim);
        } else {
          for (uint32_t j = 0; j < dim; ++j)  // the table adds in float32
            it->second.v[j] = static_cast<float>(it->second.v[j]) + values[i * dim + j];
        }
        lfu[keys[i]] += 1;
      }
    } else if (op == 2) {
      std::unique_ptr<bool[]> founds(new bool[batch]);
      table->find_or_insert(batch, keys.data(), values.data(), founds.get());
      for (size_t i = 0; i < batch; ++i) {
        auto it = model.find(keys[i]);
        ASSERT_EQ(founds[i], it != model.end()) << "key " << keys[i];
        if (it == model.end()) {
          it = model.emplace(keys[i], Row{}).first;
          it->second.v.assign(dim, static_cast<double>(static_cast<uint64_t>(keys[i]) & 0xFFFFFF));
        }
        for (uint32_t j = 0; j < dim; ++j)
          ASSERT_EQ(values[i * dim + j], static_cast<float>(it->second.v[j]));
        lfu[keys[i]] += 1;
      }
    } else if (op == 3) {
      table->erase(batch / 4, keys.data());
      for (size_t i = 0; i < batch / 4; ++i) {
        model.erase(keys[i]);
        lfu.erase(keys[i]);
      }
    } else {
      table->assign(batch, keys.data(), values.data());
      for (size_t i = 0; i < batch; ++i) {
        auto it = model.find(keys[i]);
        if (it == model.end()) continue;
        it->second.v.assign(values.begin() + i * dim, values.begin() + (i + 1) * dim);
        lfu[keys[i]] += 1;
      }
    }
    ASSERT_EQ(table->size(), model.size());
    // Every model key is found with its row and LFU count; absent keys are not found.
    std::vector<K> probe(batch);
    for (size_t i = 0; i < batch; ++i) probe[i] = draw_key<K>(rng, key_space);
    for (size_t i = 0; i < batch / 2 && i < model.size(); ++i) probe[i] = keys[i];
    std::vector<float> out(batch * dim);
    std::vector<uint64_t> scores(batch);
    std::unique_ptr<bool[]> founds(new bool[batch]);
    table->find(batch, probe.data(), out.data(), founds.get(), scores.data());
    for (size_t i = 0; i < batch; ++i) {
      auto it = model.find(probe[i]);
      ASSERT_EQ(founds[i], it != model.end()) << "key " << probe[i];
      if (it == model.end()) continue;
      ASSERT_EQ(scores[i], lfu[probe[i]]);
      for (uint32_t j = 0; j < dim; ++j)
        ASSERT_EQ(out[i * dim + j], static_cast<float>(it->second.v[j]));
    }
  }
  // for_each sees exactly the model.
  size_t visited = 0;
  table->for_each([&](K key, std::span<const float> row, uint64_t) {
    ++visited;
    auto it = model.find(key);
    ASSERT_NE(it, model.end());
    ASSERT_EQ(row[0], static_cast<float>(it->second.v[0]));
  });
  EXPECT_EQ(visited, model.size());
  EXPECT_LE(table->load_factor(), o.max_load_factor);
}

// A pooled batch that fills the table exactly to its load factor does not grow it; one more key
// does (the workers' batched size claims do not make growth early).
TEST(CpuTableModel, PooledBatchGrowsExactlyAtTheLoadFactor) {
  const uint64_t seed = std::random_device{}();
  std::printf("cpu_table_model seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  TableOptions o;
  o.dim = 2;
  o.init_capacity = 1u << 16;
  o.max_capacity = 1u << 20;
  o.num_threads = 3;
  auto table = make_table<uint64_t>(Backend::kCpu, o);
  std::unordered_map<uint64_t, int> distinct;
  std::vector<uint64_t> keys;
  while (keys.size() < o.init_capacity / 2 + 1) {
    const uint64_t k = rng() >> 8;
    if (distinct[k]++ == 0) keys.push_back(k);
  }
  const std::vector<float> rows(keys.size() * o.dim, 1.0f);
  table->insert_or_assign(keys.size() - 1, keys.data(), rows.data());
  EXPECT_EQ(table->size(), keys.size() - 1);
  EXPECT_EQ(table->capacity(), o.init_capacity);
  table->insert_or_assign(1, keys.data() + keys.size() - 1, rows.data());
  EXPECT_EQ(table->capacity(), 2 * o.init_capacity);
  EXPECT_EQ(table->size(), keys.size());
}

TEST(CpuTableModel, SingleThreadInt64) {
  run_model<int64_t>(1, 700, std::random_device{}());
}
TEST(CpuTableModel, SingleThreadUint64) {
  run_model<uint64_t>(1, 700, std::random_device{}());
}
TEST(CpuTableModel, PoolLargeBatches) {
  run_model<uint64_t>(3, 18000, std::random_device{}());
}

}  // namespace
}  // namespace dynemb

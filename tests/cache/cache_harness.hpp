// Drives an EmbeddingCache from host vectors on either backend (copies in and out of the
// backend's memory), and the reference LRU model the tests compare it with.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/cache/cache_sets.hpp"
#include "dynemb/cache/embedding_cache.hpp"
#include "dynemb/core/memory.hpp"

namespace dynemb::cache::testing {

// What one query returned, in host memory.
template <class K>
struct QueryOutput {
  std::vector<float> values;
  std::vector<K> missing_keys;
  std::vector<uint64_t> missing_positions;
};

// The rows of a cache or model by key.
template <class K>
using Contents = std::map<K, std::vector<float>>;

// n distinct random keys (never the default sentinel -1), in random order.
inline std::vector<int64_t> distinct_keys(dynemb::testing::TestRng& rng, size_t n) {
  std::set<int64_t> keys;
  while (keys.size() < n) keys.insert(static_cast<int64_t>(rng.next() >> 2));
  std::vector<int64_t> out(keys.begin(), keys.end());
  std::shuffle(out.begin(), out.end(), rng.engine());
  return out;
}

// One query's buffers in a backend's memory: its keys, and outputs for every key (values filled
// with `fill`, to see that misses leave it alone).
template <class K>
struct QueryBuffers {
  QueryBuffers(Backend backend, const std::vector<K>& host_keys, uint32_t row_dim,
               float fill = -7.0f)
      : n(host_keys.size()),
        dim(row_dim),
        keys(backend, n),
        missing(backend, n),
        positions(backend, n),
        count(backend, 1),
        values(backend, n * dim) {
    keys.upload(host_keys.data(), n);
    fill_values(fill);
  }

  // Sets every value to `fill` again (a captured query's outputs, before each replay).
  void fill_values(float fill = -7.0f) {
    const std::vector<float> init(n * dim, fill);
    values.upload(init.data(), init.size());
  }

  // Queues cache.query over these buffers on `stream`.
  void run(EmbeddingCache<K>& cache, StreamHandle stream = nullptr) {
    cache.query(n, keys.data(), values.data(), missing.data(), positions.data(), count.data(),
                stream);
  }

  // What the query wrote; the caller has waited for it.
  QueryOutput<K> download() const {
    uint64_t listed = 0;
    count.download(&listed, 1);
    QueryOutput<K> out;
    out.values.resize(n * dim);
    values.download(out.values.data(), out.values.size());
    out.missing_keys.resize(listed);
    out.missing_positions.resize(listed);
    missing.download(out.missing_keys.data(), listed);
    positions.download(out.missing_positions.data(), listed);
    return out;
  }

  size_t n;
  uint32_t dim;
  BackendBuffer<K> keys, missing;
  BackendBuffer<uint64_t> positions, count;
  BackendBuffer<float> values;
};

// Host-vector calls on a cache of either backend; each call waits for the device.
template <class K>
class CacheHarness {
 public:
  CacheHarness(Backend backend, const CacheOptions<K>& options)
      : backend_(backend), cache_(make_cache<K>(backend, options)) {}

  EmbeddingCache<K>& cache() { return *cache_; }
  uint32_t dim() const { return cache_->dim(); }

  // query; `fill` is what values holds before the call (to see that misses leave it alone).
  QueryOutput<K> query(const std::vector<K>& keys, float fill = -7.0f) {
    QueryBuffers<K> buffers(backend_, keys, dim(), fill);
    buffers.run(*cache_);
    backend_synchronize(backend_);
    return buffers.download();
  }

  void replace(const std::vector<K>& keys, const std::vector<float>& values) {
    BackendBuffer<K> d_keys = upload(keys);
    BackendBuffer<float> d_values = upload(values);
    cache_->replace(keys.size(), d_keys.data(), d_values.data());
    backend_synchronize(backend_);
  }

  void update(const std::vector<K>& keys, const std::vector<float>& values) {
    BackendBuffer<K> d_keys = upload(keys);
    BackendBuffer<float> d_values = upload(values);
    cache_->update(keys.size(), d_keys.data(), d_values.data());
    backend_synchronize(backend_);
  }

  void erase(const std::vector<K>& keys) {
    BackendBuffer<K> d_keys = upload(keys);
    cache_->erase(keys.size(), d_keys.data());
    backend_synchronize(backend_);
  }

  size_t preload(const std::vector<K>& keys, const std::vector<float>& values) {
    BackendBuffer<K> d_keys = upload(keys);
    BackendBuffer<float> d_values = upload(values);
    return cache_->preload(keys.size(), d_keys.data(), d_values.data());
  }

  // Keys and rows stored in sets [first_set, first_set + num_sets).
  Contents<K> dump(uint64_t first_set, uint64_t num_sets) {
    const size_t cap = num_sets * cache_->options().ways;
    BackendBuffer<K> d_keys(backend_, cap);
    BackendBuffer<float> d_values(backend_, cap * dim());
    const size_t count = cache_->dump(first_set, num_sets, d_keys.data(), d_values.data());
    std::vector<K> keys(count);
    std::vector<float> values(count * dim());
    d_keys.download(keys.data(), count);
    d_values.download(values.data(), values.size());
    Contents<K> out;
    for (size_t i = 0; i < count; ++i) {
      const bool fresh = out.emplace(keys[i], std::vector<float>(values.begin() + i * dim(),
                                                                 values.begin() + (i + 1) * dim()))
                             .second;
      if (!fresh) duplicate_keys_.push_back(keys[i]);
    }
    return out;
  }
  Contents<K> dump_all() { return dump(0, cache_->num_sets()); }
  // Keys a dump found more than once (must stay empty: keys in a cache are unique).
  const std::vector<K>& duplicate_keys() const { return duplicate_keys_; }

 private:
  template <class T>
  BackendBuffer<T> upload(const std::vector<T>& host) {
    BackendBuffer<T> buffer(backend_, host.size());
    buffer.upload(host.data(), host.size());
    return buffer;
  }

  Backend backend_;
  std::unique_ptr<EmbeddingCache<K>> cache_;
  std::vector<K> duplicate_keys_;
};

// The reference: per set, the stored keys with their last-use time and row. A new key goes to
// the candidate set with more free slots (the first on a tie); when both are full the key with
// the lowest (last use, key bits) of the two sets leaves. Queries stamp every hit with the
// call's time; a replace stamps its i-th key with the call's time + i.
template <class K>
class ReferenceLru {
 public:
  ReferenceLru(uint64_t num_sets, uint32_t ways, uint32_t dim)
      : sets_(num_sets), ways_(ways), dim_(dim) {}

  QueryOutput<K> query(const std::vector<K>& keys, float fill = -7.0f) {
    const uint64_t now = clock_++;
    QueryOutput<K> out;
    out.values.assign(keys.size() * dim_, fill);
    for (size_t i = 0; i < keys.size(); ++i) {
      Entry* e = find(keys[i]);
      if (e == nullptr) {
        out.missing_keys.push_back(keys[i]);
        out.missing_positions.push_back(i);
        continue;
      }
      std::copy(e->row.begin(), e->row.end(), out.values.begin() + i * dim_);
      e->last_use = std::max(e->last_use, now);
    }
    return out;
  }

  void replace(const std::vector<K>& keys, const std::vector<float>& values) {
    const uint64_t base = clock_;
    clock_ += keys.size();
    for (size_t i = 0; i < keys.size(); ++i) {
      std::vector<float> row(values.begin() + i * dim_, values.begin() + (i + 1) * dim_);
      if (Entry* e = find(keys[i])) {
        e->row = row;
        e->last_use = base + i;
        continue;
      }
      const CandidateSets c = candidate_sets(cache_key_bits(keys[i]), sets_.size());
      auto& a = sets_[c.first];
      auto& b = sets_[c.second];
      if (a.size() < ways_ || b.size() < ways_) {
        (a.size() <= b.size() ? a : b)[keys[i]] = Entry{base + i, row};
        continue;
      }
      // Both full: the least recently used of the two sets leaves.
      std::map<K, Entry>* victim_set = nullptr;
      K victim{};
      for (auto* set : {&a, &b}) {
        for (const auto& [k, e] : *set) {
          if (victim_set == nullptr ||
              older(e.last_use, k, (*victim_set)[victim].last_use, victim)) {
            victim_set = set;
            victim = k;
          }
        }
      }
      victim_set->erase(victim);
      ++evicted_;
      (*victim_set)[keys[i]] = Entry{base + i, row};
    }
  }

  void update(const std::vector<K>& keys, const std::vector<float>& values) {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (Entry* e = find(keys[i])) {
        e->row.assign(values.begin() + i * dim_, values.begin() + (i + 1) * dim_);
      }
    }
  }

  void erase(const std::vector<K>& keys) {
    for (const K key : keys) {
      const CandidateSets c = candidate_sets(cache_key_bits(key), sets_.size());
      sets_[c.first].erase(key);
      sets_[c.second].erase(key);
    }
  }

  Contents<K> set_contents(uint64_t set) const {
    Contents<K> out;
    for (const auto& [k, e] : sets_[set]) out[k] = e.row;
    return out;
  }
  Contents<K> contents() const {
    Contents<K> out;
    for (uint64_t s = 0; s < sets_.size(); ++s) {
      for (const auto& [k, e] : sets_[s]) out[k] = e.row;
    }
    return out;
  }
  uint64_t evicted() const { return evicted_; }

 private:
  struct Entry {
    uint64_t last_use = 0;
    std::vector<float> row;
  };
  static bool older(uint64_t use_a, K a, uint64_t use_b, K b) {
    return use_a != use_b ? use_a < use_b : cache_key_bits(a) < cache_key_bits(b);
  }
  Entry* find(K key) {
    const CandidateSets c = candidate_sets(cache_key_bits(key), sets_.size());
    for (const uint64_t s : {c.first, c.second}) {
      auto it = sets_[s].find(key);
      if (it != sets_[s].end()) return &it->second;
    }
    return nullptr;
  }

  std::vector<std::map<K, Entry>> sets_;
  uint32_t ways_;
  uint32_t dim_;
  uint64_t clock_ = 1;
  uint64_t evicted_ = 0;
};

// A row that identifies its key and a version: every element is an exact float drawn from a hash
// of (key, version, element index).
template <class K>
std::vector<float> row_of(K key, uint32_t dim, int version = 0) {
  std::vector<float> row(dim);
  for (uint32_t j = 0; j < dim; ++j) {
    const uint64_t h = hash_key_bits(cache_key_bits(key) * 0x9E3779B97F4A7C15ull +
                                     static_cast<uint64_t>(version) * 1315423911ull + j);
    row[j] = static_cast<float>(h & 0xFFFFFF);
  }
  return row;
}

// Rows of keys, one after the other.
template <class K>
std::vector<float> rows_of(const std::vector<K>& keys, uint32_t dim, int version = 0) {
  std::vector<float> out;
  out.reserve(keys.size() * dim);
  for (const K k : keys) {
    const std::vector<float> r = row_of(k, dim, version);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

}  // namespace dynemb::cache::testing

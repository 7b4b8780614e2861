// Where a cache's lookup path reads the rows the cache misses: any lower tier (a host table,
// RocksDB, Redis; the storage part adapts its Storage to this) or a function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

#include "dynemb/cache/cache_options.hpp"

namespace dynemb::cache {

// A source of rows for keys the cache does not hold. Buffers are host memory.
template <CacheKey K>
class MissSource {
 public:
  virtual ~MissSource() = default;
  // Floats per row the source returns.
  virtual uint32_t dim() const = 0;
  // For each of n keys: its row to rows[i * dim()] and founds[i] = true, or founds[i] = false
  // (rows[i] then unspecified) when the source does not have it.
  virtual void fetch(size_t n, const K* keys, float* rows, bool* founds) = 0;
};

// A MissSource that calls a function.
template <CacheKey K>
class FunctionMissSource final : public MissSource<K> {
 public:
  using Fetch = std::function<void(size_t n, const K* keys, float* rows, bool* founds)>;
  FunctionMissSource(uint32_t dim, Fetch fetch) : dim_(dim), fetch_(std::move(fetch)) {}
  uint32_t dim() const override { return dim_; }
  void fetch(size_t n, const K* keys, float* rows, bool* founds) override {
    fetch_(n, keys, rows, founds);
  }

 private:
  uint32_t dim_;
  Fetch fetch_;
};

}  // namespace dynemb::cache

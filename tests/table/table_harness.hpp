// The harness of the typed table tests: one fixture over (key type x backend), and a wrapper
// that uploads host vectors into the backend's memory, calls the table and downloads results,
// so the same test body drives host pointers (CPU) and device pointers (CUDA).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::testing {

// One instance of the typed fixture: a key type and a backend; `kGrouped` (CUDA) makes every
// writing call, however small, take the grouped-by-bucket path (grouped_write_min_batch = 0)
// instead of the bucket locks.
template <TableKey K, Backend B, bool kGroupedWrites = false>
struct TableConfig {
  using Key = K;
  static constexpr Backend kBackend = B;
  static constexpr bool kGrouped = kGroupedWrites;
};

using AllTableConfigs =
    ::testing::Types<TableConfig<int64_t, Backend::kCpu>, TableConfig<uint64_t, Backend::kCpu>,
                     TableConfig<int64_t, Backend::kCuda>, TableConfig<uint64_t, Backend::kCuda>,
                     TableConfig<int64_t, Backend::kCuda, true>>;

// Readable instance names: cpu_int64, cuda_uint64, cuda_grouped_int64, ...
struct TableConfigNames {
  template <class Config>
  static std::string GetName(int) {
    return to_string(Config::kBackend) + (Config::kGrouped ? "_grouped" : "") +
           (std::is_same_v<typename Config::Key, int64_t> ? "_int64" : "_uint64");
  }
};

using Row = std::vector<float>;

// A value written into output buffers before a call, to see what the call left untouched.
inline constexpr float kUntouchedValue = -12345.5f;
inline constexpr uint64_t kUntouchedScore = 0xDEADBEEFCAFEF00Dull;

// The bucket a key lands in among `num_buckets`, as every backend computes it.
template <TableKey K>
uint64_t bucket_of_key(K key, uint64_t num_buckets) {
  return bucket_of_hash(hash_key_bits(key_bits(key)), num_buckets);
}

// A random key that is not reserved (int64 keys are negative half the time).
template <TableKey K>
K random_key(TestRng& rng) {
  for (;;) {
    const K key = static_cast<K>(rng.next());
    if (!is_reserved_key(key)) return key;
  }
}

// `n` distinct random non-reserved keys, none of them in `exclude`.
template <TableKey K>
std::vector<K> random_keys(TestRng& rng, size_t n, const std::set<K>& exclude = {}) {
  std::set<K> seen(exclude);
  std::vector<K> keys;
  while (keys.size() < n) {
    const K key = random_key<K>(rng);
    if (seen.insert(key).second) keys.push_back(key);
  }
  return keys;
}

// `n` distinct random keys that all land in `bucket` of `num_buckets`, none in `exclude`.
template <TableKey K>
std::vector<K> keys_in_bucket(TestRng& rng, uint64_t bucket, uint64_t num_buckets, size_t n,
                              const std::set<K>& exclude = {}) {
  std::set<K> seen(exclude);
  std::vector<K> keys;
  while (keys.size() < n) {
    const K key = random_key<K>(rng);
    if (bucket_of_key(key, num_buckets) == bucket && seen.insert(key).second) keys.push_back(key);
  }
  return keys;
}

// Every reserved key pattern, as K.
template <TableKey K>
std::vector<K> reserved_keys() {
  std::vector<K> keys;
  for (uint64_t bits = kFirstReservedKey; bits != 0; ++bits) keys.push_back(static_cast<K>(bits));
  return keys;
}

// A recognisable row for `key`: exactly representable floats that differ per key and `salt`.
template <TableKey K>
Row value_row(K key, uint32_t dim, float salt = 0.0f) {
  Row row(dim);
  const float base = static_cast<float>(key_bits(key) % 4093) * 0.25f;
  for (uint32_t j = 0; j < dim; ++j) row[j] = base + static_cast<float>(j) + salt;
  return row;
}

// Rows of value_row for every key, row-major.
template <TableKey K>
std::vector<float> value_rows(const std::vector<K>& keys, uint32_t dim, float salt = 0.0f) {
  std::vector<float> values;
  values.reserve(keys.size() * dim);
  for (K key : keys) {
    const Row row = value_row(key, dim, salt);
    values.insert(values.end(), row.begin(), row.end());
  }
  return values;
}

// Row i of a row-major [n x dim] buffer.
inline Row row_at(const std::vector<float>& values, size_t i, uint32_t dim) {
  return Row(values.begin() + static_cast<std::ptrdiff_t>(i * dim),
             values.begin() + static_cast<std::ptrdiff_t>((i + 1) * dim));
}

// The initializer's row for `key`.
template <TableKey K>
Row initial_row(const InitializerOptions& init, K key, uint32_t dim) {
  Row row(dim);
  fill_initial_row(init, key_bits(key), row.data(), dim);
  return row;
}

// One stored row as the tests see it.
struct Entry {
  Row row;
  uint64_t score = 0;
  bool operator==(const Entry&) const = default;
};

// Prints an entry in gtest failure messages.
inline void PrintTo(const Entry& e, std::ostream* os) {
  *os << "{score " << e.score << ", row [";
  for (size_t j = 0; j < e.row.size(); ++j) *os << (j > 0 ? ", " : "") << e.row[j];
  *os << "]}";
}

template <TableKey K>
using Snapshot = std::map<K, Entry>;

// Results of the read calls, downloaded to the host.
struct FindResult {
  std::vector<float> values;
  std::vector<bool> founds;
  std::vector<uint64_t> scores;
};

template <TableKey K>
struct MissResult {
  size_t missed = 0;
  std::vector<float> values;
  std::vector<K> missed_keys;
  std::vector<uint64_t> missed_indices;
  std::vector<uint64_t> scores;
};

// Rows a call returned: (key, row, score) triples, compact.
template <TableKey K>
struct RowsResult {
  size_t count = 0;
  std::vector<K> keys;
  std::vector<float> values;
  std::vector<uint64_t> scores;
  // The returned triples as a map (a key returned twice fails the test).
  Snapshot<K> as_map(uint32_t dim) const {
    Snapshot<K> out;
    for (size_t i = 0; i < count; ++i) {
      const bool fresh = out.emplace(keys[i], Entry{row_at(values, i, dim), scores[i]}).second;
      EXPECT_TRUE(fresh) << "key " << keys[i] << " returned twice";
    }
    return out;
  }
};

// A table of one backend driven with host vectors.
template <TableKey K>
class TableHarness {
 public:
  TableHarness(Backend backend, const TableOptions& options)
      : backend_(backend), table_(make_table<K>(backend, options)) {}

  Table<K>& table() { return *table_; }
  Table<K>* operator->() { return table_.get(); }
  Backend backend() const { return backend_; }
  uint32_t dim() const { return table_->dim(); }
  uint64_t num_buckets() const { return table_->capacity() / table_->options().bucket_capacity; }

  // --- buffers ------------------------------------------------------------------------------

  // A backend buffer holding a copy of `host` (empty when `host` is empty).
  template <class T>
  BackendBuffer<T> upload(const std::vector<T>& host) const {
    if (host.empty()) return BackendBuffer<T>();
    BackendBuffer<T> buffer(backend_, host.size());
    buffer.upload(host.data(), host.size());
    return buffer;
  }
  // A backend buffer of `n` copies of `fill`.
  template <class T>
  BackendBuffer<T> filled(size_t n, T fill) const {
    return upload(std::vector<T>(n, fill));
  }
  // The first `n` elements of a backend buffer.
  template <class T>
  std::vector<T> download(const BackendBuffer<T>& buffer, size_t n) const {
    std::vector<T> host(n);
    if (n > 0) buffer.download(host.data(), n);
    return host;
  }
  // A backend buffer of `n` flags, all `fill`.
  BackendBuffer<bool> flags(size_t n, bool fill) const {
    BackendBuffer<bool> buffer(backend_, n);
    std::unique_ptr<bool[]> host(new bool[n > 0 ? n : 1]);
    std::fill_n(host.get(), n, fill);
    buffer.upload(host.get(), n);
    return buffer;
  }
  // The first `n` flags of a backend buffer.
  std::vector<bool> download_flags(const BackendBuffer<bool>& buffer, size_t n) const {
    std::unique_ptr<bool[]> host(new bool[n > 0 ? n : 1]);
    buffer.download(host.get(), n);
    return std::vector<bool>(host.get(), host.get() + n);
  }

  // --- calls --------------------------------------------------------------------------------

  // find; outputs start as kUntouchedValue / false / kUntouchedScore.
  FindResult find(const std::vector<K>& keys) {
    const size_t n = keys.size();
    auto k = upload(keys);
    auto v = filled(n * dim(), kUntouchedValue);
    auto f = flags(n, false);
    auto s = filled(n, kUntouchedScore);
    table_->find(n, k.data(), v.data(), f.data(), s.data());
    return FindResult{download(v, n * dim()), download_flags(f, n), download(s, n)};
  }

  MissResult<K> find_with_misses(const std::vector<K>& keys) {
    const size_t n = keys.size();
    auto k = upload(keys);
    auto v = filled(n * dim(), kUntouchedValue);
    auto mk = filled(n, K{0});
    auto mi = filled(n, kUntouchedScore);
    auto s = filled(n, kUntouchedScore);
    MissResult<K> r;
    r.missed = table_->find_with_misses(n, k.data(), v.data(), mk.data(), mi.data(), s.data());
    r.values = download(v, n * dim());
    r.missed_keys = download(mk, r.missed);
    r.missed_indices = download(mi, r.missed);
    r.scores = download(s, n);
    return r;
  }

  std::vector<bool> contains(const std::vector<K>& keys) {
    const size_t n = keys.size();
    auto k = upload(keys);
    auto f = flags(n, false);
    table_->contains(n, k.data(), f.data());
    return download_flags(f, n);
  }

  // find_or_insert; `scores` empty means nullptr. founds start as true, so a call that does
  // not write them shows.
  FindResult find_or_insert(const std::vector<K>& keys, const std::vector<uint64_t>& scores = {}) {
    const size_t n = keys.size();
    auto k = upload(keys);
    auto v = filled(n * dim(), kUntouchedValue);
    auto f = flags(n, true);
    auto s = upload(scores);
    table_->find_or_insert(n, k.data(), v.data(), f.data(), s.data());
    return FindResult{download(v, n * dim()), download_flags(f, n), {}};
  }

  // find_or_insert_given: `values` are the rows offered for missing keys; the result holds the
  // buffer after the call. founds start as true, as in find_or_insert.
  FindResult find_or_insert_given(const std::vector<K>& keys, const std::vector<float>& values,
                                  const std::vector<uint64_t>& scores = {}) {
    const size_t n = keys.size();
    auto k = upload(keys);
    auto v = upload(values);
    auto f = flags(n, true);
    auto s = upload(scores);
    table_->find_or_insert_given(n, k.data(), v.data(), f.data(), s.data());
    return FindResult{download(v, n * dim()), download_flags(f, n), {}};
  }

  void insert_or_assign(const std::vector<K>& keys, const std::vector<float>& values,
                        const std::vector<uint64_t>& scores = {}) {
    auto k = upload(keys);
    auto v = upload(values);
    auto s = upload(scores);
    table_->insert_or_assign(keys.size(), k.data(), v.data(), s.data());
  }

  // insert_and_evict with every output buffer present.
  RowsResult<K> insert_and_evict(const std::vector<K>& keys, const std::vector<float>& values,
                                 const std::vector<uint64_t>& scores = {}) {
    const size_t n = keys.size();
    auto k = upload(keys);
    auto v = upload(values);
    auto s = upload(scores);
    auto ek = filled(n, K{0});
    auto ev = filled(n * dim(), kUntouchedValue);
    auto es = filled(n, kUntouchedScore);
    RowsResult<K> r;
    r.count =
        table_->insert_and_evict(n, k.data(), v.data(), s.data(), ek.data(), ev.data(), es.data());
    r.keys = download(ek, r.count);
    r.values = download(ev, r.count * dim());
    r.scores = download(es, r.count);
    return r;
  }

  void assign(const std::vector<K>& keys, const std::vector<float>& values,
              const std::vector<uint64_t>& scores = {}) {
    auto k = upload(keys);
    auto v = upload(values);
    auto s = upload(scores);
    table_->assign(keys.size(), k.data(), v.data(), s.data());
  }

  void assign_scores(const std::vector<K>& keys, const std::vector<uint64_t>& scores) {
    auto k = upload(keys);
    auto s = upload(scores);
    table_->assign_scores(keys.size(), k.data(), s.data());
  }

  void accum_or_assign(const std::vector<K>& keys, const std::vector<float>& values,
                       const std::vector<uint64_t>& scores = {}) {
    auto k = upload(keys);
    auto v = upload(values);
    auto s = upload(scores);
    table_->accum_or_assign(keys.size(), k.data(), v.data(), s.data());
  }

  void erase(const std::vector<K>& keys) {
    auto k = upload(keys);
    table_->erase(keys.size(), k.data());
  }

  RowsResult<K> export_batch(size_t offset, size_t n_slots,
                             std::optional<uint64_t> min_score = std::nullopt) {
    auto k = filled(n_slots, K{0});
    auto v = filled(n_slots * dim(), kUntouchedValue);
    auto s = filled(n_slots, kUntouchedScore);
    RowsResult<K> r;
    r.count = table_->export_batch(offset, n_slots, k.data(), v.data(), s.data(), min_score);
    EXPECT_LE(r.count, n_slots) << "export_batch(" << offset << ", " << n_slots << ")";
    r.keys = download(k, r.count);
    r.values = download(v, r.count * dim());
    r.scores = download(s, r.count);
    return r;
  }

  // Every stored row, by walking export_batch in steps of `step` slots over capacity(); a key
  // seen twice fails the test.
  Snapshot<K> snapshot(size_t step = 0, std::optional<uint64_t> min_score = std::nullopt) {
    const size_t capacity = table_->capacity();
    if (step == 0) step = capacity;
    Snapshot<K> out;
    for (size_t offset = 0; offset < capacity; offset += step) {
      const RowsResult<K> r = export_batch(offset, std::min(step, capacity - offset), min_score);
      for (size_t i = 0; i < r.count; ++i) {
        const bool fresh =
            out.emplace(r.keys[i], Entry{row_at(r.values, i, dim()), r.scores[i]}).second;
        EXPECT_TRUE(fresh) << "export_batch returned key " << r.keys[i] << " twice";
      }
    }
    return out;
  }

  // Every stored row, through for_each; a key seen twice fails the test.
  Snapshot<K> snapshot_by_for_each() {
    Snapshot<K> out;
    table_->for_each([&](K key, std::span<const float> row, uint64_t score) {
      const bool fresh = out.emplace(key, Entry{Row(row.begin(), row.end()), score}).second;
      EXPECT_TRUE(fresh) << "for_each visited key " << key << " twice";
    });
    return out;
  }

 private:
  Backend backend_;
  std::unique_ptr<Table<K>> table_;
};

// The base of every typed table fixture: skips CUDA instances without a usable GPU.
template <class Config>
class TableTestBase : public ::testing::Test {
 public:
  using Key = typename Config::Key;
  static constexpr Backend kBackend = Config::kBackend;

 protected:
  void SetUp() override {
    if (kBackend == Backend::kCuda && !cuda_backend_available()) {
      GTEST_SKIP() << "CUDA backend not built or no CUDA device visible";
    }
  }

  // A table of this instance's backend and key type (and write path).
  TableHarness<Key> make(TableOptions options) const {
    if (Config::kGrouped) options.grouped_write_min_batch = 0;
    return TableHarness<Key>(kBackend, options);
  }
};

// Options for a roomy table (no growth, eviction or refusal in small tests).
inline TableOptions roomy_options(ScorePolicy policy = ScorePolicy::kCustomized, uint32_t dim = 4) {
  TableOptions o;
  o.dim = dim;
  o.init_capacity = 4096;
  o.max_capacity = 4096;
  o.bucket_capacity = 128;
  o.score_policy = policy;
  return o;
}

// Options for a tiny fixed table whose buckets fill quickly: 4 buckets of 16 slots.
inline TableOptions tiny_options(ScorePolicy policy = ScorePolicy::kCustomized,
                                 SafeCheck safe_check = SafeCheck::kIgnore, uint32_t dim = 4) {
  TableOptions o;
  o.dim = dim;
  o.init_capacity = 64;
  o.max_capacity = 64;
  o.bucket_capacity = 16;
  o.max_load_factor = 1.0;
  o.score_policy = policy;
  o.safe_check = safe_check;
  return o;
}

}  // namespace dynemb::testing

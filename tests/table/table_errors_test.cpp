// Bad inputs: reserved keys (ERROR / WARNING / IGNORE), null pointers, n == 0, invalid options.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>

#include "core/warning_capture.hpp"
#include "dynemb/core/error.hpp"
#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TableErrorsTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TableErrorsTest, AllTableConfigs, TableConfigNames);

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// True when `message` shows `key` in decimal (signed or unsigned) or hexadecimal.
template <TableKey K>
bool names_key(const std::string& message, K key) {
  std::ostringstream hex;
  hex << std::hex << key_bits(key);
  const std::string m = lower(message);
  return m.find(std::to_string(key)) != std::string::npos ||
         m.find(std::to_string(key_bits(key))) != std::string::npos ||
         m.find(hex.str()) != std::string::npos;
}

// One call of the table that takes keys, by name, driven through the harness.
template <TableKey K>
struct KeyedCall {
  const char* name;
  bool writes;
  std::function<void(TableHarness<K>&, const std::vector<K>&)> call;
};

template <TableKey K>
std::vector<KeyedCall<K>> keyed_calls() {
  auto scores = [](size_t n) { return std::vector<uint64_t>(n, 1000); };
  return {
      {"find", false, [](TableHarness<K>& h, const std::vector<K>& k) { h.find(k); }},
      {"find_with_misses", false,
       [](TableHarness<K>& h, const std::vector<K>& k) { h.find_with_misses(k); }},
      {"contains", false, [](TableHarness<K>& h, const std::vector<K>& k) { h.contains(k); }},
      {"find_or_insert", true,
       [=](TableHarness<K>& h, const std::vector<K>& k) { h.find_or_insert(k, scores(k.size())); }},
      {"find_or_insert_given", true,
       [=](TableHarness<K>& h, const std::vector<K>& k) {
         h.find_or_insert_given(k, value_rows(k, h.dim(), 5.0f), scores(k.size()));
       }},
      {"insert_or_assign", true,
       [=](TableHarness<K>& h, const std::vector<K>& k) {
         h.insert_or_assign(k, value_rows(k, h.dim(), 1.0f), scores(k.size()));
       }},
      {"insert_and_evict", true,
       [=](TableHarness<K>& h, const std::vector<K>& k) {
         h.insert_and_evict(k, value_rows(k, h.dim(), 2.0f), scores(k.size()));
       }},
      {"assign", true,
       [=](TableHarness<K>& h, const std::vector<K>& k) {
         h.assign(k, value_rows(k, h.dim(), 3.0f), scores(k.size()));
       }},
      {"assign_scores", true,
       [=](TableHarness<K>& h, const std::vector<K>& k) { h.assign_scores(k, scores(k.size())); }},
      {"accum_or_assign", true,
       [=](TableHarness<K>& h, const std::vector<K>& k) {
         h.accum_or_assign(k, value_rows(k, h.dim(), 4.0f), scores(k.size()));
       }},
      {"erase", true, [](TableHarness<K>& h, const std::vector<K>& k) { h.erase(k); }},
  };
}

// A batch of stored and new keys with reserved keys mixed in; `clean` is the batch without them.
template <TableKey K>
struct ReservedBatch {
  std::vector<K> stored, batch, clean;
  std::vector<size_t> reserved_positions;
};

template <TableKey K>
ReservedBatch<K> reserved_batch(TestRng& rng) {
  ReservedBatch<K> r;
  const auto keys = random_keys<K>(rng, 40);
  r.stored.assign(keys.begin(), keys.begin() + 20);
  std::vector<K> reserved = reserved_keys<K>();
  std::shuffle(reserved.begin(), reserved.end(), rng.engine());
  reserved.resize(4);
  size_t next_reserved = 0;
  for (size_t i = 10; i < keys.size(); ++i) {  // 10 stored, 20 new
    if (next_reserved < reserved.size() && rng.chance(0.2)) {
      r.reserved_positions.push_back(r.batch.size());
      r.batch.push_back(reserved[next_reserved++]);
    }
    r.batch.push_back(keys[i]);
    r.clean.push_back(keys[i]);
  }
  while (next_reserved < reserved.size()) {
    r.reserved_positions.push_back(r.batch.size());
    r.batch.push_back(reserved[next_reserved++]);
  }
  return r;
}

TYPED_TEST(TableErrorsTest, ReservedKeyInErrorModeThrowsAndChangesNothing) {
  using K = typename TestFixture::Key;
  TestRng rng;
  for (const KeyedCall<K>& call : keyed_calls<K>()) {
    SCOPED_TRACE(call.name);
    auto h = this->make(roomy_options());
    const ReservedBatch<K> r = reserved_batch<K>(rng);
    h.insert_or_assign(r.stored, value_rows(r.stored, h.dim()), std::vector<uint64_t>(20, 7));
    const Snapshot<K> before = h.snapshot();
    std::string message;
    try {
      call.call(h, r.batch);
      ADD_FAILURE() << "no InvalidArgument";
    } catch (const InvalidArgument& e) {
      message = e.what();
    }
    const size_t first = r.reserved_positions.front();
    EXPECT_NE(message.find(call.name), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(first)), std::string::npos)
        << "position " << first << ": " << message;
    EXPECT_TRUE(names_key(message, r.batch[first])) << message;
    EXPECT_EQ(h.snapshot(), before);
    EXPECT_EQ(h->stats().reserved_keys, 0u);
    EXPECT_EQ(h->stats().erased, 0u);
  }
}

TYPED_TEST(TableErrorsTest, ReservedKeysInIgnoreAndWarningModesAreSkippedAndCounted) {
  using K = typename TestFixture::Key;
  TestRng rng;
  for (SafeCheck mode : {SafeCheck::kIgnore, SafeCheck::kWarning}) {
    for (const KeyedCall<K>& call : keyed_calls<K>()) {
      SCOPED_TRACE(std::string(call.name) + " " + to_string(mode));
      TableOptions o = roomy_options();
      o.safe_check = mode;
      auto h = this->make(o);
      auto twin = this->make(o);  // gets the batch without its reserved keys
      const ReservedBatch<K> r = reserved_batch<K>(rng);
      for (auto* t : {&h, &twin}) {
        t->insert_or_assign(r.stored, value_rows(r.stored, t->dim()), std::vector<uint64_t>(20, 7));
      }
      WarningCapture warnings;
      EXPECT_NO_THROW(call.call(h, r.batch));
      h->stats();  // the CUDA table logs WARNING reports at a later call or stats() at the latest
      EXPECT_EQ(warnings.messages().empty(), mode == SafeCheck::kIgnore);
      call.call(twin, r.clean);
      EXPECT_EQ(h.snapshot(), twin.snapshot());
      EXPECT_EQ(h->stats().reserved_keys, r.reserved_positions.size());
      EXPECT_EQ(h->stats().erased, twin->stats().erased);
    }
  }
}

TYPED_TEST(TableErrorsTest, ReadsReportReservedKeysAsNotFoundInIgnoreMode) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options();
  o.safe_check = SafeCheck::kIgnore;
  auto h = this->make(o);
  const ReservedBatch<K> r = reserved_batch<K>(rng);
  h.insert_or_assign(r.stored, value_rows(r.stored, h.dim()), std::vector<uint64_t>(20, 7));
  const std::set<K> stored(r.stored.begin(), r.stored.end());
  std::vector<bool> expected_found(r.batch.size());
  std::vector<K> expected_missed;
  std::vector<uint64_t> expected_indices;
  for (size_t i = 0; i < r.batch.size(); ++i) {
    expected_found[i] = stored.count(r.batch[i]) > 0;
    if (!expected_found[i]) {
      expected_missed.push_back(r.batch[i]);
      expected_indices.push_back(i);
    }
  }
  EXPECT_EQ(h.find(r.batch).founds, expected_found);
  EXPECT_EQ(h.contains(r.batch), expected_found);
  const MissResult<K> m = h.find_with_misses(r.batch);
  EXPECT_EQ(m.missed_keys, expected_missed);
  EXPECT_EQ(m.missed_indices, expected_indices);
  const FindResult f = h.find_or_insert(r.batch);
  for (size_t i : r.reserved_positions) EXPECT_FALSE(f.founds[i]) << i;
  EXPECT_EQ(h->stats().reserved_keys, 4 * r.reserved_positions.size());
}

TYPED_TEST(TableErrorsTest, SkippedReservedKeysGetNoRowFromFindAndFindOrInsertInIgnoreMode) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options();
  o.safe_check = SafeCheck::kIgnore;
  auto h = this->make(o);
  const ReservedBatch<K> r = reserved_batch<K>(rng);
  h.insert_or_assign(r.stored, value_rows(r.stored, h.dim()), std::vector<uint64_t>(20, 7));
  const std::set<K> stored(r.stored.begin(), r.stored.end());
  const uint32_t dim = h.dim();
  const Row untouched(dim, kUntouchedValue);
  const FindResult read = h.find(r.batch);  // before the inserts: reserved and new keys missing
  for (size_t i : r.reserved_positions) {
    EXPECT_FALSE(read.founds[i]) << i;
    EXPECT_EQ(row_at(read.values, i, dim), untouched) << i;
    EXPECT_EQ(read.scores[i], kUntouchedScore) << i;
  }
  const FindResult f = h.find_or_insert(r.batch);
  const std::vector<float> offered = value_rows(r.batch, dim, 5.0f);
  const FindResult g = h.find_or_insert_given(r.batch, offered);
  for (size_t i = 0; i < r.batch.size(); ++i) {
    const bool reserved = is_reserved_key(r.batch[i]);
    const bool was_stored = stored.count(r.batch[i]) > 0;
    SCOPED_TRACE("batch[" + std::to_string(i) + "] = " + std::to_string(key_bits(r.batch[i])));
    EXPECT_EQ(f.founds[i], was_stored);
    if (reserved) {
      // find_or_insert writes no row for it; find_or_insert_given leaves the offered row.
      EXPECT_EQ(row_at(f.values, i, dim), untouched);
      EXPECT_EQ(row_at(g.values, i, dim), row_at(offered, i, dim));
      EXPECT_FALSE(g.founds[i]);
    } else {
      if (was_stored) EXPECT_EQ(row_at(f.values, i, dim), value_row(r.batch[i], dim));
      EXPECT_NE(row_at(f.values, i, dim), untouched);
      EXPECT_TRUE(g.founds[i]);  // the first call inserted every key that is not reserved
      EXPECT_EQ(row_at(g.values, i, dim), row_at(f.values, i, dim));
    }
  }
  EXPECT_EQ(h->stats().reserved_keys, 3 * r.reserved_positions.size());
  EXPECT_EQ(h->size(), stored.size() + r.clean.size() - 10);  // 10 of the clean keys were stored
}

TYPED_TEST(TableErrorsTest, InsertAndEvictReturnsNoSkippedReservedKeyInIgnoreMode) {
  using K = typename TestFixture::Key;
  TestRng rng;
  // A full table at max capacity: the batch evicts and is refused, around its reserved keys.
  auto h = this->make(tiny_options(ScorePolicy::kCustomized, SafeCheck::kIgnore));
  const auto residents = random_keys<K>(rng, 64);
  h.insert_or_assign(residents, value_rows(residents, h.dim()), std::vector<uint64_t>(64, 10));
  const Snapshot<K> before = h.snapshot();
  const std::set<K> resident_set(residents.begin(), residents.end());
  const std::vector<K> fresh = random_keys<K>(rng, 24, resident_set);
  std::vector<K> batch;
  std::vector<uint64_t> scores;
  std::vector<K> reserved = reserved_keys<K>();
  std::shuffle(reserved.begin(), reserved.end(), rng.engine());
  for (size_t i = 0; i < fresh.size(); ++i) {
    if (i % 6 == 2) {  // 4 reserved keys, each with the highest score of the batch
      batch.push_back(reserved[i / 6]);
      scores.push_back(1000);
    }
    batch.push_back(fresh[i]);
    scores.push_back(rng.uniform(1, 20));  // some evict (score >= 10), some are refused
  }
  const std::vector<float> rows = value_rows(batch, h.dim(), 3.0f);
  const TableStats stats_before = h->stats();
  const RowsResult<K> out = h.insert_and_evict(batch, rows, scores);
  EXPECT_LE(out.count, batch.size());
  EXPECT_GT(out.count, 0u);  // 24 new keys into a table of 64 slots filled by 64 keys
  const Snapshot<K> after = h.snapshot();
  // Conservation without the reserved keys: the residents and the batch's other keys are each
  // either stored now or returned, exactly once, with their rows.
  std::map<K, Row> expected;
  for (const auto& [key, entry] : before) expected[key] = entry.row;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!is_reserved_key(batch[i])) expected[batch[i]] = row_at(rows, i, h.dim());
  }
  std::map<K, Row> seen;
  for (const auto& [key, entry] : after) seen[key] = entry.row;
  for (size_t i = 0; i < out.count; ++i) {
    EXPECT_FALSE(is_reserved_key(out.keys[i])) << "returned reserved key " << out.keys[i];
    const bool fresh_key = seen.emplace(out.keys[i], row_at(out.values, i, h.dim())).second;
    EXPECT_TRUE(fresh_key) << "key " << out.keys[i] << " both stored and returned, or twice";
  }
  EXPECT_EQ(seen, expected);
  // The count is the call's evictions and refusals; the reserved keys are counted apart.
  const TableStats stats = h->stats();
  EXPECT_EQ(out.count,
            (stats.evictions - stats_before.evictions) + (stats.refused - stats_before.refused));
  EXPECT_EQ(stats.reserved_keys, 4u);
}

// One call with a required pointer left null (and n > 0).
template <TableKey K>
struct NullCall {
  std::string name;
  std::function<void(Table<K>&, size_t, const K*, float*, bool*, uint64_t*, K*)> call;
};

template <TableKey K>
std::vector<NullCall<K>> null_calls() {
  using T = Table<K>;
  std::vector<NullCall<K>> calls;
  auto add = [&](std::string name, auto f) { calls.push_back({std::move(name), f}); };
  add("find keys", [](T& t, size_t n, const K*, float* v, bool* f, uint64_t* s, K*) {
    t.find(n, nullptr, v, f, s);
  });
  add("find values", [](T& t, size_t n, const K* k, float*, bool* f, uint64_t* s, K*) {
    t.find(n, k, nullptr, f, s);
  });
  add("find_with_misses keys", [](T& t, size_t n, const K*, float* v, bool*, uint64_t* s, K* o) {
    t.find_with_misses(n, nullptr, v, o, s, s);
  });
  add("find_with_misses missed_keys", [](T& t, size_t n, const K* k, float* v, bool*, uint64_t* s,
                                         K*) { t.find_with_misses(n, k, v, nullptr, s, s); });
  add("find_with_misses missed_indices",
      [](T& t, size_t n, const K* k, float* v, bool*, uint64_t* s, K* o) {
        t.find_with_misses(n, k, v, o, nullptr, s);
      });
  add("contains keys",
      [](T& t, size_t n, const K*, float*, bool* f, uint64_t*, K*) { t.contains(n, nullptr, f); });
  add("contains founds",
      [](T& t, size_t n, const K* k, float*, bool*, uint64_t*, K*) { t.contains(n, k, nullptr); });
  add("find_pointers keys", [](T& t, size_t n, const K*, float* v, bool* f, uint64_t* s, K*) {
    t.find_pointers(n, nullptr, reinterpret_cast<float**>(v), f, s);
  });
  add("find_pointers rows", [](T& t, size_t n, const K* k, float*, bool* f, uint64_t* s, K*) {
    t.find_pointers(n, k, nullptr, f, s);
  });
  add("find_or_insert_pointers keys",
      [](T& t, size_t n, const K*, float* v, bool* f, uint64_t*, K*) {
        t.find_or_insert_pointers(n, nullptr, reinterpret_cast<float**>(v), f);
      });
  add("find_or_insert_pointers rows", [](T& t, size_t n, const K* k, float*, bool* f, uint64_t*,
                                         K*) { t.find_or_insert_pointers(n, k, nullptr, f); });
  add("find_or_insert keys", [](T& t, size_t n, const K*, float* v, bool* f, uint64_t*, K*) {
    t.find_or_insert(n, nullptr, v, f);
  });
  add("find_or_insert values", [](T& t, size_t n, const K* k, float*, bool* f, uint64_t*, K*) {
    t.find_or_insert(n, k, nullptr, f);
  });
  add("find_or_insert_given keys", [](T& t, size_t n, const K*, float* v, bool* f, uint64_t*, K*) {
    t.find_or_insert_given(n, nullptr, v, f);
  });
  add("find_or_insert_given values", [](T& t, size_t n, const K* k, float*, bool* f, uint64_t*,
                                        K*) { t.find_or_insert_given(n, k, nullptr, f); });
  add("insert_or_assign keys", [](T& t, size_t n, const K*, float* v, bool*, uint64_t*, K*) {
    t.insert_or_assign(n, nullptr, v);
  });
  add("insert_or_assign values", [](T& t, size_t n, const K* k, float*, bool*, uint64_t*, K*) {
    t.insert_or_assign(n, k, nullptr);
  });
  add("insert_and_evict keys", [](T& t, size_t n, const K*, float* v, bool*, uint64_t* s, K* o) {
    t.insert_and_evict(n, nullptr, v, s, o, v, s);
  });
  add("insert_and_evict values", [](T& t, size_t n, const K* k, float* v, bool*, uint64_t* s,
                                    K* o) { t.insert_and_evict(n, k, nullptr, s, o, v, s); });
  add("insert_and_evict evicted_keys", [](T& t, size_t n, const K* k, float* v, bool*, uint64_t* s,
                                          K*) { t.insert_and_evict(n, k, v, s, nullptr, v, s); });
  add("assign keys",
      [](T& t, size_t n, const K*, float* v, bool*, uint64_t*, K*) { t.assign(n, nullptr, v); });
  add("assign values",
      [](T& t, size_t n, const K* k, float*, bool*, uint64_t*, K*) { t.assign(n, k, nullptr); });
  add("assign_scores keys", [](T& t, size_t n, const K*, float*, bool*, uint64_t* s, K*) {
    t.assign_scores(n, nullptr, s);
  });
  add("assign_scores scores", [](T& t, size_t n, const K* k, float*, bool*, uint64_t*, K*) {
    t.assign_scores(n, k, nullptr);
  });
  add("accum_or_assign keys", [](T& t, size_t n, const K*, float* v, bool*, uint64_t*, K*) {
    t.accum_or_assign(n, nullptr, v);
  });
  add("accum_or_assign values", [](T& t, size_t n, const K* k, float*, bool*, uint64_t*, K*) {
    t.accum_or_assign(n, k, nullptr);
  });
  add("erase keys",
      [](T& t, size_t n, const K*, float*, bool*, uint64_t*, K*) { t.erase(n, nullptr); });
  add("export_batch keys", [](T& t, size_t n, const K*, float* v, bool*, uint64_t* s, K*) {
    t.export_batch(0, n, nullptr, v, s);
  });
  add("export_batch values", [](T& t, size_t n, const K*, float*, bool*, uint64_t* s, K* o) {
    t.export_batch(0, n, o, nullptr, s);
  });
  return calls;
}

TYPED_TEST(TableErrorsTest, NullRequiredPointerWithPositiveNIsInvalidAndChangesNothing) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto stored = random_keys<K>(rng, 8);
  h.insert_or_assign(stored, value_rows(stored, h.dim()), std::vector<uint64_t>(8, 3));
  const Snapshot<K> before = h.snapshot();
  // Four keys: two stored, two new.
  const std::vector<K> keys{stored[0], stored[1], random_keys<K>(rng, 1)[0],
                            random_keys<K>(rng, 1)[0]};
  auto k = h.upload(keys);
  auto v = h.filled(keys.size() * h.dim(), 1.0f);
  auto f = h.flags(keys.size(), false);
  auto s = h.filled(keys.size(), uint64_t{5});
  auto o = h.filled(keys.size(), K{0});
  for (const NullCall<K>& c : null_calls<K>()) {
    SCOPED_TRACE(c.name);
    // Every backend words it the same: "<call>: <argument> = nullptr, must not be null when n > 0".
    const size_t space = c.name.find(' ');
    const std::string expected = c.name.substr(0, space) + ": " + c.name.substr(space + 1) +
                                 " = nullptr, must not be null when n > 0";
    try {
      c.call(h.table(), keys.size(), k.data(), v.data(), f.data(), s.data(), o.data());
      ADD_FAILURE() << "no InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
    EXPECT_EQ(h.snapshot(), before);
  }
}

TYPED_TEST(TableErrorsTest, ZeroKeysIsANoOpEvenWithNullPointers) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto stored = random_keys<K>(rng, 8);
  h.insert_or_assign(stored, value_rows(stored, h.dim()), std::vector<uint64_t>(8, 3));
  const Snapshot<K> before = h.snapshot();
  Table<K>& t = h.table();
  EXPECT_NO_THROW(t.find(0, nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(t.find_with_misses(0, nullptr, nullptr, nullptr, nullptr, nullptr), 0u);
  EXPECT_NO_THROW(t.contains(0, nullptr, nullptr));
  EXPECT_NO_THROW(t.find_or_insert(0, nullptr, nullptr, nullptr));
  EXPECT_NO_THROW(t.find_or_insert_given(0, nullptr, nullptr, nullptr));
  EXPECT_NO_THROW(t.insert_or_assign(0, nullptr, nullptr));
  EXPECT_EQ(t.insert_and_evict(0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), 0u);
  EXPECT_NO_THROW(t.assign(0, nullptr, nullptr));
  EXPECT_NO_THROW(t.assign_scores(0, nullptr, nullptr));
  EXPECT_NO_THROW(t.accum_or_assign(0, nullptr, nullptr));
  EXPECT_NO_THROW(t.erase(0, nullptr));
  EXPECT_EQ(t.export_batch(0, 0, nullptr, nullptr, nullptr), 0u);
  EXPECT_EQ(h.snapshot(), before);
  const TableStats stats = t.stats();
  EXPECT_EQ(stats.erased + stats.refused + stats.evictions + stats.reserved_keys, 0u);
}

// One invalid option: how to break it, and the argument the error must name.
struct BadOption {
  const char* argument;
  std::function<void(TableOptions&)> breaks;
};

TYPED_TEST(TableErrorsTest, InvalidOptionsAreRejectedNamingTheArgument) {
  const std::vector<BadOption> bad = {
      {"dim", [](TableOptions& o) { o.dim = 0; }},
      {"dim", [](TableOptions& o) { o.dim = (1u << 20) + 1; }},
      {"bucket_capacity", [](TableOptions& o) { o.bucket_capacity = 8; }},
      {"bucket_capacity", [](TableOptions& o) { o.bucket_capacity = 48; }},
      {"bucket_capacity", [](TableOptions& o) { o.bucket_capacity = 2048; }},
      {"init_capacity", [](TableOptions& o) { o.init_capacity = 0; }},
      {"init_capacity", [](TableOptions& o) { o.init_capacity = 1000; }},
      {"max_capacity", [](TableOptions& o) { o.max_capacity = 4096 + 64; }},
      {"max_capacity", [](TableOptions& o) { o.max_capacity = 1024; }},
      {"max_capacity", [](TableOptions& o) { o.max_capacity = (1ull << 40) + 128; }},
      {"max_load_factor", [](TableOptions& o) { o.max_load_factor = 0.0; }},
      {"max_load_factor", [](TableOptions& o) { o.max_load_factor = 1.5; }},
      {"max_load_factor",
       [](TableOptions& o) { o.max_load_factor = std::numeric_limits<double>::quiet_NaN(); }},
      {"initializer", [](TableOptions& o) { o.initializer.low = o.initializer.high; }},
      {"initializer",
       [](TableOptions& o) {
         o.initializer.kind = InitializerKind::kNormal;
         o.initializer.stddev = -1.0f;
       }},
  };
  for (const BadOption& b : bad) {
    SCOPED_TRACE(b.argument);
    TableOptions o = roomy_options();
    o.init_capacity = 2048;
    b.breaks(o);
    std::string message;
    try {
      this->make(o);
      ADD_FAILURE() << "no InvalidArgument";
    } catch (const InvalidArgument& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(b.argument), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace dynemb::testing

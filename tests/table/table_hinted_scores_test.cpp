// assign_scores_at: assign_scores with each key's row address from a lookup as a hint. Hints
// that still point at the key's slot, hints made stale by evictions, missing hints (new keys),
// keys no longer stored, reserved keys and copies of a key, on HBM and hybrid tables, against a
// std::map of the stored scores. Every backend and key type.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "dynemb/core/error.hpp"
#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TableHintedScoresTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TableHintedScoresTest, AllTableConfigs, TableConfigNames);

// The addresses find_pointers gives for `keys` (nullptr where not stored).
template <TableKey K>
std::vector<float*> addresses(TableHarness<K>& h, const std::vector<K>& keys) {
  auto k = h.upload(keys);
  auto p = h.filled(keys.size(), static_cast<float*>(nullptr));
  h->find_pointers(keys.size(), k.data(), p.data(), nullptr);
  return h.download(p, keys.size());
}

TYPED_TEST(TableHintedScoresTest, MatchesAssignScoresWithFreshStaleAndMissingHints) {
  using K = typename TestFixture::Key;
  TestRng rng;
  for (const bool hybrid : {false, true}) {
    SCOPED_TRACE(hybrid ? "hybrid" : "all rows in the fast memory");
    // 4 buckets of 16 slots: the second batch evicts, so some hints go stale.
    TableOptions o = tiny_options(ScorePolicy::kCustomized);
    if (hybrid) o.max_hbm_for_values = 24 * o.dim * sizeof(float);  // 24 of 64 rows in HBM
    auto h = this->make(o);
    const auto first = random_keys<K>(rng, 56);
    std::vector<uint64_t> first_scores(first.size());
    for (auto& s : first_scores) s = rng.uniform(1, 1000);
    h.insert_or_assign(first, value_rows(first, h.dim()), first_scores);
    const std::vector<float*> hints = addresses(h, first);

    // Later keys with higher scores push some of the first ones out (or into other slots).
    const auto later = random_keys<K>(rng, 40, std::set<K>(first.begin(), first.end()));
    std::vector<uint64_t> later_scores(later.size());
    for (auto& s : later_scores) s = rng.uniform(500, 2000);
    h.insert_or_assign(later, value_rows(later, h.dim(), 1.0f), later_scores);
    const Snapshot<K> before = h.snapshot();

    // The batch: the first keys with their (possibly stale) hints, the later ones without,
    // copies of some keys (the same score), keys never stored, and reserved keys.
    std::vector<K> keys;
    std::vector<float*> rows;
    std::vector<uint64_t> scores;
    std::map<K, uint64_t> given;
    const auto add = [&](K key, float* hint) {
      auto it = given.find(key);
      if (it == given.end()) it = given.emplace(key, rng.uniform(1ull << 40, 1ull << 41)).first;
      keys.push_back(key);
      rows.push_back(hint);
      scores.push_back(it->second);
    };
    for (size_t i = 0; i < first.size(); ++i) add(first[i], hints[i]);
    for (const K key : later) add(key, nullptr);
    for (size_t i = 0; i < first.size(); i += 7) add(first[i], hints[i]);  // copies
    std::set<K> taken(first.begin(), first.end());
    taken.insert(later.begin(), later.end());
    for (const K key : random_keys<K>(rng, 10, taken)) add(key, nullptr);
    const auto reserved = reserved_keys<K>();
    for (const K key : reserved) add(key, nullptr);
    // In a random order.
    for (size_t i = keys.size(); i > 1; --i) {
      const size_t j = rng.uniform(0, i - 1);
      std::swap(keys[i - 1], keys[j]);
      std::swap(rows[i - 1], rows[j]);
      std::swap(scores[i - 1], scores[j]);
    }

    const uint64_t reserved_before = h->stats().reserved_keys;
    auto k = h.upload(keys);
    auto r = h.upload(rows);
    auto s = h.upload(scores);
    h->assign_scores_at(keys.size(), k.data(), r.data(), s.data());

    Snapshot<K> expected = before;
    for (auto& [key, entry] : expected) entry.score = given.at(key);
    EXPECT_EQ(h.snapshot(), expected);  // rows unchanged, every stored key's score given
    EXPECT_EQ(h->stats().reserved_keys - reserved_before, reserved.size());
  }
}

TYPED_TEST(TableHintedScoresTest, ErrorModeRefusesAReservedKeyAndChangesNothing) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(tiny_options(ScorePolicy::kCustomized, SafeCheck::kError));
  const auto keys = random_keys<K>(rng, 20);
  h.insert_or_assign(keys, value_rows(keys, h.dim()), std::vector<uint64_t>(keys.size(), 5));
  const Snapshot<K> before = h.snapshot();
  std::vector<K> batch = keys;
  std::vector<float*> hints = addresses(h, keys);
  batch.push_back(reserved_keys<K>().front());
  hints.push_back(nullptr);
  auto k = h.upload(batch);
  auto r = h.upload(hints);
  auto s = h.filled(batch.size(), uint64_t{99});
  EXPECT_THROW(h->assign_scores_at(batch.size(), k.data(), r.data(), s.data()), InvalidArgument);
  EXPECT_EQ(h.snapshot(), before);
}

}  // namespace
}  // namespace dynemb::testing

// An independent model of the table contract for the randomized tests: a std::unordered_map of
// rows and scores, plus (for a table fixed at max capacity) the keys of each bucket, so it can
// predict every eviction and refusal of a batch whose keys fall into distinct buckets.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <unordered_map>
#include <vector>

#include "table/table_harness.hpp"

namespace dynemb::testing {

template <TableKey K>
class ReferenceTable {
 public:
  // `num_buckets` == 0 models a table that never evicts (growth only).
  ReferenceTable(const TableOptions& options, uint64_t num_buckets)
      : options_(options), buckets_(num_buckets) {}

  // What happened to one key written through insert().
  enum class Outcome { kUpdated, kInserted, kEvicted, kRefused };

  struct Result {
    Outcome outcome = Outcome::kUpdated;
    K victim{};          // kEvicted: the entry that left
    Entry victim_entry;  // kEvicted
    uint64_t score = 0;  // the score the key was (or would have been) stored with
  };

  const std::unordered_map<K, Entry>& rows() const { return rows_; }
  bool contains(K key) const { return rows_.count(key) > 0; }
  const Entry* find(K key) const {
    auto it = rows_.find(key);
    return it == rows_.end() ? nullptr : &it->second;
  }

  // The table clock: the step (STEP) or the call-level score (CUSTOMIZED).
  uint64_t clock = 0;
  uint64_t evictions = 0, refused = 0, erased = 0;

  // The score a write stores for a key, per the contract's policy table.
  uint64_t next_score(const Entry* existing, std::optional<uint64_t> given) const {
    switch (options_.score_policy) {
      case ScorePolicy::kLfu: {
        const uint64_t inc = given.value_or(1);
        const uint64_t base = existing ? existing->score : 0;
        return base > std::numeric_limits<uint64_t>::max() - inc
                   ? std::numeric_limits<uint64_t>::max()
                   : base + inc;
      }
      case ScorePolicy::kCustomized:
        return given.value_or(clock);
      default:
        return clock;
    }
  }

  // Writes `row` under `key` (row == nullopt keeps an existing row / uses `new_row` for a new
  // key), inserting through eviction when the key is new.
  Result write(K key, const std::optional<Row>& row, const Row& new_row,
               std::optional<uint64_t> given) {
    Result r;
    auto it = rows_.find(key);
    if (it != rows_.end()) {
      it->second.score = next_score(&it->second, given);
      if (row) it->second.row = *row;
      r.score = it->second.score;
      return r;
    }
    r.score = next_score(nullptr, given);
    if (!buckets_.empty()) {
      std::vector<K>& bucket = buckets_[bucket_of_key(key, buckets_.size())];
      if (bucket.size() == options_.bucket_capacity) {
        size_t v = 0;
        for (size_t i = 1; i < bucket.size(); ++i) {
          const uint64_t si = rows_.at(bucket[i]).score, sv = rows_.at(bucket[v]).score;
          if (si < sv || (si == sv && key_bits(bucket[i]) < key_bits(bucket[v]))) v = i;
        }
        const Entry& victim = rows_.at(bucket[v]);
        if (victim.score > r.score) {
          ++refused;
          r.outcome = Outcome::kRefused;
          return r;
        }
        r.outcome = Outcome::kEvicted;
        r.victim = bucket[v];
        r.victim_entry = victim;
        rows_.erase(bucket[v]);
        bucket[v] = bucket.back();
        bucket.pop_back();
        ++evictions;
      } else {
        r.outcome = Outcome::kInserted;
      }
      bucket.push_back(key);
    } else {
      r.outcome = Outcome::kInserted;
    }
    rows_[key] = Entry{row ? *row : new_row, r.score};
    return r;
  }

  // Sets the score of a stored key.
  void set_score_of(K key, uint64_t score) {
    if (auto it = rows_.find(key); it != rows_.end()) it->second.score = score;
  }

  // Removes a stored key; true when it was stored.
  bool erase(K key) {
    auto it = rows_.find(key);
    if (it == rows_.end()) return false;
    rows_.erase(it);
    if (!buckets_.empty()) {
      std::vector<K>& bucket = buckets_[bucket_of_key(key, buckets_.size())];
      bucket.erase(std::find(bucket.begin(), bucket.end(), key));
    }
    ++erased;
    return true;
  }

  // Removes every key whose score matches; returns how many.
  size_t erase_if(ScorePredicate p) {
    std::vector<K> doomed;
    for (const auto& [key, entry] : rows_) {
      if (matches(p, entry.score)) doomed.push_back(key);
    }
    for (K key : doomed) erase(key);
    return doomed.size();
  }

  Snapshot<K> snapshot() const { return Snapshot<K>(rows_.begin(), rows_.end()); }

 private:
  TableOptions options_;
  std::vector<std::vector<K>> buckets_;
  std::unordered_map<K, Entry> rows_;
};

}  // namespace dynemb::testing

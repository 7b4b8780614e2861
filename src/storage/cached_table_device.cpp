// The caching table's calls that work on the fast table's memory (docs/storage.md, "The fast
// tier on the GPU"): find_or_insert and prefetch look the batch up in the fast table where it
// lives, list only the misses on the host, read them below and move them up in one batch; rows
// of keys found in the fast tier never leave it.
#include <algorithm>
#include <exception>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "dynemb/core/error.hpp"
#include "dynemb/core/initializer.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "phase_clock.hpp"
#include "tier_device.hpp"

namespace dynemb::storage {
namespace {

constexpr uint64_t kPinned = ~0ull;

// The misses of a batch: their distinct usable keys, and for each missed position the index of
// its key among them (or -1 for a skipped reserved key).
struct Misses {
  std::vector<uint32_t> positions;    // batch positions not found in the fast tier, in order
  std::vector<uint64_t> unique;       // the distinct usable keys at them
  std::vector<int64_t> index;         // per missed position: its key's index in unique, or -1
  std::vector<uint32_t> first, last;  // per unique key: its first and last batch position
  std::vector<uint8_t> maybe_below;   // per unique key: it may be stored below (the filter)
};

// The distinct usable missed keys of a miss list: a reserved key throws in ERROR mode (naming
// its first position; nothing changed yet) and is skipped otherwise.
template <TableKey K>
Misses group_misses(detail::TierDevice::MissList&& list, SafeCheck mode, const char* where) {
  Misses m;
  m.positions = std::move(list.positions);
  m.index.assign(list.index.begin(), list.index.end());
  std::vector<uint8_t> reserved;  // per distinct key, once there is a reserved one
  size_t first_reserved = 0;
  for (size_t k = 0; k < list.unique.size(); ++k) {
    if (!is_reserved_key(static_cast<K>(list.unique[k]))) continue;
    if (reserved.empty()) {
      reserved.assign(list.unique.size(), 0);
      first_reserved = k;
    }
    reserved[k] = 1;
    if (list.first[k] < list.first[first_reserved]) first_reserved = k;
  }
  if (reserved.empty()) {
    m.unique = std::move(list.unique);
    m.first = std::move(list.first);
    m.last = std::move(list.last);
    m.maybe_below = std::move(list.maybe_below);
    return m;
  }
  require(mode != SafeCheck::kError, where,
          ("keys[" + std::to_string(list.first[first_reserved]) + "]").c_str(),
          std::to_string(list.unique[first_reserved]), "is a reserved key (>= 0xFFFFFFFFFFFFFFF0)");
  std::vector<int64_t> remap(list.unique.size(), -1);
  for (size_t k = 0; k < list.unique.size(); ++k) {
    if (reserved[k]) continue;
    remap[k] = static_cast<int64_t>(m.unique.size());
    m.unique.push_back(list.unique[k]);
    m.first.push_back(list.first[k]);
    m.last.push_back(list.last[k]);
    m.maybe_below.push_back(list.maybe_below[k]);
  }
  for (int64_t& k : m.index) k = remap[k];
  return m;
}

constexpr uint32_t kNotInBatch = ~0u;

}  // namespace

namespace detail {
// Words of the set a staged prefetch of n keys hashes its missed keys into: a power of two, at
// least twice n (probes stay short), at least 64.
size_t staged_set_slots(size_t n) {
  size_t slots = 64;
  while (slots < 2 * n) slots *= 2;
  return slots;
}
}  // namespace detail

namespace {

// The last batch position of each of `want` (keys of the batch), found on the device (only when
// a call's own misses pushed some of its hits out: rare).
template <TableKey K>
std::vector<uint32_t> last_positions(detail::TierDevice& d, size_t n, const K* keys,
                                     const std::vector<K>& want, StreamHandle stream) {
  std::vector<uint64_t> bits(want.size());
  for (size_t w = 0; w < want.size(); ++w) bits[w] = key_bits(want[w]);
  std::vector<uint32_t> at(want.size());
  d.last_positions(n, reinterpret_cast<const uint64_t*>(keys), bits.size(), bits.data(), at.data(),
                   stream);
  return at;
}

// out[w] = src[at[w]] (8-byte scores in the fast table's memory); `fallback` where the key was
// not in the batch (a key left pinned by a call that failed).
void gather_scores(detail::TierDevice& d, const std::vector<uint32_t>& at, const uint64_t* src,
                   uint64_t fallback, std::vector<uint64_t>& out, StreamHandle stream) {
  std::vector<uint32_t> known_at;
  std::vector<size_t> known;
  for (size_t w = 0; w < at.size(); ++w) {
    out[w] = fallback;
    if (at[w] == kNotInBatch) continue;
    known_at.push_back(at[w]);
    known.push_back(w);
  }
  std::vector<uint64_t> got(known.size());
  d.gather(known.size(), known_at.data(), src, sizeof(uint64_t), got.data(), stream);
  for (size_t k = 0; k < known.size(); ++k) out[known[k]] = got[k];
}

}  // namespace

template <TableKey K>
const uint64_t* CachedTable<K>::pinned_scores(size_t n, StreamHandle stream, bool below_held) {
  // Held keys have the highest score; a prefetch pins one lower, so it never evicts them.
  const detail::Scratch slot =
      below_held ? detail::Scratch::kPinnedBelowHeld : detail::Scratch::kPinned;
  const uint64_t value = below_held ? kPinned - 1 : kPinned;
  size_t& filled = pinned_filled_[below_held ? 1 : 0];
  const size_t want = std::max<size_t>(n, 1);
  auto* p = static_cast<uint64_t*>(device_->scratch(slot, want * sizeof(uint64_t), stream));
  if (filled < want) {  // a grown scratch holds nothing: fill it whole
    const size_t fill = std::max(want, filled * 2);
    p = static_cast<uint64_t*>(device_->scratch(slot, fill * sizeof(uint64_t), stream));
    device_->fill(fill, value, p, stream);
    filled = fill;
  }
  return p;
}

template <TableKey K>
void CachedTable<K>::hold(size_t n, const K* keys, const uint64_t* scores, StreamHandle stream) {
  using detail::Scratch;
  auto* hk = static_cast<K*>(device_->scratch(Scratch::kHeldKeys, n * sizeof(K), stream));
  auto* hs =
      static_cast<uint64_t*>(device_->scratch(Scratch::kHeldScores, n * sizeof(uint64_t), stream));
  device_->copy(hk, keys, n * sizeof(K), stream);
  device_->copy(hs, scores, n * sizeof(uint64_t), stream);
  held_ = n;
}

template <TableKey K>
void CachedTable<K>::settle(StreamHandle stream) {
  settle_prefetch(stream);
  created_.clear();
  created_on_device_ = 0;
  trusted_ = false;
  if (held_ == 0) return;
  using detail::Scratch;
  const size_t n = held_;
  held_ = 0;
  device_->wait(stream, detail::Mark::kCallEnd);  // the held copies are made
  auto* hk = static_cast<K*>(device_->scratch(Scratch::kHeldKeys, n * sizeof(K), stream));
  auto* hs =
      static_cast<uint64_t*>(device_->scratch(Scratch::kHeldScores, n * sizeof(uint64_t), stream));
  fast_->assign_scores(n, hk, hs, stream);
}

template <TableKey K>
void CachedTable<K>::find_or_insert_device(size_t n, const K* keys, float* values, bool* founds,
                                           const uint64_t* scores, float** rows, Miss miss,
                                           bool copy_out, StreamHandle stream) {
  using detail::Scratch;
  require(n < (size_t{1} << 31), "CachedTable::find_or_insert", "n", std::to_string(n),
          "must be < 2^31");
  detail::TierDevice& d = *device_;
  const TableOptions& o = options_;
  CachingPhaseTimes& phases = stats_.phases;
  detail::PhaseClock clock;
  phases.calls += 1;
  settle_prefetch(stream);  // a prefetch left on the device: done, its evictions written down
  install_prefetched(false);
  const std::vector<uint64_t> created = std::move(created_);  // by the last prefetch
  const size_t created_on_device = created_on_device_;        // by a prefetch on the device
  // After prefetch_step, an address call trusts that its keys are all up: nothing read back.
  const bool trusted = trusted_ && rows != nullptr && !copy_out;
  settle(stream);
  drain_pending();
  const uint64_t now = clock_now();
  // The keys the last prefetch gave new rows: not found before this call.
  const auto report_created = [&] {
    if (founds == nullptr) return;
    // Still where that prefetch left them.
    if (created_on_device > 0) clear_created_on_device(n, keys, created_on_device, founds, stream);
    if (created.empty()) return;
    auto* sorted = static_cast<uint64_t*>(
        d.scratch(Scratch::kCreated, created.size() * sizeof(uint64_t), stream));
    d.upload(sorted, created.data(), created.size() * sizeof(uint64_t), stream);
    d.clear_flags_of(n, reinterpret_cast<const uint64_t*>(keys), sorted, created.size(), founds,
                     stream);
  };
  // The call's scores in the fast table's memory (the policy's: CUSTOMIZED takes the caller's).
  const bool given_scores = scores != nullptr && o.score_policy == ScorePolicy::kCustomized;
  const uint64_t* call_scores = scores;
  if (!given_scores) {
    auto* cs =
        static_cast<uint64_t*>(d.scratch(Scratch::kCallScores, n * sizeof(uint64_t), stream));
    d.fill(n, now, cs, stream);
    call_scores = cs;
  }
  if (trusted) {  // one lookup; keys not up are counted on the device (caching_stats().unserved)
    auto* found = static_cast<bool*>(d.scratch(Scratch::kFound, n, stream));
    fast_->find_pointers(n, keys, rows, found, nullptr, stream);
    d.count_missing(n, found, stream);  // read only by caching_stats()
    if (founds != nullptr) d.copy(founds, found, n, stream);
    report_created();
    fast_->assign_scores_at(n, keys, rows, pinned_scores(n, stream), stream);
    hold(n, keys, call_scores, stream);
    stats_.hits += n;
    stats_.lookups += n;
    stats_.unsynced_calls += 1;
    d.record(detail::Mark::kCallEnd, stream);
    clock.lap(phases.lookup_ns);
    clock.total(phases.total_ns);
    return;
  }
  // 1. One lookup where the rows live; nothing changes yet.
  float** ptrs =
      rows != nullptr
          ? rows
          : static_cast<float**>(d.scratch(Scratch::kPointers, n * sizeof(float*), stream));
  auto* found = static_cast<bool*>(d.scratch(Scratch::kFound, n, stream));
  fast_->find_pointers(n, keys, ptrs, found, nullptr, stream);
  // Over a private store, the misses are first listed on the device: when the filter shows every
  // one stored nowhere, they go in from there (one read of their count; "A call whose misses are
  // all new" in docs/storage.md).
  if (caching_.private_store && pending_.empty() && miss == Miss::kInitialize && !given_scores) {
    if (stage_call_backoff_ > 0) {
      --stage_call_backoff_;
    } else if (find_or_insert_new(n, keys, values, founds, rows, copy_out, ptrs, found, call_scores,
                                  now, created_on_device, created, clock, stream)) {
      return;
    }
  }
  detail::TierDevice::MissList list;
  d.list_misses(n, reinterpret_cast<const uint64_t*>(keys), found, list, stream);
  clock.lap(phases.lookup_ns);
  stats_.hits += n - list.positions.size();
  stats_.lookups += n - list.positions.size();
  if (list.positions.empty()) {  // every key in the fast tier: no host work
    if (copy_out) d.copy_rows_out(n, ptrs, dim_, values, stream);
    if (founds != nullptr) d.copy(founds, found, n, stream);
    report_created();
    if (rows != nullptr) {
      fast_->assign_scores_at(n, keys, ptrs, pinned_scores(n, stream), stream);
      hold(n, keys, call_scores, stream);
    } else {
      fast_->assign_scores_at(n, keys, ptrs, call_scores, stream);
    }
    d.record(detail::Mark::kCallEnd, stream);
    clock.lap(phases.outputs_ns);
    clock.total(phases.total_ns);
    return;
  }
  // 2. The misses: read below (or new rows), moved up in one batch.
  const Misses m = group_misses<K>(std::move(list), o.safe_check, "CachedTable::find_or_insert");
  // The hits' rows go out now: a bucket holding more of the call's keys than it has slots may
  // push a hit out while the misses go in (its slot then holds another key's row).
  if (copy_out) d.copy_rows_out(n, ptrs, dim_, values, stream);
  const size_t u = m.unique.size();
  const size_t missed = m.positions.size();
  std::vector<uint8_t> below;
  std::vector<uint64_t> uscores;
  clock.lap(phases.misses_ns);
  std::vector<uint32_t> row_of;  // per unique key: its row in urows
  float* urows = read_below(m.unique, below, uscores, row_of, &m.maybe_below);
  clock.lap(phases.lower_read_ns);
  // Row slots: the rows found below first, then the new ones (drawn on the device, they need no
  // upload; kGiven's are the caller's). Key k's row stays at urows + k * dim, where the lower tier
  // put it: rows_at lists the rows the device reads, in slot order (no compaction on the host).
  std::vector<uint32_t> slot(u);
  std::vector<uint32_t> rows_at;
  uint32_t placed = 0;
  for (size_t k = 0; k < u; ++k) {
    if (!below[k]) continue;
    rows_at.push_back(row_of[k]);
    slot[k] = placed++;
  }
  for (size_t k = 0; k < u; ++k) {
    if (below[k]) continue;
    if (miss == Miss::kGiven) rows_at.push_back(row_of[k]);
    slot[k] = placed++;
  }
  // New rows: the caller's (kGiven, from the first position of the key) or the initializer's.
  const std::vector<uint32_t>& first = m.first;
  std::vector<uint32_t> fresh_at;
  std::vector<size_t> fresh;
  for (size_t k = 0; k < u; ++k) {
    if (below[k]) continue;
    fresh.push_back(k);
    fresh_at.push_back(first[k]);
  }
  if (miss == Miss::kGiven) {  // read back into pinned rows (commit's evicted rows come later)
    float* given = d.host_rows(detail::HostRows::kEvicted, fresh.size() * dim_);
    d.gather(fresh.size(), fresh_at.data(), values, dim_ * sizeof(float), given, stream);
    for (size_t f = 0; f < fresh.size(); ++f)
      std::copy(given + f * dim_, given + (f + 1) * dim_, urows + size_t{row_of[fresh[f]]} * dim_);
  }
  // kInitialize: new rows are drawn on the device as they go in (commit's `initial`).
  std::vector<uint8_t> initial;
  if (miss == Miss::kInitialize) {
    initial.assign(u, 0);
    for (const size_t k : fresh) initial[slot[k]] = 1;
  }
  // Scores: the caller's at the key's last position (CUSTOMIZED), else the call's.
  std::vector<uint64_t> by_key(u, now);
  if (given_scores) d.gather(u, m.last.data(), scores, sizeof(uint64_t), by_key.data(), stream);
  std::vector<K> up, ukeys(u);
  size_t lower_hits = 0;
  for (size_t k = 0; k < u; ++k) {
    ukeys[slot[k]] = static_cast<K>(m.unique[k]);
    uscores[slot[k]] = by_key[k];
    if (below[k]) {
      up.push_back(static_cast<K>(m.unique[k]));
      ++lower_hits;
    }
  }
  stats_.lookups += u;
  stats_.misses += u;
  stats_.lower_hits += lower_hits;
  stats_.new_rows += u - lower_hits;
  // The call's keys in the fast tier stay while the misses go in (pinned), then take their
  // scores; an address call keeps them pinned until its next call (hold).
  fast_->assign_scores(n, keys, pinned_scores(n, stream), stream);
  const RealScores hit_scores = [&](const std::vector<K>& hits, std::vector<uint64_t>& out) {
    if (!given_scores) {
      std::fill(out.begin(), out.end(), now);
      return;
    }
    gather_scores(d, last_positions(d, n, keys, hits, stream), scores, now, out, stream);
  };
  std::vector<K> left;  // keys of this call that went down (their bucket was full of the call's)
  clock.lap(phases.misses_ns);
  try {
    commit(ukeys, urows, uscores, {}, {}, up, &left, stream, false, &hit_scores,
           initial.empty() ? nullptr : &initial, /*absent=*/true, &rows_at);
  } catch (...) {  // the lower tier failed (the rows wait pending): no key stays pinned
    fast_->assign_scores(n, keys, call_scores, stream);
    throw;
  }
  clock.skip();  // commit timed its insert, evicted and write_down phases
  if (rows != nullptr) {
    fast_->assign_scores(n, keys, pinned_scores(n, stream), stream);
    hold(n, keys, call_scores, stream);
    fast_->find_pointers(n, keys, rows, nullptr, nullptr, stream);
  } else {
    fast_->assign_scores(n, keys, call_scores, stream);
    if (copy_out) {  // the missed positions' rows, now in the fast tier, go out from there
      // list_misses left the missed positions and keys in the fast table's memory (commit
      // lists no misses).
      const auto* mpos = static_cast<const uint32_t*>(
          d.scratch(Scratch::kMissPositions, n * sizeof(uint32_t), stream));
      const auto* mkeys =
          static_cast<const K*>(d.scratch(Scratch::kMissKeys, n * sizeof(uint64_t), stream));
      auto* mptrs =
          static_cast<float**>(d.scratch(Scratch::kMissPointers, missed * sizeof(float*), stream));
      fast_->find_pointers(missed, mkeys, mptrs, nullptr, nullptr, stream);
      d.copy_rows_to(missed, mpos, mptrs, dim_, values, stream);
    }
  }
  const std::unordered_set<uint64_t> went_down(left.begin(), left.end());
  // 3. Outputs at the missed positions: the row (copy out) and whether the key existed before
  // that position (below, or an earlier position of this call).
  std::vector<uint32_t> out_at;
  std::vector<float> out_rows;
  std::unique_ptr<bool[]> out_found(new bool[missed]);
  std::vector<uint8_t> seen(u, 0);
  for (size_t j = 0; j < missed; ++j) {
    const int64_t k = m.index[j];
    out_found[j] = false;
    if (k < 0) continue;  // a skipped reserved key: no row, not found
    out_found[j] = below[k] || seen[k];
    seen[k] = 1;
    if (copy_out && !went_down.empty() && went_down.count(m.unique[k])) {
      // not in the fast tier: from the host
      out_at.push_back(m.positions[j]);
      float* row = urows + size_t{row_of[k]} * dim_;
      if (!initial.empty() && initial[slot[k]])  // drawn on the device: again here
        fill_initial_row(o.initializer, m.unique[k], row, dim_);
      out_rows.insert(out_rows.end(), row, row + dim_);
    }
  }
  if (!out_at.empty()) {
    d.scatter(out_at.size(), out_at.data(), out_rows.data(), dim_ * sizeof(float), values, stream);
  }
  if (founds != nullptr) {
    // At every missed position (list_misses left them in the fast table's memory).
    const auto* mpos = static_cast<const uint32_t*>(
        d.scratch(Scratch::kMissPositions, n * sizeof(uint32_t), stream));
    d.copy(founds, found, n, stream);
    d.scatter_to(missed, mpos, out_found.get(), 1, founds, stream);
    report_created();
  }
  d.record(detail::Mark::kCallEnd, stream);
  clock.lap(phases.outputs_ns);
  clock.total(phases.total_ns);
}

template <TableKey K>
bool CachedTable<K>::prefetch_device(size_t n, const K* keys, StreamHandle stream, bool create,
                                     PrefetchFor purpose) {
  using detail::Scratch;
  require(n < (size_t{1} << 31), "CachedTable::prefetch", "n", std::to_string(n), "must be < 2^31");
  detail::TierDevice& d = *device_;
  const StreamHandle s = d.side_stream();
  settle_prefetch(s);
  CachingPhaseTimes& phases = stats_.phases;
  detail::PhaseClock clock;
  phases.calls += 1;
  install_prefetched(true);
  // The keys are ready after the work issued on `stream`, the default stream (nullptr)
  // included: a cudaMemcpy from pageable memory may return before its copy has landed.
  d.order_after(s, stream);
  d.wait(s, detail::Mark::kCallEnd);  // the last call's pins are in place
  drain_pending();
  auto* ptrs = static_cast<float**>(d.scratch(Scratch::kPointers, n * sizeof(float*), s));
  auto* found = static_cast<bool*>(d.scratch(Scratch::kFound, n, s));
  auto* current = static_cast<uint64_t*>(d.scratch(Scratch::kCallScores, n * sizeof(uint64_t), s));
  fast_->find_pointers(n, keys, ptrs, found, current, s);
  detail::TierDevice::MissList list;
  d.list_misses(n, reinterpret_cast<const uint64_t*>(keys), found, list, s);
  clock.lap(phases.lookup_ns);
  const Misses m = group_misses<K>(std::move(list), options_.safe_check, "CachedTable::prefetch");
  const uint64_t refused_before = stats_.prefetch_refused;
  bool complete = true;  // every key of the batch is up (no reserved key skipped, none refused)
  for (const int64_t k : m.index) complete = complete && k >= 0;
  const size_t u = m.unique.size();
  std::vector<uint8_t> below;
  std::vector<uint64_t> uscores;
  clock.lap(phases.misses_ns);
  std::vector<uint32_t> row_of;  // per unique key: its row in urows
  float* urows = read_below(m.unique, below, uscores, row_of, &m.maybe_below);
  clock.lap(phases.lower_read_ns);
  // Rows found below move up with their scores; with `create`, keys stored nowhere come in with
  // new rows (scored now; the next call gives every key its score). The rows found below go
  // first, read by the device where the lower tier put them (rows_at), the new ones (drawn on the
  // device: no upload) follow.
  std::vector<K> in, up;
  std::vector<uint32_t> rows_at;
  std::vector<uint64_t> in_scores;
  std::vector<uint64_t> created;
  std::vector<uint8_t> initial;  // per `in`: a new row, drawn on the device as it goes in
  const uint64_t now = clock_now();
  for (size_t k = 0; k < u; ++k) {
    if (!below[k]) continue;
    rows_at.push_back(row_of[k]);
    in.push_back(static_cast<K>(m.unique[k]));
    up.push_back(in.back());
    initial.push_back(0);
    in_scores.push_back(uscores[k]);
  }
  for (size_t k = 0; k < u && create; ++k) {
    if (below[k]) continue;
    uscores[k] = now;
    in.push_back(static_cast<K>(m.unique[k]));
    created.push_back(m.unique[k]);
    initial.push_back(1);
    in_scores.push_back(now);
  }
  stats_.lookups += u;
  stats_.lower_hits += up.size();
  stats_.new_rows += created.size();
  created_.insert(created_.end(), created.begin(), created.end());  // since the last call
  if (!std::is_sorted(created_.begin(), created_.end()))            // CUDA lists the misses sorted
    std::sort(created_.begin(), created_.end());
  if (!in.empty()) {
    // The batch's keys already in the fast tier stay (pinned) while its rows come up; then
    // every key has its score back (held keys keep "pinned", their score now).
    fast_->assign_scores(n, keys, pinned_scores(n, s, true), s);
    if (held_ > 0) {  // held keys of this batch stay above what comes up
      const auto* hk = static_cast<const K*>(d.scratch(Scratch::kHeldKeys, held_ * sizeof(K), s));
      fast_->assign_scores(held_, hk, pinned_scores(held_, s), s);
    }
    const RealScores hit_scores = [&](const std::vector<K>& hits, std::vector<uint64_t>& out) {
      gather_scores(d, last_positions(d, n, keys, hits, s), current, now, out, s);
    };
    std::exception_ptr failed;  // the lower tier failed (the rows wait pending)
    clock.lap(phases.misses_ns);
    try {
      commit(in, urows, in_scores, {}, {}, up, nullptr, s, true, &hit_scores,
             created.empty() ? nullptr : &initial, /*absent=*/true, &rows_at);
    } catch (...) {
      failed = std::current_exception();
    }
    clock.skip();  // commit timed its insert, evicted and write_down phases
    // Every key gets its score back (also when the write down failed).
    // At every missed position (list_misses left them in the fast table's memory); a key that
    // did not come up is not in the fast table, so its score there changes nothing.
    std::vector<uint64_t> at_scores(m.positions.size(), 0);
    for (size_t j = 0; j < m.positions.size(); ++j) {
      const int64_t k = m.index[j];
      if (k >= 0 && (below[k] || create)) at_scores[j] = uscores[k];
    }
    const auto* mpos =
        static_cast<const uint32_t*>(d.scratch(Scratch::kMissPositions, n * sizeof(uint32_t), s));
    d.scatter_to(at_scores.size(), mpos, at_scores.data(), sizeof(uint64_t), current, s);
    fast_->assign_scores(n, keys, current, s);
    if (failed) {
      d.synchronize(s);
      std::rethrow_exception(failed);
    }
    if (purpose == PrefetchFor::kCaller) stats_.prefetched += in.size();
  }
  d.synchronize(s);  // the next call finds the rows up (and its scratch free)
  clock.lap(phases.outputs_ns);
  clock.total(phases.total_ns);
  return complete && (create || up.size() == u) && stats_.prefetch_refused == refused_before;
}

template <TableKey K>
bool CachedTable<K>::find_or_insert_new(size_t n, const K* keys, float* values, bool* founds,
                                        float** rows, bool copy_out, float** ptrs, bool* found,
                                        const uint64_t* call_scores, uint64_t now,
                                        size_t created_on_device,
                                        const std::vector<uint64_t>& created,
                                        detail::PhaseClock& clock, StreamHandle stream) {
  using detail::Scratch;
  using detail::TierDevice;
  constexpr uint64_t kPinnedBelowHeld = ~0ull - 1;
  TierDevice& d = *device_;
  CachingPhaseTimes& phases = stats_.phases;
  auto* fresh = static_cast<uint64_t*>(d.scratch(Scratch::kCallNew, n * 8, stream));
  auto* status =
      static_cast<uint64_t*>(d.scratch(Scratch::kCallStatus, TierDevice::kStageWords * 8, stream));
  // The distinct missed keys, hashed into a set (their index kept there for the repeats and
  // the rows out).
  const size_t set_slots = detail::staged_set_slots(n);
  auto* set =
      static_cast<uint64_t*>(d.scratch(Scratch::kCallSet, detail::staged_set_bytes(n), stream));
  d.stage_new_keys(n, reinterpret_cast<const uint64_t*>(keys), found, n, fresh, status, set,
                   set_slots, stream);
  // A call of rows out goes by address (below); its rows out and founds start now, on the
  // device's side stream, beside the wait for the status, the pins and the insert: they read only
  // the hits' rows, which stay where they are, and draw the new keys' (those of a call that falls
  // back are written again by the host lists). (Started right after the lookup instead, before
  // the hash, they slowed the hash and the status behind them: 1376-1389 against 1446-1465 M
  // keys/s in the lead's rounds R3 and R2.)
  const bool by_address = copy_out && rows == nullptr;
  const StreamHandle rows_stream = by_address ? d.side_stream() : stream;
  if (by_address) {
    d.order_after(rows_stream, stream);
    d.copy_rows_or_initial(n, ptrs, reinterpret_cast<const uint64_t*>(keys), options_.initializer,
                           dim_, values, founds, set, set_slots, rows_stream);
  }
  uint64_t w[TierDevice::kStageWords] = {};
  d.download(w, status, sizeof w, stream);  // the call's one wait before its insert
  const size_t u = w[TierDevice::kStageDistinct];
  if (w[TierDevice::kStageInsert] != u) {  // some may be below (or reserved): the host lists
    if (w[TierDevice::kStageWhy] & TierDevice::kMaybeBelow) stage_call_backoff_ = 16;
    stats_.staged_call_fallbacks += 1;
    d.order_after(stream, rows_stream);  // the host lists' outputs come after the rows out
    return false;
  }
  stats_.staged_calls += 1;
  const size_t missed = w[TierDevice::kStageMissed];
  stats_.hits += n - missed;
  stats_.lookups += n - missed + u;
  stats_.misses += u;
  stats_.new_rows += u;
  stats_.filtered += u;
  clock.lap(phases.lookup_ns);
  // The new rows, drawn where they go; the call's keys in the fast tier stay (pinned) while
  // they go in, pinned too.
  std::unordered_set<uint64_t> went_down;  // keys of the call pushed out by the call's own
  std::vector<K> ev_keys;
  std::vector<uint64_t> ev_scores;
  float* ev_rows = nullptr;
  size_t evicted = 0;
  // By address (a call of rows out): the hits are pinned where the lookup found them and the
  // new keys go in one below with their initial rows drawn where they go, so no hit can leave;
  // then one pass writes every row out (the hits' copied, the new keys' drawn again) and the
  // scores are given back, the hits' by address.
  // founds: the lookup's, with a new key's later copies found (whether it stays or not; by
  // address, written with the rows out), then those a prefetch created cleared.
  const auto write_founds = [&] {
    if (!by_address) {
      auto* first = static_cast<uint32_t*>(d.scratch(Scratch::kCallFirst, u * 4 + 4, stream));
      d.mark_repeats(n, reinterpret_cast<const uint64_t*>(keys), found, fresh, u, first, set,
                     set_slots, stream);
      d.copy(founds, found, n, stream);
    }
    if (created_on_device > 0) clear_created_on_device(n, keys, created_on_device, founds, stream);
    if (!created.empty()) {
      auto* sorted = static_cast<uint64_t*>(
          d.scratch(Scratch::kCreated, created.size() * sizeof(uint64_t), stream));
      d.upload(sorted, created.data(), created.size() * sizeof(uint64_t), stream);
      d.clear_flags_of(n, reinterpret_cast<const uint64_t*>(keys), sorted, created.size(), founds,
                       stream);
    }
  };
  // The `evicted` rows the insert pushed out (keys, rows, scores on the device) brought to the
  // host lists ev_keys / ev_rows / ev_scores and counted; returns their keys' bits. A key of the
  // call (pinned; each leaves once: the new ones had no row before) goes down with the call's
  // score.
  const auto take_evicted = [&](const K* dek, const float* dev, const uint64_t* des) {
    if (caching_.private_store)
      d.filter_add(evicted, reinterpret_cast<const uint64_t*>(dek), stream);
    ev_keys.resize(evicted);
    ev_scores.resize(evicted);
    ev_rows = d.host_rows(detail::HostRows::kEvicted, evicted * dim_);
    d.download_parts({{ev_keys.data(), dek, evicted * sizeof(K)},
                      {ev_rows, dev, evicted * dim_ * sizeof(float)},
                      {ev_scores.data(), des, evicted * sizeof(uint64_t)}},
                     stream);
    std::vector<uint64_t> put_keys(evicted);
    for (size_t e = 0; e < evicted; ++e) {
      put_keys[e] = key_bits(ev_keys[e]);
      if (!shadowed_.empty()) shadowed_.erase(put_keys[e]);
      if (ev_scores[e] < kPinnedBelowHeld) continue;
      ev_scores[e] = now;
      went_down.insert(put_keys[e]);
    }
    stats_.evictions_written += evicted;
    stats_.batch_evicted += went_down.size();
    clock.lap(phases.evicted_ns);
    return put_keys;
  };
  if (by_address) {
    fast_->assign_scores_at(n, keys, ptrs, pinned_scores(n, stream), stream);
    auto* dek = static_cast<K*>(d.scratch(Scratch::kEvictedKeys, u * sizeof(K), stream));
    auto* dev =
        static_cast<float*>(d.scratch(Scratch::kEvictedRows, u * dim_ * sizeof(float), stream));
    auto* des = static_cast<uint64_t*>(d.scratch(Scratch::kEvictedScores, u * 8, stream));
    if (u > 0)
      fast_->insert_and_evict_counted(u, status + TierDevice::kStageInsert,
                                      reinterpret_cast<const K*>(fresh),
                                      /*values=*/nullptr, pinned_scores(u, stream, true), dek, dev,
                                      des, status + TierDevice::kStageEvicted, stream);
    d.order_after(stream, rows_stream);
    fast_->assign_scores_at(n, keys, ptrs, call_scores, stream);
    if (founds != nullptr) write_founds();  // issued before the wait for the evicted count
    if (u > 0) {
      uint64_t count = 0;
      d.download(&count, status + TierDevice::kStageEvicted, sizeof count, stream);
      evicted = count;
    }
    clock.lap(phases.insert_ns);
    if (evicted > 0) {
      const std::vector<uint64_t> put_keys = take_evicted(dek, dev, des);
      write_down(put_keys, ev_rows, ev_scores, {}, false);  // the scores are given back already
      clock.lap(phases.write_down_ns);
    }
  }
  // An address call: the new rows drawn into a staging buffer, the call's keys pinned by key (the
  // insert may push one out: a bucket with more of the call's keys than slots).
  const uint64_t* pinned = by_address ? nullptr : pinned_scores(n, stream);
  if (!by_address) fast_->assign_scores(n, keys, pinned, stream);
  if (u > 0 && !by_address) {
    auto* drows = static_cast<float*>(d.scratch(Scratch::kRows, u * dim_ * sizeof(float), stream));
    d.initial_rows_from(0, u, fresh, options_.initializer, dim_, drows, stream);
    auto* dek = static_cast<K*>(d.scratch(Scratch::kEvictedKeys, u * sizeof(K), stream));
    auto* dev =
        static_cast<float*>(d.scratch(Scratch::kEvictedRows, u * dim_ * sizeof(float), stream));
    auto* des = static_cast<uint64_t*>(d.scratch(Scratch::kEvictedScores, u * 8, stream));
    evicted = fast_->insert_and_evict(u, reinterpret_cast<const K*>(fresh), drows, pinned, dek, dev,
                                      des, stream);
    clock.lap(phases.insert_ns);
    if (evicted > 0) {
      const std::vector<uint64_t> put_keys = take_evicted(dek, dev, des);
      try {
        write_down(put_keys, ev_rows, ev_scores, {}, false);
      } catch (...) {  // the rows wait pending: no key stays pinned
        fast_->assign_scores(n, keys, call_scores, stream);
        throw;
      }
      clock.lap(phases.write_down_ns);
    }
  }
  // Outputs: addresses (held), looked up again; founds: the lookup's, with a new key's later
  // copies found.
  if (rows != nullptr) {
    hold(n, keys, call_scores, stream);
    fast_->find_pointers(n, keys, rows, nullptr, nullptr, stream);
  } else if (!by_address) {
    fast_->assign_scores(n, keys, call_scores, stream);
  }
  if (founds != nullptr && !by_address) write_founds();
  d.record(detail::Mark::kCallEnd, stream);
  clock.lap(phases.outputs_ns);
  clock.total(phases.total_ns);
  return true;
}

template <TableKey K>
bool CachedTable<K>::prefetch_on_device(size_t n, const K* keys, StreamHandle stream) {
  using detail::Scratch;
  using detail::TierDevice;
  // Only a private store's filter can tell, on the device, that a missed key is stored nowhere.
  if (!caching_.private_store || !caching_.stage_prefetch_on_device ||
      options_.score_policy == ScorePolicy::kLfu)
    return false;
  install_prefetched(true);
  if (!pending_.empty()) return false;  // rows below may be in host memory: the host path
  if (stage_backoff_ > 0) {             // the last one fell back: the host path for a while
    --stage_backoff_;
    return false;
  }
  require(n < (size_t{1} << 31), "CachedTable::prefetch_step", "n", std::to_string(n),
          "must be < 2^31");
  TierDevice& d = *device_;
  const StreamHandle s = d.side_stream();
  CachingPhaseTimes& phases = stats_.phases;
  detail::PhaseClock clock;
  phases.calls += 1;
  if (created_on_device_ > 0) {  // an earlier device prefetch's new keys: kept on the host now
    std::vector<uint64_t> earlier(created_on_device_);
    d.download(earlier.data(), d.scratch(Scratch::kDeferNew, earlier.size() * 8, s),
               earlier.size() * 8, s);
    created_.insert(created_.end(), earlier.begin(), earlier.end());
    std::sort(created_.begin(), created_.end());
    created_on_device_ = 0;
  }
  // The keys are ready after the work issued on `stream`, the default stream (nullptr)
  // included: a cudaMemcpy from pageable memory may return before its copy has landed.
  d.order_after(s, stream);
  d.wait(s, detail::Mark::kCallEnd);  // the last call's pins are in place
  const size_t cap = std::max<size_t>(std::min(n, stage_cap_), 1);
  // The batch is copied: the caller may reuse its buffer once the next call has begun.
  auto* dkeys = static_cast<K*>(d.scratch(Scratch::kDeferKeys, n * sizeof(K), s));
  d.copy(dkeys, keys, n * sizeof(K), s);
  auto* ptrs = static_cast<float**>(d.scratch(Scratch::kDeferPointers, n * sizeof(float*), s));
  auto* found = static_cast<bool*>(d.scratch(Scratch::kDeferFound, n, s));
  auto* current = static_cast<uint64_t*>(d.scratch(Scratch::kDeferCurrent, n * 8, s));
  fast_->find_pointers(n, dkeys, ptrs, found, current, s);
  auto* fresh = static_cast<uint64_t*>(d.scratch(Scratch::kDeferNew, n * 8, s));
  auto* status =
      static_cast<uint64_t*>(d.scratch(Scratch::kDeferStatus, TierDevice::kStageWords * 8, s));
  // The distinct missed keys, hashed into a set (kept for the next call's founds).
  const size_t set_slots = detail::staged_set_slots(n);
  auto* set = static_cast<uint64_t*>(d.scratch(Scratch::kDeferSet, detail::staged_set_bytes(n), s));
  d.stage_new_keys(n, reinterpret_cast<const uint64_t*>(dkeys), found, cap, fresh, status, set,
                   set_slots, s);
  // The batch's keys in the fast tier stay while the new ones go in: pinned as high as the held
  // keys, so the held ones need no pin again (a new key, one below, can push out neither: a
  // victim must score no more than the key coming in); then every key has its score back (the
  // new ones: now; held ones: still pinned, as the lookup found them).
  fast_->assign_scores_at(n, dkeys, ptrs, pinned_scores(n, s), s);
  auto* ek = static_cast<K*>(d.scratch(Scratch::kDeferEvictedKeys, cap * sizeof(K), s));
  auto* er =
      static_cast<float*>(d.scratch(Scratch::kDeferEvictedRows, cap * dim_ * sizeof(float), s));
  auto* es = static_cast<uint64_t*>(d.scratch(Scratch::kDeferEvictedScores, cap * 8, s));
  fast_->insert_and_evict_counted(
      cap, status + TierDevice::kStageInsert, reinterpret_cast<const K*>(fresh),
      /*values=*/nullptr,  // the initializer's rows, drawn by the insert where they go
      pinned_scores(cap, s, true), ek, er, es, status + TierDevice::kStageEvicted, s);
  d.fill_missing(n, found, clock_now(), current, s);
  fast_->assign_scores_at(n, dkeys, ptrs, current, s);  // the hits stayed where they were
  d.post_words(status, TierDevice::kStageWords, s);
  d.record(detail::Mark::kPrefetchEnd, s);
  stage_ = DeviceStage{true, n, cap, set_slots};
  stats_.staged_prefetches += 1;
  clock.lap(phases.lookup_ns);
  clock.total(phases.total_ns);
  return true;
}

template <TableKey K>
void CachedTable<K>::clear_created_on_device(size_t n, const K* keys, size_t created, bool* founds,
                                             StreamHandle stream) {
  using detail::Scratch;
  detail::TierDevice& d = *device_;
  const auto* unique = static_cast<const uint64_t*>(
      d.scratch(Scratch::kDeferNew, created * sizeof(uint64_t), stream));
  const auto* set =
      static_cast<const uint64_t*>(d.scratch(Scratch::kDeferSet, created_set_slots_ * 16, stream));
  d.clear_flags_of_staged(n, reinterpret_cast<const uint64_t*>(keys), unique, created, set,
                          created_set_slots_, founds, stream);
}

template <TableKey K>
void CachedTable<K>::settle_prefetch(StreamHandle stream) {
  using detail::Scratch;
  using detail::TierDevice;
  if (!stage_.active) return;
  constexpr uint64_t kPinnedBelowHeld = ~0ull - 1;
  const DeviceStage st = stage_;
  stage_.active = false;
  TierDevice& d = *device_;
  const StreamHandle s = d.side_stream();
  CachingPhaseTimes& phases = stats_.phases;
  detail::PhaseClock clock;
  d.wait(stream, detail::Mark::kPrefetchEnd);  // the caller's work comes after it
  uint64_t w[TierDevice::kStageWords] = {};
  d.take_words(w, TierDevice::kStageWords);  // waits for the prefetch (done by now, usually)
  const uint64_t u = w[TierDevice::kStageDistinct];
  const uint64_t evicted = w[TierDevice::kStageEvicted];
  if (w[TierDevice::kStageInsert] != u) {  // nothing went in: the next call finds the misses
    trusted_ = false;
    stats_.staged_fallbacks += 1;
    if (w[TierDevice::kStageWhy] & TierDevice::kOverCap)
      stage_cap_ = std::max<size_t>(stage_cap_ * 2, u + u / 2);
    if (w[TierDevice::kStageWhy] & (TierDevice::kMaybeBelow | TierDevice::kReservedMissed))
      stage_backoff_ = 16;
    clock.lap(phases.misses_ns);
    return;
  }
  stats_.lookups += u;
  stats_.new_rows += u;
  stats_.filtered += u;
  stats_.prefetched += u;
  created_on_device_ = u;
  created_set_slots_ = st.set_slots;
  if (evicted > 0) {
    // What left goes down (the filter learns it first); a key of the batch that left (pinned)
    // takes its real score, the one the prefetch gave back to the batch.
    const auto* ek = static_cast<const K*>(d.scratch(Scratch::kDeferEvictedKeys, st.cap * 8, s));
    const auto* er =
        static_cast<const float*>(d.scratch(Scratch::kDeferEvictedRows, st.cap * dim_ * 4, s));
    const auto* es =
        static_cast<const uint64_t*>(d.scratch(Scratch::kDeferEvictedScores, st.cap * 8, s));
    if (caching_.private_store) d.filter_add(evicted, reinterpret_cast<const uint64_t*>(ek), s);
    std::vector<K> ev_keys(evicted);
    float* ev_rows = d.host_rows(detail::HostRows::kEvicted, evicted * dim_);
    std::vector<uint64_t> ev_scores(evicted);
    d.download_parts({{ev_keys.data(), ek, evicted * sizeof(K)},
                      {ev_rows, er, evicted * dim_ * sizeof(float)},
                      {ev_scores.data(), es, evicted * sizeof(uint64_t)}},
                     s);
    std::vector<K> own;
    std::vector<size_t> own_at;
    for (size_t e = 0; e < evicted; ++e) {
      if (ev_scores[e] < kPinnedBelowHeld) continue;
      own.push_back(ev_keys[e]);
      own_at.push_back(e);
    }
    if (!own.empty()) {  // refused or pushed out by the batch's own keys: not all up
      trusted_ = false;
      stats_.prefetch_refused += own.size();
      const auto* dkeys = static_cast<const K*>(d.scratch(Scratch::kDeferKeys, st.n * 8, s));
      const auto* current =
          static_cast<const uint64_t*>(d.scratch(Scratch::kDeferCurrent, st.n * 8, s));
      std::vector<uint64_t> real(own.size());
      gather_scores(d, last_positions(d, st.n, dkeys, own, s), current, clock_now(), real, s);
      for (size_t o = 0; o < own.size(); ++o) ev_scores[own_at[o]] = real[o];
    }
    std::vector<uint64_t> put_keys(evicted);
    for (size_t e = 0; e < evicted; ++e) {
      put_keys[e] = key_bits(ev_keys[e]);
      if (!shadowed_.empty()) shadowed_.erase(put_keys[e]);
    }
    stats_.evictions_written += evicted;
    clock.lap(phases.evicted_ns);
    write_down(put_keys, ev_rows, ev_scores, {}, false);
    clock.lap(phases.write_down_ns);
  }
}

// The members defined here, for both key types (the rest: cached_table.cpp).
template const uint64_t* CachedTable<int64_t>::pinned_scores(size_t, StreamHandle, bool);
template void CachedTable<int64_t>::hold(size_t, const int64_t*, const uint64_t*, StreamHandle);
template void CachedTable<int64_t>::settle(StreamHandle);
template bool CachedTable<int64_t>::prefetch_on_device(size_t, const int64_t*, StreamHandle);
template void CachedTable<int64_t>::settle_prefetch(StreamHandle);
template void CachedTable<int64_t>::clear_created_on_device(size_t, const int64_t*, size_t, bool*,
                                                            StreamHandle);
template bool CachedTable<int64_t>::find_or_insert_new(size_t, const int64_t*, float*, bool*,
                                                       float**, bool, float**, bool*,
                                                       const uint64_t*, uint64_t, size_t,
                                                       const std::vector<uint64_t>&,
                                                       detail::PhaseClock&, StreamHandle);
template void CachedTable<int64_t>::find_or_insert_device(size_t, const int64_t*, float*, bool*,
                                                          const uint64_t*, float**, Miss, bool,
                                                          StreamHandle);
template bool CachedTable<int64_t>::prefetch_device(size_t, const int64_t*, StreamHandle, bool,
                                                    PrefetchFor);
template const uint64_t* CachedTable<uint64_t>::pinned_scores(size_t, StreamHandle, bool);
template void CachedTable<uint64_t>::hold(size_t, const uint64_t*, const uint64_t*, StreamHandle);
template void CachedTable<uint64_t>::settle(StreamHandle);
template bool CachedTable<uint64_t>::prefetch_on_device(size_t, const uint64_t*, StreamHandle);
template void CachedTable<uint64_t>::settle_prefetch(StreamHandle);
template void CachedTable<uint64_t>::clear_created_on_device(size_t, const uint64_t*, size_t, bool*,
                                                             StreamHandle);
template bool CachedTable<uint64_t>::find_or_insert_new(size_t, const uint64_t*, float*, bool*,
                                                        float**, bool, float**, bool*,
                                                        const uint64_t*, uint64_t, size_t,
                                                        const std::vector<uint64_t>&,
                                                        detail::PhaseClock&, StreamHandle);
template void CachedTable<uint64_t>::find_or_insert_device(size_t, const uint64_t*, float*, bool*,
                                                           const uint64_t*, float**, Miss, bool,
                                                           StreamHandle);
template bool CachedTable<uint64_t>::prefetch_device(size_t, const uint64_t*, StreamHandle, bool,
                                                     PrefetchFor);

}  // namespace dynemb::storage

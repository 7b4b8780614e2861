#include "dynemb/storage/cached_table.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <unordered_map>

#include "dynemb/core/initializer.hpp"
#include "dynemb/core/log.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/core/score.hpp"
#include "flat_index.hpp"
#include "phase_clock.hpp"
#include "tier_device.hpp"

namespace dynemb::storage {
namespace {

// `host` in backend memory: the host array itself on the CPU, else a copy in `buffer`.
template <class T>
T* on_backend(Backend backend, int device, T* host, size_t n,
              BackendBuffer<std::remove_const_t<T>>& buffer, bool upload) {
  if (backend == Backend::kCpu) return host;
  buffer = BackendBuffer<std::remove_const_t<T>>(backend, std::max<size_t>(n, 1), device);
  if (upload && n > 0) buffer.upload(host, n);
  return buffer.data();
}

// Copies n elements of backend memory to the host (a no-op when they are the same array).
template <class T>
void to_host(Backend backend, T* host, const T* src, size_t n) {
  if (host != src) copy_from_backend(backend, host, src, n * sizeof(T));
}

// Copies n host elements into backend memory.
template <class T>
void to_backend(Backend backend, T* dst, const T* host, size_t n) {
  if (host != dst) copy_to_backend(backend, dst, host, n * sizeof(T));
}

template <TableKey K>
uint64_t bits(K key) {
  return key_bits(key);
}

// Runs a lower-tier call, adding its time to `wait_ns` and counting a StorageError.
template <class F>
void lower_call(CachingStats& stats, F&& f) {
  const auto start = std::chrono::steady_clock::now();
  try {
    f();
  } catch (const StorageError&) {
    stats.lower_failures += 1;
    stats.lower_wait_ns +=
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count());
    throw;
  }
  stats.lower_wait_ns += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
}

}  // namespace

// What resolve found for each distinct key of a call.
template <TableKey K>
struct CachedTable<K>::Resolved {
  std::vector<uint8_t> in_fast;  // the key is in the fast tier
  std::vector<uint8_t> below;    // not in the fast tier, found below (or pending)
  std::vector<float> rows;       // u x dim: below rows, and fast rows when asked for
  std::vector<uint64_t> scores;  // the stored score where found
};

template <TableKey K>
struct CachedTable<K>::Prefetch {
  std::vector<uint64_t> keys;  // asked below: not in the fast tier nor pending when it began
  std::vector<float> rows;
  std::vector<uint64_t> scores;
  std::unique_ptr<bool[]> found;
  uint64_t wait_ns = 0;
  std::future<void> done;                // the read; holds its StorageError if it failed
  std::unordered_set<uint64_t> changed;  // keys written or erased below since it began
  bool cleared = false;                  // clear() since it began
};

template <TableKey K>
CachedTable<K>::CachedTable(Backend backend, const TableOptions& fast,
                            std::shared_ptr<Storage> lower, const CachingOptions& caching)
    : backend_(backend), dim_(fast.dim), caching_(caching), lower_(std::move(lower)) {
  require(caching.filter_log2_bits >= 10 && caching.filter_log2_bits <= 32, "CachedTable",
          "caching.filter_log2_bits", std::to_string(caching.filter_log2_bits),
          "must be in [10, 32]");
  require(lower_ != nullptr, "CachedTable", "lower", "nullptr", "must be a Storage");
  require(lower_->row_dim() == fast.dim, "CachedTable", "lower->row_dim()",
          std::to_string(lower_->row_dim()),
          "must equal the fast table's dim " + std::to_string(fast.dim));
  options_ = fast;
  TableOptions internal = fast;
  // A refused row goes down and reserved keys are checked here, before the fast table sees
  // them; every score is computed here (by options_.score_policy, as one big table would) and
  // given to the fast table exactly.
  internal.safe_check = SafeCheck::kIgnore;
  internal.score_policy = ScorePolicy::kCustomized;
  // Allocated whole: a fast table that grew would move the rows a step holds by address while
  // a prefetch inserts (docs/storage.md, "Prefetch beside a step").
  internal.init_capacity = internal.max_capacity;
  fast_ = make_table<K>(backend, internal);
  device_ = detail::make_tier_device(backend, fast.device);
  if (caching_.private_store) {
    device_->filter_reset(caching_.filter_log2_bits, nullptr);
    // The store's keys so far (read once): they may be below.
    ScanCursor cursor;
    constexpr size_t kChunk = 4096;
    std::vector<uint64_t> keys(kChunk), scores(kChunk);
    std::vector<float> rows(kChunk * dim_);
    while (!cursor.done()) {
      const size_t got = lower_->scan(cursor, kChunk, keys.data(), rows.data(), scores.data());
      device_->filter_add_host(got, keys.data(), nullptr);
    }
  }
  if (caching_.max_call_keys > 0) reserve_buffers(caching_.max_call_keys);
  growths_at_start_ = device_->growths();
}

template <TableKey K>
void CachedTable<K>::reserve_buffers(size_t n) {
  using detail::Scratch;
  detail::TierDevice& d = *device_;
  const StreamHandle stream = nullptr;
  const size_t rows = n * dim_ * sizeof(float);
  const auto reserve = [&](std::initializer_list<Scratch> slots, size_t bytes) {
    for (const Scratch slot : slots) d.scratch(slot, bytes, stream);
  };
  d.reserve(n, stream);  // its own passes and staging
  // find_or_insert* and prefetch: lookup, misses moved up (commit), evictions, outputs, holds.
  reserve(
      {Scratch::kKeys, Scratch::kScores, Scratch::kCallScores, Scratch::kTouchKeys,
       Scratch::kTouchScores, Scratch::kPointers, Scratch::kEvictedKeys, Scratch::kEvictedScores,
       Scratch::kHeldKeys, Scratch::kHeldScores, Scratch::kCreated, Scratch::kMissPointers},
      n * 8);
  reserve({Scratch::kRows, Scratch::kEvictedRows}, rows);
  reserve({Scratch::kFound, Scratch::kStill}, n);
  pinned_scores(n, stream);
  pinned_scores(n, stream, true);
  d.host_rows(detail::HostRows::kMiss, n * dim_);
  d.host_rows(detail::HostRows::kEvicted, n * dim_);
  if (caching_.private_store && options_.score_policy != ScorePolicy::kLfu) {
    // A call whose misses are all new, and (when on) a prefetch staged on the device, whose
    // staging then holds every key of its batch (it never falls back for room).
    reserve({Scratch::kCallNew}, n * 8);
    reserve({Scratch::kCallStatus}, detail::TierDevice::kStageWords * 8);
    reserve({Scratch::kCallFirst}, n * 4 + 4);
    reserve({Scratch::kCallSet}, detail::staged_set_bytes(n));
    if (caching_.stage_prefetch_on_device) {
      reserve({Scratch::kDeferKeys, Scratch::kDeferPointers, Scratch::kDeferCurrent,
               Scratch::kDeferNew, Scratch::kDeferEvictedKeys, Scratch::kDeferEvictedScores},
              n * 8);
      reserve({Scratch::kDeferEvictedRows}, rows);
      reserve({Scratch::kDeferFound}, n);
      reserve({Scratch::kDeferSet}, detail::staged_set_bytes(n));
      reserve({Scratch::kDeferStatus}, detail::TierDevice::kStageWords * 8);
      stage_cap_ = std::max(stage_cap_, n);
    }
  }
  d.synchronize(stream);  // the pinned scores are filled before any stream uses them
}

template <TableKey K>
CachedTable<K>::~CachedTable() {
  if (prefetch_ && prefetch_->done.valid()) prefetch_->done.wait();
  try {  // a prefetch left on the device: what it evicted goes down
    settle_prefetch(nullptr);
  } catch (const std::exception& e) {
    warn(std::string("CachedTable: rows a prefetch evicted could not be written down: ") +
         e.what());
  }
}

template <TableKey K>
std::vector<K> CachedTable<K>::download_keys(size_t n, const K* keys) const {
  std::vector<K> out(n);
  if (backend_ != Backend::kCpu) backend_synchronize(backend_);
  to_host(backend_, out.data(), keys, n);
  return out;
}

template <TableKey K>
uint64_t CachedTable<K>::clock_now() const {
  if (options_.score_policy == ScorePolicy::kTimestamp) {
    const auto now = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count());
    clock_.store(now);
    return now;
  }
  return clock_.load();
}

namespace {

// Keys of a batch that may be stored: ERROR mode throws on a reserved key (before anything
// changes); WARNING / IGNORE skip it (usable[i] = false).
template <TableKey K>
std::vector<uint8_t> usable_keys(const std::vector<K>& keys, SafeCheck mode, const char* where) {
  std::vector<uint8_t> usable(keys.size(), 1);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!is_reserved_key(keys[i])) continue;
    require(mode != SafeCheck::kError, where, ("keys[" + std::to_string(i) + "]").c_str(),
            std::to_string(key_bits(keys[i])), "is a reserved key (>= 0xFFFFFFFFFFFFFFF0)");
    usable[i] = 0;
  }
  return usable;
}

// A batch on the host: its keys, which of them may be stored, the distinct usable keys in
// first-seen order, and each entry's index among them (or -1).
template <TableKey K>
struct HostBatch {
  std::vector<K> keys;
  std::vector<uint8_t> usable;
  std::vector<K> unique;
  std::vector<int64_t> index;
};

// Checks a downloaded batch's keys (usable_keys) and finds its distinct usable keys.
template <TableKey K>
HostBatch<K> host_batch(std::vector<K> keys, SafeCheck mode, const char* where) {
  HostBatch<K> b;
  b.usable = usable_keys(keys, mode, where);
  std::unordered_map<K, int64_t> seen;
  seen.reserve(keys.size() * 2);
  b.index.assign(keys.size(), -1);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!b.usable[i]) continue;
    auto [it, fresh] = seen.try_emplace(keys[i], static_cast<int64_t>(b.unique.size()));
    if (fresh) b.unique.push_back(keys[i]);
    b.index[i] = it->second;
  }
  b.keys = std::move(keys);
  return b;
}

}  // namespace

template <TableKey K>
void CachedTable<K>::note_below(const std::vector<uint64_t>& keys) {
  if (!prefetch_) return;
  prefetch_->changed.insert(keys.begin(), keys.end());
}

template <TableKey K>
void CachedTable<K>::prefetch_async(size_t n, const K* keys, StreamHandle) {
  if (n == 0) return;
  require(keys != nullptr, "CachedTable::prefetch_async", "keys", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  std::lock_guard lock(mutex_);
  settle_prefetch(nullptr);
  trusted_ = false;
  install_prefetched(true);
  auto [hk, usable, unique, index] =
      host_batch(download_keys(n, keys), options_.safe_check, "CachedTable::prefetch_async");
  const size_t u = unique.size();
  std::unique_ptr<bool[]> in_fast(new bool[u]);
  BackendBuffer<K> kb;
  BackendBuffer<bool> fb;
  bool* dfound = on_backend(backend_, options_.device, in_fast.get(), u, fb, false);
  fast_->contains(u, on_backend(backend_, options_.device, unique.data(), u, kb, true), dfound);
  to_host(backend_, in_fast.get(), dfound, u);
  auto p = std::make_unique<Prefetch>();
  for (size_t j = 0; j < u; ++j) {
    if (!in_fast[j] && !pending_.count(bits(unique[j]))) p->keys.push_back(bits(unique[j]));
  }
  if (p->keys.empty()) return;
  p->rows.resize(p->keys.size() * dim_);
  p->scores.resize(p->keys.size());
  p->found.reset(new bool[p->keys.size()]);
  Prefetch* raw = p.get();
  std::shared_ptr<Storage> lower = lower_;
  p->done = std::async(std::launch::async, [raw, lower] {
    const auto start = std::chrono::steady_clock::now();
    lower->find(raw->keys.size(), raw->keys.data(), raw->rows.data(), raw->scores.data(),
                raw->found.get());
    raw->wait_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now() - start)
                                             .count());
  });
  prefetch_ = std::move(p);
}

template <TableKey K>
void CachedTable<K>::wait_prefetch() {
  std::lock_guard lock(mutex_);
  settle_prefetch(nullptr);
  install_prefetched(true);
}

template <TableKey K>
void CachedTable<K>::install_prefetched(bool wait) {
  if (!prefetch_) return;
  if (!wait && prefetch_->done.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
    return;
  std::unique_ptr<Prefetch> p = std::move(prefetch_);
  try {
    p->done.get();
  } catch (const StorageError&) {
    stats_.lower_failures += 1;  // a prefetch is an optimization: the rows are read when needed
    return;
  }
  if (p->cleared) return;
  // Keys that moved up meanwhile, or whose row below changed, stay as they are.
  std::vector<K> candidates;
  std::vector<size_t> at;
  for (size_t i = 0; i < p->keys.size(); ++i) {
    if (!p->found[i] || p->changed.count(p->keys[i]) || pending_.count(p->keys[i])) continue;
    candidates.push_back(static_cast<K>(p->keys[i]));
    at.push_back(i);
  }
  const size_t c = candidates.size();
  if (c == 0) return;
  std::unique_ptr<bool[]> in_fast(new bool[c]);
  BackendBuffer<K> kb;
  BackendBuffer<bool> fb;
  bool* dfound = on_backend(backend_, options_.device, in_fast.get(), c, fb, false);
  fast_->contains(c, on_backend(backend_, options_.device, candidates.data(), c, kb, true), dfound);
  to_host(backend_, in_fast.get(), dfound, c);
  std::vector<K> up;
  std::vector<float> rows;
  std::vector<uint64_t> scores;
  for (size_t k = 0; k < c; ++k) {
    if (in_fast[k]) continue;
    const size_t i = at[k];
    up.push_back(candidates[k]);
    rows.insert(rows.end(), p->rows.begin() + i * dim_, p->rows.begin() + (i + 1) * dim_);
    scores.push_back(p->scores[i]);
  }
  stats_.lower_wait_ns += p->wait_ns;
  stats_.lookups += p->keys.size();
  stats_.lower_hits += up.size();
  if (up.empty()) return;
  device_->wait(device_->side_stream(), detail::Mark::kCallEnd);
  commit(up, rows.data(), scores, {}, {}, up, nullptr, device_->side_stream(), true);
  device_->synchronize(device_->side_stream());
  stats_.prefetched += up.size();
}

template <TableKey K>
void CachedTable<K>::drain_pending() {
  if (pending_.empty()) return;
  std::vector<uint64_t> put_keys, put_scores, erase_keys;
  std::vector<float> put_rows;
  for (const auto& [key, p] : pending_) {
    if (p.erased) {
      erase_keys.push_back(key);
    } else {
      put_keys.push_back(key);
      put_scores.push_back(p.score);
      put_rows.insert(put_rows.end(), p.row.begin(), p.row.end());
    }
  }
  lower_call(stats_, [&] {
    lower_->write(put_keys.size(), put_keys.data(), put_rows.data(), put_scores.data(),
                  erase_keys.size(), erase_keys.data());
  });
  stats_.rows_down += put_keys.size();
  stats_.bytes_down += put_keys.size() * (dim_ * sizeof(float) + sizeof(uint64_t));
  pending_.clear();
}

template <TableKey K>
void CachedTable<K>::write_down(const std::vector<uint64_t>& put_keys, const float* put_rows,
                                const std::vector<uint64_t>& put_scores,
                                const std::vector<uint64_t>& erase_keys, bool flushing) {
  if (put_keys.empty() && erase_keys.empty()) return;
  note_below(put_keys);
  note_below(erase_keys);
  if (pending_.empty()) {
    try {
      lower_call(stats_, [&] {
        lower_->write(put_keys.size(), put_keys.data(), put_rows, put_scores.data(),
                      erase_keys.size(), erase_keys.data());
      });
      stats_.rows_down += put_keys.size();
      stats_.bytes_down += put_keys.size() * (dim_ * sizeof(float) + sizeof(uint64_t));
      return;
    } catch (const StorageError&) {
      if (flushing) throw;  // a flush's rows are still in the fast tier
      // fall through: keep the rows in host memory
    }
  }
  for (const uint64_t key : erase_keys) pending_[key] = Pending{{}, 0, true};
  for (size_t i = 0; i < put_keys.size(); ++i) {
    Pending& p = pending_[put_keys[i]];
    p.row.assign(put_rows + i * dim_, put_rows + (i + 1) * dim_);
    p.score = put_scores[i];
    p.erased = false;
  }
  drain_pending();  // throws StorageError while the lower tier is down; the rows stay pending
}

template <TableKey K>
typename CachedTable<K>::Resolved CachedTable<K>::resolve(const std::vector<K>& unique,
                                                          bool want_fast_rows) {
  const size_t u = unique.size();
  Resolved r;
  r.in_fast.assign(u, 0);
  r.below.assign(u, 0);
  r.rows.assign(u * dim_, 0.0f);
  r.scores.assign(u, 0);
  if (u == 0) return r;
  BackendBuffer<K> kb;
  const K* dkeys = on_backend(backend_, options_.device, unique.data(), u, kb, true);
  std::unique_ptr<bool[]> found(new bool[u]);
  BackendBuffer<bool> fb;
  BackendBuffer<uint64_t> sb;
  bool* dfound = on_backend(backend_, options_.device, found.get(), u, fb, false);
  uint64_t* dscores = on_backend(backend_, options_.device, r.scores.data(), u, sb, false);
  if (want_fast_rows) {
    BackendBuffer<float> vb;
    float* dvalues = on_backend(backend_, options_.device, r.rows.data(), u * dim_, vb, false);
    fast_->find(u, dkeys, dvalues, dfound, dscores);
    to_host(backend_, r.rows.data(), dvalues, u * dim_);
  } else {
    std::vector<float*> ptrs(u);
    BackendBuffer<float*> pb;
    float** dptrs = on_backend(backend_, options_.device, ptrs.data(), u, pb, false);
    fast_->find_pointers(u, dkeys, dptrs, dfound, dscores);
  }
  to_host(backend_, found.get(), dfound, u);
  to_host(backend_, r.scores.data(), dscores, u);
  std::vector<uint64_t> ask;
  std::vector<size_t> ask_at;
  for (size_t j = 0; j < u; ++j) {
    if (found[j]) {
      r.in_fast[j] = 1;
      continue;
    }
    const auto p = pending_.find(bits(unique[j]));
    if (p != pending_.end() && !p->second.erased) {
      r.below[j] = 1;
      r.scores[j] = p->second.score;
      std::copy(p->second.row.begin(), p->second.row.end(), r.rows.begin() + j * dim_);
      continue;
    }
    ask.push_back(bits(unique[j]));
    ask_at.push_back(j);
  }
  if (!ask.empty()) {
    std::vector<float> rows(ask.size() * dim_);
    std::vector<uint64_t> scores(ask.size());
    std::unique_ptr<bool[]> got(new bool[ask.size()]);
    lower_call(stats_, [&] {
      lower_->find(ask.size(), ask.data(), rows.data(), scores.data(), got.get());
    });
    for (size_t a = 0; a < ask.size(); ++a) {
      if (!got[a]) continue;
      const size_t j = ask_at[a];
      r.below[j] = 1;
      r.scores[j] = scores[a];
      std::copy(rows.begin() + a * dim_, rows.begin() + (a + 1) * dim_, r.rows.begin() + j * dim_);
    }
  }
  size_t hits = 0, lower = 0;
  for (size_t j = 0; j < u; ++j) {
    hits += r.in_fast[j];
    lower += r.below[j];
  }
  stats_.lookups += u;
  stats_.hits += hits;
  stats_.misses += u - hits;
  stats_.lower_hits += lower;
  return r;
}

template <TableKey K>
float* CachedTable<K>::read_below(const std::vector<uint64_t>& keys, std::vector<uint8_t>& below,
                                  std::vector<uint64_t>& scores, std::vector<uint32_t>& row_of,
                                  const std::vector<uint8_t>* maybe) {
  const size_t u = keys.size();
  below.assign(u, 0);
  scores.assign(u, 0);
  row_of.resize(u);
  for (size_t j = 0; j < u; ++j) row_of[j] = static_cast<uint32_t>(j);
  const bool filtered =
      maybe != nullptr && std::find(maybe->begin(), maybe->end(), 0) != maybe->end();
  if (pending_.empty() && !filtered) {  // straight into place
    float* rows = device_->host_rows(detail::HostRows::kMiss, std::max<size_t>(u, 1) * dim_);
    std::unique_ptr<bool[]> got(new bool[std::max<size_t>(u, 1)]);
    lower_call(stats_, [&] { lower_->find(u, keys.data(), rows, scores.data(), got.get()); });
    for (size_t j = 0; j < u; ++j) below[j] = got[j];
    return rows;
  }
  std::vector<uint64_t> ask;
  std::vector<size_t> ask_at;
  for (size_t j = 0; j < u; ++j) {
    if (filtered && !(*maybe)[j]) {  // never written below: stored nowhere
      stats_.filtered += 1;
      continue;
    }
    if (!pending_.empty()) {
      const auto p = pending_.find(keys[j]);
      if (p != pending_.end() && !p->second.erased) {
        below[j] = 1;
        scores[j] = p->second.score;
        continue;  // its row is copied in below, once the buffer is sized
      }
    }
    ask.push_back(keys[j]);
    ask_at.push_back(j);
  }
  // u rows in all: the keys asked read into rows [0, asked) (one batch, no copy), each other key
  // (a pending row, or a key stored nowhere) one row after them.
  float* rows = device_->host_rows(detail::HostRows::kMiss, std::max<size_t>(u, 1) * dim_);
  std::vector<uint8_t> asked(u, 0);
  for (size_t a = 0; a < ask.size(); ++a) {
    asked[ask_at[a]] = 1;
    row_of[ask_at[a]] = static_cast<uint32_t>(a);
  }
  size_t next = ask.size();
  for (size_t j = 0; j < u; ++j) {
    if (asked[j]) continue;
    row_of[j] = static_cast<uint32_t>(next++);
    if (!below[j]) continue;
    const Pending& p = pending_.at(keys[j]);
    std::copy(p.row.begin(), p.row.end(), rows + size_t{row_of[j]} * dim_);
  }
  if (ask.empty()) return rows;
  std::vector<uint64_t> got_scores(ask.size());
  std::unique_ptr<bool[]> got(new bool[ask.size()]);
  lower_call(stats_,
             [&] { lower_->find(ask.size(), ask.data(), rows, got_scores.data(), got.get()); });
  for (size_t a = 0; a < ask.size(); ++a) {
    if (!got[a]) continue;
    const size_t j = ask_at[a];
    below[j] = 1;
    scores[j] = got_scores[a];
  }
  return rows;
}

template <TableKey K>
void CachedTable<K>::commit(const std::vector<K>& keys, const float* rows,
                            const std::vector<uint64_t>& scores, const std::vector<K>& touch_keys,
                            const std::vector<uint64_t>& touch_scores,
                            const std::vector<K>& moved_up, std::vector<K>* left_fast,
                            StreamHandle stream, bool below_held, const RealScores* pinned_hits,
                            const std::vector<uint8_t>* initial, bool absent,
                            const std::vector<uint32_t>* rows_at) {
  constexpr uint64_t kPinnedBelowHeld = ~0ull - 1;
  // The call's keys are pinned (highest score) while its rows go in, so the fast tier's
  // policy picks its victims among the other keys; then every key gets its real score.
  // Every buffer is the device side's scratch: copies are staged and ordered on `stream`.
  using detail::Scratch;
  detail::TierDevice& d = *device_;
  detail::PhaseClock clock;
  const size_t t = touch_keys.size();
  const size_t m = keys.size();
  K* dtouch = nullptr;
  if (t > 0) {
    dtouch = static_cast<K*>(d.scratch(Scratch::kTouchKeys, t * sizeof(K), stream));
    d.upload(dtouch, touch_keys.data(), t * sizeof(K), stream);
    fast_->assign_scores(t, dtouch, pinned_scores(t, stream, below_held), stream);
  }
  std::vector<K> ev_keys(m);
  float* ev_rows = d.host_rows(detail::HostRows::kEvicted, std::max<size_t>(m, 1) * dim_);
  std::vector<uint64_t> ev_scores(m);
  size_t evicted = 0;
  detail::FlatIndex index(0);      // the call's keys (built when some of them left: see below)
  std::vector<uint8_t> left_flag;  // per index: the key left the fast tier
  size_t pinned_left = 0;          // keys the caller pinned (its hits) that left
  if (m > 0) {
    const uint64_t* dpinned = pinned_scores(m, stream, below_held);
    auto* dkeys = static_cast<K*>(d.scratch(Scratch::kKeys, m * sizeof(K), stream));
    auto* drows = static_cast<float*>(d.scratch(Scratch::kRows, m * dim_ * sizeof(float), stream));
    auto* dscores =
        static_cast<uint64_t*>(d.scratch(Scratch::kScores, m * sizeof(uint64_t), stream));
    auto* dek = static_cast<K*>(d.scratch(Scratch::kEvictedKeys, m * sizeof(K), stream));
    auto* dev =
        static_cast<float*>(d.scratch(Scratch::kEvictedRows, m * dim_ * sizeof(float), stream));
    auto* des =
        static_cast<uint64_t*>(d.scratch(Scratch::kEvictedScores, m * sizeof(uint64_t), stream));
    d.upload(dkeys, keys.data(), m * sizeof(K), stream);
    // Rows drawn on the device at the end of the list are not uploaded.
    size_t upload = m;
    while (initial != nullptr && upload > 0 && (*initial)[upload - 1]) --upload;
    if (rows_at != nullptr) {  // the rows read where they are (no compaction on the host)
      require(rows_at->size() == upload, "CachedTable::commit", "rows_at->size()",
              std::to_string(rows_at->size()), "must equal the rows not drawn on the device");
      d.gather_host_rows(upload, rows_at->data(), rows, dim_, drows, stream);
    } else {
      d.upload(drows, rows, upload * dim_ * sizeof(float), stream);
    }
    if (initial != nullptr) {  // new rows drawn where they go, not on the host
      // The new rows at the end are drawn from the keys already up; any others by index.
      d.initial_rows_from(upload, m, reinterpret_cast<const uint64_t*>(dkeys), options_.initializer,
                          dim_, drows, stream);
      std::vector<uint32_t> at;
      std::vector<uint64_t> new_keys;
      for (size_t i = 0; i < upload; ++i) {
        if (!(*initial)[i]) continue;
        at.push_back(static_cast<uint32_t>(i));
        new_keys.push_back(bits(keys[i]));
      }
      d.initial_rows(at.size(), at.data(), new_keys.data(), options_.initializer, dim_, drows,
                     stream);
    }
    d.upload(dscores, scores.data(), m * sizeof(uint64_t), stream);
    if (!absent)  // pins the call's keys already in the fast tier
      fast_->assign_scores(m, dkeys, dpinned, stream);
    evicted = fast_->insert_and_evict(m, dkeys, drows, dpinned, dek, dev, des, stream);
    clock.lap(stats_.phases.insert_ns);
    // What leaves may be below from now on (a private store's filter).
    if (caching_.private_store)
      d.filter_add(evicted, reinterpret_cast<const uint64_t*>(dek), stream);
    fast_->assign_scores(m, dkeys, dscores, stream);
    // An entry evicted and then stored again by the same call (its old row) has not left: which
    // are still in comes back with the evictions (one wait). Keys that were all absent cannot be
    // (a key's only insert is its own, and what it pushes out leaves).
    std::unique_ptr<bool[]> still(new bool[std::max<size_t>(evicted, 1)]);
    std::fill(still.get(), still.get() + evicted, false);
    bool* dstill = nullptr;
    if (evicted > 0 && !absent) {
      dstill = static_cast<bool*>(d.scratch(Scratch::kStill, evicted, stream));
      fast_->contains(evicted, dek, dstill, stream);
    }
    d.download_parts({{ev_keys.data(), dek, evicted * sizeof(K)},
                      {ev_rows, dev, evicted * dim_ * sizeof(float)},
                      {ev_scores.data(), des, evicted * sizeof(uint64_t)},
                      {still.get(), dstill, dstill != nullptr ? evicted : 0}},
                     stream);
    if (evicted > 0 && dstill != nullptr) {
      size_t kept = 0;
      for (size_t e = 0; e < evicted; ++e) {
        if (still[e]) continue;
        ev_keys[kept] = ev_keys[e];
        ev_scores[kept] = ev_scores[e];
        if (kept != e)
          std::copy(ev_rows + e * dim_, ev_rows + (e + 1) * dim_, ev_rows + kept * dim_);
        ++kept;
      }
      evicted = kept;
    }
    // One index of the call's keys (keys[i]: i, touch_keys[i]: m + i) sorts out what left:
    // a key of this call can leave twice (its old row pushed out by an earlier key of the call,
    // then its new row pushed out or refused): it goes down once, with the call's row; a key of
    // the call refused (a bucket full of the call's own keys) carries the pinned score: it goes
    // down with its real one; keys the caller pinned outside this commit (a call's hits) too.
    // Every one of these left with a pinned score (the call's keys went in pinned, the touched
    // and the caller's were pinned before): without such an eviction (the usual case) there is
    // nothing to sort out and no index to build.
    const bool pinned_left_fast =
        std::any_of(ev_scores.begin(), ev_scores.begin() + evicted,
                    [&](uint64_t score) { return score >= kPinnedBelowHeld; });
    if (pinned_left_fast) {
      index = detail::FlatIndex(m + t);
      for (size_t i = 0; i < m; ++i) index.emplace(bits(keys[i]), static_cast<uint32_t>(i));
      for (size_t i = 0; i < t; ++i)
        index.emplace(bits(touch_keys[i]), static_cast<uint32_t>(m + i));
      left_flag.assign(m + t, 0);
    }
    std::vector<K> other;
    std::vector<size_t> other_at;
    std::vector<float> drawn(dim_);
    size_t kept = 0;
    for (size_t e = 0; e < evicted && pinned_left_fast; ++e) {
      const uint32_t at = index.find(bits(ev_keys[e]));
      const float* src = ev_rows + e * dim_;
      uint64_t score = ev_scores[e];
      if (at != detail::FlatIndex::kAbsent) {
        if (left_flag[at]) continue;  // its second leaving: sent once
        left_flag[at] = 1;
        if (at < m) {
          if (left_fast != nullptr) left_fast->push_back(keys[at]);
          src = rows +
                size_t{rows_at != nullptr && at < rows_at->size() ? (*rows_at)[at] : at} * dim_;
          if (initial != nullptr && (*initial)[at]) {  // drawn on the device: again here
            fill_initial_row(options_.initializer, bits(keys[at]), drawn.data(), dim_);
            src = drawn.data();
          }
          score = scores[at];
        } else {
          score = touch_scores[at - m];
        }
      } else if (pinned_hits != nullptr && score >= kPinnedBelowHeld) {
        other.push_back(ev_keys[e]);
        other_at.push_back(kept);
      }
      ev_keys[kept] = ev_keys[e];
      ev_scores[kept] = score;
      float* dst = ev_rows + kept * dim_;
      if (src != dst) std::copy(src, src + dim_, dst);  // kept <= e: never overlapping ahead
      ++kept;
    }
    if (pinned_left_fast) evicted = kept;
    pinned_left = other.size();
    if (!other.empty()) {
      std::vector<uint64_t> other_scores(other.size());
      (*pinned_hits)(other, other_scores);
      for (size_t o = 0; o < other.size(); ++o) ev_scores[other_at[o]] = other_scores[o];
    }
  }
  if (t > 0) {
    auto* dts =
        static_cast<uint64_t*>(d.scratch(Scratch::kTouchScores, t * sizeof(uint64_t), stream));
    d.upload(dts, touch_scores.data(), t * sizeof(uint64_t), stream);
    fast_->assign_scores(t, dtouch, dts, stream);
  }
  std::vector<uint64_t> put_keys(evicted), erase_keys;
  for (size_t e = 0; e < evicted; ++e) {
    put_keys[e] = bits(ev_keys[e]);
    if (!shadowed_.empty()) shadowed_.erase(put_keys[e]);
  }
  // Rows moved up leave the lower tier, unless they went straight back down.
  const auto left = [&](K key) {
    if (left_flag.empty()) return false;  // nothing of the call left (no index built)
    const uint32_t at = index.find(bits(key));
    return at != detail::FlatIndex::kAbsent && left_flag[at];
  };
  for (const K key : moved_up)
    if (!left(key)) erase_keys.push_back(bits(key));
  if (evicted > 0) {
    // The call's keys that left, and the hits its caller pinned that left (pinned_left).
    const size_t own =
        static_cast<size_t>(std::count(left_flag.begin(), left_flag.end(), 1)) + pinned_left;
    (below_held ? stats_.prefetch_refused : stats_.batch_evicted) += own;
  }
  stats_.rows_up += moved_up.size();
  stats_.bytes_up += moved_up.size() * (dim_ * sizeof(float) + sizeof(uint64_t));
  stats_.evictions_written += evicted;
  ev_scores.resize(evicted);
  clock.lap(m > 0 ? stats_.phases.evicted_ns : stats_.phases.insert_ns);
  write_down(put_keys, ev_rows, ev_scores, erase_keys, false);
  clock.lap(stats_.phases.write_down_ns);
}

// --- reads ------------------------------------------------------------------------------------

template <TableKey K>
void CachedTable<K>::find(size_t n, const K* keys, float* values, bool* founds, uint64_t* scores,
                          StreamHandle) {
  if (n == 0) return;
  require(keys && values && founds, "CachedTable::find", "keys / values / founds", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  std::lock_guard lock(mutex_);
  settle(nullptr);
  auto [hk, usable, unique, index] =
      host_batch(download_keys(n, keys), options_.safe_check, "CachedTable::find");
  const Resolved r = resolve(unique, true);
  std::vector<float> hv(n * dim_);
  std::vector<uint64_t> hs(n);
  std::unique_ptr<bool[]> hf(new bool[n]);
  to_host(backend_, hv.data(), values, n * dim_);  // missing keys' rows stay as they were
  if (scores != nullptr) to_host(backend_, hs.data(), scores, n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t j = index[i];
    hf[i] = j >= 0 && (r.in_fast[j] || r.below[j]);
    if (!hf[i]) continue;
    std::copy(r.rows.begin() + j * dim_, r.rows.begin() + (j + 1) * dim_, hv.begin() + i * dim_);
    hs[i] = r.scores[j];
  }
  to_backend(backend_, values, hv.data(), n * dim_);
  to_backend(backend_, founds, hf.get(), n);
  if (scores != nullptr) to_backend(backend_, scores, hs.data(), n);
}

template <TableKey K>
size_t CachedTable<K>::find_with_misses(size_t n, const K* keys, float* values, K* missed_keys,
                                        uint64_t* missed_indices, uint64_t* scores,
                                        StreamHandle stream) {
  if (n == 0) return 0;
  require(missed_keys && missed_indices, "CachedTable::find_with_misses",
          "missed_keys / missed_indices", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  std::lock_guard lock(mutex_);
  settle(nullptr);
  BackendBuffer<bool> fb(backend_, n, options_.device);
  find(n, keys, values, fb.data(), scores, stream);
  std::unique_ptr<bool[]> hf(new bool[n]);
  to_host(backend_, hf.get(), fb.data(), n);
  const std::vector<K> hk = download_keys(n, keys);
  std::vector<K> mk;
  std::vector<uint64_t> mi;
  for (size_t i = 0; i < n; ++i) {
    if (hf[i]) continue;
    mk.push_back(hk[i]);
    mi.push_back(i);
  }
  to_backend(backend_, missed_keys, mk.data(), mk.size());
  to_backend(backend_, missed_indices, mi.data(), mi.size());
  return mk.size();
}

template <TableKey K>
void CachedTable<K>::contains(size_t n, const K* keys, bool* founds, StreamHandle) {
  if (n == 0) return;
  require(keys && founds, "CachedTable::contains", "keys / founds", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  std::lock_guard lock(mutex_);
  settle(nullptr);
  auto [hk, usable, unique, index] =
      host_batch(download_keys(n, keys), options_.safe_check, "CachedTable::contains");
  const Resolved r = resolve(unique, false);
  std::unique_ptr<bool[]> hf(new bool[n]);
  for (size_t i = 0; i < n; ++i)
    hf[i] = index[i] >= 0 && (r.in_fast[index[i]] || r.below[index[i]]);
  to_backend(backend_, founds, hf.get(), n);
}

template <TableKey K>
void CachedTable<K>::prefetch(size_t n, const K* keys, StreamHandle stream, bool create) {
  if (n == 0) return;
  require(keys != nullptr, "CachedTable::prefetch", "keys", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  std::lock_guard lock(mutex_);
  trusted_ = false;  // it may move out what a prefetch_step brought up
  if (options_.score_policy != ScorePolicy::kLfu) {
    prefetch_device(n, keys, stream, create, PrefetchFor::kCaller);
    return;
  }
  settle(stream);
  stats_.prefetched += move_up(n, keys, stream);
}

template <TableKey K>
void CachedTable<K>::prefetch_step(size_t n, const K* keys, StreamHandle stream) {
  if (n == 0) return;
  require(keys != nullptr, "CachedTable::prefetch_step", "keys", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  std::lock_guard lock(mutex_);
  if (options_.score_policy == ScorePolicy::kLfu) {  // the host path: no trust
    settle(stream);
    stats_.prefetched += move_up(n, keys, stream);
    return;
  }
  settle_prefetch(stream);
  // Left on the device when it can be (a private store); its next call settles it.
  if (prefetch_on_device(n, keys, stream)) {
    trusted_ = true;
    return;
  }
  trusted_ = prefetch_device(n, keys, stream, true, PrefetchFor::kCaller);
}

template <TableKey K>
size_t CachedTable<K>::move_up(size_t n, const K* keys, StreamHandle stream) {
  auto [hk, usable, unique, index] =
      host_batch(download_keys(n, keys), options_.safe_check, "CachedTable::prefetch");
  drain_pending();
  install_prefetched(false);
  const Resolved r = resolve(unique, false);
  std::vector<K> up, hits;
  std::vector<float> rows;
  std::vector<uint64_t> scores, hit_scores;
  for (size_t j = 0; j < unique.size(); ++j) {
    if (r.in_fast[j]) {  // pinned while the others come up, then given their score back
      hits.push_back(unique[j]);
      hit_scores.push_back(r.scores[j]);
    }
    if (!r.below[j]) continue;
    up.push_back(unique[j]);
    rows.insert(rows.end(), r.rows.begin() + j * dim_, r.rows.begin() + (j + 1) * dim_);
    scores.push_back(r.scores[j]);
  }
  if (up.empty()) return 0;
  commit(up, rows.data(), scores, hits, hit_scores, up, nullptr, stream);
  return up.size();
}

template <TableKey K>
void CachedTable<K>::find_pointers(size_t n, const K* keys, float** rows, bool* founds,
                                   uint64_t* scores, StreamHandle stream) {
  if (n == 0) return;
  require(keys && rows, "CachedTable::find_pointers", "keys / rows", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  std::lock_guard lock(mutex_);
  settle(stream);
  // Rows found below move up with their scores (the contents are unchanged), then one lookup.
  if (options_.score_policy != ScorePolicy::kLfu) {
    prefetch_device(n, keys, stream, false, PrefetchFor::kRead);
  } else {
    move_up(n, keys, stream);
  }
  fast_->find_pointers(n, keys, rows, founds, scores, stream);
  device_->record(detail::Mark::kCallEnd, stream);
}

// --- writes -----------------------------------------------------------------------------------

template <TableKey K>
void CachedTable<K>::find_or_insert_impl(size_t n, const K* keys, float* values, bool* founds,
                                         const uint64_t* scores, float** rows, Miss miss,
                                         bool copy_out, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  if (options_.score_policy != ScorePolicy::kLfu) {  // LFU's scores need the stored ones
    find_or_insert_device(n, keys, values, founds, scores, rows, miss, copy_out, stream);
    return;
  }
  const TableOptions& o = options_;
  auto [hk, usable, unique, index] =
      host_batch(download_keys(n, keys), o.safe_check, "CachedTable::find_or_insert");
  std::vector<uint64_t> given;
  if (scores != nullptr) {
    given.resize(n);
    to_host(backend_, given.data(), scores, n);
  }
  std::vector<float> hv;
  if (miss == Miss::kGiven || copy_out) {
    hv.resize(n * dim_);
    if (miss == Miss::kGiven) to_host(backend_, hv.data(), values, n * dim_);
  }
  drain_pending();
  install_prefetched(false);
  Resolved r = resolve(unique, copy_out);
  const size_t u = unique.size();
  // Apply the batch in order on the host: existence, scores, new rows.
  std::vector<uint8_t> exists(u), fresh(u, 0);
  std::vector<uint64_t> score(u);
  for (size_t j = 0; j < u; ++j) {
    exists[j] = r.in_fast[j] || r.below[j];
    score[j] = r.scores[j];
  }
  const uint64_t now = clock_now();
  std::unique_ptr<bool[]> hf(new bool[n]);
  for (size_t i = 0; i < n; ++i) {
    const int64_t j = index[i];
    if (j < 0) {
      hf[i] = false;
      continue;
    }
    hf[i] = exists[j];
    if (!exists[j]) {
      fresh[j] = 1;
      exists[j] = 1;
      float* row = r.rows.data() + j * dim_;
      if (miss == Miss::kGiven) {
        std::copy(hv.begin() + i * dim_, hv.begin() + (i + 1) * dim_, row);
      } else {
        fill_initial_row(o.initializer, bits(hk[i]), row, dim_);
      }
    }
    score[j] = next_score(o.score_policy, hf[i], score[j], scores != nullptr,
                          scores != nullptr ? given[i] : 0, now);
  }
  std::vector<K> change_keys, touch_keys, up;
  std::vector<float> change_rows;
  std::vector<uint64_t> change_scores, touch_scores;
  for (size_t j = 0; j < u; ++j) {
    if (r.in_fast[j]) {
      touch_keys.push_back(unique[j]);
      touch_scores.push_back(score[j]);
      continue;
    }
    change_keys.push_back(unique[j]);
    change_rows.insert(change_rows.end(), r.rows.begin() + j * dim_,
                       r.rows.begin() + (j + 1) * dim_);
    change_scores.push_back(score[j]);
    if (r.below[j]) up.push_back(unique[j]);
    stats_.new_rows += fresh[j];
  }
  commit(change_keys, change_rows.data(), change_scores, touch_keys, touch_scores, up, nullptr,
         stream);
  if (copy_out) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t j = index[i];
      if (j < 0) continue;  // a skipped reserved key's row stays as given
      std::copy(r.rows.begin() + j * dim_, r.rows.begin() + (j + 1) * dim_, hv.begin() + i * dim_);
    }
    to_backend(backend_, values, hv.data(), n * dim_);
  }
  if (founds != nullptr) to_backend(backend_, founds, hf.get(), n);
  // On the caller's stream, so its next kernels see the addresses.
  if (rows != nullptr) fast_->find_pointers(n, keys, rows, nullptr, nullptr, stream);
}

template <TableKey K>
void CachedTable<K>::find_or_insert(size_t n, const K* keys, float* values, bool* founds,
                                    const uint64_t* scores, StreamHandle stream) {
  if (n == 0) return;
  require(keys && values, "CachedTable::find_or_insert", "keys / values", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  find_or_insert_impl(n, keys, values, founds, scores, nullptr, Miss::kInitialize, true, stream);
}

template <TableKey K>
void CachedTable<K>::find_or_insert_given(size_t n, const K* keys, float* values, bool* founds,
                                          const uint64_t* scores, StreamHandle stream) {
  if (n == 0) return;
  require(keys && values, "CachedTable::find_or_insert_given", "keys / values", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  find_or_insert_impl(n, keys, values, founds, scores, nullptr, Miss::kGiven, true, stream);
}

template <TableKey K>
void CachedTable<K>::find_or_insert_pointers(size_t n, const K* keys, float** rows, bool* founds,
                                             const uint64_t* scores, StreamHandle stream) {
  if (n == 0) return;
  require(keys && rows, "CachedTable::find_or_insert_pointers", "keys / rows", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  find_or_insert_impl(n, keys, nullptr, founds, scores, rows, Miss::kInitialize, false, stream);
}

template <TableKey K>
void CachedTable<K>::write_rows_impl(size_t n, const K* keys, const float* values,
                                     const uint64_t* scores, bool insert_missing, bool accumulate) {
  std::lock_guard lock(mutex_);
  settle(nullptr);
  const TableOptions& o = options_;
  auto [hk, usable, unique, index] =
      host_batch(download_keys(n, keys), o.safe_check, "CachedTable::write");
  std::vector<float> hv(n * dim_);
  to_host(backend_, hv.data(), values, n * dim_);
  std::vector<uint64_t> given;
  if (scores != nullptr) {
    given.resize(n);
    to_host(backend_, given.data(), scores, n);
  }
  drain_pending();
  install_prefetched(false);
  Resolved r = resolve(unique, accumulate);
  const size_t u = unique.size();
  std::vector<uint8_t> exists(u), touched(u, 0);
  std::vector<uint64_t> score(u);
  for (size_t j = 0; j < u; ++j) {
    exists[j] = r.in_fast[j] || r.below[j];
    score[j] = r.scores[j];
  }
  const uint64_t now = clock_now();
  for (size_t i = 0; i < n; ++i) {
    const int64_t j = index[i];
    if (j < 0 || (!exists[j] && !insert_missing)) continue;
    float* row = r.rows.data() + j * dim_;
    const float* v = hv.data() + i * dim_;
    if (accumulate && exists[j]) {
      for (uint32_t c = 0; c < dim_; ++c) row[c] += v[c];
    } else {
      std::copy(v, v + dim_, row);
    }
    score[j] = next_score(o.score_policy, exists[j], score[j], scores != nullptr,
                          scores != nullptr ? given[i] : 0, now);
    if (!exists[j]) stats_.new_rows += 1;
    exists[j] = 1;
    touched[j] = 1;
  }
  std::vector<K> change_keys, up;
  std::vector<float> change_rows;
  std::vector<uint64_t> change_scores;
  for (size_t j = 0; j < u; ++j) {
    if (!touched[j]) continue;
    change_keys.push_back(unique[j]);
    change_rows.insert(change_rows.end(), r.rows.begin() + j * dim_,
                       r.rows.begin() + (j + 1) * dim_);
    change_scores.push_back(score[j]);
    if (r.below[j]) up.push_back(unique[j]);
  }
  commit(change_keys, change_rows.data(), change_scores, {}, {}, up, nullptr, nullptr);
}

template <TableKey K>
void CachedTable<K>::insert_or_assign(size_t n, const K* keys, const float* values,
                                      const uint64_t* scores, StreamHandle) {
  if (n == 0) return;
  require(keys && values, "CachedTable::insert_or_assign", "keys / values", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  write_rows_impl(n, keys, values, scores, true, false);
}

template <TableKey K>
size_t CachedTable<K>::insert_and_evict(size_t n, const K* keys, const float* values,
                                        const uint64_t* scores, K* evicted_keys, float*, uint64_t*,
                                        StreamHandle) {
  if (n == 0) return 0;
  require(keys && values && evicted_keys, "CachedTable::insert_and_evict",
          "keys / values / evicted_keys", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  write_rows_impl(n, keys, values, scores, true, false);
  return 0;
}

template <TableKey K>
void CachedTable<K>::assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
                            StreamHandle) {
  if (n == 0) return;
  require(keys && values, "CachedTable::assign", "keys / values", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  write_rows_impl(n, keys, values, scores, false, false);
}

template <TableKey K>
void CachedTable<K>::accum_or_assign(size_t n, const K* keys, const float* values,
                                     const uint64_t* scores, StreamHandle) {
  if (n == 0) return;
  require(keys && values, "CachedTable::accum_or_assign", "keys / values", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  write_rows_impl(n, keys, values, scores, true, true);
}

template <TableKey K>
void CachedTable<K>::assign_scores(size_t n, const K* keys, const uint64_t* scores, StreamHandle) {
  if (n == 0) return;
  require(keys && scores, "CachedTable::assign_scores", "keys / scores", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  std::lock_guard lock(mutex_);
  settle(nullptr);
  auto [hk, usable, unique, index] =
      host_batch(download_keys(n, keys), options_.safe_check, "CachedTable::assign_scores");
  std::vector<uint64_t> given(n);
  to_host(backend_, given.data(), scores, n);
  drain_pending();
  Resolved r = resolve(unique, false);
  std::vector<uint64_t> last(unique.size());
  for (size_t i = 0; i < n; ++i)
    if (index[i] >= 0) last[index[i]] = given[i];
  std::vector<K> fast_keys;
  std::vector<uint64_t> fast_scores, put_keys, put_scores;
  std::vector<float> put_rows;
  for (size_t j = 0; j < unique.size(); ++j) {
    if (r.in_fast[j]) {
      fast_keys.push_back(unique[j]);
      fast_scores.push_back(last[j]);
    } else if (r.below[j]) {  // rewritten below with its new score; the row stays there
      put_keys.push_back(bits(unique[j]));
      put_scores.push_back(last[j]);
      put_rows.insert(put_rows.end(), r.rows.begin() + j * dim_, r.rows.begin() + (j + 1) * dim_);
    }
  }
  if (!fast_keys.empty()) {
    BackendBuffer<K> kb;
    BackendBuffer<uint64_t> sb;
    fast_->assign_scores(
        fast_keys.size(),
        on_backend(backend_, options_.device, fast_keys.data(), fast_keys.size(), kb, true),
        on_backend(backend_, options_.device, fast_scores.data(), fast_scores.size(), sb, true));
  }
  write_down(put_keys, put_rows.data(), put_scores, {}, false);
}

template <TableKey K>
void CachedTable<K>::erase(size_t n, const K* keys, StreamHandle stream) {
  if (n == 0) return;
  require(keys != nullptr, "CachedTable::erase", "keys", "nullptr",
          "must be non-null when n = " + std::to_string(n));
  std::lock_guard lock(mutex_);
  settle(stream);
  const std::vector<K> hk = download_keys(n, keys);
  const auto usable = usable_keys(hk, options_.safe_check, "CachedTable::erase");
  drain_pending();
  std::vector<uint64_t> below;
  for (size_t i = 0; i < n; ++i)
    if (usable[i]) below.push_back(bits(hk[i]));
  note_below(below);
  lower_call(stats_, [&] { lower_->erase(below.size(), below.data()); });
  for (const uint64_t k : below) shadowed_.erase(k);
  fast_->erase(n, keys, stream);
}

template <TableKey K>
size_t CachedTable<K>::erase_if(ScorePredicate predicate, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  settle(stream);
  drain_pending();
  // The fast tier decides for its keys (a copy below is stale); the lower tier for the rest.
  std::vector<K> fast_match;
  std::unordered_set<uint64_t> in_fast;
  fast_->for_each([&](K key, std::span<const float>, uint64_t score) {
    in_fast.insert(bits(key));
    if (matches(predicate, score)) fast_match.push_back(key);
  });
  std::vector<uint64_t> erase_below;
  ScanCursor cursor;
  constexpr size_t kChunk = 4096;
  std::vector<uint64_t> keys(kChunk), scores(kChunk);
  std::vector<float> rows(kChunk * dim_);
  size_t below_matches = 0;
  while (!cursor.done()) {
    size_t got = 0;
    lower_call(stats_, [&] {
      got = lower_->scan(cursor, kChunk, keys.data(), rows.data(), scores.data());
    });
    for (size_t i = 0; i < got; ++i) {
      if (in_fast.count(keys[i])) continue;
      if (matches(predicate, scores[i])) {
        erase_below.push_back(keys[i]);
        ++below_matches;
      }
    }
  }
  for (const K key : fast_match)
    if (shadowed_.erase(bits(key))) erase_below.push_back(bits(key));
  note_below(erase_below);
  lower_call(stats_, [&] { lower_->erase(erase_below.size(), erase_below.data()); });
  BackendBuffer<K> kb;
  fast_->erase(
      fast_match.size(),
      on_backend(backend_, options_.device, fast_match.data(), fast_match.size(), kb, true),
      stream);
  return fast_match.size() + below_matches;
}

template <TableKey K>
void CachedTable<K>::clear(StreamHandle stream) {
  std::lock_guard lock(mutex_);
  settle(stream);
  if (prefetch_) prefetch_->cleared = true;
  lower_call(stats_, [&] { lower_->clear(); });
  if (caching_.private_store) device_->filter_reset(caching_.filter_log2_bits, stream);
  pending_.clear();
  shadowed_.clear();
  fast_->clear(stream);
}

// --- whole table ------------------------------------------------------------------------------

template <TableKey K>
void CachedTable<K>::settle_for_reading(StreamHandle stream) const {
  // The table is never created const: settling a prefetch left on the device changes no contents.
  try {
    const_cast<CachedTable*>(this)->settle_prefetch(stream);
  } catch (const StorageError&) {
    // The lower tier failed: the evicted rows wait pending (counted); the next writing call
    // surfaces the failure.
  }
}

template <TableKey K>
size_t CachedTable<K>::size(StreamHandle stream) const {
  std::lock_guard lock(mutex_);
  settle_for_reading(stream);  // its evictions are below (or pending) first
  size_t below = lower_->size();
  // Pending rows: a put not yet below adds one; an erase marker whose stale copy is still below
  // (its key is in the fast tier) takes one away.
  if (!pending_.empty()) {
    std::vector<uint64_t> keys;
    for (const auto& [key, p] : pending_) keys.push_back(key);
    std::vector<float> rows(keys.size() * dim_);
    std::vector<uint64_t> scores(keys.size());
    std::unique_ptr<bool[]> found(new bool[keys.size()]);
    lower_->find(keys.size(), keys.data(), rows.data(), scores.data(), found.get());
    for (size_t i = 0; i < keys.size(); ++i) {
      const bool erased = pending_.at(keys[i]).erased;
      if (!erased && !found[i]) ++below;
      if (erased && found[i]) --below;
    }
  }
  return fast_->size(stream) + below - shadowed_.size();
}

template <TableKey K>
size_t CachedTable<K>::capacity() const {
  std::lock_guard lock(mutex_);
  settle_for_reading(nullptr);
  return fast_->capacity() + lower_->size();
}

template <TableKey K>
double CachedTable<K>::load_factor(StreamHandle stream) const {
  const size_t c = capacity();
  return c == 0 ? 0.0 : static_cast<double>(size(stream)) / static_cast<double>(c);
}

template <TableKey K>
void CachedTable<K>::reserve(size_t new_capacity, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  settle_prefetch(stream);
  fast_->reserve(new_capacity, stream);
}

template <TableKey K>
size_t CachedTable<K>::export_batch(size_t offset, size_t n_slots, K* keys, float* values,
                                    uint64_t* scores, std::optional<uint64_t> min_score,
                                    StreamHandle stream) {
  if (n_slots == 0) return 0;
  require(keys && values && scores, "CachedTable::export_batch", "keys / values / scores",
          "nullptr", "must be non-null when n_slots = " + std::to_string(n_slots));
  std::lock_guard lock(mutex_);
  settle(stream);
  drain_pending();
  const size_t fc = fast_->capacity();
  size_t written = 0;
  if (offset < fc) {
    written = fast_->export_batch(offset, std::min(n_slots, fc - offset), keys, values, scores,
                                  min_score, stream);
  }
  const size_t end = offset + n_slots;
  if (end <= fc) return written;
  const uint64_t start = std::max(offset, fc) - fc;
  uint64_t want = end - fc - start;
  constexpr size_t kChunk = 4096;
  std::vector<uint64_t> bk(kChunk), bs(kChunk);
  std::vector<float> bv(kChunk * dim_);
  if (export_next_ != start) {  // restart the scan and skip to `start`
    export_cursor_ = ScanCursor{};
    export_next_ = 0;
    while (export_next_ < start && !export_cursor_.done()) {
      size_t got = 0;
      lower_call(stats_, [&] {
        got = lower_->scan(export_cursor_, std::min<uint64_t>(kChunk, start - export_next_),
                           bk.data(), bv.data(), bs.data());
      });
      export_next_ += got;
    }
  }
  std::vector<K> out_keys;
  std::vector<float> out_rows;
  std::vector<uint64_t> out_scores;
  while (want > 0 && !export_cursor_.done()) {
    size_t got = 0;
    lower_call(stats_, [&] {
      got = lower_->scan(export_cursor_, std::min<uint64_t>(kChunk, want), bk.data(), bv.data(),
                         bs.data());
    });
    export_next_ += got;
    want -= got;
    if (got == 0) continue;
    // Skip the stale copies of keys in the fast tier.
    std::vector<K> ck(got);
    for (size_t i = 0; i < got; ++i) ck[i] = static_cast<K>(bk[i]);
    std::unique_ptr<bool[]> in_fast(new bool[got]);
    BackendBuffer<K> kb;
    BackendBuffer<bool> fb;
    bool* dfound = on_backend(backend_, options_.device, in_fast.get(), got, fb, false);
    fast_->contains(got, on_backend(backend_, options_.device, ck.data(), got, kb, true), dfound);
    to_host(backend_, in_fast.get(), dfound, got);
    for (size_t i = 0; i < got; ++i) {
      if (in_fast[i] || (min_score && bs[i] < *min_score)) continue;
      out_keys.push_back(ck[i]);
      out_scores.push_back(bs[i]);
      out_rows.insert(out_rows.end(), bv.begin() + i * dim_, bv.begin() + (i + 1) * dim_);
    }
  }
  to_backend(backend_, keys + written, out_keys.data(), out_keys.size());
  to_backend(backend_, values + written * dim_, out_rows.data(), out_rows.size());
  to_backend(backend_, scores + written, out_scores.data(), out_scores.size());
  return written + out_keys.size();
}

template <TableKey K>
void CachedTable<K>::for_each(const typename Table<K>::RowVisitor& visit) {
  std::lock_guard lock(mutex_);
  settle(nullptr);
  drain_pending();
  std::unordered_set<uint64_t> in_fast;
  fast_->for_each([&](K key, std::span<const float> row, uint64_t score) {
    in_fast.insert(bits(key));
    visit(key, row, score);
  });
  ScanCursor cursor;
  constexpr size_t kChunk = 4096;
  std::vector<uint64_t> keys(kChunk), scores(kChunk);
  std::vector<float> rows(kChunk * dim_);
  while (!cursor.done()) {
    size_t got = 0;
    lower_call(stats_, [&] {
      got = lower_->scan(cursor, kChunk, keys.data(), rows.data(), scores.data());
    });
    for (size_t i = 0; i < got; ++i) {
      if (in_fast.count(keys[i])) continue;
      visit(static_cast<K>(keys[i]), std::span<const float>(rows.data() + i * dim_, dim_),
            scores[i]);
    }
  }
}

template <TableKey K>
void CachedTable<K>::flush() {
  std::lock_guard lock(mutex_);
  settle(nullptr);
  install_prefetched(true);
  drain_pending();
  const size_t fc = fast_->capacity();
  constexpr size_t kChunk = 1 << 14;
  BackendBuffer<K> kb(backend_, kChunk, options_.device);
  BackendBuffer<float> vb(backend_, kChunk * dim_, options_.device);
  BackendBuffer<uint64_t> sb(backend_, kChunk, options_.device);
  std::vector<K> hk(kChunk);
  std::vector<uint64_t> keys(kChunk), scores(kChunk);
  std::vector<float> rows(kChunk * dim_);
  for (size_t offset = 0; offset < fc; offset += kChunk) {
    const size_t got =
        fast_->export_batch(offset, std::min(kChunk, fc - offset), kb.data(), vb.data(), sb.data());
    if (got == 0) continue;
    if (caching_.private_store)  // a flushed copy is below too
      device_->filter_add(got, reinterpret_cast<const uint64_t*>(kb.data()), nullptr);
    to_host(backend_, hk.data(), kb.data(), got);
    to_host(backend_, rows.data(), vb.data(), got * dim_);
    to_host(backend_, scores.data(), sb.data(), got);
    for (size_t i = 0; i < got; ++i) keys[i] = bits(hk[i]);
    lower_call(stats_,
               [&] { lower_->insert_or_assign(got, keys.data(), rows.data(), scores.data()); });
    for (size_t i = 0; i < got; ++i) shadowed_.insert(keys[i]);
    stats_.rows_down += got;
    stats_.bytes_down += got * (dim_ * sizeof(float) + sizeof(uint64_t));
    stats_.flushed_rows += got;
  }
  lower_call(stats_, [&] { lower_->flush(); });
}

template <TableKey K>
void CachedTable<K>::set_score(uint64_t score) {
  const uint64_t before = clock_.exchange(score);
  if (options_.score_policy == ScorePolicy::kCustomized && score < before) {
    warn("CachedTable::set_score: the score goes backwards from " + std::to_string(before) +
         " to " + std::to_string(score));
  }
}

template <TableKey K>
CachingStats CachedTable<K>::caching_stats() const {
  std::lock_guard lock(mutex_);
  settle_for_reading(nullptr);  // its counts are in
  CachingStats s = stats_;
  s.unserved += device_->missing_total();  // counted on the device by unsynchronized calls
  s.pending_rows = pending_.size();
  s.buffer_growths = device_->growths() - growths_at_start_;
  s.fast = fast_->stats();
  s.lower = lower_->stats();
  return s;
}

template <TableKey K>
TableStats CachedTable<K>::stats() const {
  std::lock_guard lock(mutex_);
  settle_for_reading(nullptr);
  TableStats s = fast_->stats();
  s.evictions = lower_->stats().evicted;
  return s;
}

template class CachedTable<int64_t>;
template class CachedTable<uint64_t>;

}  // namespace dynemb::storage

// CpuTable: construction, argument screening, growth and the whole-table operations.
#include "cpu/cpu_table.hpp"

#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "arguments.hpp"
#include "cpu/host_memory.hpp"
#include "cpu/rehash.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/log.hpp"

namespace dynemb::table::cpu {
namespace {

uint64_t threshold_of(double max_load_factor, uint64_t capacity) {
  return static_cast<uint64_t>(std::floor(max_load_factor * static_cast<double>(capacity)));
}

template <TableKey K>
std::string key_text(K key) {
  return std::to_string(key);
}

// A storage of `capacity` slots for `options`' rows, once the host memory for it is there (else
// OutOfMemory, which `what` begins).
std::unique_ptr<BucketStorage> new_storage(const TableOptions& options, uint64_t capacity,
                                           const std::string& what) {
  const uint64_t buckets = capacity / options.bucket_capacity;
  require_host_memory(BucketStorage::bytes_for(buckets, options.bucket_capacity, options.dim),
                      what + " = " + std::to_string(capacity) + " slots of " +
                          std::to_string(options.dim) + " floats");
  return std::make_unique<BucketStorage>(buckets, options.bucket_capacity, options.dim);
}

}  // namespace

template <TableKey K>
CpuTable<K>::CpuTable(const TableOptions& options)
    : options_(options),
      row_bytes_(static_cast<size_t>(options.dim) * sizeof(float)),
      pool_(options.num_threads),
      clock_(options.score_policy),
      locks_(options.max_capacity / options.bucket_capacity),
      storage_(new_storage(options, options.init_capacity, "CpuTable: init_capacity")),
      grow_threshold_(threshold_of(options.max_load_factor, options.init_capacity)),
      capacity_(options.init_capacity) {
  fault_in(*storage_);
}

template <TableKey K>
void CpuTable<K>::fault_in(const BucketStorage& s) {
  if (!options_.prefault_host_memory) return;
  for_bucket_ranges(s.num_buckets(),
                    [&](uint64_t first, uint64_t last) { s.fault_in(first, last); });
}

template <TableKey K>
void CpuTable<K>::require_pointer(const void* ptr, const char* call, const char* argument) {
  detail::require_pointer(ptr, call, argument);
}

template <TableKey K>
void CpuTable<K>::screen_reserved(const char* call, size_t n, const K* keys) {
  if (options_.safe_check != SafeCheck::kError) return;
  // Each range stops at its first reserved key, or where an earlier one was found already.
  std::atomic<size_t> first{n};
  for_key_ranges(n, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end && i < first.load(std::memory_order_relaxed); ++i) {
      if (!is_reserved_key(keys[i])) continue;
      size_t seen = first.load(std::memory_order_relaxed);
      while (i < seen && !first.compare_exchange_weak(seen, i, std::memory_order_relaxed)) {
      }
      return;
    }
  });
  const size_t at = first.load();
  if (at == n) return;
  throw InvalidArgument(
      std::string(call) + ": keys[" + std::to_string(at) + "] = " + key_text(keys[at]) +
      ", a reserved key (bit pattern >= 0xFFFFFFFFFFFFFFF0); nothing was changed");
}

template <TableKey K>
void CpuTable<K>::report_reserved(const char* call, const K* keys, const ReservedKeys& reserved) {
  const uint64_t count = reserved.count();
  if (count == 0) return;
  reserved_keys_.fetch_add(count, std::memory_order_relaxed);
  if (options_.safe_check != SafeCheck::kWarning) return;
  const size_t first = reserved.first();
  warn(std::string(call) + ": keys[" + std::to_string(first) + "] = " + key_text(keys[first]) +
       ", a reserved key (bit pattern >= 0xFFFFFFFFFFFFFFF0) and " + std::to_string(count - 1) +
       " more were skipped");
}

template <TableKey K>
void CpuTable<K>::grow_from(uint64_t seen_capacity, bool for_load) {
  std::unique_lock lock(mutex_);
  if (storage_->capacity() != seen_capacity) return;  // someone else grew already
  // No worker holds size claims now, so size_ is exact: grow only if the key really needs it.
  if (for_load && size_.load(std::memory_order_relaxed) + 1 <= grow_threshold_) return;
  grow_locked();
}

template <TableKey K>
void CpuTable<K>::grow_locked() {
  const BucketStorage& from = *storage_;
  if (from.capacity() >= options_.max_capacity) return;
  const uint64_t new_capacity = std::min<uint64_t>(from.capacity() * 2, options_.max_capacity);
  const uint64_t new_buckets = new_capacity / options_.bucket_capacity;
  auto to =
      new_storage(options_, new_capacity,
                  "CpuTable: growth (max_capacity = " + std::to_string(options_.max_capacity) +
                      ") to capacity");
  fault_in(*to);
  uint64_t dropped = 0;
  if (new_buckets == 2 * from.num_buckets()) {
    for_bucket_ranges(from.num_buckets(), [&](uint64_t first, uint64_t last) {
      rehash_buckets(from, *to, first, last);
    });
  } else {
    dropped = rehash_buckets(from, *to, 0, from.num_buckets());
  }
  storage_ = std::move(to);
  grow_threshold_ = threshold_of(options_.max_load_factor, new_capacity);
  capacity_.store(new_capacity, std::memory_order_relaxed);
  size_.fetch_sub(dropped, std::memory_order_relaxed);
  evictions_.fetch_add(dropped, std::memory_order_relaxed);
  rehashes_.fetch_add(1, std::memory_order_relaxed);
}

template <TableKey K>
size_t CpuTable<K>::erase_if(ScorePredicate predicate, StreamHandle) {
  std::shared_lock lock(mutex_);
  const BucketStorage& s = *storage_;
  std::atomic<uint64_t> removed{0};
  for_bucket_ranges(s.num_buckets(), [&](uint64_t first, uint64_t last) {
    uint64_t local = 0;
    for (uint64_t b = first; b < last; ++b) {
      SpinGuard guard(locks_.of_bucket(b));
      for (uint32_t slot = 0; slot < s.bucket_capacity(); ++slot) {
        if (s.is_full_slot(b, slot) && matches(predicate, s.score(b, slot))) {
          s.remove(b, slot);
          ++local;
        }
      }
    }
    removed.fetch_add(local, std::memory_order_relaxed);
  });
  size_.fetch_sub(removed.load(), std::memory_order_relaxed);
  erased_.fetch_add(removed.load(), std::memory_order_relaxed);
  return removed.load();
}

template <TableKey K>
void CpuTable<K>::clear(StreamHandle) {
  std::unique_lock lock(mutex_);
  storage_->clear();
  size_.store(0, std::memory_order_relaxed);
}

template <TableKey K>
size_t CpuTable<K>::size(StreamHandle) const {
  return size_.load(std::memory_order_relaxed);
}

template <TableKey K>
size_t CpuTable<K>::capacity() const {
  return capacity_.load(std::memory_order_relaxed);
}

template <TableKey K>
double CpuTable<K>::load_factor(StreamHandle stream) const {
  return static_cast<double>(size(stream)) / static_cast<double>(capacity());
}

template <TableKey K>
void CpuTable<K>::reserve(size_t new_capacity, StreamHandle) {
  require(new_capacity <= options_.max_capacity, "reserve", "new_capacity",
          std::to_string(new_capacity),
          "must be <= max_capacity (" + std::to_string(options_.max_capacity) + ")");
  std::unique_lock lock(mutex_);
  while (storage_->capacity() < new_capacity) grow_locked();
}

template <TableKey K>
size_t CpuTable<K>::export_batch(size_t offset, size_t n_slots, K* keys, float* values,
                                 uint64_t* scores, std::optional<uint64_t> min_score,
                                 StreamHandle) {
  if (n_slots == 0) return 0;
  require_pointer(keys, "export_batch", "keys");
  require_pointer(values, "export_batch", "values");
  std::shared_lock lock(mutex_);
  const BucketStorage& s = *storage_;
  const uint64_t end = offset + detail::export_slot_count(offset, n_slots, s.capacity());
  const uint32_t cap = s.bucket_capacity();
  size_t out = 0;
  for (uint64_t slot = offset; slot < end;) {
    const uint64_t b = slot / cap;
    const uint64_t bucket_end = std::min<uint64_t>(end, (b + 1) * cap);
    SpinGuard guard(locks_.of_bucket(b));
    for (; slot < bucket_end; ++slot) {
      const uint32_t in = static_cast<uint32_t>(slot - b * cap);
      if (!s.is_full_slot(b, in)) continue;
      const uint64_t score = s.score(b, in);
      if (min_score && score < *min_score) continue;
      keys[out] = static_cast<K>(s.key(b, in));
      std::memcpy(values + out * options_.dim, s.row(b, in), row_bytes_);
      if (scores) scores[out] = score;
      ++out;
    }
  }
  return out;
}

template <TableKey K>
void CpuTable<K>::for_each(const typename Table<K>::RowVisitor& visit) {
  std::shared_lock lock(mutex_);
  const BucketStorage& s = *storage_;
  const uint32_t cap = s.bucket_capacity();
  std::vector<uint64_t> keys(cap), scores(cap);
  std::vector<float> rows(static_cast<size_t>(cap) * options_.dim);
  for (uint64_t b = 0; b < s.num_buckets(); ++b) {
    uint32_t count = 0;
    {
      SpinGuard guard(locks_.of_bucket(b));
      for (uint32_t slot = 0; slot < cap; ++slot) {
        if (!s.is_full_slot(b, slot)) continue;
        keys[count] = s.key(b, slot);
        scores[count] = s.score(b, slot);
        std::memcpy(rows.data() + static_cast<size_t>(count) * options_.dim, s.row(b, slot),
                    row_bytes_);
        ++count;
      }
    }
    for (uint32_t r = 0; r < count; ++r) {
      visit(
          static_cast<K>(keys[r]),
          std::span<const float>(rows.data() + static_cast<size_t>(r) * options_.dim, options_.dim),
          scores[r]);
    }
  }
}

template <TableKey K>
void CpuTable<K>::set_score(uint64_t score) {
  const ScorePolicy policy = options_.score_policy;
  if (policy != ScorePolicy::kStep && policy != ScorePolicy::kCustomized) return;
  const uint64_t before = clock_.set(score);
  if (policy == ScorePolicy::kCustomized && score < before) {
    warn("set_score: score = " + std::to_string(score) + " goes backwards from " +
         std::to_string(before) + " (customized scores should not decrease)");
  }
}

template <TableKey K>
void CpuTable<K>::advance_step() {
  if (options_.score_policy == ScorePolicy::kStep) clock_.advance();
}

template <TableKey K>
TableStats CpuTable<K>::stats() const {
  TableStats st;
  st.evictions = evictions_.load(std::memory_order_relaxed);
  st.refused = refused_.load(std::memory_order_relaxed);
  st.reserved_keys = reserved_keys_.load(std::memory_order_relaxed);
  st.rehashes = rehashes_.load(std::memory_order_relaxed);
  st.erased = erased_.load(std::memory_order_relaxed);
  return st;
}

template class CpuTable<int64_t>;
template class CpuTable<uint64_t>;

}  // namespace dynemb::table::cpu

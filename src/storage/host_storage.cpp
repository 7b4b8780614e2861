#include "dynemb/storage/host_storage.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace dynemb::storage {
namespace {

constexpr uint32_t kBucket = 128;

uint64_t round_up_to_buckets(uint64_t rows) {
  return std::max<uint64_t>(kBucket, (rows + kBucket - 1) / kBucket * kBucket);
}

TableOptions host_table_options(const HostStorageOptions& o) {
  require(o.row_dim > 0, "HostStorage", "row_dim", std::to_string(o.row_dim), "must be > 0");
  require(o.max_rows > 0, "HostStorage", "max_rows", "0", "must be > 0");
  TableOptions t;
  t.dim = o.row_dim;
  t.max_capacity = round_up_to_buckets(o.max_rows);
  t.init_capacity = std::min(round_up_to_buckets(o.init_rows), t.max_capacity);
  t.bucket_capacity = kBucket;
  t.score_policy = ScorePolicy::kCustomized;  // scores are stored exactly as given
  t.safe_check = SafeCheck::kError;
  t.num_threads = o.num_threads;
  return t;
}

}  // namespace

HostStorage::HostStorage(const HostStorageOptions& options)
    : row_dim_(options.row_dim),
      table_(make_table<uint64_t>(Backend::kCpu, host_table_options(options))) {}

HostStorage::~HostStorage() = default;

std::string HostStorage::describe() const {
  return "host(max_rows=" + std::to_string(table_->options().max_capacity) + ")";
}

void HostStorage::find(size_t n, const uint64_t* keys, float* values, uint64_t* scores,
                       bool* founds) {
  if (n == 0) return;
  table_->find(n, keys, values, founds, scores);
  size_t found = 0;
  for (size_t i = 0; i < n; ++i) found += founds[i] ? 1 : 0;
  std::lock_guard lock(mutex_);
  stats_.reads += 1;
  stats_.rows_read += n;
  stats_.rows_found += found;
  stats_.bytes_read += found * (row_dim_ * sizeof(float) + sizeof(uint64_t));
}

void HostStorage::write(size_t n_put, const uint64_t* put_keys, const float* put_values,
                        const uint64_t* put_scores, size_t n_erase, const uint64_t* erase_keys) {
  require(n_put == 0 || (put_keys && put_values && put_scores), "HostStorage::write",
          "put_keys / put_values / put_scores", "nullptr",
          "must be non-null when n_put = " + std::to_string(n_put));
  require(n_erase == 0 || erase_keys, "HostStorage::write", "erase_keys", "nullptr",
          "must be non-null when n_erase = " + std::to_string(n_erase));
  // Erase first, then put: a key in both lists ends up stored.
  if (n_erase > 0) table_->erase(n_erase, erase_keys);
  size_t evicted = 0;
  if (n_put > 0) {
    std::vector<uint64_t> ev_keys(n_put);
    // A full table evicts its lowest scores (or refuses the new row): both leave the store.
    evicted = table_->insert_and_evict(n_put, put_keys, put_values, put_scores, ev_keys.data(),
                                       nullptr, nullptr);
  }
  std::lock_guard lock(mutex_);
  stats_.writes += 1;
  stats_.rows_written += n_put;
  stats_.rows_erased += n_erase;
  stats_.bytes_written += n_put * (row_dim_ * sizeof(float) + sizeof(uint64_t));
  stats_.evicted += evicted;
}

size_t HostStorage::scan(ScanCursor& cursor, size_t max_rows, uint64_t* keys, float* values,
                         uint64_t* scores) {
  uint64_t offset = 0;
  if (!cursor.position.empty()) offset = std::stoull(cursor.position);
  const uint64_t capacity = table_->capacity();
  if (offset >= capacity || max_rows == 0) {
    cursor.finished = offset >= capacity;
    return 0;
  }
  const size_t slots = std::min<uint64_t>(max_rows, capacity - offset);
  const size_t got = table_->export_batch(offset, slots, keys, values, scores);
  cursor.position = std::to_string(offset + slots);
  cursor.finished = offset + slots >= capacity;
  std::lock_guard lock(mutex_);
  stats_.bytes_read += got * (row_dim_ * sizeof(float) + sizeof(uint64_t));
  return got;
}

size_t HostStorage::size() {
  return table_->size();
}

void HostStorage::clear() {
  table_->clear();
}

StorageStats HostStorage::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace dynemb::storage

#include "dynemb/storage/host_storage.hpp"

#include <algorithm>
#include <atomic>
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
      table_(make_table<uint64_t>(Backend::kCpu, host_table_options(options))),
      pool_(options.num_threads) {}

void HostStorage::in_pieces(size_t n, const std::function<void(size_t, size_t)>& f) {
  // Pieces of at least 1024 rows, two a thread: a caching table's misses (thousands to tens of
  // thousands of rows) use every core, where the table alone would run them on one or a few.
  constexpr size_t kMinPiece = 1024;
  const size_t pieces = std::min<size_t>(size_t{pool_.threads()} * 2, n / kMinPiece);
  if (pieces <= 1) {
    f(0, n);
    return;
  }
  pool_.run(pieces, [&](size_t p) { f(n * p / pieces, n * (p + 1) / pieces); });
}

HostStorage::~HostStorage() = default;

std::string HostStorage::describe() const {
  return "host(max_rows=" + std::to_string(table_->options().max_capacity) + ")";
}

void HostStorage::find(size_t n, const uint64_t* keys, float* values, uint64_t* scores,
                       bool* founds) {
  if (n == 0) return;
  in_pieces(n, [&](size_t begin, size_t end) {
    table_->find(end - begin, keys + begin, values + begin * row_dim_, founds + begin,
                 scores + begin);
  });
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
  if (n_erase > 0) {
    in_pieces(n_erase,
              [&](size_t begin, size_t end) { table_->erase(end - begin, erase_keys + begin); });
  }
  std::atomic<size_t> evicted{0};
  if (n_put > 0) {
    std::vector<uint64_t> ev_keys(n_put);
    // A full table evicts its lowest scores (or refuses the new row): both leave the store.
    in_pieces(n_put, [&](size_t begin, size_t end) {
      evicted +=
          table_->insert_and_evict(end - begin, put_keys + begin, put_values + begin * row_dim_,
                                   put_scores + begin, ev_keys.data() + begin, nullptr, nullptr);
    });
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

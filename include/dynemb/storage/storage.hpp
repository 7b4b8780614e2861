// The lower tier of a table: a batched key -> (row, score) store below the fast table
// (docs/storage.md). Rows are a trainable table's full rows, [embedding | optimizer state], of a
// width fixed when the store is created. Implementations: host memory (host_storage.hpp), RocksDB
// (rocksdb_storage.hpp), Redis (redis_storage.hpp), or the user's own subclass.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>

#include "dynemb/core/error.hpp"

namespace dynemb::storage {

// A lower tier failed (I/O error, disk full, a server gone, a directory that is not ours). The
// batch that failed did not complete and may be retried as a whole: writes are idempotent
// (a failed write may have reached part of the store; repeating it gives the same contents).
class StorageError : public Error {
 public:
  using Error::Error;
};

// Where a scan stands: an opaque position owned by the store (empty = the start). A scan walked
// until done() visits every row stored when it began that is not erased meanwhile, at least
// once (exactly once if the store is not written in between).
struct ScanCursor {
  std::string position;
  bool finished = false;
  bool done() const { return finished; }
};

// Cumulative counts of one store since it was opened.
struct StorageStats {
  uint64_t reads = 0;          // find calls
  uint64_t rows_read = 0;      // keys asked for
  uint64_t rows_found = 0;     // keys found
  uint64_t writes = 0;         // insert_or_assign / write calls
  uint64_t rows_written = 0;   // rows stored
  uint64_t rows_erased = 0;    // keys erased (asked for)
  uint64_t bytes_read = 0;     // row + score bytes returned by find and scan
  uint64_t bytes_written = 0;  // row + score bytes stored
  uint64_t evicted = 0;        // rows the store itself dropped by its policy (bounded stores)
  uint64_t failures = 0;       // calls that threw StorageError
  uint64_t wait_ns = 0;        // time spent inside the store's calls
};

// A batched key -> (row of row_dim() floats, uint64 score) store. Keys are uint64 bit patterns
// (an int64 key is stored as its bit pattern). Buffers are host memory, row-major [n x row_dim].
// Calls are safe from several threads. Every virtual takes pointers and counts, so a binding
// (pybind11 trampoline) can subclass it.
class Storage {
 public:
  virtual ~Storage() = default;

  // Floats per row, fixed at creation.
  virtual uint32_t row_dim() const = 0;
  // A short description for messages ("rocksdb:/data/t1", "redis:127.0.0.1:6379", ...).
  virtual std::string describe() const = 0;

  // For each key: copies its row to values[i * row_dim()], its score to scores[i] and sets
  // founds[i]; missing keys leave values and scores as they were. Throws StorageError.
  virtual void find(size_t n, const uint64_t* keys, float* values, uint64_t* scores,
                    bool* founds) = 0;

  // Stores `n_put` rows (inserting or overwriting, scores stored exactly) and removes
  // `n_erase` keys, as one batch; a key in both lists ends up stored. Throws StorageError (the
  // batch may be retried as a whole).
  virtual void write(size_t n_put, const uint64_t* put_keys, const float* put_values,
                     const uint64_t* put_scores, size_t n_erase, const uint64_t* erase_keys) = 0;

  // Copies up to max_rows stored rows after `cursor` into keys / values / scores and moves the
  // cursor on; returns how many (0 with cursor not done is allowed). cursor.done() once every
  // row was visited.
  virtual size_t scan(ScanCursor& cursor, size_t max_rows, uint64_t* keys, float* values,
                      uint64_t* scores) = 0;

  // Number of stored rows (may walk the store).
  virtual size_t size() = 0;
  // Makes every completed write durable where the store can (fsync, WAL flush); no-op in memory.
  virtual void flush() = 0;
  // Removes every row.
  virtual void clear() = 0;
  // The counts so far.
  virtual StorageStats stats() const = 0;

  // Stores rows (write with no erase).
  void insert_or_assign(size_t n, const uint64_t* keys, const float* values,
                        const uint64_t* scores) {
    write(n, keys, values, scores, 0, nullptr);
  }
  // Removes the keys that exist (write with no put).
  void erase(size_t n, const uint64_t* keys) { write(0, nullptr, nullptr, nullptr, n, keys); }
};

// Writes every row of `store` to one file at `path` (header with format version and row width,
// the rows, a CRC32C), through a temporary file renamed into place. Returns the rows written.
uint64_t dump_storage(Storage& store, const std::filesystem::path& path);
// Checks a file dump_storage wrote (magic, version, row width == store.row_dim(), size, CRC)
// and then stores its rows into `store` (existing rows stay unless overwritten). Returns the rows
// loaded. A bad file is InvalidArgument naming the path and what is wrong; the store is unchanged.
uint64_t load_storage(Storage& store, const std::filesystem::path& path);

// Adds the time of one call of a store to its stats' wait_ns as the call ends (under `mutex`).
class StorageCallTimer {
 public:
  StorageCallTimer(StorageStats& stats, std::mutex& mutex)
      : stats_(stats), mutex_(mutex), start_(std::chrono::steady_clock::now()) {}
  ~StorageCallTimer() {
    std::lock_guard lock(mutex_);
    stats_.wait_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::steady_clock::now() - start_)
                                                .count());
  }
  StorageCallTimer(const StorageCallTimer&) = delete;
  StorageCallTimer& operator=(const StorageCallTimer&) = delete;

 private:
  StorageStats& stats_;
  std::mutex& mutex_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dynemb::storage

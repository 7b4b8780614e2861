// A disk tier: rows in a RocksDB database of its own directory, marked as dynemb's.
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>

#include "dynemb/storage/storage.hpp"

namespace dynemb::storage {

// Shape of a RocksDB store.
struct RocksDbStorageOptions {
  std::filesystem::path directory;  // created if missing or empty; otherwise must be ours
  uint32_t row_dim = 0;             // floats per row, > 0; must match an existing directory's
  bool sync_writes = false;         // fsync the WAL on every write (flush() always does)
  uint64_t block_cache_bytes = 64ull << 20;
};

// A Storage in RocksDB: key = 8-byte big-endian key bits, value = score + row. Batched reads by
// MultiGet, writes by one WriteBatch per call (atomic). Every write goes through the WAL, so
// what a write returned from survives the process being killed; flush() makes it survive a
// machine crash too. A directory holding another database, or a database without dynemb's
// marker, or of another row width, is StorageError at construction.
class RocksDbStorage final : public Storage {
 public:
  explicit RocksDbStorage(const RocksDbStorageOptions& options);
  ~RocksDbStorage() override;

  uint32_t row_dim() const override { return row_dim_; }
  std::string describe() const override { return "rocksdb:" + directory_.string(); }
  void find(size_t n, const uint64_t* keys, float* values, uint64_t* scores, bool* founds) override;
  void write(size_t n_put, const uint64_t* put_keys, const float* put_values,
             const uint64_t* put_scores, size_t n_erase, const uint64_t* erase_keys) override;
  size_t scan(ScanCursor& cursor, size_t max_rows, uint64_t* keys, float* values,
              uint64_t* scores) override;
  size_t size() override;
  void flush() override;
  void clear() override;
  StorageStats stats() const override;

 private:
  struct Db;
  [[noreturn]] void fail(const std::string& what, const std::string& status);

  std::filesystem::path directory_;
  uint32_t row_dim_;
  bool sync_writes_;
  std::unique_ptr<Db> db_;
  mutable std::mutex mutex_;
  StorageStats stats_{};
};

}  // namespace dynemb::storage

// The default lower tier: rows in host memory, in a CPU table (make_table(Backend::kCpu)).
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "dynemb/core/thread_pool.hpp"
#include "dynemb/storage/storage.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::storage {

// Shape of a host-memory store.
struct HostStorageOptions {
  uint32_t row_dim = 0;            // floats per row, > 0
  uint64_t init_rows = 1 << 16;    // slots at creation (rounded up to whole buckets)
  uint64_t max_rows = 1ull << 30;  // growth stops here; when full, the lowest-score rows are
                                   // evicted (counted in stats().evicted)
  uint32_t num_threads = 0;        // threads of the table and of the store's batches (0 = all)
};

// A Storage over a CPU table with exact stored scores (CUSTOMIZED policy). Reserved keys
// (>= kFirstReservedKey) are InvalidArgument. A batch of a few thousand rows or more is split
// over the store's threads (the table's own loops spread only much larger batches).
class HostStorage final : public Storage {
 public:
  explicit HostStorage(const HostStorageOptions& options);
  ~HostStorage() override;

  uint32_t row_dim() const override { return row_dim_; }
  std::string describe() const override;
  void find(size_t n, const uint64_t* keys, float* values, uint64_t* scores, bool* founds) override;
  void write(size_t n_put, const uint64_t* put_keys, const float* put_values,
             const uint64_t* put_scores, size_t n_erase, const uint64_t* erase_keys) override;
  size_t scan(ScanCursor& cursor, size_t max_rows, uint64_t* keys, float* values,
              uint64_t* scores) override;
  size_t size() override;
  void flush() override {}
  void clear() override;
  StorageStats stats() const override;

  // The table underneath (for inspection).
  Table<uint64_t>& table() { return *table_; }

 private:
  // Calls f(begin, end) for pieces of [0, n), on the pool's threads when n is large enough.
  void in_pieces(size_t n, const std::function<void(size_t, size_t)>& f);

  uint32_t row_dim_;
  std::unique_ptr<Table<uint64_t>> table_;
  core::ThreadPool pool_;
  mutable std::mutex mutex_;  // guards stats_ and orders writes with scans
  StorageStats stats_{};
};

}  // namespace dynemb::storage

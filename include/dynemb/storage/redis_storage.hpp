// A remote tier: rows in one or several Redis servers, keys spread by hash, pipelined.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dynemb/storage/storage.hpp"

namespace dynemb::storage {

// Shape of a Redis store.
struct RedisStorageOptions {
  std::vector<std::string> servers;  // "host:port" each; a key lives on one (hash of the key)
  std::string prefix = "dynemb";     // keys are <prefix>:r:<8 key bytes>; <prefix>:meta marks it
  uint32_t row_dim = 0;              // floats per row, > 0; must match the marker if present
  uint32_t timeout_ms = 2000;        // connect and per-reply timeout
  uint32_t keys_per_command = 512;   // keys per MGET / MSET / DEL inside a pipeline
};

// A Storage in Redis: value = score + row (binary). Each call sends one pipeline per server
// (all servers at once) and reads the replies. A dropped connection is reconnected and the
// server's part of the batch sent again once; if that fails too, the call throws StorageError
// naming the server (parts sent to other servers may be applied; retrying the call is
// idempotent). scan visits each row at least once (Redis SCAN's guarantee).
class RedisStorage final : public Storage {
 public:
  explicit RedisStorage(const RedisStorageOptions& options);
  ~RedisStorage() override;

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

  // The server (index into options.servers) that holds `key`.
  size_t server_of(uint64_t key) const;

  struct Connection;  // one server's connection (redis_storage.cpp)

 private:
  // The key's 8 bytes, most significant first (a row's Redis key is <prefix>:r: + these).
  static std::string key_bytes(uint64_t key);
  [[noreturn]] void fail(const std::string& what);

  RedisStorageOptions options_;
  uint32_t row_dim_;
  std::vector<std::unique_ptr<Connection>> servers_;
  std::mutex call_mutex_;  // one call at a time on the connections
  mutable std::mutex mutex_;
  StorageStats stats_{};
};

}  // namespace dynemb::storage

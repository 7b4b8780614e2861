// Every Storage implementation, as a type the typed tests run over: each makes stores of a row
// width in an environment of its own (a temp dir, a redis-server on a free port).
#pragma once

#include <memory>
#include <string>

#include "dynemb/storage/host_storage.hpp"
#include "dynemb/storage/redis_storage.hpp"
#include "dynemb/storage/rocksdb_storage.hpp"
#include "storage/storage_fixtures.hpp"

namespace dynemb::testing {

struct HostKind {
  static constexpr const char* kName = "host";
  std::string skip_reason() const { return ""; }
  std::shared_ptr<storage::Storage> make(uint32_t dim, uint64_t max_rows = 1ull << 24) {
    storage::HostStorageOptions o;
    o.row_dim = dim;
    o.init_rows = 1024;
    o.max_rows = max_rows;
    return std::make_shared<storage::HostStorage>(o);
  }
};

struct RocksDbKind {
  static constexpr const char* kName = "rocksdb";
  StorageTempDir dir;
  int count = 0;
  std::string skip_reason() const {
#ifdef DYNEMB_WITH_ROCKSDB
    return "";
#else
    return "built without RocksDB (librocksdb-dev)";
#endif
  }
  std::shared_ptr<storage::Storage> make(uint32_t dim, uint64_t = 0) {
    storage::RocksDbStorageOptions o;
    o.directory = dir.path() / ("db" + std::to_string(count++));
    o.row_dim = dim;
    return std::make_shared<storage::RocksDbStorage>(o);
  }
};

// Two redis-servers on loopback, keys spread over both.
struct RedisKind {
  static constexpr const char* kName = "redis";
  std::unique_ptr<RedisServer> a, b;
  int count = 0;
  RedisKind() {
#ifdef DYNEMB_WITH_REDIS
    if (redis_server_installed()) {
      a = std::make_unique<RedisServer>();
      b = std::make_unique<RedisServer>();
    }
#endif
  }
  std::string skip_reason() const {
#ifndef DYNEMB_WITH_REDIS
    return "built without hiredis (libhiredis-dev)";
#endif
    return a ? "" : "redis-server is not installed (apt-get install redis-server)";
  }
  std::shared_ptr<storage::Storage> make(uint32_t dim, uint64_t = 0) {
    storage::RedisStorageOptions o;
    o.servers = {a->address(), b->address()};
    o.prefix = "t" + std::to_string(count++);
    o.row_dim = dim;
    return std::make_shared<storage::RedisStorage>(o);
  }
};

struct MapKind {
  static constexpr const char* kName = "map";
  std::string skip_reason() const { return ""; }
  std::shared_ptr<storage::Storage> make(uint32_t dim, uint64_t = 0) {
    return std::make_shared<MapStorage>(dim);
  }
};

struct KindName {
  template <class T>
  static std::string GetName(int) {
    return T::kName;
  }
};

}  // namespace dynemb::testing

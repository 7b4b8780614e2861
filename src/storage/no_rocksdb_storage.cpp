// RocksDbStorage in a build without RocksDB: constructing one throws NotAvailable.
#include "dynemb/storage/rocksdb_storage.hpp"

namespace dynemb::storage {

struct RocksDbStorage::Db {};

RocksDbStorage::RocksDbStorage(const RocksDbStorageOptions& options)
    : directory_(options.directory), row_dim_(options.row_dim), sync_writes_(false) {
  throw NotAvailable("RocksDbStorage: this build has no RocksDB (install librocksdb-dev, rebuild)");
}
RocksDbStorage::~RocksDbStorage() = default;
void RocksDbStorage::fail(const std::string& what, const std::string&) {
  throw StorageError(what);
}
void RocksDbStorage::find(size_t, const uint64_t*, float*, uint64_t*, bool*) {}
void RocksDbStorage::write(size_t, const uint64_t*, const float*, const uint64_t*, size_t,
                           const uint64_t*) {}
size_t RocksDbStorage::scan(ScanCursor&, size_t, uint64_t*, float*, uint64_t*) {
  return 0;
}
size_t RocksDbStorage::size() {
  return 0;
}
void RocksDbStorage::flush() {}
void RocksDbStorage::clear() {}
StorageStats RocksDbStorage::stats() const {
  return {};
}

}  // namespace dynemb::storage

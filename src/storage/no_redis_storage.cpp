// RedisStorage in a build without hiredis: constructing one throws NotAvailable.
#include "dynemb/storage/redis_storage.hpp"

namespace dynemb::storage {

struct RedisStorage::Connection {};

RedisStorage::RedisStorage(const RedisStorageOptions& options)
    : options_(options), row_dim_(options.row_dim) {
  throw NotAvailable("RedisStorage: this build has no hiredis (install libhiredis-dev, rebuild)");
}
RedisStorage::~RedisStorage() = default;
std::string RedisStorage::describe() const {
  return "redis (not built)";
}
void RedisStorage::find(size_t, const uint64_t*, float*, uint64_t*, bool*) {}
void RedisStorage::write(size_t, const uint64_t*, const float*, const uint64_t*, size_t,
                         const uint64_t*) {}
size_t RedisStorage::scan(ScanCursor&, size_t, uint64_t*, float*, uint64_t*) {
  return 0;
}
size_t RedisStorage::size() {
  return 0;
}
void RedisStorage::clear() {}
StorageStats RedisStorage::stats() const {
  return {};
}
size_t RedisStorage::server_of(uint64_t) const {
  return 0;
}
std::string RedisStorage::key_bytes(uint64_t) {
  return {};
}
void RedisStorage::fail(const std::string& what) {
  throw StorageError(what);
}

}  // namespace dynemb::storage

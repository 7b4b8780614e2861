#include "dynemb/storage/rocksdb_storage.hpp"

#include <rocksdb/db.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <cstring>
#include <string>
#include <vector>

namespace dynemb::storage {
namespace {

// The marker key sorts before every row key (rows start with 'r').
const std::string kMarkerKey = std::string("\x00", 1) + "dynemb.storage";
constexpr uint32_t kFormatVersion = 1;
constexpr char kRowPrefix = 'r';

std::string marker_value(uint32_t row_dim) {
  return "dynemb-storage format=" + std::to_string(kFormatVersion) +
         " row_dim=" + std::to_string(row_dim);
}

void encode_key(uint64_t key, char* out) {
  out[0] = kRowPrefix;
  for (int b = 0; b < 8; ++b) out[1 + b] = static_cast<char>(key >> (56 - 8 * b));
}
uint64_t decode_key(const char* in) {
  uint64_t key = 0;
  for (int b = 0; b < 8; ++b) key = (key << 8) | static_cast<unsigned char>(in[1 + b]);
  return key;
}

bool directory_empty(const std::filesystem::path& dir) {
  return !std::filesystem::exists(dir) || std::filesystem::is_empty(dir);
}

}  // namespace

struct RocksDbStorage::Db {
  std::unique_ptr<rocksdb::DB> db;
};

void RocksDbStorage::fail(const std::string& what, const std::string& status) {
  {
    std::lock_guard lock(mutex_);
    stats_.failures += 1;
  }
  throw StorageError("RocksDbStorage " + directory_.string() + ": " + what + ": " + status);
}

RocksDbStorage::RocksDbStorage(const RocksDbStorageOptions& options)
    : directory_(options.directory),
      row_dim_(options.row_dim),
      sync_writes_(options.sync_writes),
      db_(std::make_unique<Db>()) {
  require(options.row_dim > 0, "RocksDbStorage", "row_dim", std::to_string(options.row_dim),
          "must be > 0");
  require(!options.directory.empty(), "RocksDbStorage", "directory", "\"\"", "must be a path");
  const bool fresh = directory_empty(directory_);
  if (!fresh && !std::filesystem::exists(directory_ / "CURRENT")) {
    throw StorageError("RocksDbStorage: directory " + directory_.string() +
                       " is not empty and holds no RocksDB database (no CURRENT file): not ours, "
                       "refusing to use it");
  }
  rocksdb::Options o;
  o.create_if_missing = fresh;
  o.paranoid_checks = true;
  o.IncreaseParallelism(2);
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(o, directory_.string(), &raw);
  if (!s.ok()) {
    throw StorageError("RocksDbStorage: cannot open " + directory_.string() + ": " + s.ToString());
  }
  db_->db.reset(raw);
  std::string marker;
  const rocksdb::Status m = raw->Get(rocksdb::ReadOptions(), kMarkerKey, &marker);
  if (m.IsNotFound()) {
    bool holds_keys = false;
    {
      std::unique_ptr<rocksdb::Iterator> it(raw->NewIterator(rocksdb::ReadOptions()));
      it->SeekToFirst();
      holds_keys = it->Valid();
    }  // (an iterator must not outlive the database)
    if (holds_keys) {
      db_->db.reset();
      throw StorageError("RocksDbStorage: " + directory_.string() +
                         " holds a RocksDB database without dynemb's marker key: not ours, "
                         "refusing to use it");
    }
    rocksdb::WriteOptions w;
    w.sync = true;
    const rocksdb::Status put = raw->Put(w, kMarkerKey, marker_value(row_dim_));
    if (!put.ok()) {
      db_->db.reset();
      throw StorageError("RocksDbStorage: writing the marker to " + directory_.string() + ": " +
                         put.ToString());
    }
  } else if (!m.ok()) {
    db_->db.reset();
    throw StorageError("RocksDbStorage: reading the marker of " + directory_.string() + ": " +
                       m.ToString());
  } else if (marker != marker_value(row_dim_)) {
    db_->db.reset();
    throw StorageError("RocksDbStorage: " + directory_.string() + " is marked \"" + marker +
                       "\", expected \"" + marker_value(row_dim_) +
                       "\" (another row width or format version)");
  }
}

RocksDbStorage::~RocksDbStorage() = default;

void RocksDbStorage::find(size_t n, const uint64_t* keys, float* values, uint64_t* scores,
                          bool* founds) {
  if (n == 0) return;
  require(keys && values && scores && founds, "RocksDbStorage::find", "keys/values/scores/founds",
          "nullptr", "must be non-null when n = " + std::to_string(n));
  StorageCallTimer timer(stats_, mutex_);
  std::vector<char> key_bytes(n * 9);
  std::vector<rocksdb::Slice> slices(n);
  for (size_t i = 0; i < n; ++i) {
    encode_key(keys[i], &key_bytes[i * 9]);
    slices[i] = rocksdb::Slice(&key_bytes[i * 9], 9);
  }
  std::vector<rocksdb::PinnableSlice> got(n);
  std::vector<rocksdb::Status> status(n);
  db_->db->MultiGet(rocksdb::ReadOptions(), db_->db->DefaultColumnFamily(), n, slices.data(),
                    got.data(), status.data());
  const size_t row_bytes = row_dim_ * sizeof(float);
  size_t found = 0;
  for (size_t i = 0; i < n; ++i) {
    if (status[i].IsNotFound()) {
      founds[i] = false;
      continue;
    }
    if (!status[i].ok()) fail("MultiGet of " + std::to_string(n) + " keys", status[i].ToString());
    if (got[i].size() != 8 + row_bytes)
      fail("row of key " + std::to_string(keys[i]),
           "value of " + std::to_string(got[i].size()) + " bytes, expected " +
               std::to_string(8 + row_bytes) + " (corrupt database)");
    std::memcpy(&scores[i], got[i].data(), 8);
    std::memcpy(values + i * row_dim_, got[i].data() + 8, row_bytes);
    founds[i] = true;
    ++found;
  }
  std::lock_guard lock(mutex_);
  stats_.reads += 1;
  stats_.rows_read += n;
  stats_.rows_found += found;
  stats_.bytes_read += found * (8 + row_bytes);
}

void RocksDbStorage::write(size_t n_put, const uint64_t* put_keys, const float* put_values,
                           const uint64_t* put_scores, size_t n_erase, const uint64_t* erase_keys) {
  if (n_put == 0 && n_erase == 0) return;
  require(n_put == 0 || (put_keys && put_values && put_scores), "RocksDbStorage::write",
          "put_keys / put_values / put_scores", "nullptr",
          "must be non-null when n_put = " + std::to_string(n_put));
  require(n_erase == 0 || erase_keys, "RocksDbStorage::write", "erase_keys", "nullptr",
          "must be non-null when n_erase = " + std::to_string(n_erase));
  StorageCallTimer timer(stats_, mutex_);
  const size_t row_bytes = row_dim_ * sizeof(float);
  // Sized once (a record is a tag, two lengths, the key and the value), and each value goes in
  // as two parts (score, row) without being assembled first.
  rocksdb::WriteBatch batch(64 + n_erase * 16 + n_put * (24 + row_bytes));
  char key[9];
  for (size_t i = 0; i < n_erase; ++i) {
    encode_key(erase_keys[i], key);
    batch.Delete(rocksdb::Slice(key, 9));
  }
  for (size_t i = 0; i < n_put; ++i) {
    encode_key(put_keys[i], key);
    const rocksdb::Slice key_part(key, 9);
    const rocksdb::Slice value_parts[2] = {
        rocksdb::Slice(reinterpret_cast<const char*>(&put_scores[i]), 8),
        rocksdb::Slice(reinterpret_cast<const char*>(put_values + i * row_dim_), row_bytes)};
    batch.Put(rocksdb::SliceParts(&key_part, 1), rocksdb::SliceParts(value_parts, 2));
  }
  rocksdb::WriteOptions w;
  w.sync = sync_writes_;
  const rocksdb::Status s = db_->db->Write(w, &batch);
  if (!s.ok())
    fail("WriteBatch of " + std::to_string(n_put) + " puts and " + std::to_string(n_erase) +
             " erases (not applied; retry)",
         s.ToString());
  std::lock_guard lock(mutex_);
  stats_.writes += 1;
  stats_.rows_written += n_put;
  stats_.rows_erased += n_erase;
  stats_.bytes_written += n_put * (8 + row_bytes);
}

size_t RocksDbStorage::scan(ScanCursor& cursor, size_t max_rows, uint64_t* keys, float* values,
                            uint64_t* scores) {
  StorageCallTimer timer(stats_, mutex_);
  std::unique_ptr<rocksdb::Iterator> it(db_->db->NewIterator(rocksdb::ReadOptions()));
  char start[9];
  if (cursor.position.empty()) {
    start[0] = kRowPrefix;
    std::memset(start + 1, 0, 8);
    it->Seek(rocksdb::Slice(start, 1));
  } else {
    encode_key(std::stoull(cursor.position), start);
    it->Seek(rocksdb::Slice(start, 9));
    if (it->Valid() && it->key() == rocksdb::Slice(start, 9)) it->Next();  // resume after it
  }
  const size_t row_bytes = row_dim_ * sizeof(float);
  size_t got = 0;
  for (; it->Valid() && got < max_rows; it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != 9 || k[0] != kRowPrefix) break;
    const rocksdb::Slice v = it->value();
    if (v.size() != 8 + row_bytes)
      fail("scan", "value of " + std::to_string(v.size()) + " bytes, expected " +
                       std::to_string(8 + row_bytes) + " (corrupt database)");
    keys[got] = decode_key(k.data());
    std::memcpy(&scores[got], v.data(), 8);
    std::memcpy(values + got * row_dim_, v.data() + 8, row_bytes);
    ++got;
  }
  if (!it->status().ok()) fail("scan", it->status().ToString());
  if (got > 0) cursor.position = std::to_string(keys[got - 1]);
  cursor.finished = !(it->Valid() && it->key().size() == 9 && it->key()[0] == kRowPrefix);
  std::lock_guard lock(mutex_);
  stats_.bytes_read += got * (8 + row_bytes);
  return got;
}

size_t RocksDbStorage::size() {
  std::unique_ptr<rocksdb::Iterator> it(db_->db->NewIterator(rocksdb::ReadOptions()));
  size_t count = 0;
  for (it->Seek(rocksdb::Slice(&kRowPrefix, 1)); it->Valid() && it->key()[0] == kRowPrefix;
       it->Next())
    ++count;
  if (!it->status().ok()) fail("size", it->status().ToString());
  return count;
}

void RocksDbStorage::flush() {
  StorageCallTimer timer(stats_, mutex_);
  const rocksdb::Status s = db_->db->FlushWAL(true);
  if (!s.ok()) fail("flush (WAL sync)", s.ToString());
}

void RocksDbStorage::clear() {
  char first[9], last[9];
  encode_key(0, first);
  encode_key(~0ull, last);
  rocksdb::WriteBatch batch;
  batch.DeleteRange(rocksdb::Slice(first, 9), rocksdb::Slice(last, 9));
  batch.Delete(rocksdb::Slice(last, 9));
  const rocksdb::Status s = db_->db->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) fail("clear", s.ToString());
}

StorageStats RocksDbStorage::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace dynemb::storage

// dump_storage / load_storage: one file of a store's rows (docs/storage.md, "Storage files").
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "dynemb/storage/storage.hpp"

namespace dynemb::storage {
namespace {

constexpr char kMagic[8] = {'D', 'Y', 'N', 'S', 'T', 'O', 'R', '1'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kChunk = 4096;

// 64-bit FNV-1a over the bytes (a checksum against truncation and corruption).
uint64_t fnv1a(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
constexpr uint64_t kFnvStart = 0xcbf29ce484222325ull;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t row_dim;
  uint64_t rows;
};

[[noreturn]] void bad_file(const std::filesystem::path& path, const std::string& what) {
  throw InvalidArgument("load_storage: file " + path.string() + ": " + what);
}

}  // namespace

uint64_t dump_storage(Storage& store, const std::filesystem::path& path) {
  const uint32_t dim = store.row_dim();
  const std::filesystem::path tmp = path.string() + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) throw StorageError("dump_storage: cannot create " + tmp.string());
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kFormatVersion;
  h.row_dim = dim;
  out.write(reinterpret_cast<const char*>(&h), sizeof h);  // rows patched at the end
  std::vector<uint64_t> keys(kChunk), scores(kChunk);
  std::vector<float> values(kChunk * dim);
  uint64_t rows = 0, sum = kFnvStart;
  ScanCursor cursor;
  while (!cursor.done()) {
    const size_t got = store.scan(cursor, kChunk, keys.data(), values.data(), scores.data());
    for (size_t i = 0; i < got; ++i) {
      out.write(reinterpret_cast<const char*>(&keys[i]), 8);
      out.write(reinterpret_cast<const char*>(&scores[i]), 8);
      out.write(reinterpret_cast<const char*>(&values[i * dim]), dim * sizeof(float));
      sum = fnv1a(sum, &keys[i], 8);
      sum = fnv1a(sum, &scores[i], 8);
      sum = fnv1a(sum, &values[i * dim], dim * sizeof(float));
    }
    rows += got;
  }
  out.write(reinterpret_cast<const char*>(&sum), 8);
  h.rows = rows;
  out.seekp(0);
  out.write(reinterpret_cast<const char*>(&h), sizeof h);
  out.close();
  if (!out) throw StorageError("dump_storage: writing " + tmp.string() + " failed");
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw StorageError("dump_storage: rename to " + path.string() + ": " + ec.message());
  return rows;
}

uint64_t load_storage(Storage& store, const std::filesystem::path& path) {
  const uint32_t dim = store.row_dim();
  std::ifstream in(path, std::ios::binary);
  if (!in) bad_file(path, "cannot be opened");
  Header h{};
  in.read(reinterpret_cast<char*>(&h), sizeof h);
  if (!in || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    bad_file(path, "not a storage dump (magic)");
  if (h.version != kFormatVersion)
    bad_file(path, "format version " + std::to_string(h.version) + ", this build reads " +
                       std::to_string(kFormatVersion));
  if (h.row_dim != dim)
    bad_file(path, "row_dim " + std::to_string(h.row_dim) + ", the store's row_dim is " +
                       std::to_string(dim));
  const uint64_t record = 16 + uint64_t{dim} * sizeof(float);
  const uint64_t expected = sizeof h + h.rows * record + 8;
  const uint64_t actual = std::filesystem::file_size(path);
  if (actual != expected)
    bad_file(path,
             "size " + std::to_string(actual) + " bytes, header says " + std::to_string(expected));
  // First pass: verify the checksum before touching the store.
  std::vector<char> buf(kChunk * record);
  uint64_t sum = kFnvStart;
  for (uint64_t done = 0; done < h.rows;) {
    const uint64_t take = std::min<uint64_t>(kChunk, h.rows - done);
    in.read(buf.data(), static_cast<std::streamsize>(take * record));
    sum = fnv1a(sum, buf.data(), take * record);
    done += take;
  }
  uint64_t stored = 0;
  in.read(reinterpret_cast<char*>(&stored), 8);
  if (!in || stored != sum) bad_file(path, "checksum mismatch (corrupt file)");
  // Second pass: store the rows.
  in.clear();
  in.seekg(sizeof h);
  std::vector<uint64_t> keys(kChunk), scores(kChunk);
  std::vector<float> values(kChunk * dim);
  for (uint64_t done = 0; done < h.rows;) {
    const uint64_t take = std::min<uint64_t>(kChunk, h.rows - done);
    in.read(buf.data(), static_cast<std::streamsize>(take * record));
    for (uint64_t i = 0; i < take; ++i) {
      const char* r = buf.data() + i * record;
      std::memcpy(&keys[i], r, 8);
      std::memcpy(&scores[i], r + 8, 8);
      std::memcpy(&values[i * dim], r + 16, dim * sizeof(float));
    }
    store.insert_or_assign(take, keys.data(), values.data(), scores.data());
    done += take;
  }
  return h.rows;
}

}  // namespace dynemb::storage

// Reading checkpoints: directory sources, checked files, shard readers, verify and inspect.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "crc32c.hpp"
#include "shard_reader.hpp"

namespace dynemb::checkpoint {
namespace {

constexpr uint64_t kMaxManifestBytes = 64u << 20;

const FileEntry& entry_of(const ShardEntry& s, FileContent content, const std::string& table) {
  switch (content) {
    case FileContent::kKeys:
      return s.keys;
    case FileContent::kValues:
      return s.values;
    case FileContent::kScores:
      return s.scores;
    case FileContent::kOptimizerState:
    default:
      if (!s.optimizer_state) {
        throw CheckpointError("table \"" + table + "\" shard " + std::to_string(s.rank) +
                              " has no optimizer_state file");
      }
      return *s.optimizer_state;
  }
}

template <class T>
void check_field(const std::string& file, const char* field, T found, T expected) {
  if (found != expected) {
    throw CheckpointError(file + ": header " + field + " = " + std::to_string(found) +
                          ", the manifest says " + std::to_string(expected) +
                          " (a file from another checkpoint or table?)");
  }
}

class DirectorySource final : public CheckpointSource {
 public:
  DirectorySource(std::filesystem::path dir, bool direct_io)
      : dir_(std::move(dir)), direct_io_(direct_io) {}

  std::string read_manifest() override {
    const std::filesystem::path path = dir_ / kManifestName;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir_, ec)) {
      throw CheckpointError(dir_.string() + ": no such checkpoint directory");
    }
    const uint64_t bytes = std::filesystem::file_size(path, ec);
    if (ec) {
      throw CheckpointError(path.string() +
                            ": missing (not a checkpoint, or a dump that never finished)");
    }
    if (bytes > kMaxManifestBytes) {
      throw CheckpointError(path.string() + ": " + std::to_string(bytes) + " bytes, limit " +
                            std::to_string(kMaxManifestBytes));
    }
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in && !in.eof()) throw CheckpointError(path.string() + ": read failed");
    return text.str();
  }

  std::unique_ptr<ByteSource> open(const std::string& relative) override {
    const std::filesystem::path path = dir_ / relative;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      throw CheckpointError(path.string() + ": missing (listed in the manifest)");
    }
    return open_file_source(path, direct_io_);
  }

  uint64_t size_of(const std::string& relative) override {
    const std::filesystem::path path = dir_ / relative;
    std::error_code ec;
    const uint64_t bytes = std::filesystem::file_size(path, ec);
    if (ec) throw CheckpointError(path.string() + ": missing (listed in the manifest)");
    return bytes;
  }

 private:
  std::filesystem::path dir_;
  bool direct_io_;
};

class MemoryCheckpoint final : public CheckpointSource {
 public:
  MemoryCheckpoint(std::string manifest, std::string files)
      : manifest_(std::move(manifest)), files_(std::move(files)) {}
  std::string read_manifest() override { return manifest_; }
  std::unique_ptr<ByteSource> open(const std::string&) override {
    return open_memory_source(files_);
  }
  uint64_t size_of(const std::string&) override { return files_.size(); }

 private:
  std::string manifest_, files_;
};

}  // namespace

// --- CheckedFile ---------------------------------------------------------------------------------

CheckedFile::CheckedFile(CheckpointSource& source, const TableEntry& table, const ShardEntry& shard,
                         FileContent content, uint32_t world_size)
    : entry_(entry_of(shard, content, table.name)), source_(source.open(entry_.path)) {
  const std::string& file = entry_.path;
  if (source_->size() != entry_.bytes) {
    throw CheckpointError(file + ": size is " + std::to_string(source_->size()) +
                          " bytes, the manifest says " + std::to_string(entry_.bytes) +
                          (source_->size() < entry_.bytes ? " (truncated)" : " (extra bytes)"));
  }
  uint8_t raw[kHeaderBytes];
  read_exact(*source_, raw, kHeaderBytes, file);
  const FileHeader h = decode_header(raw, file);
  const FileHeader want = expected_header(table, shard, content, world_size);
  if (h.content != want.content) {
    throw CheckpointError(file + ": holds " + to_string(h.content) + ", the manifest lists it as " +
                          to_string(want.content));
  }
  if (h.dtype != want.dtype) {
    throw CheckpointError(file + ": dtype " + to_string(h.dtype) + ", the manifest says " +
                          to_string(want.dtype));
  }
  check_field(file, "width", h.width, want.width);
  check_field(file, "rows", h.rows, want.rows);
  check_field(file, "rank", h.rank, want.rank);
  check_field(file, "world_size", h.world_size, want.world_size);
}

void CheckedFile::read(void* dst, size_t n) {
  read_exact(*source_, dst, n, entry_.path);
  read_ += n;
}

void CheckedFile::finish() {
  if (read_ + kHeaderBytes != entry_.bytes) {
    throw CheckpointError(entry_.path + ": " + std::to_string(read_) + " payload bytes read of " +
                          std::to_string(entry_.bytes - kHeaderBytes));
  }
  const uint32_t crc = source_->crc_after(kHeaderBytes);
  if (crc != entry_.crc32c) {
    throw CheckpointError(entry_.path + ": checksum mismatch (CRC32C " + std::to_string(crc) +
                          ", the manifest says " + std::to_string(entry_.crc32c) +
                          "): the file is corrupt");
  }
}

void CheckedFile::verify_rest() {
  const uint64_t rest = entry_.bytes - kHeaderBytes - read_;
  const size_t got = source_->discard(static_cast<size_t>(rest));
  read_ += got;
  if (got != rest) {
    throw CheckpointError(entry_.path + ": truncated: wanted " + std::to_string(rest) +
                          " more bytes, got " + std::to_string(got));
  }
  finish();
}

void verify_in_parallel(std::vector<std::function<void()>> checks) {
  // A few files at once: the disk serves several streams faster than one, and each file's
  // checksum runs in its own read-ahead thread.
  constexpr size_t kStreams = 4;
  std::vector<std::string> errors(checks.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < std::min(kStreams, checks.size()); ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < checks.size(); i = next++) {
        try {
          checks[i]();
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) {
    if (!e.empty()) throw CheckpointError(e);  // the first failing file, in manifest order
  }
}

// --- ShardReader ---------------------------------------------------------------------------------

ShardReader::ShardReader(CheckpointSource& source, const TableEntry& table, const ShardEntry& shard,
                         uint32_t world_size, bool read_state)
    : table_(table),
      remaining_(shard.rows),
      keys_(source, table, shard, FileContent::kKeys, world_size),
      values_(source, table, shard, FileContent::kValues, world_size),
      scores_(source, table, shard, FileContent::kScores, world_size) {
  if (read_state && table.has_optimizer_state) {
    state_ = std::make_unique<CheckedFile>(source, table, shard, FileContent::kOptimizerState,
                                           world_size);
  }
}

void ShardReader::read(size_t n, uint64_t* keys, float* rows, size_t row_stride, uint64_t* scores) {
  if (n > remaining_) {
    throw CheckpointError("table \"" + table_.name + "\": asked for " + std::to_string(n) +
                          " rows, " + std::to_string(remaining_) + " remain");
  }
  keys_.read(keys, n * sizeof(uint64_t));
  scores_.read(scores, n * sizeof(uint64_t));
  const ValueType type = value_type_of(table_.value_dtype);
  const size_t value_bytes = size_t{table_.dim} * dtype_bytes(table_.value_dtype);
  const uint32_t words = value_words(type, table_.dim);
  if (!state_ && row_stride == table_.dim && type == ValueType::kFloat32) {
    values_.read(rows, n * value_bytes);
  } else {
    const size_t state_bytes = size_t{table_.optimizer_state_dim} * sizeof(float);
    for (size_t i = 0; i < n; ++i) {
      float* row = rows + i * row_stride;
      if (value_bytes < words * sizeof(float)) row[words - 1] = 0.0f;  // an odd dim's last half
      values_.read(row, value_bytes);
      if (state_) state_->read(row + words, state_bytes);
    }
  }
  remaining_ -= n;
}

void ShardReader::finish() {
  keys_.finish();
  values_.finish();
  scores_.finish();
  if (state_) state_->finish();
}

// --- public reading API --------------------------------------------------------------------------

std::unique_ptr<CheckpointSource> open_directory(const std::filesystem::path& dir, bool direct_io) {
  return std::make_unique<DirectorySource>(dir, direct_io);
}

std::unique_ptr<CheckpointSource> open_memory_checkpoint(std::string manifest, std::string files) {
  return std::make_unique<MemoryCheckpoint>(std::move(manifest), std::move(files));
}

Manifest read_manifest(const std::filesystem::path& dir) {
  DirectorySource source(dir, false);
  return manifest_from_json(source.read_manifest(), (dir / kManifestName).string());
}

void check_file_sizes(CheckpointSource& source, const Manifest& manifest,
                      const std::vector<std::string>& tables) {
  for (const TableEntry& t : manifest.tables) {
    if (!tables.empty() && std::find(tables.begin(), tables.end(), t.name) == tables.end()) {
      continue;
    }
    for (const ShardEntry& s : t.shards) {
      std::vector<const FileEntry*> files{&s.keys, &s.values, &s.scores};
      if (s.optimizer_state) files.push_back(&*s.optimizer_state);
      for (const FileEntry* f : files) {
        const uint64_t bytes = source.size_of(f->path);
        if (bytes != f->bytes) {
          throw CheckpointError(f->path + ": size is " + std::to_string(bytes) +
                                " bytes, the manifest says " + std::to_string(f->bytes) +
                                (bytes < f->bytes ? " (truncated)" : " (extra bytes)"));
        }
      }
    }
  }
}

void verify_files(CheckpointSource& source, const Manifest& manifest,
                  const std::vector<std::string>& tables) {
  std::vector<std::function<void()>> checks;
  for (const TableEntry& t : manifest.tables) {
    if (!tables.empty() && std::find(tables.begin(), tables.end(), t.name) == tables.end()) {
      continue;
    }
    for (const ShardEntry& s : t.shards) {
      std::vector<FileContent> contents{FileContent::kKeys, FileContent::kValues,
                                        FileContent::kScores};
      if (t.has_optimizer_state) contents.push_back(FileContent::kOptimizerState);
      for (FileContent c : contents) {
        checks.push_back([&source, &t, &s, c, world = manifest.world_size] {
          CheckedFile(source, t, s, c, world).verify_rest();
        });
      }
    }
  }
  verify_in_parallel(std::move(checks));
}

InspectResult inspect(const std::filesystem::path& dir, bool verify) {
  InspectResult r;
  auto source = open_directory(dir, true);
  const std::string text = source->read_manifest();
  const std::string where = (dir / kManifestName).string();
  // A manifest whose own checksum fails is still shown (never verified).
  const std::string checksum_problem = manifest_checksum_problem(text);
  r.manifest = manifest_from_json(text, where, /*check_own_checksum=*/false);
  for (const TableEntry& t : r.manifest.tables) {
    for (const ShardEntry& s : t.shards) {
      r.total_bytes += s.keys.bytes + s.values.bytes + s.scores.bytes +
                       (s.optimizer_state ? s.optimizer_state->bytes : 0);
    }
  }
  if (verify && !checksum_problem.empty()) {
    r.problem = where + ": " + checksum_problem;
  } else if (verify) {
    try {
      check_file_sizes(*source, r.manifest);
      verify_files(*source, r.manifest);
      r.verified = true;
    } catch (const Error& e) {
      r.problem = dir.string() + ": " + e.what();
    }
  }
  return r;
}

}  // namespace dynemb::checkpoint

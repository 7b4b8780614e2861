// Reads one shard of a table (its keys, values, scores and optional optimizer-state files) in
// chunks of rows, checking sizes and headers on open and every payload CRC32C at the end.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "byte_stream.hpp"
#include "dynemb/checkpoint/format.hpp"

namespace dynemb::checkpoint {

// One data file opened for reading, its header checked against the manifest.
class CheckedFile {
 public:
  CheckedFile(CheckpointSource& source, const TableEntry& table, const ShardEntry& shard,
              FileContent content, uint32_t world_size);
  // Reads n bytes of payload (CheckpointError if the file ends first).
  void read(void* dst, size_t n);
  // Checks that the whole payload was read and its CRC32C matches the manifest.
  void finish();
  // Reads the rest of the payload and finish()es.
  void verify_rest();

 private:
  const FileEntry& entry_;
  std::unique_ptr<ByteSource> source_;
  uint64_t read_ = 0;
};

class ShardReader {
 public:
  // Opens the shard's files (optimizer state only when `read_state` and present).
  ShardReader(CheckpointSource& source, const TableEntry& table, const ShardEntry& shard,
              uint32_t world_size, bool read_state);
  // Rows not read yet.
  uint64_t remaining() const { return remaining_; }
  // Reads the next n <= remaining() rows: key bits, n scores, and row i's values (dim elements of
  // the file's value dtype, in value_words(type, dim) words: 16-bit types two a word, an odd
  // dim's last half 0) to rows + i * row_stride followed, when reading state, by its
  // optimizer_state_dim floats.
  void read(size_t n, uint64_t* keys, float* rows, size_t row_stride, uint64_t* scores);
  // Checks every file's CRC32C after the last row (CheckpointError on a mismatch).
  void finish();

 private:
  const TableEntry& table_;
  uint64_t remaining_;
  CheckedFile keys_, values_, scores_;
  std::unique_ptr<CheckedFile> state_;
};

// Runs file checks a few at a time; rethrows the first failure (in list order) as
// CheckpointError after all finished.
void verify_in_parallel(std::vector<std::function<void()>> checks);

// An in-memory checkpoint: the manifest text, and `files` served for every data file path.
std::unique_ptr<CheckpointSource> open_memory_checkpoint(std::string manifest, std::string files);

}  // namespace dynemb::checkpoint

// Sequential byte streams for checkpoint files: a sink that appends (O_DIRECT with a
// background writer thread where the file system allows it) and a source that reads ahead.
// Both keep a running CRC32C of the payload (the bytes after a file's header).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace dynemb::checkpoint {

// Appends bytes to a new file. Nothing is durable until finish() returns.
class FileSink {
 public:
  // Creates `path` (which must not exist); `direct_io` asks for O_DIRECT (silently buffered
  // where the file system refuses it). `header_bytes` leading bytes are excluded from crc().
  FileSink(const std::filesystem::path& path, bool direct_io, size_t header_bytes);
  ~FileSink();
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  // Appends n bytes.
  void append(const void* data, size_t n);
  // Bytes appended so far.
  uint64_t size() const { return written_; }
  // CRC32C of the bytes after the header (valid after finish(); computed by the writer thread).
  uint32_t crc() const { return crc_; }
  // Replaces the first `n` bytes (the header, n <= header_bytes) with `data`, writes everything,
  // truncates to size() and fsyncs. The sink is closed afterwards.
  void finish(const void* header, size_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint64_t written_ = 0;
  uint32_t crc_ = 0;
  size_t header_bytes_;
};

// Reads a file from its start, in order.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Total bytes of the file.
  virtual uint64_t size() const = 0;
  // Copies the next min(n, remaining) bytes to dst; returns how many.
  virtual size_t read(void* dst, size_t n) = 0;
  // Skips the next min(n, remaining) bytes; returns how many.
  virtual size_t discard(size_t n) = 0;
  // CRC32C of the file's bytes from `skip` on; call once every byte was read (file sources
  // compute it in their read-ahead thread).
  virtual uint32_t crc_after(uint64_t skip) = 0;
};

// A file read ahead in large blocks by a background thread (O_DIRECT where allowed).
std::unique_ptr<ByteSource> open_file_source(const std::filesystem::path& path, bool direct_io);

// A source over bytes in memory (tests, the fuzz target).
std::unique_ptr<ByteSource> open_memory_source(std::string bytes);

// Reads exactly n bytes or throws CheckpointError naming `what` ("<file>: truncated ...").
void read_exact(ByteSource& source, void* dst, size_t n, const std::string& what);

}  // namespace dynemb::checkpoint

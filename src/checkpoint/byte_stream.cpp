#include "byte_stream.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "crc32c.hpp"
#include "dynemb/checkpoint/file_ops.hpp"
#include "dynemb/checkpoint/format.hpp"

namespace dynemb::checkpoint {
namespace {

constexpr size_t kAlign = 4096;                // O_DIRECT offset / length / address alignment
constexpr size_t kBlockBytes = 8u << 20;       // one write or read request
constexpr size_t kReadAhead = 3;               // blocks a source keeps in flight
constexpr size_t kFirstReadBytes = 64u << 10;  // the first read: header and a little data, so
                                               // a file only opened to check its header costs
                                               // one small read

[[noreturn]] void throw_errno(const std::string& what, const std::filesystem::path& path, int err) {
  throw CheckpointError(path.string() + ": " + what + " failed: " + std::strerror(err));
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t, AlignedFree>;

AlignedBytes aligned_bytes(size_t n) {
  void* p = std::aligned_alloc(kAlign, n);
  if (p == nullptr) throw std::bad_alloc();
  return AlignedBytes(static_cast<uint8_t*>(p));
}

size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

// Opens with O_DIRECT when asked and allowed, plain otherwise.
int open_maybe_direct(const std::filesystem::path& path, int flags, bool direct_io) {
  if (direct_io) {
    const int fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EINVAL) throw_errno("open", path, errno);
    if (flags & O_CREAT) ::unlink(path.c_str());
  }
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("open", path, errno);
  return fd;
}

void pwrite_all(int fd, const uint8_t* p, size_t n, uint64_t offset,
                const std::filesystem::path& path) {
  announce_file_op(FileOp::kWrite, path);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno("write", path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

}  // namespace

// --- FileSink ------------------------------------------------------------------------------------

struct FileSink::Impl {
  std::filesystem::path path;
  int fd = -1;
  AlignedBytes buffers[2];
  int current = 0;
  size_t fill = 0;
  uint64_t flushed = 0;  // file offset of buffers[current]'s first byte
  AlignedBytes first_block;
  bool first_block_written = false;

  // The background writer: one request at a time.
  std::thread worker;
  std::mutex mutex;
  std::condition_variable cv;
  bool busy = false, stop = false;
  const uint8_t* job_data = nullptr;
  size_t job_bytes = 0;
  uint64_t job_offset = 0;
  std::string error;
  size_t header_bytes = 0;
  uint64_t payload_end = 0;  // bytes the CRC covers end here (the unpadded file size)
  uint32_t crc = 0;          // of the payload written so far (writer thread)

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      cv.wait(lock, [&] { return busy || stop; });
      if (!busy) return;
      const uint8_t* data = job_data;
      const size_t bytes = job_bytes;
      const uint64_t offset = job_offset;
      const uint64_t end = std::min<uint64_t>(offset + bytes, payload_end);
      lock.unlock();
      // The payload part of this block (the header and the tail padding are not covered).
      if (end > offset && end > header_bytes) {
        const uint64_t from = std::max<uint64_t>(offset, header_bytes);
        crc = crc32c_extend(crc, data + (from - offset), end - from);
      }
      std::string failure;
      try {
        pwrite_all(fd, data, bytes, offset, path);
      } catch (const std::exception& e) {
        failure = e.what();
      }
      lock.lock();
      if (!failure.empty() && error.empty()) error = failure;
      busy = false;
      cv.notify_all();
    }
  }

  // Waits for the request in flight; rethrows its failure.
  void wait_idle() {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return !busy; });
    if (!error.empty()) throw CheckpointError(error);
  }

  void submit(const uint8_t* data, size_t bytes, uint64_t offset, uint64_t payload_limit) {
    wait_idle();
    std::lock_guard lock(mutex);
    payload_end = payload_limit;
    job_data = data;
    job_bytes = bytes;
    job_offset = offset;
    busy = true;
    cv.notify_all();
  }

  // Hands the current buffer (`bytes`, of which `payload` are real, the rest padding) to the
  // writer and switches to the other one.
  void flush_current(size_t bytes, size_t payload) {
    if (flushed == 0 && bytes >= kAlign) {
      std::memcpy(first_block.get(), buffers[current].get(), kAlign);
      first_block_written = true;
    }
    submit(buffers[current].get(), bytes, flushed, flushed + payload);
    flushed += bytes;
    current ^= 1;
    fill = 0;
  }

  ~Impl() {
    {
      std::lock_guard lock(mutex);
      stop = true;
      cv.notify_all();
    }
    if (worker.joinable()) worker.join();
    if (fd >= 0) ::close(fd);
  }
};

FileSink::FileSink(const std::filesystem::path& path, bool direct_io, size_t header_bytes)
    : impl_(std::make_unique<Impl>()), header_bytes_(header_bytes) {
  impl_->path = path;
  announce_file_op(FileOp::kCreateFile, path);
  impl_->fd = open_maybe_direct(path, O_WRONLY | O_CREAT | O_EXCL, direct_io);
  impl_->buffers[0] = aligned_bytes(kBlockBytes);
  impl_->buffers[1] = aligned_bytes(kBlockBytes);
  impl_->first_block = aligned_bytes(kAlign);
  impl_->header_bytes = header_bytes;
  impl_->worker = std::thread([impl = impl_.get()] { impl->run(); });
}

FileSink::~FileSink() = default;

void FileSink::append(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  written_ += n;
  Impl& s = *impl_;
  while (n > 0) {
    const size_t take = std::min(n, kBlockBytes - s.fill);
    std::memcpy(s.buffers[s.current].get() + s.fill, p, take);
    s.fill += take;
    p += take;
    n -= take;
    if (s.fill == kBlockBytes) s.flush_current(kBlockBytes, kBlockBytes);
  }
}

void FileSink::finish(const void* header, size_t n) {
  Impl& s = *impl_;
  if (s.fd < 0) throw CheckpointError(s.path.string() + ": finish called twice");
  if (s.flushed == 0) {
    std::memcpy(s.buffers[s.current].get(), header, n);  // the header is still in memory
  } else {
    std::memcpy(s.first_block.get(), header, n);
  }
  if (s.fill > 0) {
    const size_t padded = round_up(s.fill, kAlign);
    std::memset(s.buffers[s.current].get() + s.fill, 0, padded - s.fill);
    s.flush_current(padded, s.fill);
  }
  s.wait_idle();
  crc_ = s.crc;
  if (s.first_block_written && s.flushed > kAlign && written_ >= kAlign) {
    pwrite_all(s.fd, s.first_block.get(), kAlign, 0, s.path);
  }
  announce_file_op(FileOp::kWrite, s.path);  // the truncation to the unpadded size
  if (::ftruncate(s.fd, static_cast<off_t>(written_)) != 0) throw_errno("ftruncate", s.path, errno);
  announce_file_op(FileOp::kFsyncFile, s.path);
  if (::fsync(s.fd) != 0) throw_errno("fsync", s.path, errno);
  announce_file_op(FileOp::kCloseFile, s.path);
  const int fd = s.fd;
  s.fd = -1;
  if (::close(fd) != 0) throw_errno("close", s.path, errno);
}

// --- FileSource ----------------------------------------------------------------------------------

namespace {

// File sources checksum from the end of the data files' header.
constexpr uint64_t kCrcSkip = kHeaderBytes;

class FileSource final : public ByteSource {
 public:
  FileSource(const std::filesystem::path& path, bool direct_io) : path_(path) {
    fd_ = open_maybe_direct(path, O_RDONLY, direct_io);
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      throw_errno("stat", path, err);
    }
    size_ = static_cast<uint64_t>(st.st_size);
    for (size_t i = 0; i < kReadAhead; ++i) {
      blocks_.push_back(aligned_bytes(kBlockBytes));
      free_.push_back(blocks_.back().get());
    }
    worker_ = std::thread([this] { run(); });
  }

  ~FileSource() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      cv_.notify_all();
    }
    worker_.join();
    ::close(fd_);
  }

  uint64_t size() const override { return size_; }

  uint32_t crc_after(uint64_t skip) override {
    if (skip != kCrcSkip) throw CheckpointError(path_.string() + ": unsupported CRC offset");
    std::unique_lock lock(mutex_);
    crc_wanted_ = true;  // lets the reader look past a small file's first block
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_; });
    if (!error_.empty()) throw CheckpointError(error_);
    return crc_;
  }

  size_t read(void* dst, size_t n) override { return consume(static_cast<uint8_t*>(dst), n); }
  size_t discard(size_t n) override { return consume(nullptr, n); }

 private:
  // Copies (out != nullptr) or skips the next n bytes.
  size_t consume(uint8_t* out, size_t n) {
    size_t done = 0;
    while (done < n) {
      if (pos_ == len_) {
        if (!next_block()) break;
      }
      const size_t take = std::min(n - done, len_ - pos_);
      if (out != nullptr) std::memcpy(out + done, current_ + pos_, take);
      pos_ += take;
      done += take;
    }
    return done;
  }

  struct Filled {
    uint8_t* data;
    size_t bytes;
  };

  // Moves to the next block read ahead; false at the end of the file.
  bool next_block() {
    std::unique_lock lock(mutex_);
    if (current_ != nullptr) {
      free_.push_back(current_);
      current_ = nullptr;
      cv_.notify_all();
    }
    ++demand_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !filled_.empty() || done_; });
    if (filled_.empty()) {
      if (!error_.empty()) throw CheckpointError(error_);
      return false;
    }
    const Filled f = filled_.front();
    filled_.pop_front();
    current_ = f.data;
    len_ = f.bytes;
    pos_ = 0;
    return len_ > 0;
  }

  void run() {
    uint64_t offset = 0;
    for (;;) {
      uint8_t* block = nullptr;
      {
        std::unique_lock lock(mutex_);
        // Block 0 (small) at once; further blocks only once the consumer asked for block 1.
        cv_.wait(lock, [&] {
          return stop_ || (!free_.empty() && (issued_ == 0 || demand_ >= 2 || crc_wanted_));
        });
        if (stop_) return;
        ++issued_;
        block = free_.back();
        free_.pop_back();
      }
      size_t got = 0;
      std::string failure;
      const size_t want = offset == 0 ? kFirstReadBytes : kBlockBytes;
      while (got < want && offset + got < size_) {
        const ssize_t r = ::pread(fd_, block + got, want - got, static_cast<off_t>(offset + got));
        if (r < 0) {
          if (errno == EINTR) continue;
          failure = path_.string() + ": read failed: " + std::strerror(errno);
          break;
        }
        if (r == 0) break;
        got += static_cast<size_t>(r);
      }
      if (offset + got > kCrcSkip) {
        const uint64_t from = std::max<uint64_t>(offset, kCrcSkip);
        crc_ = crc32c_extend(crc_, block + (from - offset), offset + got - from);
      }
      offset += got;
      std::lock_guard lock(mutex_);
      if (!failure.empty()) {
        error_ = failure;
        done_ = true;
        free_.push_back(block);
        cv_.notify_all();
        return;
      }
      if (got == 0) {
        free_.push_back(block);
        done_ = true;
        cv_.notify_all();
        return;
      }
      filled_.push_back({block, got});
      cv_.notify_all();
    }
  }

  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::vector<AlignedBytes> blocks_;
  std::vector<uint8_t*> free_;
  std::deque<Filled> filled_;
  uint8_t* current_ = nullptr;
  size_t len_ = 0, pos_ = 0;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false, done_ = false;
  uint64_t demand_ = 0, issued_ = 0;  // blocks the consumer asked for / the worker started
  uint32_t crc_ = 0;                  // of the bytes after the header read so far (reader thread)
  bool crc_wanted_ = false;
  std::string error_;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::string bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  uint32_t crc_after(uint64_t skip) override {
    return skip >= bytes_.size() ? 0 : crc32c(bytes_.data() + skip, bytes_.size() - skip);
  }
  size_t read(void* dst, size_t n) override {
    const size_t take = std::min(n, bytes_.size() - pos_);
    if (take > 0) std::memcpy(dst, bytes_.data() + pos_, take);
    pos_ += take;
    return take;
  }
  size_t discard(size_t n) override {
    const size_t take = std::min(n, bytes_.size() - pos_);
    pos_ += take;
    return take;
  }

 private:
  std::string bytes_;
  size_t pos_ = 0;
};

}  // namespace

std::unique_ptr<ByteSource> open_file_source(const std::filesystem::path& path, bool direct_io) {
  return std::make_unique<FileSource>(path, direct_io);
}

std::unique_ptr<ByteSource> open_memory_source(std::string bytes) {
  return std::make_unique<MemorySource>(std::move(bytes));
}

void read_exact(ByteSource& source, void* dst, size_t n, const std::string& what) {
  const size_t got = source.read(dst, n);
  if (got != n) {
    throw CheckpointError(what + ": truncated: wanted " + std::to_string(n) + " more bytes, got " +
                          std::to_string(got));
  }
}

}  // namespace dynemb::checkpoint

// Raw binary files in and out of a WholeMemory, through pread / pwrite of each rank's part.
#include "dynemb/wholememory/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dynemb/core/error.hpp"
#include "exchange.hpp"

namespace dynemb::wholememory {
namespace {

constexpr uint64_t kChunkBytes = 64ull << 20;  // staging of device parts

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

Backend memory_of(const WholeMemory& m) {
  return m.location() == MemoryLocation::kHost ? Backend::kCpu : Backend::kCuda;
}

// Reads [offset, offset + length) of `path` into `dst` (host); "" or the failure.
std::string read_range(const std::string& path, uint64_t offset, uint64_t length, char* dst) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_text("open " + path);
  std::string failure;
  while (length > 0) {
    const ssize_t n =
        ::pread(fd, dst, std::min<uint64_t>(length, 1ull << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failure = n < 0 ? errno_text("read " + path) : path + ": shorter than its size said";
      break;
    }
    dst += n;
    offset += static_cast<uint64_t>(n);
    length -= static_cast<uint64_t>(n);
  }
  ::close(fd);
  return failure;
}

// Writes `length` bytes of `src` (host) at `offset` of the open `fd`; "" or the failure.
std::string write_range(int fd, const std::string& path, uint64_t offset, uint64_t length,
                        const char* src) {
  while (length > 0) {
    const ssize_t n =
        ::pwrite(fd, src, std::min<uint64_t>(length, 1ull << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_text("write " + path);
    src += n;
    offset += static_cast<uint64_t>(n);
    length -= static_cast<uint64_t>(n);
  }
  return "";
}

// Writes this rank's part to `fd` at `file_offset`, staging device memory through the host.
std::string write_part(const WholeMemory& m, int fd, const std::string& path,
                       uint64_t file_offset) {
  const Backend memory = memory_of(m);
  const char* part = static_cast<const char*>(m.local_data());
  const uint64_t bytes = m.local_bytes();
  if (memory == Backend::kCpu) return write_range(fd, path, file_offset, bytes, part);
  std::vector<char> staging(std::min(bytes, kChunkBytes));
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kChunkBytes, bytes - done);
    move_bytes(Backend::kCpu, staging.data(), memory, part + done, n, m.device(), nullptr);
    std::string failure = write_range(fd, path, file_offset + done, n, staging.data());
    if (!failure.empty()) return failure;
    done += n;
  }
  return "";
}

// Throws `what` on every rank unless every rank's `failure` is empty.
void agree(dist::Communicator& comm, const std::string& failure, const std::string& what) {
  if (!dist::all_ranks_ok(comm, failure.empty())) {
    throw Error(what + ": " + (failure.empty() ? std::string("failed on another rank") : failure) +
                " (rank " + std::to_string(comm.rank()) + ")");
  }
}

}  // namespace

std::vector<FileSegment> segments_of(const std::vector<uint64_t>& sizes, uint64_t offset,
                                     uint64_t length) {
  std::vector<FileSegment> out;
  uint64_t start = 0;  // of file f in the concatenation
  for (size_t f = 0; f < sizes.size() && length > 0; ++f) {
    const uint64_t end = start + sizes[f];
    if (offset < end && sizes[f] > 0) {
      const uint64_t in_file = offset - start;
      const uint64_t n = std::min(length, sizes[f] - in_file);
      out.push_back({f, in_file, n});
      offset += n;
      length -= n;
    }
    start = end;
  }
  require(length == 0, "wholememory::segments_of", "offset + length",
          std::to_string(offset + length),
          "must be <= the files' total size " + std::to_string(start));
  return out;
}

void load_from_files(WholeMemory& m, const std::vector<std::string>& files) {
  constexpr const char* kWhere = "wholememory::load_from_files";
  dist::Communicator& comm = m.communicator();
  std::string bad;
  std::vector<uint64_t> sizes(files.size(), 0);
  uint64_t total = 0;
  for (size_t f = 0; f < files.size() && bad.empty(); ++f) {
    struct stat st {};
    if (::stat(files[f].c_str(), &st) != 0) {
      bad = "files[" + std::to_string(f) + "] = " + files[f] + ": " + std::strerror(errno);
    } else {
      sizes[f] = static_cast<uint64_t>(st.st_size);
      total += sizes[f];
    }
  }
  if (bad.empty() && total != m.partition().total_bytes()) {
    bad = "files: " + std::to_string(files.size()) + " files of " + std::to_string(total) +
          " bytes in all, must hold the memory's " + std::to_string(m.partition().total_bytes()) +
          " bytes";
  }
  if (!dist::all_ranks_ok(comm, bad.empty())) {
    throw InvalidArgument(std::string(kWhere) + ": " +
                          (bad.empty() ? std::string("another rank found the files wrong") : bad) +
                          "; nothing was read");
  }
  const Backend memory = memory_of(m);
  char* part = static_cast<char*>(m.local_data());
  std::string failure;
  std::vector<char> staging;
  for (const FileSegment& s :
       segments_of(sizes, m.partition().offset_of(m.rank()), m.local_bytes())) {
    for (uint64_t done = 0; done < s.length && failure.empty();) {
      const uint64_t n =
          memory == Backend::kCpu ? s.length : std::min(kChunkBytes, s.length - done);
      char* dst = part;
      if (memory != Backend::kCpu) {
        staging.resize(n);
        dst = staging.data();
      }
      failure = read_range(files[s.file], s.offset + done, n, dst);
      if (failure.empty() && memory != Backend::kCpu) {
        move_bytes(memory, part, Backend::kCpu, staging.data(), n, m.device(), nullptr);
      }
      part += n;
      done += n;
    }
    if (!failure.empty()) break;
  }
  agree(comm, failure, kWhere);
  comm.barrier();
}

void store_to_file(const WholeMemory& m, const std::string& path) {
  constexpr const char* kWhere = "wholememory::store_to_file";
  dist::Communicator& comm = m.communicator();
  std::string failure;
  if (comm.rank() == 0) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      failure = errno_text("create " + path);
    } else {
      if (::ftruncate(fd, static_cast<off_t>(m.partition().total_bytes())) != 0) {
        failure = errno_text("size " + path);
      }
      ::close(fd);
    }
  }
  agree(comm, failure, kWhere);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    failure = errno_text("open " + path);
  } else {
    failure = write_part(m, fd, path, m.partition().offset_of(m.rank()));
    if (failure.empty() && ::fsync(fd) != 0) failure = errno_text("fsync " + path);
    ::close(fd);
  }
  agree(comm, failure, kWhere);
}

std::vector<std::string> store_parts(const WholeMemory& m, const std::string& prefix) {
  constexpr const char* kWhere = "wholememory::store_parts";
  dist::Communicator& comm = m.communicator();
  const uint32_t world = comm.world_size();
  std::vector<std::string> names;
  for (uint32_t r = 0; r < world; ++r) {
    names.push_back(prefix + "_part_" + std::to_string(r) + "_of_" + std::to_string(world) +
                    ".bin");
  }
  const std::string& mine = names[comm.rank()];
  std::string failure;
  const int fd = ::open(mine.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    failure = errno_text("create " + mine);
  } else {
    failure = write_part(m, fd, mine, 0);
    if (failure.empty() && ::fsync(fd) != 0) failure = errno_text("fsync " + mine);
    ::close(fd);
  }
  agree(comm, failure, kWhere);
  return names;
}

}  // namespace dynemb::wholememory

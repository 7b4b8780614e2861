#include "fs_util.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "dynemb/checkpoint/format.hpp"

namespace dynemb::checkpoint {
namespace {

constexpr char kStagingMarker[] = ".dynemb-tmp-";

FileOpHook& hook_slot() {
  static FileOpHook hook;
  return hook;
}

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path, int err) {
  throw CheckpointError(path.string() + ": " + what + " failed: " + std::strerror(err));
}

std::filesystem::path parent_of(const std::filesystem::path& p) {
  const std::filesystem::path parent = p.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

// The pid in a staging name ".<target>.dynemb-tmp-<pid>-<random>" (of `target` when not empty),
// 0 if it is not one.
long staging_pid(const std::string& name, const std::string& target) {
  if (name.empty() || name.front() != '.') return 0;
  const size_t marker = name.rfind(kStagingMarker);
  if (marker == std::string::npos || marker < 2) return 0;
  if (!target.empty() && name.compare(1, marker - 1, target) != 0) return 0;
  if (!target.empty() && marker - 1 != target.size()) return 0;
  const char* begin = name.data() + marker + std::strlen(kStagingMarker);
  const char* end = name.data() + name.size();
  long pid = 0;
  const auto [p, ec] = std::from_chars(begin, end, pid);
  if (ec != std::errc() || p == end || *p != '-' || pid <= 0) return 0;
  return pid;
}

}  // namespace

std::string to_string(FileOp op) {
  switch (op) {
    case FileOp::kCreateDirectory:
      return "create_directory";
    case FileOp::kCreateFile:
      return "create_file";
    case FileOp::kWrite:
      return "write";
    case FileOp::kFsyncFile:
      return "fsync_file";
    case FileOp::kCloseFile:
      return "close_file";
    case FileOp::kFsyncDirectory:
      return "fsync_directory";
    case FileOp::kRename:
      return "rename";
    case FileOp::kExchange:
      return "exchange";
    case FileOp::kRemove:
      return "remove";
  }
  return "unknown";
}

FileOpHook set_file_op_hook(FileOpHook hook) {
  FileOpHook previous = std::move(hook_slot());
  hook_slot() = std::move(hook);
  return previous;
}

void announce_file_op(FileOp op, const std::filesystem::path& path) {
  if (const FileOpHook& hook = hook_slot()) hook(op, path);
}

void fsync_directory(const std::filesystem::path& dir) {
  announce_file_op(FileOp::kFsyncDirectory, dir);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("open", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("fsync", dir, err);
}

void create_directories_durably(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return;
  const std::filesystem::path parent = parent_of(dir);
  if (parent != dir && !std::filesystem::is_directory(parent, ec)) {
    create_directories_durably(parent);
  }
  announce_file_op(FileOp::kCreateDirectory, dir);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) fail("mkdir", dir, errno);
  fsync_directory(parent);
}

void write_file_durably(const std::filesystem::path& path, const std::string& text) {
  announce_file_op(FileOp::kCreateFile, path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("open", path, errno);
  try {
    announce_file_op(FileOp::kWrite, path);
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("write", path, errno);
      }
      done += static_cast<size_t>(w);
    }
    announce_file_op(FileOp::kFsyncFile, path);
    if (::fsync(fd) != 0) fail("fsync", path, errno);
  } catch (...) {
    ::close(fd);
    throw;
  }
  announce_file_op(FileOp::kCloseFile, path);
  if (::close(fd) != 0) fail("close", path, errno);
}

void remove_directory_durably(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return;
  const std::filesystem::path doomed = detail::staging_path_for(dir);
  announce_file_op(FileOp::kRename, dir);
  if (::rename(dir.c_str(), doomed.c_str()) != 0) fail("rename for removal", dir, errno);
  fsync_directory(parent_of(dir));
  announce_file_op(FileOp::kRemove, doomed);
  std::filesystem::remove_all(doomed, ec);
  if (ec) throw CheckpointError(doomed.string() + ": remove failed: " + ec.message());
}

size_t remove_stale_staging(const std::filesystem::path& dir, const std::string& target_name) {
  std::error_code ec;
  std::vector<std::filesystem::path> stale;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const long pid = staging_pid(entry.path().filename().string(), target_name);
    if (pid == 0) continue;
    // A live process (this one included) may still be writing it.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;
    stale.push_back(entry.path());
  }
  for (const std::filesystem::path& p : stale) {
    announce_file_op(FileOp::kRemove, p);
    std::filesystem::remove_all(p, ec);
  }
  return stale.size();
}

namespace detail {

void publish_directory(const std::filesystem::path& staging, const std::filesystem::path& target) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(target, ec);
  if (!exists) {
    announce_file_op(FileOp::kRename, target);
    if (::rename(staging.c_str(), target.c_str()) != 0) fail("rename into place", target, errno);
  } else {
    announce_file_op(FileOp::kExchange, target);
    const long rc = ::syscall(SYS_renameat2, AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(),
                              RENAME_EXCHANGE);
    if (rc != 0) fail("atomic exchange (renameat2 RENAME_EXCHANGE)", target, errno);
  }
  fsync_directory(parent_of(target));
  if (exists) {
    // The old checkpoint, now at `staging`. A failure here leaves a staging directory behind
    // (removed by the next dump next to `target`); the new checkpoint is in place either way.
    try {
      announce_file_op(FileOp::kRemove, staging);
      std::filesystem::remove_all(staging, ec);
    } catch (const std::exception&) {
      // The commit itself succeeded; the leftover goes with the next dump's cleanup.
    }
  }
}

std::filesystem::path staging_path_for(const std::filesystem::path& target) {
  std::random_device rd;
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "%d-%08x", static_cast<int>(::getpid()), rd());
  std::string name = ".";
  name += target.filename().string();
  name += kStagingMarker;
  name += suffix;
  return parent_of(target) / name;
}

}  // namespace detail
}  // namespace dynemb::checkpoint

#include "fs_util.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "dynemb/checkpoint/format.hpp"

namespace dynemb::checkpoint::detail {
namespace {

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path, int err) {
  throw CheckpointError(path.string() + ": " + what + " failed: " + std::strerror(err));
}

std::filesystem::path parent_of(const std::filesystem::path& p) {
  const std::filesystem::path parent = p.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

}  // namespace

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("open", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("fsync", dir, err);
}

void write_file_durably(const std::filesystem::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("open", path, errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      fail("write", path, err);
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("fsync", path, err);
  }
  if (::close(fd) != 0) fail("close", path, errno);
}

void publish_directory(const std::filesystem::path& staging, const std::filesystem::path& target) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(target, ec);
  if (!exists) {
    if (::rename(staging.c_str(), target.c_str()) != 0) fail("rename into place", target, errno);
  } else {
    const long rc = ::syscall(SYS_renameat2, AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(),
                              RENAME_EXCHANGE);
    if (rc != 0) fail("atomic exchange (renameat2 RENAME_EXCHANGE)", target, errno);
  }
  fsync_directory(parent_of(target));
  if (exists) std::filesystem::remove_all(staging, ec);  // the old checkpoint; best effort
}

std::filesystem::path staging_path_for(const std::filesystem::path& target) {
  std::random_device rd;
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "%d-%08x", static_cast<int>(::getpid()), rd());
  std::string name = ".";
  name += target.filename().string();
  name += ".dynemb-tmp-";
  name += suffix;
  return parent_of(target) / name;
}

}  // namespace dynemb::checkpoint::detail

// The file and key-value store rendezvous of rank 0's bytes.
#include "dynemb/dist/bootstrap.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "dynemb/core/error.hpp"

namespace dynemb::dist {
namespace {

void write_all(int fd, const uint8_t* data, size_t n, const std::string& file) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error("file id exchanger: writing " + file + ": " + std::strerror(errno));
    data += w;
    n -= static_cast<size_t>(w);
  }
}

class FileIdExchanger final : public IdExchanger {
 public:
  FileIdExchanger(std::filesystem::path path, std::chrono::milliseconds timeout)
      : path_(std::move(path)), timeout_(timeout) {
    require(!path_.empty(), "make_file_id_exchanger", "path", "\"\"", "a file path");
  }

  std::vector<uint8_t> share(uint32_t rank, const std::vector<uint8_t>& root_bytes) override {
    const std::filesystem::path file = path_.string() + "." + std::to_string(calls_++);
    if (rank == 0) {
      publish(file, root_bytes);
      return root_bytes;
    }
    return wait_for(file);
  }

 private:
  // Writes a temporary file next to `file`, fsyncs it and renames it into place, so a reader
  // sees either nothing or every byte.
  void publish(const std::filesystem::path& file, const std::vector<uint8_t>& bytes) {
    std::random_device rd;
    const std::string temp =
        file.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("file id exchanger: creating " + temp + ": " + std::strerror(errno));
    const uint64_t n = bytes.size();
    try {
      write_all(fd, reinterpret_cast<const uint8_t*>(&n), sizeof n, temp);
      write_all(fd, bytes.data(), bytes.size(), temp);
      if (::fsync(fd) != 0) throw Error("file id exchanger: fsync " + temp);
    } catch (...) {
      ::close(fd);
      ::unlink(temp.c_str());
      throw;
    }
    ::close(fd);
    if (::rename(temp.c_str(), file.c_str()) != 0) {
      ::unlink(temp.c_str());
      throw Error("file id exchanger: renaming into " + file.string() + ": " +
                  std::strerror(errno));
    }
  }

  std::vector<uint8_t> wait_for(const std::filesystem::path& file) const {
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
      std::ifstream in(file, std::ios::binary);
      if (in) {
        std::vector<uint8_t> all((std::istreambuf_iterator<char>(in)), {});
        uint64_t n = 0;
        if (all.size() >= sizeof n) std::memcpy(&n, all.data(), sizeof n);
        if (all.size() >= sizeof n && all.size() - sizeof n == n) {
          return std::vector<uint8_t>(all.begin() + sizeof n, all.end());
        }
        throw Error("file id exchanger: " + file.string() + " holds " + std::to_string(all.size()) +
                    " bytes, not a length and that many bytes");
      }
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited >= timeout_) {
        throw Error(
            "file id exchanger: waited " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
            " ms for rank 0's file " + file.string() + " (timeout " +
            std::to_string(timeout_.count()) + " ms); is rank 0 running, on this path?");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
    }
  }

  std::filesystem::path path_;
  std::chrono::milliseconds timeout_;
  uint64_t calls_ = 0;
};

class StoreIdExchanger final : public IdExchanger {
 public:
  StoreIdExchanger(StoreSet set, StoreGet get, std::string prefix)
      : set_(std::move(set)), get_(std::move(get)), prefix_(std::move(prefix)) {
    require(static_cast<bool>(set_) && static_cast<bool>(get_), "make_store_id_exchanger",
            "set / get", "empty function", "both given");
  }
  std::vector<uint8_t> share(uint32_t rank, const std::vector<uint8_t>& root_bytes) override {
    const std::string key = prefix_ + std::to_string(calls_++);
    if (rank == 0) {
      set_(key, root_bytes);
      return root_bytes;
    }
    return get_(key);
  }

 private:
  StoreSet set_;
  StoreGet get_;
  std::string prefix_;
  uint64_t calls_ = 0;
};

}  // namespace

std::unique_ptr<IdExchanger> make_file_id_exchanger(std::filesystem::path path,
                                                    std::chrono::milliseconds timeout) {
  return std::make_unique<FileIdExchanger>(std::move(path), timeout);
}

std::unique_ptr<IdExchanger> make_store_id_exchanger(StoreSet set, StoreGet get,
                                                     std::string prefix) {
  return std::make_unique<StoreIdExchanger>(std::move(set), std::move(get), std::move(prefix));
}

}  // namespace dynemb::dist

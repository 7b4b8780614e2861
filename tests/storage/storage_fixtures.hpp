// What the storage tests share: a redis-server on a free loopback port, temporary directories,
// the user's own store (a std::map, with injectable faults), and a std::map model of a store.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dynemb/storage/storage.hpp"

namespace dynemb::testing {

// A fresh empty directory under the temp dir, removed with the object.
class StorageTempDir {
 public:
  StorageTempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "dynemb_storage_XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~StorageTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// True when redis-server is on PATH.
inline bool redis_server_installed() {
  return std::system("command -v redis-server > /dev/null 2>&1") == 0;
}

// A loopback TCP port nobody listens on right now.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A redis-server this test started on 127.0.0.1 (no persistence); stopped when destroyed.
class RedisServer {
 public:
  // `persist_dir`: keep an fsync'd append-only file there, so a killed server restarts with its
  // data; empty: no persistence.
  explicit RedisServer(std::string persist_dir = "")
      : port_(free_loopback_port()), persist_dir_(std::move(persist_dir)) {
    start();
  }
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Starts the server (again, on the same port) and waits until it accepts connections.
  void start() {
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      std::freopen("/dev/null", "w", stdout);
      if (persist_dir_.empty()) {
        ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", static_cast<char*>(nullptr));
      } else {
        ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir",
                 persist_dir_.c_str(), static_cast<char*>(nullptr));
      }
      std::_Exit(127);
    }
    for (int attempt = 0; attempt < 500; ++attempt) {
      if (accepts()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "redis-server on port " << port_ << " did not start";
  }
  // Kills the server (SIGKILL: no goodbye to the clients) and reaps it.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  // True once the server answers PING with PONG (not while it loads its data).
  bool accepts() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (ok) {
      const char ping[] = "PING\r\n";
      char reply[16] = {};
      ok = ::write(fd, ping, sizeof ping - 1) == static_cast<ssize_t>(sizeof ping - 1) &&
           ::read(fd, reply, sizeof reply - 1) > 0 && std::strncmp(reply, "+PONG", 5) == 0;
    }
    ::close(fd);
    return ok;
  }

  int port_;
  std::string persist_dir_;
  pid_t pid_ = -1;
};

// The user's own store, as a user would write one: a std::map behind the Storage interface.
// `fail_calls` makes the next calls throw StorageError (a lower tier that is down).
class MapStorage final : public storage::Storage {
 public:
  explicit MapStorage(uint32_t row_dim) : row_dim_(row_dim) {}

  uint32_t row_dim() const override { return row_dim_; }
  std::string describe() const override { return "map"; }
  void find(size_t n, const uint64_t* keys, float* values, uint64_t* scores,
            bool* founds) override {
    if (read_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(read_delay_ms_));
    std::lock_guard lock(mutex_);
    check_up();
    for (size_t i = 0; i < n; ++i) {
      const auto it = rows_.find(keys[i]);
      founds[i] = it != rows_.end();
      if (!founds[i]) continue;
      scores[i] = it->second.score;
      std::copy(it->second.row.begin(), it->second.row.end(), values + i * row_dim_);
    }
    stats_.reads += 1;
    stats_.rows_read += n;
  }
  void write(size_t n_put, const uint64_t* put_keys, const float* put_values,
             const uint64_t* put_scores, size_t n_erase, const uint64_t* erase_keys) override {
    std::lock_guard lock(mutex_);
    check_up();
    if (failing_writes_ > 0) {
      --failing_writes_;
      stats_.failures += 1;
      throw storage::StorageError("MapStorage: injected write failure (disk full)");
    }
    for (size_t i = 0; i < n_erase; ++i) rows_.erase(erase_keys[i]);
    for (size_t i = 0; i < n_put; ++i) {
      rows_[put_keys[i]] =
          Row{std::vector<float>(put_values + i * row_dim_, put_values + (i + 1) * row_dim_),
              put_scores[i]};
    }
    stats_.writes += 1;
    stats_.rows_written += n_put;
    stats_.rows_erased += n_erase;
  }
  size_t scan(storage::ScanCursor& cursor, size_t max_rows, uint64_t* keys, float* values,
              uint64_t* scores) override {
    std::lock_guard lock(mutex_);
    check_up();
    auto it =
        cursor.position.empty() ? rows_.begin() : rows_.upper_bound(std::stoull(cursor.position));
    size_t got = 0;
    for (; it != rows_.end() && got < max_rows; ++it, ++got) {
      keys[got] = it->first;
      scores[got] = it->second.score;
      std::copy(it->second.row.begin(), it->second.row.end(), values + got * row_dim_);
    }
    if (got > 0) cursor.position = std::to_string(keys[got - 1]);
    cursor.finished = it == rows_.end();
    return got;
  }
  size_t size() override {
    std::lock_guard lock(mutex_);
    check_up();
    return rows_.size();
  }
  void flush() override {}
  void clear() override {
    std::lock_guard lock(mutex_);
    check_up();
    rows_.clear();
  }
  storage::StorageStats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }

  // The next `calls` calls throw StorageError.
  void fail_calls(int calls) { failing_ = calls; }
  // Every find takes this long first (a slow remote tier).
  void delay_reads(int ms) { read_delay_ms_ = ms; }
  // The next `calls` writes throw StorageError (reads still work: a full disk).
  void fail_writes(int calls) { failing_writes_ = calls; }

 private:
  struct Row {
    std::vector<float> row;
    uint64_t score;
  };
  void check_up() {
    if (failing_ > 0) {
      --failing_;
      stats_.failures += 1;
      throw storage::StorageError("MapStorage: injected failure");
    }
  }

  uint32_t row_dim_;
  mutable std::mutex mutex_;
  std::map<uint64_t, Row> rows_;
  storage::StorageStats stats_{};
  std::atomic<int> failing_{0};
  std::atomic<int> failing_writes_{0};
  std::atomic<int> read_delay_ms_{0};
};

}  // namespace dynemb::testing

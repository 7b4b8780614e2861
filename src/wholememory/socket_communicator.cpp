// Collectives as pairwise byte streams over a mesh of Unix sockets.
#include "dynemb/wholememory/socket_communicator.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <thread>
#include <vector>
#include "dynemb/core/error.hpp"

namespace dynemb::wholememory {
namespace {

sockaddr_un address_of(const std::string& job, uint32_t rank, socklen_t& length) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = "dynemb-wmtest-" + job + "-" + std::to_string(rank);
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

[[noreturn]] void fail(const std::string& what) {
  throw Error("socket communicator: " + what + ": " + std::strerror(errno));
}

void send_all(int fd, const char* data, size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::send(fd, data, bytes, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("send");
    }
    data += n;
    bytes -= static_cast<size_t>(n);
  }
}

void recv_all(int fd, char* data, size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, data, bytes, 0);
    if (n == 0) throw Error("socket communicator: a peer closed its socket");
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("recv");
    }
    data += n;
    bytes -= static_cast<size_t>(n);
  }
}

class SocketCommunicator final : public dist::Communicator {
 public:
  SocketCommunicator(const std::string& job, uint32_t rank, uint32_t world)
      : rank_(rank), world_(world), peers_(world, -1) {
    const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0) fail("socket");
    socklen_t length = 0;
    sockaddr_un self = address_of(job, rank, length);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&self), length) != 0) fail("bind");
    if (::listen(listener, static_cast<int>(world)) != 0) fail("listen");
    // Connect to every lower rank (retrying until it listens), then accept the higher ones.
    for (uint32_t peer = 0; peer < rank; ++peer) {
      const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      socklen_t peer_length = 0;
      sockaddr_un a = address_of(job, peer, peer_length);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (::connect(fd, reinterpret_cast<sockaddr*>(&a), peer_length) != 0) {
        if (std::chrono::steady_clock::now() > deadline)
          fail("connect to rank " + std::to_string(peer));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      send_all(fd, reinterpret_cast<const char*>(&rank_), sizeof(rank_));
      peers_[peer] = fd;
    }
    for (uint32_t accepted = rank + 1; accepted < world; ++accepted) {
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) fail("accept");
      uint32_t peer = 0;
      recv_all(fd, reinterpret_cast<char*>(&peer), sizeof(peer));
      if (peer >= world || peers_[peer] != -1) throw Error("socket communicator: bad peer");
      peers_[peer] = fd;
    }
    ::close(listener);
  }

  ~SocketCommunicator() override {
    for (int fd : peers_) {
      if (fd >= 0) ::close(fd);
    }
  }

  uint32_t rank() const override { return rank_; }
  uint32_t world_size() const override { return world_; }
  Backend backend() const override { return Backend::kCpu; }
  std::string name() const override { return "socket"; }

  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs,
                    void* recv, const size_t* recv_counts, const size_t* recv_displs,
                    dist::DataType type, StreamHandle) override {
    const size_t e = dist::data_type_bytes(type);
    const char* s = static_cast<const char*>(send);
    char* r = static_cast<char*>(recv);
    std::memmove(r + recv_displs[rank_] * e, s + send_displs[rank_] * e, send_counts[rank_] * e);
    std::exception_ptr send_error;
    std::thread sender([&] {
      try {
        for (uint32_t k = 1; k < world_; ++k) {
          const uint32_t peer = (rank_ + k) % world_;
          send_all(peers_[peer], s + send_displs[peer] * e, send_counts[peer] * e);
        }
      } catch (...) {
        send_error = std::current_exception();
      }
    });
    std::exception_ptr recv_error;
    try {
      for (uint32_t k = 1; k < world_; ++k) {
        const uint32_t peer = (rank_ + world_ - k) % world_;
        recv_all(peers_[peer], r + recv_displs[peer] * e, recv_counts[peer] * e);
      }
    } catch (...) {
      recv_error = std::current_exception();
    }
    sender.join();
    if (send_error) std::rethrow_exception(send_error);
    if (recv_error) std::rethrow_exception(recv_error);
  }

  void all_gather(const void* send, void* recv, size_t count, dist::DataType type,
                  StreamHandle stream) override {
    std::vector<size_t> sc(world_, count), sd(world_, 0), rc(world_, count), rd(world_);
    for (uint32_t r = 0; r < world_; ++r) rd[r] = r * count;
    all_to_all_v(send, sc.data(), sd.data(), recv, rc.data(), rd.data(), type, stream);
  }

  void all_reduce_sum(const void* send, void* recv, size_t count, dist::DataType type,
                      StreamHandle stream) override {
    const size_t e = dist::data_type_bytes(type);
    std::vector<char> all(world_ * count * e);
    all_gather(send, all.data(), count, type, stream);
    std::vector<char> sum(count * e, 0);
    for (uint32_t r = 0; r < world_; ++r) add(sum.data(), all.data() + r * count * e, count, type);
    std::memcpy(recv, sum.data(), count * e);
  }

  void broadcast(void* buffer, size_t count, dist::DataType type, uint32_t root,
                 StreamHandle stream) override {
    std::vector<size_t> sc(world_, rank_ == root ? count : 0), sd(world_, 0), rc(world_, 0),
        rd(world_, 0);
    rc[root] = count;
    const size_t e = dist::data_type_bytes(type);
    std::vector<char> copy(static_cast<char*>(buffer), static_cast<char*>(buffer) + count * e);
    all_to_all_v(copy.data(), sc.data(), sd.data(), buffer, rc.data(), rd.data(), type, stream);
  }

  void barrier() override {
    uint8_t one = 1;
    std::vector<uint8_t> all(world_);
    all_gather(&one, all.data(), 1, dist::DataType::kUint8, nullptr);
  }

 private:
  template <class T>
  static void add_as(char* sum, const char* values, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      T a, b;
      std::memcpy(&a, sum + i * sizeof(T), sizeof(T));
      std::memcpy(&b, values + i * sizeof(T), sizeof(T));
      a = static_cast<T>(a + b);
      std::memcpy(sum + i * sizeof(T), &a, sizeof(T));
    }
  }
  static void add(char* sum, const char* values, size_t count, dist::DataType type) {
    switch (type) {
      case dist::DataType::kUint8:
        return add_as<uint8_t>(sum, values, count);
      case dist::DataType::kInt32:
        return add_as<int32_t>(sum, values, count);
      case dist::DataType::kUint32:
        return add_as<uint32_t>(sum, values, count);
      case dist::DataType::kInt64:
        return add_as<int64_t>(sum, values, count);
      case dist::DataType::kUint64:
        return add_as<uint64_t>(sum, values, count);
      case dist::DataType::kFloat32:
        return add_as<float>(sum, values, count);
      case dist::DataType::kFloat64:
        return add_as<double>(sum, values, count);
    }
  }

  uint32_t rank_;
  uint32_t world_;
  std::vector<int> peers_;
};

}  // namespace

std::unique_ptr<dist::Communicator> make_socket_communicator(const std::string& job, uint32_t rank,
                                                             uint32_t world) {
  return std::make_unique<SocketCommunicator>(job, rank, world);
}

}  // namespace dynemb::wholememory

// One-node checks and descriptor passing over abstract Unix datagram sockets.
#include "node_ipc.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "dynemb/core/error.hpp"

namespace dynemb::wholememory {
namespace {

std::string node_identity() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(host) + "/" + boot;
}

// The abstract socket address "\0dynemb-wm-<job>-<rank>".
sockaddr_un socket_address(uint64_t job, uint32_t rank, socklen_t& length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string name = "dynemb-wm-" + std::to_string(job) + "-" + std::to_string(rank);
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return address;
}

std::string errno_text(const char* call) {
  return std::string(call) + ": " + std::strerror(errno);
}

// One message: the sender's rank and whether a descriptor rides along.
struct FdMessage {
  uint32_t rank;
  uint32_t has_fd;
};

// Sends `mine` (or no descriptor) to every other rank; returns "" or the failure.
std::string send_to_all(int sock, uint64_t job, uint32_t rank, uint32_t world, int mine) {
  for (uint32_t step = 1; step < world; ++step) {
    const uint32_t peer = (rank + step) % world;
    socklen_t length = 0;
    sockaddr_un address = socket_address(job, peer, length);
    FdMessage body{rank, mine >= 0 ? 1u : 0u};
    iovec iov{&body, sizeof(body)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_name = &address;
    msg.msg_namelen = length;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (mine >= 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &mine, sizeof(int));
    }
    ssize_t sent = -1;
    // The peer's socket exists (everyone bound before the barrier); retry a transient EAGAIN.
    for (int attempt = 0; attempt < 6000; ++attempt) {
      sent = ::sendmsg(sock, &msg, 0);
      if (sent >= 0 || (errno != EAGAIN && errno != EINTR && errno != ENOBUFS)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (sent < 0) return errno_text("sendmsg") + " to rank " + std::to_string(peer);
  }
  return "";
}

}  // namespace

void require_one_node(dist::Communicator& comm, const std::string& what) {
  const std::vector<std::string> nodes = dist::all_gather_strings(comm, node_identity());
  for (uint32_t r = 1; r < nodes.size(); ++r) {
    if (nodes[r] != nodes[0]) {
      throw NotAvailable(what +
                         ": every rank must run on one node (shared memory and CUDA IPC "
                         "do not cross nodes); rank 0 is on " +
                         nodes[0] + ", rank " + std::to_string(r) + " on " + nodes[r]);
    }
  }
}

std::vector<int> exchange_fds(dist::Communicator& comm, int mine, const std::string& what) {
  const uint32_t rank = comm.rank();
  const uint32_t world = comm.world_size();
  std::vector<int> fds(world, -1);
  // A job id fresh to this exchange (rank 0's draw), so concurrent jobs never meet.
  uint64_t job = 0;
  if (rank == 0)
    job = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  job = dist::all_gather_values<uint64_t>(comm, {&job, 1})[0];

  std::string failure;
  const int sock = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) failure = errno_text("socket");
  if (failure.empty()) {
    socklen_t length = 0;
    sockaddr_un address = socket_address(job, rank, length);
    if (::bind(sock, reinterpret_cast<sockaddr*>(&address), length) != 0) {
      failure = errno_text("bind");
    }
    timeval timeout{120, 0};
    ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  if (!dist::all_ranks_ok(comm, failure.empty())) {
    if (sock >= 0) ::close(sock);
    throw Error(what + ": could not open the descriptor socket" +
                (failure.empty() ? " on another rank" : " (" + failure + ")"));
  }

  // Send on a thread of its own while this one receives: no rank waits on a full queue.
  std::string send_failure;
  std::thread sender([&] { send_failure = send_to_all(sock, job, rank, world, mine); });
  for (uint32_t got = 0; got + 1 < world && failure.empty(); ++got) {
    FdMessage body{};
    iovec iov{&body, sizeof(body)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n != static_cast<ssize_t>(sizeof(body)) || body.rank >= world) {
      failure = n < 0 ? errno_text("recvmsg") : "recvmsg: a malformed message";
      break;
    }
    if (body.has_fd != 0) {
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      if (c == nullptr || c->cmsg_type != SCM_RIGHTS) {
        failure = "recvmsg: rank " + std::to_string(body.rank) + "'s descriptor did not arrive";
        break;
      }
      std::memcpy(&fds[body.rank], CMSG_DATA(c), sizeof(int));
    }
  }
  sender.join();
  ::close(sock);
  if (failure.empty() && !send_failure.empty()) failure = send_failure;
  if (failure.empty() && mine >= 0) {
    fds[rank] = ::fcntl(mine, F_DUPFD_CLOEXEC, 0);
    if (fds[rank] < 0) failure = errno_text("fcntl(F_DUPFD_CLOEXEC)");
  }
  if (!dist::all_ranks_ok(comm, failure.empty())) {
    close_fds(fds);
    throw Error(what + ": passing descriptors between the ranks failed" +
                (failure.empty() ? " on another rank" : " (" + failure + ")"));
  }
  return fds;
}

void close_fds(const std::vector<int>& fds) noexcept {
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace dynemb::wholememory

#include "bench/cache/peer_process.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "dynemb/core/error.hpp"

namespace dynemb::bench {

PeerProcess::PeerProcess(const std::string& command) {
  int to_child[2];
  int from_child[2];
  if (pipe(to_child) != 0) throw Error("peer: pipe failed: " + std::string(std::strerror(errno)));
  if (pipe(from_child) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    throw Error("peer: pipe failed: " + std::string(std::strerror(errno)));
  }
  // A peer that dies must not kill the benchmark with SIGPIPE on the next write: ask reports it.
  std::signal(SIGPIPE, SIG_IGN);
  pid_ = fork();
  if (pid_ < 0) {
    for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
    throw Error("peer: fork failed: " + std::string(std::strerror(errno)));
  }
  if (pid_ == 0) {
    dup2(to_child[0], STDIN_FILENO);
    dup2(from_child[1], STDOUT_FILENO);
    for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  to_peer_ = fdopen(to_child[1], "w");
  from_peer_ = fdopen(from_child[0], "r");
}

PeerProcess::~PeerProcess() {
  if (to_peer_ != nullptr) {
    std::fputs("quit\n", to_peer_);
    std::fclose(to_peer_);
  }
  if (from_peer_ != nullptr) std::fclose(from_peer_);
  if (pid_ > 0) waitpid(pid_, nullptr, 0);
}

std::string PeerProcess::ask(const std::string& line) {
  if (std::fprintf(to_peer_, "%s\n", line.c_str()) < 0 || std::fflush(to_peer_) != 0) {
    throw Error("peer: could not send '" + line + "': the peer has exited");
  }
  std::string answer;
  for (int c = std::fgetc(from_peer_); c != '\n'; c = std::fgetc(from_peer_)) {
    if (c == EOF) throw Error("peer: no answer to '" + line + "': the peer has exited");
    answer.push_back(static_cast<char>(c));
  }
  return answer;
}

}  // namespace dynemb::bench

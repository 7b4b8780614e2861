// A peer benchmark program run as a child process that answers one line for each line it is sent
// (the HugeCTR gpu_cache peer's protocol, bench/cache/hugectr_peer/peer_main.cu), so that the
// benchmark can interleave the peer's timed rounds with its own.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <string>

namespace dynemb::bench {

class PeerProcess {
 public:
  // Starts `command` (run by /bin/sh) with its stdin and stdout connected to this object (its
  // stderr is this process's); throws Error when it cannot be started.
  explicit PeerProcess(const std::string& command);
  // Tells the peer to quit and waits for it.
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  // Sends `line` and returns the peer's one-line answer (without the newline); throws Error
  // naming the command when the peer exits or closes its output instead of answering.
  std::string ask(const std::string& line);

 private:
  pid_t pid_ = -1;
  FILE* to_peer_ = nullptr;
  FILE* from_peer_ = nullptr;
};

}  // namespace dynemb::bench

#include "train/stop_request.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <string>

namespace dynemb::train {
namespace {

std::atomic<bool> g_stop_requested{false};

extern "C" void request_stop(int) {
  // A second Ctrl-C leaves at once.
  if (g_stop_requested.exchange(true)) _exit(130);
}

}  // namespace

struct StopSignals::Saved {
  struct sigaction old_int {};
  struct sigaction old_term {};
};

bool stop_requested() {
  return g_stop_requested.load(std::memory_order_relaxed);
}

void throw_if_stop_requested(const char* doing) {
  if (stop_requested()) throw Interrupted(std::string("interrupted (Ctrl-C) while ") + doing);
}

void set_stop_requested(bool requested) {
  g_stop_requested = requested;
}

StopSignals::StopSignals(bool enabled) : enabled_(enabled) {
  g_stop_requested = false;
  if (!enabled_) return;
  saved_ = new Saved;
  struct sigaction action {};
  action.sa_handler = request_stop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &saved_->old_int);
  sigaction(SIGTERM, &action, &saved_->old_term);
}

StopSignals::~StopSignals() {
  if (!enabled_) return;
  sigaction(SIGINT, &saved_->old_int, nullptr);
  sigaction(SIGTERM, &saved_->old_term, nullptr);
  delete saved_;
}

}  // namespace dynemb::train

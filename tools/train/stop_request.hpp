// Ctrl-C / SIGTERM for `dynemb train`: the signal handler's flag, read by every long loop.
// The first request stops training after the current step (the run then evaluates and saves
// as usual); setup loops that have nothing to finish (skipping to a resume point, loading the
// held-out set, long metric computations) end the run with Interrupted instead. A second
// request exits the process at once (status 130).
#pragma once

#include "dynemb/core/error.hpp"

namespace dynemb::train {

// The run was stopped by Ctrl-C / SIGTERM before it had anything to finish.
class Interrupted : public Error {
 public:
  using Error::Error;
};

// True once Ctrl-C / SIGTERM arrived while a StopSignals object was alive.
bool stop_requested();
// Throws Interrupted ("interrupted while <doing>") when a stop was requested.
void throw_if_stop_requested(const char* doing);

// Installs the handlers for SIGINT and SIGTERM while alive (clears the flag first).
class StopSignals {
 public:
  explicit StopSignals(bool enabled);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct Saved;
  bool enabled_;
  Saved* saved_ = nullptr;
};

// Sets or clears the flag (tests).
void set_stop_requested(bool requested);

}  // namespace dynemb::train

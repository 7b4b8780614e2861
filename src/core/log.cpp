#include "dynemb/core/log.hpp"

#include <cstdio>
#include <mutex>

namespace dynemb {
namespace {

std::mutex& handler_mutex() {
  static std::mutex m;
  return m;
}

WarningHandler& handler() {
  static WarningHandler h;
  return h;
}

}  // namespace

WarningHandler set_warning_handler(WarningHandler h) {
  std::lock_guard lock(handler_mutex());
  WarningHandler previous = std::move(handler());
  handler() = std::move(h);
  return previous;
}

void warn(const std::string& message) {
  std::lock_guard lock(handler_mutex());
  if (handler()) {
    handler()(message);
  } else {
    std::fprintf(stderr, "dynemb warning: %s\n", message.c_str());
  }
}

}  // namespace dynemb

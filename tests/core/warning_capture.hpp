// Collects dynemb warnings for the lifetime of the object (then restores the previous handler).
#pragma once

#include <string>
#include <vector>

#include "dynemb/core/log.hpp"

namespace dynemb::testing {

class WarningCapture {
 public:
  WarningCapture() {
    previous_ = set_warning_handler([this](const std::string& m) { messages_.push_back(m); });
  }
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;
  ~WarningCapture() { set_warning_handler(previous_); }

  // The warnings received so far (warn() serializes calls to the handler).
  const std::vector<std::string>& messages() const { return messages_; }
  // Forgets the warnings received so far.
  void reset() { messages_.clear(); }

 private:
  std::vector<std::string> messages_;
  WarningHandler previous_;
};

}  // namespace dynemb::testing

// Warnings dynemb emits (refused inserts, skipped keys, scores going backwards).
#pragma once

#include <functional>
#include <string>

namespace dynemb {

// Receives every warning; the default writes "dynemb warning: <message>" to stderr.
using WarningHandler = std::function<void(const std::string& message)>;

// Replaces the warning handler (nullptr restores the default); returns the previous one.
WarningHandler set_warning_handler(WarningHandler handler);

// Sends `message` to the current warning handler (thread-safe).
void warn(const std::string& message);

}  // namespace dynemb

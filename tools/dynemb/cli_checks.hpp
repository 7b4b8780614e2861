// Option checks shared by the dynemb program's subcommands.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace dynemb::tools {

// Rejects a value that starts with '-' (CLI11 would wrap it around for unsigned options), with a
// message naming the value and the limit.
inline CLI::Validator not_negative() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (value.empty() || value.front() != '-') return "";
        return "value = " + value + ", must be >= 0";
      },
      "", "not negative");
}

}  // namespace dynemb::tools

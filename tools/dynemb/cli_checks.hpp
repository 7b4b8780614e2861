// Option checks shared by the dynemb program's subcommands. CLI11 reports a failed check as a
// parse error naming the option; main() exits 2 for every such usage error.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>

namespace dynemb::tools {

// An unsigned decimal integer in [lo, hi] (no sign, no wrap-around, no overflow), with a
// message naming the value and the limit.
inline CLI::Validator unsigned_in(uint64_t lo, uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& value) -> std::string {
        uint64_t v = 0;
        const char* end = value.data() + value.size();
        const auto [p, ec] = std::from_chars(value.data(), end, v);
        if (value.empty() || value.front() == '-' || value.front() == '+' || p != end ||
            ec == std::errc::invalid_argument) {
          return "value = " + value + ", must be an unsigned integer in [" + std::to_string(lo) +
                 ", " + std::to_string(hi) + "]";
        }
        if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
          return "value = " + value + ", must be in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "]";
        }
        return "";
      },
      "", "unsigned in range");
}

// unsigned_in(0, the largest value of T): for an option stored in `T`.
template <typename T>
CLI::Validator fits(const T&) {
  return unsigned_in(0, std::numeric_limits<T>::max());
}

// Rejects a value that starts with '-' (CLI11 would wrap it around for unsigned options), with a
// message naming the value and the limit; for options of any number type (fits() is stricter
// for an unsigned integer option: it also refuses overflow).
inline CLI::Validator not_negative() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (value.empty() || value.front() != '-') return "";
        return "value = " + value + ", must be >= 0";
      },
      "", "not negative");
}

// A finite number in [lo, hi] (NaN and inf refused), with a message naming the value and limit.
inline CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v) || v < lo ||
            v > hi) {
          return "value = " + value + ", must be a finite number in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "]";
        }
        return "";
      },
      "", "finite in range");
}

}  // namespace dynemb::tools

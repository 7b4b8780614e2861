#include "dynemb/core/error.hpp"

namespace dynemb {

void require(bool ok, const char* where, const char* argument, const std::string& value,
             const std::string& limit) {
  if (ok) return;
  throw InvalidArgument(std::string(where) + ": " + argument + " = " + value + ", " + limit);
}

}  // namespace dynemb

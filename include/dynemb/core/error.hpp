// The one exception hierarchy of dynemb. Every message names the argument, the value and the
// limit that was broken.
#pragma once

#include <stdexcept>
#include <string>

namespace dynemb {

// Base of every error dynemb throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed a value outside what the API accepts; nothing was changed.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// An insert was refused by the eviction policy while the safe-check mode is ERROR.
class InsertRefused : public Error {
 public:
  using Error::Error;
};

// A CUDA runtime or driver call failed.
class CudaError : public Error {
 public:
  using Error::Error;
};

// The feature is not built into this binary (e.g. CUDA backend without nvcc).
class NotAvailable : public Error {
 public:
  using Error::Error;
};

// A table could not get the memory it needs: the message names the option, the bytes asked for
// and the bytes there are. A table being created is not created. A growth is not made: the table
// keeps its capacity and contents, and the call that needed the growth stops there (what it wrote
// before stays written).
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// An operation is not valid in the object's current state (e.g. a full table at max capacity).
class StateError : public Error {
 public:
  using Error::Error;
};

// Throws InvalidArgument("<where>: <argument> = <value>, <limit>") when `ok` is false.
void require(bool ok, const char* where, const char* argument, const std::string& value,
             const std::string& limit);

}  // namespace dynemb

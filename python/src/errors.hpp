// dynemb's C++ exceptions as Python exceptions carrying the C++ message.
#pragma once

#include <pybind11/pybind11.h>

namespace dynemb::python {

// Adds Error (RuntimeError) and its subclasses to `m` (InvalidArgument is also a ValueError,
// NotAvailable a NotImplementedError, OutOfMemory a MemoryError) and translates every dynemb
// exception into them.
void register_errors(pybind11::module_& m);

}  // namespace dynemb::python

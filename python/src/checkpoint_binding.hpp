// dump / load / inspect of checkpoints for the Python module.
#pragma once

#include <pybind11/pybind11.h>

namespace dynemb::python {

// Adds dump, load and inspect to `m`.
void register_checkpoint(pybind11::module_& m);

}  // namespace dynemb::python

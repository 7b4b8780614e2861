// The wholememory part in dynemb._C: groups of processes (one rank, or a node's processes over
// Unix sockets), float tensors spread over them with gather / scatter and files, and the
// WholeMemory embedding. dynemb.wholememory wraps them for PyTorch.
#pragma once

#include <pybind11/pybind11.h>

namespace dynemb::python {

// Adds WholeMemoryGroup, WholeTensor and WholeEmbedding to `m` (after register_embedding: the
// embedding takes its OptimizerOptions and InitializerOptions).
void register_wholememory(pybind11::module_& m);

}  // namespace dynemb::python

// dynemb._C: the compiled part of the dynemb Python package.
#include <pybind11/pybind11.h>

#include "checkpoint_binding.hpp"
#include "collection_handle.hpp"
#include "dynemb/table/table.hpp"
#include "embedding_handle.hpp"
#include "errors.hpp"
#include "sharded_handle.hpp"
#include "storage_binding.hpp"
#include "tensor_arg.hpp"
#include "wholememory_binding.hpp"

namespace py = pybind11;
using namespace dynemb::python;

PYBIND11_MODULE(_C, m) {
  m.doc() =
      "dynemb's compiled module: trainable dynamic tables and checkpoints, tensors in and "
      "out through DLPack";
  register_errors(m);
  register_storage(m);
  register_embedding(m);
  register_collection(m);
  register_checkpoint(m);
  register_wholememory(m);
  register_sharded(m);
  m.def("cuda_available", &dynemb::cuda_backend_available,
        "True when this module has the CUDA backend and a CUDA device is visible.");
  m.def(
      "tensor_address",
      [](py::handle obj) {
        TensorArg t(obj, "tensor_address", "tensor");
        return reinterpret_cast<uintptr_t>(t.data());
      },
      py::arg("tensor"),
      "The address dynemb reads a tensor at (through DLPack or the buffer protocol), to check "
      "that no copy is made.");
#ifdef DYNEMB_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
}

// Translation of dynemb exceptions into a Python hierarchy rooted at dynemb._C.Error.
#include "errors.hpp"

#include <Python.h>

#include "dynemb/checkpoint/format.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/storage/storage.hpp"

namespace dynemb::python {

namespace {

// Created once at import and never freed (the module keeps them alive too).
PyObject* g_error = nullptr;
PyObject* g_invalid_argument = nullptr;
PyObject* g_insert_refused = nullptr;
PyObject* g_cuda_error = nullptr;
PyObject* g_not_available = nullptr;
PyObject* g_out_of_memory = nullptr;
PyObject* g_state_error = nullptr;
PyObject* g_checkpoint_error = nullptr;
PyObject* g_storage_error = nullptr;

PyObject* new_exception(pybind11::module_& m, const char* name, PyObject* base1, PyObject* base2,
                        const char* doc) {
  const std::string full = std::string("dynemb._C.") + name;
  PyObject* bases = base2 == nullptr ? PyTuple_Pack(1, base1) : PyTuple_Pack(2, base1, base2);
  PyObject* type = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases, nullptr);
  Py_XDECREF(bases);
  if (type == nullptr) throw pybind11::error_already_set();
  m.add_object(name, pybind11::reinterpret_borrow<pybind11::object>(type));
  return type;
}

}  // namespace

void register_errors(pybind11::module_& m) {
  g_error = new_exception(m, "Error", PyExc_RuntimeError, nullptr, "Base of every dynemb error.");
  g_invalid_argument = new_exception(m, "InvalidArgument", g_error, PyExc_ValueError,
                                     "An argument outside what the API accepts; nothing changed.");
  g_insert_refused = new_exception(m, "InsertRefused", g_error, nullptr,
                                   "Inserts refused by the eviction policy (check mode ERROR).");
  g_cuda_error = new_exception(m, "CudaError", g_error, nullptr, "A CUDA call failed.");
  g_not_available = new_exception(m, "NotAvailable", g_error, PyExc_NotImplementedError,
                                  "A feature not built into this module or not available yet.");
  g_out_of_memory = new_exception(m, "OutOfMemory", g_error, PyExc_MemoryError,
                                  "A table could not get the memory it needs.");
  g_state_error = new_exception(m, "StateError", g_error, nullptr,
                                "An operation not valid in the object's current state.");
  g_checkpoint_error = new_exception(m, "CheckpointError", g_error, nullptr,
                                     "A checkpoint missing, malformed, corrupt or mismatched.");
  g_storage_error =
      new_exception(m, "StorageError", g_error, nullptr,
                    "A lower tier (external storage) failed; the batch may be retried.");
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const storage::StorageError& e) {
      PyErr_SetString(g_storage_error, e.what());
    } catch (const checkpoint::CheckpointError& e) {
      PyErr_SetString(g_checkpoint_error, e.what());
    } catch (const InvalidArgument& e) {
      PyErr_SetString(g_invalid_argument, e.what());
    } catch (const InsertRefused& e) {
      PyErr_SetString(g_insert_refused, e.what());
    } catch (const CudaError& e) {
      PyErr_SetString(g_cuda_error, e.what());
    } catch (const NotAvailable& e) {
      PyErr_SetString(g_not_available, e.what());
    } catch (const OutOfMemory& e) {
      PyErr_SetString(g_out_of_memory, e.what());
    } catch (const StateError& e) {
      PyErr_SetString(g_state_error, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });
}

}  // namespace dynemb::python

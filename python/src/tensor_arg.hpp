// Tensors crossing the Python boundary without copies: borrowed from any object with
// __dlpack__ (PyTorch, NumPy, CuPy, ...) or the buffer protocol, and handed back as DLPack
// capsules that torch.from_dlpack / numpy.from_dlpack wrap.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dlpack.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/core/value_type.hpp"

namespace dynemb::python {

namespace py = pybind11;

// The element types dynemb reads and writes.
enum class Element : uint8_t { kInt64, kUInt64, kFloat32, kUInt8, kFloat16, kBFloat16 };

// "int64", "uint64", "float32", "uint8", "float16", "bfloat16".
const char* to_string(Element element);

// Where a tensor lives: the CPU, or one CUDA device.
struct Placement {
  Backend backend = Backend::kCpu;
  int device = 0;
  bool operator==(const Placement&) const = default;
};

// "cpu" or "cuda:N".
std::string to_string(Placement placement);

// A tensor borrowed from a Python object for the length of one call: the object's memory is
// used in place (no copy); the exporter's capsule or buffer is held until destruction.
class TensorArg {
 public:
  // Imports `obj` through __dlpack__() (the legacy "dltensor" capsule; a CPU object that
  // refuses it falls back to the buffer protocol), or reads an unconsumed "dltensor" capsule.
  // Throws InvalidArgument naming `where` and `name` when `obj` is neither.
  TensorArg(py::handle obj, std::string where, std::string name);
  TensorArg(TensorArg&&) = default;
  ~TensorArg();

  // Checks element type, rank, placement and row-major compactness of every dimension but the
  // first `strided_rows` (a 2-D tensor may then have a row stride >= its width); throws
  // InvalidArgument naming the argument, the value found and the one needed.
  void require(Element element, int ndim, Placement placement, bool strided_rows = false) const;

  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int dim) const { return shape_.at(static_cast<size_t>(dim)); }
  int64_t numel() const;
  // Elements between consecutive rows (2-D) — the row stride.
  int64_t row_stride() const;
  Placement placement() const { return placement_; }
  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  const std::string& name() const { return name_; }

 private:
  std::string where_, name_;
  py::object owner_;  // the capsule or the buffer's exporter
  std::optional<py::buffer_info> buffer_;
  void* data_ = nullptr;
  dlpack::DataType dtype_{};
  Placement placement_{};
  bool host_readable_ = true;
  std::vector<int64_t> shape_, strides_;  // strides in elements
};

// Imports `obj` unless it is None.
std::optional<TensorArg> optional_tensor(py::handle obj, const std::string& where,
                                         const std::string& name);

// A DLPack capsule over memory dynemb allocated; `release` frees it when the consumer (or,
// unconsumed, the capsule) is done with it.
py::object make_capsule(void* data, Element element, std::vector<int64_t> shape,
                        Placement placement, std::function<void()> release);

// A capsule owning a fresh array of `count` elements in `placement`'s memory.
py::object new_capsule(Element element, std::vector<int64_t> shape, Placement placement,
                       void** data);

// A capsule owning a host vector (moved in).
template <class T>
py::object capsule_of(std::vector<T>&& values, Element element, std::vector<int64_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  return make_capsule(owned->data(), element, std::move(shape), Placement{},
                      [owned] { delete owned; });
}

// The tensor element that holds embedding elements of `type`.
Element element_of(ValueType type);

// The row stride of `t` (a [rows, width] tensor of `type`'s elements, checked by require) in 32-bit
// words, what the ops take: float32 as is; 16-bit types need an even stride (rows start on a word:
// two elements a word) and a word-aligned start. rows <= 1: the width's words. Throws
// InvalidArgument naming `where` and `name` otherwise.
uint32_t word_stride(const TensorArg& t, ValueType type, const std::string& where,
                     const std::string& name);

}  // namespace dynemb::python

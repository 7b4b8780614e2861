// Borrowing tensors through DLPack / the buffer protocol, and handing memory back as capsules.
#include "tensor_arg.hpp"

#include <Python.h>

#include <utility>

#include "dynemb/core/error.hpp"
#include "dynemb/core/memory.hpp"

namespace dynemb::python {

namespace {

size_t element_bytes(Element e) {
  switch (e) {
    case Element::kUInt8:
      return 1;
    case Element::kFloat16:
    case Element::kBFloat16:
      return 2;
    case Element::kFloat32:
      return 4;
    default:
      return 8;
  }
}

dlpack::DataType dl_type(Element e) {
  switch (e) {
    case Element::kInt64:
      return {dlpack::kInt, 64, 1};
    case Element::kUInt64:
      return {dlpack::kUInt, 64, 1};
    case Element::kFloat32:
      return {dlpack::kFloat, 32, 1};
    case Element::kFloat16:
      return {dlpack::kFloat, 16, 1};
    case Element::kBFloat16:
      return {dlpack::kBfloat, 16, 1};
    case Element::kUInt8:
    default:
      return {dlpack::kUInt, 8, 1};
  }
}

std::string describe(dlpack::DataType t) {
  const char* kind = "type";
  switch (t.code) {
    case dlpack::kInt:
      kind = "int";
      break;
    case dlpack::kUInt:
      kind = "uint";
      break;
    case dlpack::kFloat:
      kind = "float";
      break;
    case dlpack::kBfloat:
      kind = "bfloat";
      break;
    case dlpack::kBool:
      return "bool";
    default:
      break;
  }
  std::string s = kind + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

// Element type of a buffer-protocol format character of `itemsize` bytes.
dlpack::DataType buffer_type(const std::string& format, py::ssize_t itemsize) {
  const char c = format.empty() ? 'B' : format.back();
  const auto bits = static_cast<uint8_t>(itemsize * 8);
  switch (c) {
    case 'f':
    case 'd':
    case 'e':
      return {dlpack::kFloat, bits, 1};
    case '?':
      return {dlpack::kBool, bits, 1};
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
    case 'N':
      return {dlpack::kUInt, bits, 1};
    default:
      return {dlpack::kInt, bits, 1};
  }
}

struct CapsuleContext {
  std::vector<int64_t> shape;
  std::function<void()> release;
  dlpack::ManagedTensor managed{};
};

void delete_context(dlpack::ManagedTensor* self) {
  auto* ctx = static_cast<CapsuleContext*>(self->manager_ctx);
  if (ctx->release) ctx->release();
  delete ctx;
}

// An unconsumed capsule frees its tensor; a consumed one ("used_dltensor") belongs to the
// consumer.
void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, dlpack::kCapsuleName)) {
    auto* managed =
        static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule, dlpack::kCapsuleName));
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  }
}

}  // namespace

const char* to_string(Element element) {
  switch (element) {
    case Element::kInt64:
      return "int64";
    case Element::kUInt64:
      return "uint64";
    case Element::kFloat32:
      return "float32";
    case Element::kFloat16:
      return "float16";
    case Element::kBFloat16:
      return "bfloat16";
    case Element::kUInt8:
    default:
      return "uint8";
  }
}

std::string to_string(Placement p) {
  return p.backend == Backend::kCpu ? std::string("cpu") : "cuda:" + std::to_string(p.device);
}

TensorArg::TensorArg(py::handle obj, std::string where, std::string name)
    : where_(std::move(where)), name_(std::move(name)) {
  // The type's name only for messages (read when one is built, not on every call).
  const auto type_name = [&obj] {
    return std::string(py::str(py::type::handle_of(obj).attr("__name__")));
  };
  bool imported = false;
  if (PyCapsule_IsValid(obj.ptr(), dlpack::kCapsuleName)) {
    owner_ = py::reinterpret_borrow<py::object>(obj);  // read, not consumed
    imported = true;
  } else if (py::hasattr(obj, "__dlpack__")) {
    try {
      // No max_version: the legacy "dltensor" capsule. A CUDA tensor is asked with stream=-1
      // (no synchronization): dynemb works on the caller's current stream, the one the tensor
      // was made on; stream=None would have PyTorch 2 order the legacy default stream after it.
      bool on_cuda = false;
      if (py::hasattr(obj, "__dlpack_device__")) {
        const py::tuple device = obj.attr("__dlpack_device__")();
        const int type = py::int_(device[0]).cast<int>();
        on_cuda = type == dlpack::kCuda || type == dlpack::kCudaManaged;
      }
      owner_ = on_cuda ? obj.attr("__dlpack__")(py::arg("stream") = -1) : obj.attr("__dlpack__")();
      imported = true;
    } catch (py::error_already_set& e) {
      // NumPy refuses read-only arrays through DLPack; the buffer protocol takes them.
      if (!PyObject_CheckBuffer(obj.ptr())) {
        throw InvalidArgument(where_ + ": " + name_ + " (" + type_name() +
                              ") could not be exported through __dlpack__: " + e.what());
      }
    }
  }
  if (imported) {
    if (!PyCapsule_IsValid(owner_.ptr(), dlpack::kCapsuleName)) {
      throw InvalidArgument(where_ + ": " + name_ + " (" + type_name() +
                            "): __dlpack__() did not return a \"dltensor\" capsule");
    }
    auto* managed = static_cast<dlpack::ManagedTensor*>(
        PyCapsule_GetPointer(owner_.ptr(), dlpack::kCapsuleName));
    const dlpack::Tensor& t = managed->dl_tensor;
    data_ = static_cast<char*>(t.data) + t.byte_offset;
    dtype_ = t.dtype;
    shape_.assign(t.shape, t.shape + t.ndim);
    if (t.strides != nullptr) {
      strides_.assign(t.strides, t.strides + t.ndim);
    } else {
      strides_.resize(shape_.size());
      int64_t s = 1;
      for (int d = t.ndim - 1; d >= 0; --d) {
        strides_[d] = s;
        s *= shape_[d];
      }
    }
    switch (t.device.device_type) {
      case dlpack::kCpu:
      case dlpack::kCudaHost:
        placement_ = {Backend::kCpu, 0};
        break;
      case dlpack::kCuda:
      case dlpack::kCudaManaged:
        placement_ = {Backend::kCuda, t.device.device_id};
        break;
      default:
        throw InvalidArgument(where_ + ": " + name_ + " lives on DLPack device type " +
                              std::to_string(t.device.device_type) +
                              ", only CPU and CUDA memory are accepted");
    }
    return;
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    throw InvalidArgument(where_ + ": " + name_ + " is a " + type_name() +
                          ", must be a tensor (an object with __dlpack__ or the buffer protocol)");
  }
  buffer_.emplace(py::reinterpret_borrow<py::buffer>(obj).request());
  owner_ = py::reinterpret_borrow<py::object>(obj);
  data_ = buffer_->ptr;
  dtype_ = buffer_type(buffer_->format, buffer_->itemsize);
  shape_.assign(buffer_->shape.begin(), buffer_->shape.end());
  for (size_t d = 0; d < shape_.size(); ++d) {
    if (buffer_->strides[d] % buffer_->itemsize != 0) {
      throw InvalidArgument(where_ + ": " + name_ + " has a stride of " +
                            std::to_string(buffer_->strides[d]) +
                            " bytes, not a multiple of its element size");
    }
    strides_.push_back(buffer_->strides[d] / buffer_->itemsize);
  }
  placement_ = {Backend::kCpu, 0};
}

TensorArg::~TensorArg() = default;

int64_t TensorArg::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

int64_t TensorArg::row_stride() const {
  return shape_.size() == 2 ? strides_[0] : 1;
}

void TensorArg::require(Element element, int ndim, Placement placement, bool strided_rows) const {
  const std::string prefix = where_ + ": " + name_;
  const dlpack::DataType want = dl_type(element);
  const bool same_type =
      dtype_.code == want.code && dtype_.bits == want.bits && dtype_.lanes == want.lanes;
  // A bool tensor of one byte passes as uint8 (found flags).
  const bool bool_as_byte =
      element == Element::kUInt8 && dtype_.code == dlpack::kBool && dtype_.bits == 8;
  if (!same_type && !bool_as_byte) {
    throw InvalidArgument(prefix + ": dtype = " + describe(dtype_) + ", must be " +
                          to_string(element));
  }
  if (this->ndim() != ndim) {
    throw InvalidArgument(prefix + ": ndim = " + std::to_string(this->ndim()) + ", must be " +
                          std::to_string(ndim));
  }
  if (!(placement_ == placement)) {
    throw InvalidArgument(prefix + ": device = " + to_string(placement_) + ", must be " +
                          to_string(placement) + " (where the table lives)");
  }
  // An empty tensor has no layout to check (exporters give it arbitrary strides).
  if (numel() == 0) return;
  // Row-major compact, except for a row stride >= the row width when allowed; dimensions of
  // size 1 may have any stride.
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    const bool free_dim = shape_[d] == 1;
    if (d == 0 && strided_rows && ndim == 2) {
      if (!free_dim && strides_[0] < shape_[1]) {
        throw InvalidArgument(prefix + ": row stride = " + std::to_string(strides_[0]) +
                              ", must be >= its width " + std::to_string(shape_[1]));
      }
      break;
    }
    if (!free_dim && strides_[d] != expected) {
      // Built with std::to_string: an std::ostringstream here crashed inside libstdc++'s
      // number formatting under PyTorch 2.11 / Python 3.12 on the GPU machine.
      throw InvalidArgument(prefix + ": is not contiguous (stride " + std::to_string(strides_[d]) +
                            " in dimension " + std::to_string(d) + ", must be " +
                            std::to_string(expected) + "); call .contiguous() first");
    }
    expected *= shape_[d];
  }
}

std::optional<TensorArg> optional_tensor(py::handle obj, const std::string& where,
                                         const std::string& name) {
  if (obj.is_none()) return std::nullopt;
  return TensorArg(obj, where, name);
}

py::object make_capsule(void* data, Element element, std::vector<int64_t> shape,
                        Placement placement, std::function<void()> release) {
  auto* ctx = new CapsuleContext{std::move(shape), std::move(release), {}};
  dlpack::Tensor& t = ctx->managed.dl_tensor;
  t.data = data;
  t.device = {placement.backend == Backend::kCpu ? dlpack::kCpu : dlpack::kCuda,
              placement.backend == Backend::kCpu ? 0 : placement.device};
  t.ndim = static_cast<int32_t>(ctx->shape.size());
  t.dtype = dl_type(element);
  t.shape = ctx->shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = delete_context;
  PyObject* capsule = PyCapsule_New(&ctx->managed, dlpack::kCapsuleName, capsule_destructor);
  if (capsule == nullptr) {
    delete_context(&ctx->managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

py::object new_capsule(Element element, std::vector<int64_t> shape, Placement placement,
                       void** data) {
  size_t count = 1;
  for (int64_t s : shape) count *= static_cast<size_t>(s);
  const size_t bytes = std::max<size_t>(count * element_bytes(element), 1);
  void* p = backend_alloc(placement.backend, bytes, placement.device);
  *data = p;
  const Backend backend = placement.backend;
  return make_capsule(p, element, std::move(shape), placement,
                      [backend, p] { backend_free(backend, p); });
}

Element element_of(ValueType type) {
  switch (type) {
    case ValueType::kFloat16:
      return Element::kFloat16;
    case ValueType::kBFloat16:
      return Element::kBFloat16;
    default:
      return Element::kFloat32;
  }
}

uint32_t word_stride(const TensorArg& t, ValueType type, const std::string& where,
                     const std::string& name) {
  const int64_t width = t.size(1);
  if (t.size(0) <= 1) return value_words(type, static_cast<uint32_t>(width));
  const int64_t stride = t.row_stride();
  if (type == ValueType::kFloat32) return static_cast<uint32_t>(stride);
  if (stride % 2 != 0 || reinterpret_cast<uintptr_t>(t.as<uint16_t>()) % 4 != 0) {
    throw InvalidArgument(where + ": " + name + ": row stride = " + std::to_string(stride) + " " +
                          to_string(type) +
                          " elements, must be even with the tensor 4-byte aligned (16-bit "
                          "outputs are read and written two elements a 32-bit word)");
  }
  return static_cast<uint32_t>(stride / 2);
}

}  // namespace dynemb::python

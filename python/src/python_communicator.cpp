// The Communicator over a Python object's collectives.
#include "python_communicator.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "dynemb/core/error.hpp"
#include "tensor_arg.hpp"

namespace dynemb::python {

namespace {

using dist::DataType;

// A capsule of `bytes` uint8 over host memory dynemb owns for the length of one call.
py::object borrowed_bytes(const void* data, size_t bytes) {
  static uint8_t empty = 0;  // DLPack consumers may refuse a null pointer, even for 0 bytes
  void* p = bytes == 0 || data == nullptr ? &empty : const_cast<void*>(data);
  return make_capsule(p, Element::kUInt8, {static_cast<int64_t>(bytes)}, Placement{}, [] {});
}

// True when piece r starts where piece r - 1 ends (the layout torch's all_to_all_single takes).
bool packed(const size_t* counts, const size_t* displs, uint32_t world) {
  size_t at = 0;
  for (uint32_t r = 0; r < world; ++r) {
    if (displs[r] != at) return false;
    at += counts[r];
  }
  return true;
}

template <class T>
void sum_ranks(const std::vector<uint8_t>& gathered, void* recv, size_t count, uint32_t world) {
  std::vector<T> total(count, T{});
  for (uint32_t r = 0; r < world; ++r) {
    const auto* part = reinterpret_cast<const T*>(gathered.data() + r * count * sizeof(T));
    for (size_t i = 0; i < count; ++i) total[i] = static_cast<T>(total[i] + part[i]);
  }
  if (count > 0) std::memcpy(recv, total.data(), count * sizeof(T));
}

class PythonCommunicator final : public dist::Communicator {
 public:
  PythonCommunicator(uint32_t rank, uint32_t world, py::object collectives)
      : rank_(rank), world_(world), collectives_(std::move(collectives)) {
    for (const char* method : {"all_to_all", "all_gather", "broadcast", "barrier"}) {
      if (!py::hasattr(collectives_, method)) {
        throw InvalidArgument("python_communicator: collectives (a " +
                              std::string(py::str(py::type::of(collectives_).attr("__name__"))) +
                              ") has no method " + method);
      }
    }
  }
  ~PythonCommunicator() override {
    py::gil_scoped_acquire gil;
    collectives_ = py::object();
  }

  uint32_t rank() const override { return rank_; }
  uint32_t world_size() const override { return world_; }
  Backend backend() const override { return Backend::kCpu; }
  std::string name() const override { return "python"; }

  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs,
                    void* recv, const size_t* recv_counts, const size_t* recv_displs, DataType type,
                    StreamHandle) override {
    const size_t width = dist::data_type_bytes(type);
    std::vector<size_t> send_bytes(world_), recv_bytes(world_);
    size_t send_total = 0, recv_total = 0;
    for (uint32_t r = 0; r < world_; ++r) {
      send_bytes[r] = send_counts[r] * width;
      recv_bytes[r] = recv_counts[r] * width;
      send_total += send_bytes[r];
      recv_total += recv_bytes[r];
    }
    // torch's all_to_all_single takes pieces back to back: pack or unpack around it when the
    // displacements leave gaps or repeat a piece (the pooled exchange sends one buffer to all).
    const bool send_packed = packed(send_counts, send_displs, world_);
    const bool recv_packed = packed(recv_counts, recv_displs, world_);
    std::vector<uint8_t> send_stage, recv_stage;
    const void* send_ptr =
        static_cast<const uint8_t*>(send) + (send_packed ? send_displs[0] * width : 0);
    if (!send_packed) {
      send_stage.resize(send_total);
      size_t at = 0;
      for (uint32_t r = 0; r < world_; ++r) {
        if (send_bytes[r] > 0) {
          std::memcpy(send_stage.data() + at,
                      static_cast<const uint8_t*>(send) + send_displs[r] * width, send_bytes[r]);
        }
        at += send_bytes[r];
      }
      send_ptr = send_stage.data();
    }
    void* recv_ptr = static_cast<uint8_t*>(recv) + (recv_packed ? recv_displs[0] * width : 0);
    if (!recv_packed) {
      recv_stage.resize(recv_total);
      recv_ptr = recv_stage.data();
    }
    call("all_to_all", [&] {
      collectives_.attr("all_to_all")(borrowed_bytes(send_ptr, send_total), as_list(send_bytes),
                                      borrowed_bytes(recv_ptr, recv_total), as_list(recv_bytes));
    });
    if (!recv_packed) {
      size_t at = 0;
      for (uint32_t r = 0; r < world_; ++r) {
        if (recv_bytes[r] > 0) {
          std::memcpy(static_cast<uint8_t*>(recv) + recv_displs[r] * width, recv_stage.data() + at,
                      recv_bytes[r]);
        }
        at += recv_bytes[r];
      }
    }
  }

  void all_gather(const void* send, void* recv, size_t count, DataType type,
                  StreamHandle) override {
    const size_t bytes = count * dist::data_type_bytes(type);
    // send may alias recv's own slot: gather from a copy.
    std::vector<uint8_t> mine(static_cast<const uint8_t*>(send),
                              static_cast<const uint8_t*>(send) + bytes);
    call("all_gather", [&] {
      collectives_.attr("all_gather")(borrowed_bytes(mine.data(), bytes),
                                      borrowed_bytes(recv, bytes * world_));
    });
  }

  void all_reduce_sum(const void* send, void* recv, size_t count, DataType type,
                      StreamHandle stream) override {
    std::vector<uint8_t> gathered(count * dist::data_type_bytes(type) * world_);
    all_gather(send, gathered.data(), count, type, stream);
    switch (type) {
      case DataType::kUint8:
        return sum_ranks<uint8_t>(gathered, recv, count, world_);
      case DataType::kInt32:
        return sum_ranks<int32_t>(gathered, recv, count, world_);
      case DataType::kUint32:
        return sum_ranks<uint32_t>(gathered, recv, count, world_);
      case DataType::kInt64:
        return sum_ranks<int64_t>(gathered, recv, count, world_);
      case DataType::kUint64:
        return sum_ranks<uint64_t>(gathered, recv, count, world_);
      case DataType::kFloat32:
        return sum_ranks<float>(gathered, recv, count, world_);
      case DataType::kFloat64:
        return sum_ranks<double>(gathered, recv, count, world_);
    }
  }

  void broadcast(void* buffer, size_t count, DataType type, uint32_t root, StreamHandle) override {
    require(root < world_, "PythonCommunicator::broadcast", "root", std::to_string(root),
            "< world_size = " + std::to_string(world_));
    const size_t bytes = count * dist::data_type_bytes(type);
    call("broadcast", [&] { collectives_.attr("broadcast")(borrowed_bytes(buffer, bytes), root); });
  }

  void barrier() override {
    call("barrier", [&] { collectives_.attr("barrier")(); });
  }

 private:
  static py::list as_list(const std::vector<size_t>& values) {
    py::list list;
    for (size_t v : values) list.append(v);
    return list;
  }

  // Runs `body` holding the GIL; a Python exception becomes Error naming the collective.
  template <class Body>
  void call(const char* collective, Body&& body) {
    py::gil_scoped_acquire gil;
    try {
      body();
    } catch (py::error_already_set& e) {
      const std::string what = e.what();
      throw Error("python communicator (rank " + std::to_string(rank_) + " of " +
                  std::to_string(world_) + "): " + collective + " failed: " + what);
    }
  }

  uint32_t rank_, world_;
  py::object collectives_;
};

}  // namespace

std::shared_ptr<dist::Communicator> make_python_communicator(uint32_t rank, uint32_t world_size,
                                                             py::object collectives) {
  if (world_size == 0 || rank >= world_size) {
    throw InvalidArgument("python_communicator: rank = " + std::to_string(rank) +
                          ", world_size = " + std::to_string(world_size) +
                          "; need world_size >= 1 and rank < world_size");
  }
  return std::make_shared<PythonCommunicator>(rank, world_size, std::move(collectives));
}

}  // namespace dynemb::python

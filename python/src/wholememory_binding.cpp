// Bindings of the wholememory part: tensors cross through DLPack; the executor of a call is the
// placement of its indices (CPU: host threads; CUDA: kernels on that device).
#include "wholememory_binding.hpp"

#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "dynemb/core/error.hpp"
#include "dynemb/wholememory/embedding.hpp"
#include "dynemb/wholememory/file_io.hpp"
#include "dynemb/wholememory/socket_communicator.hpp"
#include "dynemb/wholememory/tensor.hpp"
#include "tensor_arg.hpp"

namespace dynemb::python {
namespace {

namespace wm = dynemb::wholememory;

// The processes a WholeMemory spans.
struct Group {
  std::shared_ptr<dist::Communicator> comm;
};

// The placement a call runs on, from its indices: CUDA calls must be on the memory's device.
Placement placement_for(const TensorArg& indices, const wm::WholeMemory& m,
                        const std::string& where) {
  const Placement p = indices.placement();
  if (p.backend == Backend::kCuda && m.device() >= 0 && p.device != m.device()) {
    throw InvalidArgument(where + ": indices on " + to_string(p) + ", must be on cuda:" +
                          std::to_string(m.device()) + " (the memory's device) or the CPU");
  }
  return p;
}

class TensorHandle {
 public:
  TensorHandle(std::shared_ptr<Group> group, std::vector<uint64_t> shape, const std::string& type,
               const std::string& location, int device)
      : group_(std::move(group)) {
    wm::TensorOptions o;
    o.shape = std::move(shape);
    o.dtype = dist::DataType::kFloat32;
    o.type = wm::parse_memory_type(type);
    o.location = wm::parse_memory_location(location);
    o.device = device;
    tensor_ = std::make_unique<wm::WholeTensor>(*group_->comm, o);
  }

  py::object gather(py::handle indices) const {
    const std::string where = "WholeTensor.gather";
    TensorArg ids(indices, where, "indices");
    const Placement p = placement_for(ids, tensor_->memory(), where);
    ids.require(Element::kInt64, 1, p);
    void* data = nullptr;
    std::vector<int64_t> shape = {ids.size(0)};
    if (tensor_->shape().size() == 2) shape.push_back(static_cast<int64_t>(tensor_->cols()));
    py::object out = new_capsule(Element::kFloat32, shape, p, &data);
    wm::gather(*tensor_, ids.as<int64_t>(), static_cast<size_t>(ids.size(0)), data, p.backend);
    tensor_->memory().synchronize();
    return out;
  }

  void scatter(py::handle values, py::handle indices) {
    const std::string where = "WholeTensor.scatter";
    TensorArg ids(indices, where, "indices");
    const Placement p = placement_for(ids, tensor_->memory(), where);
    ids.require(Element::kInt64, 1, p);
    TensorArg v(values, where, "values");
    v.require(Element::kFloat32, static_cast<int>(tensor_->shape().size()), p);
    if (v.size(0) != ids.size(0) ||
        (v.ndim() == 2 && v.size(1) != static_cast<int64_t>(tensor_->cols()))) {
      throw InvalidArgument(where + ": values: shape[0] = " + std::to_string(v.size(0)) +
                            ", must be one row of " + std::to_string(tensor_->cols()) +
                            " per index (" + std::to_string(ids.size(0)) + ")");
    }
    wm::scatter(*tensor_, v.data(), ids.as<int64_t>(), static_cast<size_t>(ids.size(0)), p.backend);
    tensor_->memory().synchronize();
  }

  wm::WholeTensor& tensor() { return *tensor_; }
  const wm::WholeTensor& tensor() const { return *tensor_; }

 private:
  std::shared_ptr<Group> group_;  // outlives the memory
  std::unique_ptr<wm::WholeTensor> tensor_;
};

class EmbeddingHandle {
 public:
  EmbeddingHandle(std::shared_ptr<Group> group, wm::WholeEmbeddingOptions options)
      : group_(std::move(group)),
        embedding_(std::make_unique<wm::WholeEmbedding>(*group_->comm, options)) {}

  py::object lookup(py::handle indices) const {
    const std::string where = "WholeEmbedding.lookup";
    TensorArg ids(indices, where, "indices");
    const Placement p = placement_for(ids, embedding_->tensor().memory(), where);
    ids.require(Element::kInt64, 1, p);
    void* data = nullptr;
    py::object out =
        new_capsule(Element::kFloat32,
                    {ids.size(0), static_cast<int64_t>(embedding_->options().dim)}, p, &data);
    embedding_->lookup(ids.as<int64_t>(), static_cast<size_t>(ids.size(0)),
                       static_cast<float*>(data), p.backend);
    embedding_->tensor().memory().synchronize();
    return out;
  }

  uint64_t apply_gradients(py::handle indices, py::handle grads) {
    const std::string where = "WholeEmbedding.apply_gradients";
    TensorArg ids(indices, where, "indices");
    const Placement p = placement_for(ids, embedding_->tensor().memory(), where);
    ids.require(Element::kInt64, 1, p);
    TensorArg g(grads, where, "grads");
    g.require(Element::kFloat32, 2, p);
    if (g.size(0) != ids.size(0) || g.size(1) != static_cast<int64_t>(embedding_->options().dim)) {
      throw InvalidArgument(where + ": grads: shape = [" + std::to_string(g.size(0)) + ", " +
                            std::to_string(g.size(1)) + "], must be [" +
                            std::to_string(ids.size(0)) + ", " +
                            std::to_string(embedding_->options().dim) + "]");
    }
    return embedding_->apply_gradients(ids.as<int64_t>(), static_cast<size_t>(ids.size(0)),
                                       g.as<float>(), p.backend);
  }

  wm::WholeEmbedding& embedding() { return *embedding_; }

 private:
  std::shared_ptr<Group> group_;
  std::unique_ptr<wm::WholeEmbedding> embedding_;
};

}  // namespace

void register_wholememory(py::module_& m) {
  py::class_<Group, std::shared_ptr<Group>>(m, "WholeMemoryGroup")
      .def_static(
          "local", [] { return std::make_shared<Group>(Group{dist::make_local_communicator()}); },
          "One rank: this process alone.")
      .def_static(
          "socket",
          [](const std::string& job, uint32_t rank, uint32_t world_size) {
            py::gil_scoped_release release;
            return std::make_shared<Group>(Group{std::shared_ptr<dist::Communicator>(
                wm::make_socket_communicator(job, rank, world_size))});
          },
          py::arg("job"), py::arg("rank"), py::arg("world_size"),
          "Rank `rank` of the `world_size` processes of this node that pass the same `job` name "
          "(joined over Unix sockets; blocks until all are there).")
      .def_property_readonly("rank", [](const Group& g) { return g.comm->rank(); })
      .def_property_readonly("world_size", [](const Group& g) { return g.comm->world_size(); })
      .def("barrier", [](Group& g) {
        py::gil_scoped_release release;
        g.comm->barrier();
      });

  py::class_<TensorHandle>(m, "WholeTensor")
      .def(py::init<std::shared_ptr<Group>, std::vector<uint64_t>, const std::string&,
                    const std::string&, int>(),
           py::arg("group"), py::arg("shape"), py::arg("type") = "continuous",
           py::arg("location") = "host", py::arg("device") = -1)
      .def("gather", &TensorHandle::gather, py::arg("indices"))
      .def("scatter", &TensorHandle::scatter, py::arg("values"), py::arg("indices"))
      .def(
          "load_from_files",
          [](TensorHandle& t, const std::vector<std::string>& files) {
            wm::load_from_files(t.tensor().memory(), files);
          },
          py::arg("files"))
      .def(
          "store_to_file",
          [](const TensorHandle& t, const std::string& path) {
            wm::store_to_file(t.tensor().memory(), path);
          },
          py::arg("path"))
      .def(
          "store_parts",
          [](const TensorHandle& t, const std::string& prefix) {
            return wm::store_parts(t.tensor().memory(), prefix);
          },
          py::arg("prefix"))
      .def_property_readonly("shape", [](const TensorHandle& t) { return t.tensor().shape(); })
      .def_property_readonly(
          "local_first_row",
          [](const TensorHandle& t) { return t.tensor().memory().local_first_row(); })
      .def_property_readonly("local_rows",
                             [](const TensorHandle& t) {
                               const auto& m = t.tensor().memory();
                               return m.partition().rows_of(m.rank());
                             })
      .def_property_readonly("device",
                             [](const TensorHandle& t) { return t.tensor().memory().device(); })
      .def("describe", [](const TensorHandle& t) { return t.tensor().memory().describe(); });

  py::class_<EmbeddingHandle>(m, "WholeEmbedding")
      .def(py::init([](std::shared_ptr<Group> group, uint64_t rows, uint32_t dim,
                       const OptimizerOptions& optimizer, const InitializerOptions& initializer,
                       const std::string& type, const std::string& location, int device,
                       double cache_ratio, const std::string& cache_on) {
             wm::WholeEmbeddingOptions o;
             o.rows = rows;
             o.dim = dim;
             o.optimizer = optimizer;
             o.initializer = initializer;
             o.type = wm::parse_memory_type(type);
             o.location = wm::parse_memory_location(location);
             o.device = device;
             o.cache_ratio = cache_ratio;
             o.cache_executor = parse_backend(cache_on);
             return std::make_unique<EmbeddingHandle>(std::move(group), o);
           }),
           py::arg("group"), py::arg("rows"), py::arg("dim"), py::arg("optimizer"),
           py::arg("initializer"), py::arg("type") = "continuous", py::arg("location") = "host",
           py::arg("device") = -1, py::arg("cache_ratio") = 0.0, py::arg("cache_on") = "cuda")
      .def("lookup", &EmbeddingHandle::lookup, py::arg("indices"))
      .def("apply_gradients", &EmbeddingHandle::apply_gradients, py::arg("indices"),
           py::arg("grads"))
      .def("invalidate_cache", [](EmbeddingHandle& e) { e.embedding().invalidate_cache(); })
      .def("cache_stats", [](EmbeddingHandle& e) {
        const wm::WholeEmbeddingCacheStats s = e.embedding().cache_stats();
        py::dict d;
        d["slots"] = s.slots;
        d["hits"] = s.hits;
        d["misses"] = s.misses;
        d["invalidated"] = s.invalidated;
        return d;
      });
}

}  // namespace dynemb::python

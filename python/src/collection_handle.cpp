// CollectionHandle and CollectionTable.
#include "collection_handle.hpp"

#include <pybind11/stl.h>

#include <string>

#include "batch_args.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/table/table.hpp"
#include "stats_dict.hpp"

namespace dynemb::python {

namespace {

StreamHandle as_stream(uintptr_t stream) {
  return reinterpret_cast<StreamHandle>(stream);
}

}  // namespace

CollectionHandle::CollectionHandle(Backend backend, std::vector<EmbeddingOptions> tables) {
  if (tables.empty()) throw InvalidArgument("EmbeddingCollection: tables is empty, need >= 1");
  if (backend == Backend::kCuda && !cuda_backend_available()) {
    throw NotAvailable(
        "EmbeddingCollection: backend = cuda, but this module has no CUDA backend or sees no "
        "CUDA device");
  }
  placement_ = {backend, backend == Backend::kCuda ? tables.front().table.device : 0};
  collection_ = std::make_unique<EmbeddingCollection<int64_t>>(backend, std::move(tables));
}

uint64_t CollectionHandle::forward(py::list batches, bool training, py::handle out,
                                   uintptr_t stream) {
  BatchArgs args = parse_batches(batches, num_tables(), out, dim(), placement_,
                                 "EmbeddingCollection.forward", output_type());
  return run_forward(args, training, batches, stream);
}

uint64_t CollectionHandle::forward_packed(py::handle indices, py::handle offsets,
                                          py::handle weights, const std::vector<int64_t>& id_ranges,
                                          const std::vector<int64_t>& bags, PoolingMode mode,
                                          bool training, py::handle out, uintptr_t stream) {
  BatchArgs args =
      parse_packed_batches(indices, offsets, weights, id_ranges, bags, mode, num_tables(), out,
                           dim(), placement_, "EmbeddingCollection.forward_packed", output_type());
  return run_forward(args, training, py::make_tuple(indices, offsets, weights), stream);
}

uint64_t CollectionHandle::run_forward(BatchArgs& args, bool training, py::object batches,
                                       uintptr_t stream) {
  batches_in_flight_ = py::none();
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    pending_ = 0;  // every forward, evaluation too, drops the pending step first
    collection_->forward(args.batches, args.out->as<float>(), args.out_stride, training,
                         as_stream(stream));
    if (!training) return 0;
    pending_ = ++generation_;
    out_rows_ = args.rows;
  }
  batches_in_flight_ = std::move(batches);
  return generation_;
}

void CollectionHandle::backward(py::handle grad, uint64_t generation, uintptr_t stream) {
  const std::string where = "EmbeddingCollection.backward";
  TensorArg g(grad, where, "grad");
  py::gil_scoped_release release;
  std::lock_guard lock(mutex_);
  if (pending_ == 0 || generation != pending_) {
    throw StateError(
        where + ": the gradient belongs to training forward " + std::to_string(generation) +
        ", but " +
        (pending_ == 0 ? std::string("no training forward awaits its backward")
                       : "the collection's last training forward is " + std::to_string(pending_)) +
        " (one step in flight: forward, backward, forward, ...); the tables are "
        "unchanged");
  }
  const uint32_t stride = check_gradient(g, out_rows_, dim(), placement_, where, output_type());
  collection_->backward(g.as<float>(), stride, as_stream(stream));
  pending_ = 0;
  collection_->end_step();
}

void CollectionHandle::set_host_sync_free(bool on, uint32_t key_bits, uint32_t lookup_streams) {
  py::gil_scoped_release release;
  std::lock_guard lock(mutex_);
  collection_->set_host_sync_free(on, key_bits, lookup_streams);
}

bool CollectionHandle::host_sync_free() const {
  std::lock_guard lock(mutex_);
  return collection_->host_sync_free();
}

CollectionTable::CollectionTable(std::shared_ptr<CollectionHandle> owner, size_t index)
    : owner_(std::move(owner)), index_(index) {
  if (!owner_) throw InvalidArgument("CollectionTable: owner is None");
  if (index_ >= owner_->num_tables()) {
    throw InvalidArgument("CollectionTable: index = " + std::to_string(index_) + ", must be < " +
                          std::to_string(owner_->num_tables()));
  }
}

RowLayout CollectionTable::row_layout() const {
  return embedding_row_layout(owner_->collection().options(index_));
}

uint32_t CollectionTable::optimizer_state_dim() const {
  const EmbeddingOptions& o = owner_->collection().options(index_);
  return dynemb::optimizer_state_words(o.optimizer.kind, o.dim, state_value_type(o.optimizer));
}

py::tuple CollectionTable::find(py::handle indices, uintptr_t stream) {
  const Placement placement = owner_->placement();
  TensorArg ids(indices, "CollectionTable.find", "indices");
  ids.require(Element::kInt64, 1, placement);
  const int64_t n = ids.size(0);
  void* rows = nullptr;
  void* founds = nullptr;
  py::object rows_capsule =
      new_capsule(Element::kFloat32, {n, static_cast<int64_t>(row_dim())}, placement, &rows);
  py::object founds_capsule = new_capsule(Element::kUInt8, {n}, placement, &founds);
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex());
    backend_zero(placement.backend, rows, static_cast<size_t>(n) * row_dim() * sizeof(float),
                 as_stream(stream));
    table().find(static_cast<size_t>(n), ids.as<int64_t>(), static_cast<float*>(rows),
                 static_cast<bool*>(founds), nullptr, as_stream(stream));
  }
  return py::make_tuple(rows_capsule, founds_capsule);
}

py::tuple CollectionTable::export_rows(uint64_t min_score) {
  checkpoint::DeltaRows<int64_t> delta;
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex());
    delta = checkpoint::incremental_dump(table(), min_score);
  }
  const auto n = static_cast<int64_t>(delta.keys.size());
  const int64_t width = delta.dim;
  return py::make_tuple(capsule_of(std::move(delta.keys), Element::kInt64, {n}),
                        capsule_of(std::move(delta.values), Element::kFloat32, {n, width}),
                        capsule_of(std::move(delta.scores), Element::kInt64, {n}),
                        delta.next_threshold);
}

py::dict CollectionTable::stats() const {
  EmbeddingCollectionStats s;
  size_t size = 0;
  double load = 0.0;
  Table<int64_t>& t = owner_->collection().table(index_);
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex());
    s = owner_->collection().stats();
    size = t.size();
    load = t.load_factor();
  }
  // nonfinite_gradients and refused_batches: over the collection's tables
  py::dict d = table_stats_dict(s.tables.at(index_), s.nonfinite_gradients, size, load, t);
  d["refused_batches"] = s.refused_batches;
  return d;
}

void register_collection(py::module_& m) {
  py::class_<CollectionHandle, std::shared_ptr<CollectionHandle>>(m, "EmbeddingCollection")
      .def(py::init<Backend, std::vector<EmbeddingOptions>>(), py::arg("backend"),
           py::arg("tables"))
      .def("forward", &CollectionHandle::forward, py::arg("batches"), py::arg("training"),
           py::arg("out"), py::arg("stream") = 0)
      .def("forward_packed", &CollectionHandle::forward_packed, py::arg("indices"),
           py::arg("offsets"), py::arg("weights"), py::arg("id_ranges"), py::arg("bags"),
           py::arg("mode"), py::arg("training"), py::arg("out"), py::arg("stream") = 0)
      .def("backward", &CollectionHandle::backward, py::arg("grad"), py::arg("generation"),
           py::arg("stream") = 0)
      .def("set_host_sync_free", &CollectionHandle::set_host_sync_free, py::arg("on"),
           py::arg("key_bits") = 0, py::arg("lookup_streams") = 8)
      .def_property_readonly("host_sync_free", &CollectionHandle::host_sync_free)
      .def_property_readonly("num_tables", &CollectionHandle::num_tables)
      .def_property_readonly("dim", &CollectionHandle::dim)
      .def(
          "table",
          [](std::shared_ptr<CollectionHandle> self, size_t index) {
            return CollectionTable(std::move(self), index);
          },
          py::arg("index"), "Table `index`, for inspection and checkpoints.");
  py::class_<CollectionTable>(m, "CollectionTable")
      .def("find", &CollectionTable::find, py::arg("indices"), py::arg("stream") = 0)
      .def("export_rows", &CollectionTable::export_rows, py::arg("min_score") = 0)
      .def("stats", &CollectionTable::stats)
      .def("caching_stats", [](const CollectionTable&) { return py::none(); })
      .def_property_readonly("dim", &CollectionTable::dim)
      .def_property_readonly("row_dim", &CollectionTable::row_dim)
      .def_property_readonly("optimizer_state_dim", &CollectionTable::optimizer_state_dim)
      .def_property(
          "score", [](CollectionTable& t) { return t.table().score(); },
          [](CollectionTable& t, uint64_t s) { t.table().set_score(s); })
      .def_property_readonly("score_policy",
                             [](CollectionTable& t) { return t.table().options().score_policy; });
}

}  // namespace dynemb::python

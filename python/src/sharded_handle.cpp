// ShardedHandle, the communicators' bindings and their factories.
#include "sharded_handle.hpp"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "batch_args.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/dist/bootstrap.hpp"
#include "dynemb/dist/mpi_communicator.hpp"
#include "dynemb/dist/nccl_communicator.hpp"
#include "dynemb/dist/sharded_checkpoint.hpp"
#include "dynemb/ops/optimizer.hpp"
#include "python_communicator.hpp"
#include "stats_dict.hpp"

namespace dynemb::python {

namespace {

StreamHandle as_stream(uintptr_t stream) {
  return reinterpret_cast<StreamHandle>(stream);
}

dist::KeyRouter router_named(const std::string& name) {
  if (name == "hash") return dist::KeyRouter::hash();
  if (name == "modulo") return dist::KeyRouter::modulo();
  throw InvalidArgument("ShardedCollection: router = \"" + name + "\", must be hash or modulo");
}

dist::ShardedExchange exchange_named(const std::string& name) {
  if (name == "rows") return dist::ShardedExchange::kRows;
  if (name == "pooled_on_owner") return dist::ShardedExchange::kPooledOnOwner;
  throw InvalidArgument("ShardedCollection: exchange = \"" + name +
                        "\", must be rows or pooled_on_owner");
}

}  // namespace

ShardedHandle::ShardedHandle(std::shared_ptr<dist::Communicator> comm,
                             std::vector<EmbeddingOptions> tables, const std::string& router,
                             const std::string& exchange)
    : comm_(std::move(comm)) {
  if (!comm_) throw InvalidArgument("ShardedCollection: communicator is None");
  if (tables.empty()) throw InvalidArgument("ShardedCollection: tables is empty, need >= 1");
  const Backend backend = comm_->backend();
  if (backend == Backend::kCuda && !cuda_backend_available()) {
    throw NotAvailable(
        "ShardedCollection: the communicator is on CUDA, but this module has no "
        "CUDA backend or sees no CUDA device");
  }
  placement_ = {backend, backend == Backend::kCuda ? tables.front().table.device : 0};
  auto r = router_named(router);
  auto x = exchange_named(exchange);
  py::gil_scoped_release release;  // collective: a Python communicator takes the GIL itself
  collection_ = std::make_unique<dist::ShardedEmbeddingCollection<int64_t>>(
      *comm_, std::move(tables), std::move(r), x);
}

uint64_t ShardedHandle::forward(py::list batches, bool training, py::handle out, uintptr_t stream) {
  BatchArgs args;
  // A bad argument here still takes part in the step (refused), so no rank waits for this one.
  try {
    args =
        parse_batches(batches, num_tables(), out, dim(), placement_, "ShardedCollection.forward");
  } catch (...) {
    take_part_refusing(stream);
    throw;
  }
  batches_in_flight_ = py::none();
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    pending_ = 0;
    collection_->forward(args.batches, args.out->as<float>(), args.out_stride, training,
                         as_stream(stream));
    if (!training) return 0;
    pending_ = ++generation_;
    out_rows_ = args.rows;
  }
  batches_in_flight_ = batches;
  return generation_;
}

void ShardedHandle::take_part_refusing(uintptr_t stream) {
  py::gil_scoped_release release;
  std::lock_guard lock(mutex_);
  pending_ = 0;
  try {
    // No batches: refused in the collection's own check, which every rank learns from the
    // counts exchange.
    collection_->forward({}, nullptr, dim(), false, as_stream(stream));
  } catch (const std::exception&) {
  }
}

void ShardedHandle::backward(py::handle grad, uint64_t generation, uintptr_t stream) {
  const std::string where = "ShardedCollection.backward";
  TensorArg g(grad, where, "grad");
  py::gil_scoped_release release;
  std::lock_guard lock(mutex_);
  if (pending_ == 0 || generation != pending_) {
    throw StateError(
        where + ": the gradient belongs to training forward " + std::to_string(generation) +
        ", but " +
        (pending_ == 0 ? std::string("no training forward awaits its backward")
                       : "the collection's last training forward is " + std::to_string(pending_)) +
        "; the tables are unchanged");
  }
  const uint32_t stride = check_gradient(g, out_rows_, dim(), placement_, where);
  pending_ = 0;
  collection_->backward(g.as<float>(), stride, as_stream(stream));
  collection_->end_step();
}

py::tuple ShardedHandle::export_rows(size_t table, uint64_t min_score) {
  if (table >= num_tables()) {
    throw InvalidArgument("ShardedCollection.export_rows: table = " + std::to_string(table) +
                          ", must be < " + std::to_string(num_tables()));
  }
  checkpoint::DeltaRows<int64_t> delta;
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    delta = checkpoint::incremental_dump(collection_->local().table(table), min_score);
  }
  const auto n = static_cast<int64_t>(delta.keys.size());
  const int64_t width = delta.dim;
  return py::make_tuple(capsule_of(std::move(delta.keys), Element::kInt64, {n}),
                        capsule_of(std::move(delta.values), Element::kFloat32, {n, width}),
                        capsule_of(std::move(delta.scores), Element::kInt64, {n}),
                        delta.next_threshold);
}

py::list ShardedHandle::stats() const {
  EmbeddingCollectionStats s;
  std::vector<size_t> sizes;
  std::vector<double> loads;
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    s = collection_->local().stats();
    for (size_t t = 0; t < num_tables(); ++t) {
      sizes.push_back(collection_->local().table(t).size());
      loads.push_back(collection_->local().table(t).load_factor());
    }
  }
  py::list list;
  for (size_t t = 0; t < num_tables(); ++t) {
    // nonfinite_gradients: over the collection's tables
    list.append(table_stats_dict(s.tables.at(t), s.nonfinite_gradients, sizes[t], loads[t],
                                 collection_->local().table(t)));
  }
  return list;
}

std::vector<uint64_t> ShardedHandle::global_sizes() {
  py::gil_scoped_release release;
  std::lock_guard lock(mutex_);
  return collection_->global_sizes();
}

uint32_t ShardedHandle::owner(uint32_t table, int64_t key) const {
  if (table >= num_tables()) {
    throw InvalidArgument("ShardedCollection.owner: table = " + std::to_string(table) +
                          ", must be < " + std::to_string(num_tables()));
  }
  return collection_->owner(table, key);
}

py::dict ShardedHandle::dump(const std::string& path, const std::vector<std::string>& names,
                             bool optimizer_state, std::optional<uint64_t> min_score,
                             const std::vector<std::string>& only) {
  checkpoint::DumpOptions options;
  options.only = only;
  options.optimizer_state = optimizer_state;
  options.min_score = min_score;
  checkpoint::DumpReport report;
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    report = dist::dump_sharded(*collection_, path, names, options);
  }
  py::dict d;
  d["rows"] = report.rows;
  d["bytes"] = report.bytes;
  d["manifest"] = checkpoint::manifest_to_json(report.manifest);
  return d;
}

py::dict ShardedHandle::load(const std::string& path, const std::vector<std::string>& names,
                             bool optimizer_state, const std::vector<std::string>& only) {
  checkpoint::LoadOptions options;
  options.optimizer_state = optimizer_state;
  options.only = only;
  checkpoint::LoadReport report;
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    pending_ = 0;  // rows change under a pending step: its backward is refused
    report = dist::load_sharded(*collection_, path, names, options);
  }
  py::dict d;
  d["rows_read"] = report.rows_read;
  d["rows_loaded"] = report.rows_loaded;
  d["rows_dropped"] = report.rows_dropped;
  d["bytes_read"] = report.bytes_read;
  d["state_skipped"] = report.state_skipped;
  return d;
}

void ShardedHandle::set_score(size_t table, uint64_t score) {
  if (table >= num_tables()) {
    throw InvalidArgument("ShardedCollection.set_score: table = " + std::to_string(table) +
                          ", must be < " + std::to_string(num_tables()));
  }
  std::lock_guard lock(mutex_);
  collection_->local().table(table).set_score(score);
}

py::dict ShardedHandle::stage_times() const {
  std::lock_guard lock(mutex_);
  const dist::ShardedStageTimes& t = collection_->stage_times();
  py::dict d;
  d["dedup"] = t.dedup;
  d["exchange"] = t.exchange;
  d["lookup"] = t.lookup;
  d["pool"] = t.pool;
  d["backward"] = t.backward;
  d["optimizer"] = t.optimizer;
  d["steps"] = t.steps;
  return d;
}

void register_sharded(py::module_& m) {
  py::class_<dist::Communicator, std::shared_ptr<dist::Communicator>>(m, "Communicator")
      .def_property_readonly("rank", &dist::Communicator::rank)
      .def_property_readonly("world_size", &dist::Communicator::world_size)
      .def_property_readonly("backend", &dist::Communicator::backend)
      .def_property_readonly("name", &dist::Communicator::name)
      .def(
          "barrier",
          [](dist::Communicator& c) {
            py::gil_scoped_release release;
            c.barrier();
          },
          "Returns once every rank has called it.")
      .def(
          "all_gather_strings",
          [](dist::Communicator& c, const std::string& mine) {
            std::vector<std::string> all;
            {
              py::gil_scoped_release release;
              all = dist::all_gather_strings(c, mine);
            }
            py::list list;
            for (const auto& s : all) list.append(py::bytes(s));
            return list;
          },
          py::arg("mine"), "Collective: every rank's bytes, rank-major.");
  m.def(
      "local_communicator",
      [](Backend backend) -> std::shared_ptr<dist::Communicator> {
        return dist::make_local_communicator(backend);
      },
      py::arg("backend") = Backend::kCpu, "A communicator of one rank (world size 1).");
  m.def("python_communicator", &make_python_communicator, py::arg("rank"), py::arg("world_size"),
        py::arg("collectives"),
        "A host communicator whose collectives are the methods all_to_all, all_gather, "
        "broadcast and barrier of `collectives` (dynemb.torch wraps a torch.distributed group).");
  m.def("nccl_available", &dist::nccl_available, "True when this module was built with NCCL.");
  m.def("mpi_available", &dist::mpi_available, "True when this module was built with MPI.");
  m.def(
      "nccl_communicator",
      [](uint32_t rank, uint32_t world_size, py::object store_set, py::object store_get,
         const std::string& prefix, int device) -> std::shared_ptr<dist::Communicator> {
        // The store's set / get run in Python, with the GIL taken back for each call.
        dist::StoreSet set = [store_set](const std::string& key, const std::vector<uint8_t>& v) {
          py::gil_scoped_acquire gil;
          store_set(key, py::bytes(reinterpret_cast<const char*>(v.data()), v.size()));
        };
        dist::StoreGet get = [store_get](const std::string& key) {
          py::gil_scoped_acquire gil;
          const std::string value = py::cast<std::string>(py::bytes(store_get(key)));
          return std::vector<uint8_t>(value.begin(), value.end());
        };
        auto exchanger = dist::make_store_id_exchanger(std::move(set), std::move(get), prefix);
        std::unique_ptr<dist::Communicator> comm;
        {
          py::gil_scoped_release release;
          comm = dist::make_nccl_communicator(rank, world_size, *exchanger, device);
        }
        return comm;
      },
      py::arg("rank"), py::arg("world_size"), py::arg("store_set"), py::arg("store_get"),
      py::arg("prefix"), py::arg("device"),
      "Joins an NCCL communicator on CUDA device `device`; rank 0's NCCL id travels through a "
      "key-value store's set(key, bytes) / get(key) -> bytes (torch.distributed's store).");

  py::class_<ShardedHandle>(m, "ShardedCollection")
      .def(py::init<std::shared_ptr<dist::Communicator>, std::vector<EmbeddingOptions>,
                    const std::string&, const std::string&>(),
           py::arg("communicator"), py::arg("tables"), py::arg("router") = "hash",
           py::arg("exchange") = "rows")
      .def("forward", &ShardedHandle::forward, py::arg("batches"), py::arg("training"),
           py::arg("out"), py::arg("stream") = 0)
      .def("backward", &ShardedHandle::backward, py::arg("grad"), py::arg("generation"),
           py::arg("stream") = 0)
      .def("export_rows", &ShardedHandle::export_rows, py::arg("table"), py::arg("min_score") = 0)
      .def("stats", &ShardedHandle::stats)
      .def("global_sizes", &ShardedHandle::global_sizes)
      .def("owner", &ShardedHandle::owner, py::arg("table"), py::arg("key"))
      .def("stage_times", &ShardedHandle::stage_times)
      .def("dump", &ShardedHandle::dump, py::arg("path"), py::arg("names"),
           py::arg("optimizer_state"), py::arg("min_score") = py::none(),
           py::arg("only") = std::vector<std::string>{})
      .def("load", &ShardedHandle::load, py::arg("path"), py::arg("names"),
           py::arg("optimizer_state"), py::arg("only") = std::vector<std::string>{})
      .def("set_score", &ShardedHandle::set_score, py::arg("table"), py::arg("score"))
      .def_property_readonly("rank", &ShardedHandle::rank)
      .def_property_readonly("world_size", &ShardedHandle::world_size)
      .def_property_readonly("dim", &ShardedHandle::dim)
      .def_property_readonly("row_dim", &ShardedHandle::row_dim)
      .def_property_readonly("optimizer_state_dim",
                             [](ShardedHandle& h) {
                               const EmbeddingOptions& o = h.collection().options(0);
                               return dynemb::optimizer_state_words(o.optimizer.kind, o.dim,
                                                                    state_value_type(o.optimizer));
                             })
      .def_property_readonly("num_tables", &ShardedHandle::num_tables);
}

}  // namespace dynemb::python

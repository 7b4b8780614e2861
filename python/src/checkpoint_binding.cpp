// Checkpoint functions over named EmbeddingHandles, in the verified on-disk format.
#include "checkpoint_binding.hpp"

#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "collection_handle.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "embedding_handle.hpp"

namespace dynemb::python {

namespace {

// (name, table) pairs; a table is an Embedding handle or one table of a grouped collection.
using NamedHandles = std::vector<std::pair<std::string, py::object>>;

std::vector<checkpoint::NamedTable> named_tables(const NamedHandles& handles) {
  std::vector<checkpoint::NamedTable> tables;
  tables.reserve(handles.size());
  for (const auto& [name, object] : handles) {
    if (object.is_none()) throw InvalidArgument("checkpoint: table \"" + name + "\" is None");
    if (py::isinstance<EmbeddingHandle>(object)) {
      tables.push_back(checkpoint::named(name, py::cast<EmbeddingHandle&>(object).embedding()));
    } else if (py::isinstance<CollectionTable>(object)) {
      tables.push_back(checkpoint::named(name, py::cast<CollectionTable&>(object)));
    } else {
      throw InvalidArgument("checkpoint: table \"" + name + "\" is a " +
                            std::string(py::str(py::type::of(object).attr("__name__"))) +
                            ", must be a dynemb table");
    }
  }
  return tables;
}

py::dict dump(const std::string& path, const NamedHandles& handles, bool optimizer_state,
              std::optional<uint64_t> min_score) {
  checkpoint::DumpOptions options;
  options.optimizer_state = optimizer_state;
  options.min_score = min_score;
  const auto tables = named_tables(handles);
  checkpoint::DumpReport report;
  {
    py::gil_scoped_release release;
    report = checkpoint::dump(path, tables, options);
  }
  py::dict d;
  d["rows"] = report.rows;
  d["bytes"] = report.bytes;
  d["manifest"] = checkpoint::manifest_to_json(report.manifest);
  return d;
}

py::dict load(const std::string& path, const NamedHandles& handles, bool optimizer_state,
              const std::vector<std::string>& only) {
  checkpoint::LoadOptions options;
  options.optimizer_state = optimizer_state;
  options.only = only;
  const auto tables = named_tables(handles);
  checkpoint::LoadReport report;
  {
    py::gil_scoped_release release;
    report = checkpoint::load(path, tables, options);
  }
  py::dict d;
  d["rows_read"] = report.rows_read;
  d["rows_loaded"] = report.rows_loaded;
  d["rows_dropped"] = report.rows_dropped;
  d["bytes_read"] = report.bytes_read;
  d["state_skipped"] = report.state_skipped;
  return d;
}

py::dict inspect(const std::string& path, bool verify) {
  const checkpoint::InspectResult r = checkpoint::inspect(path, verify);
  py::dict d;
  d["verified"] = r.verified;
  d["problem"] = r.problem;
  d["total_bytes"] = r.total_bytes;
  d["manifest"] = checkpoint::manifest_to_json(r.manifest);
  return d;
}

}  // namespace

void register_checkpoint(py::module_& m) {
  m.def("dump", &dump, py::arg("path"), py::arg("tables"), py::arg("optimizer_state"),
        py::arg("min_score") = py::none(),
        "Writes the named tables to one checkpoint directory (atomically: staged, then renamed); "
        "with min_score, a delta of the rows whose score >= it. Returns rows, bytes, manifest.");
  m.def("load", &load, py::arg("path"), py::arg("tables"), py::arg("optimizer_state"),
        py::arg("only") = std::vector<std::string>{},
        "Verifies the checkpoint (sizes, headers, checksums, dims) and then loads it into the "
        "named tables; any problem found first leaves every table unchanged.");
  m.def("inspect", &inspect, py::arg("path"), py::arg("verify") = true,
        "The manifest of a checkpoint and whether every file verifies.");
}

}  // namespace dynemb::python

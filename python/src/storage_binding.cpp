// The stores' bindings and the caching factory.
#include "storage_binding.hpp"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "dynemb/core/error.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "dynemb/storage/host_storage.hpp"
#include "dynemb/storage/redis_storage.hpp"
#include "dynemb/storage/rocksdb_storage.hpp"

namespace dynemb::python {

TableFactory<int64_t> caching_factory(std::shared_ptr<storage::Storage> lower, uint64_t fast_rows) {
  if (!lower) throw InvalidArgument("caching: the lower tier (external_storage) is None");
  return [lower, fast_rows](Backend backend, const TableOptions& table) {
    if (lower->row_dim() != table.dim) {
      throw InvalidArgument("caching: external_storage " + lower->describe() + " has row_dim " +
                            std::to_string(lower->row_dim()) + ", must be the table's row width " +
                            std::to_string(table.dim) +
                            " (embedding, optimizer state, padding: dynemb.embedding_row_dim)");
    }
    TableOptions fast = table;
    const uint64_t bucket = fast.bucket_capacity;
    const uint64_t rows = std::max<uint64_t>((fast_rows + bucket - 1) / bucket, 1) * bucket;
    fast.init_capacity = fast.max_capacity = rows;
    fast.max_load_factor = 1.0;  // a bounded cache: full buckets evict down, nothing grows
    fast.max_hbm_for_values = 0;
    return storage::make_cached_table<int64_t>(backend, fast, lower);
  };
}

namespace {

py::dict stats_dict(const storage::StorageStats& s) {
  py::dict d;
  d["reads"] = s.reads;
  d["rows_read"] = s.rows_read;
  d["rows_found"] = s.rows_found;
  d["writes"] = s.writes;
  d["rows_written"] = s.rows_written;
  d["rows_erased"] = s.rows_erased;
  d["bytes_read"] = s.bytes_read;
  d["bytes_written"] = s.bytes_written;
  d["evicted"] = s.evicted;
  d["failures"] = s.failures;
  d["wait_ns"] = s.wait_ns;
  return d;
}

}  // namespace

void register_storage(py::module_& m) {
  py::class_<storage::Storage, std::shared_ptr<storage::Storage>>(
      m, "Storage",
      "A lower tier under a caching table: key -> (row, score), rows of row_dim floats")
      .def_property_readonly("row_dim", &storage::Storage::row_dim)
      .def("describe", &storage::Storage::describe)
      .def(
          "size",
          [](storage::Storage& s) {
            py::gil_scoped_release release;
            return s.size();
          },
          "Rows stored (may walk the store).")
      .def(
          "flush",
          [](storage::Storage& s) {
            py::gil_scoped_release release;
            s.flush();
          },
          "Makes every completed write durable where the store can.")
      .def(
          "clear",
          [](storage::Storage& s) {
            py::gil_scoped_release release;
            s.clear();
          },
          "Removes every row.")
      .def("stats", [](const storage::Storage& s) { return stats_dict(s.stats()); })
      .def("__repr__",
           [](const storage::Storage& s) { return "<dynemb.Storage " + s.describe() + ">"; });

  py::class_<storage::HostStorage, storage::Storage, std::shared_ptr<storage::HostStorage>>(
      m, "HostStorage",
      "Rows in host memory, at most max_rows (then the lowest scores go, counted)")
      .def(py::init([](uint32_t row_dim, uint64_t max_rows, uint64_t init_rows, uint32_t threads) {
             storage::HostStorageOptions o;
             o.row_dim = row_dim;
             o.max_rows = max_rows;
             o.init_rows = std::min(init_rows, max_rows);
             o.num_threads = threads;
             return std::make_shared<storage::HostStorage>(o);
           }),
           py::arg("row_dim"), py::arg("max_rows") = uint64_t{1} << 30,
           py::arg("init_rows") = uint64_t{1} << 16, py::arg("num_threads") = 0);
  py::class_<storage::RocksDbStorage, storage::Storage, std::shared_ptr<storage::RocksDbStorage>>(
      m, "RocksDbStorage", "Rows in a RocksDB directory of their own (created if missing or empty)")
      .def(py::init([](uint32_t row_dim, const std::string& directory, bool sync_writes,
                       uint64_t block_cache_bytes) {
             storage::RocksDbStorageOptions o;
             o.row_dim = row_dim;
             o.directory = directory;
             o.sync_writes = sync_writes;
             o.block_cache_bytes = block_cache_bytes;
             return std::make_shared<storage::RocksDbStorage>(o);
           }),
           py::arg("row_dim"), py::arg("directory"), py::arg("sync_writes") = false,
           py::arg("block_cache_bytes") = uint64_t{64} << 20);
  py::class_<storage::RedisStorage, storage::Storage, std::shared_ptr<storage::RedisStorage>>(
      m, "RedisStorage", "Rows in one or more Redis servers (host:port), a key on one of them")
      .def(py::init([](uint32_t row_dim, std::vector<std::string> servers,
                       const std::string& prefix, uint32_t timeout_ms) {
             storage::RedisStorageOptions o;
             o.row_dim = row_dim;
             o.servers = std::move(servers);
             o.prefix = prefix;
             o.timeout_ms = timeout_ms;
             return std::make_shared<storage::RedisStorage>(o);
           }),
           py::arg("row_dim"), py::arg("servers"), py::arg("prefix") = "dynemb",
           py::arg("timeout_ms") = 2000);
  m.def("embedding_row_dim", &embedding_row_dim, py::arg("options"),
        "Floats per stored row of a trainable table (embedding, optimizer state, padding): the "
        "row_dim its external storage must have.");
}

}  // namespace dynemb::python

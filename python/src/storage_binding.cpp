// The stores' bindings and the caching factory.
#include "storage_binding.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <mutex>

#include <string>
#include <vector>

#include "dynemb/core/error.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "dynemb/storage/host_storage.hpp"
#include "dynemb/storage/redis_storage.hpp"
#include "dynemb/storage/rocksdb_storage.hpp"

namespace dynemb::python {

TableFactory<int64_t> caching_factory(std::shared_ptr<storage::Storage> lower, uint64_t fast_rows,
                                      const storage::CachingOptions& caching) {
  if (!lower) throw InvalidArgument("caching: the lower tier (external_storage) is None");
  return [lower, fast_rows, caching](Backend backend, const TableOptions& table) {
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
    return storage::make_cached_table<int64_t>(backend, fast, lower, caching);
  };
}

namespace {

// NumPy arrays over dynemb's buffers for the length of one call (no copy; read-only for inputs).
template <class T>
py::array view(const T* data, size_t n, bool writable, size_t width = 0) {
  static T empty{};  // numpy wants a pointer even for 0 elements
  T* p = n == 0 ? &empty : const_cast<T*>(data);
  py::capsule owner(p, [](void*) {});  // dynemb owns the memory
  std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(n)};
  std::vector<py::ssize_t> strides{static_cast<py::ssize_t>((width ? width : 1) * sizeof(T))};
  if (width) {
    shape.push_back(static_cast<py::ssize_t>(width));
    strides.push_back(sizeof(T));
  }
  py::array a(py::dtype::of<T>(), shape, strides, p, owner);
  if (!writable) a.attr("flags").attr("writeable") = false;
  return a;
}

// A Storage written in Python: a subclass of dynemb.Storage implements find, write, scan,
// size and clear (flush and describe optional) on NumPy arrays that view dynemb's buffers. Each
// call takes the GIL; a Python exception becomes StorageError (the caching table then keeps the
// rows it could not write, as for any failing store). Counts are kept here.
class PyStorage : public storage::Storage {
 public:
  explicit PyStorage(uint32_t row_dim) : row_dim_(row_dim) {
    if (row_dim == 0) throw InvalidArgument("Storage: row_dim = 0, must be > 0");
  }
  uint32_t row_dim() const override { return row_dim_; }
  std::string describe() const override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const storage::Storage*>(this), "describe");
    if (f) return py::cast<std::string>(f());
    return "python:" + std::string(py::str(py::type::of(py::cast(this)).attr("__name__")));
  }
  void find(size_t n, const uint64_t* keys, float* values, uint64_t* scores,
            bool* founds) override {
    call("find", [&](py::function f) {
      f(view(keys, n, false), view(values, n, true, row_dim_), view(scores, n, true),
        view(founds, n, true));
    });
    std::lock_guard lock(stats_mutex_);
    ++stats_.reads;
    stats_.rows_read += n;
    for (size_t i = 0; i < n; ++i) stats_.rows_found += founds[i] ? 1 : 0;
  }
  void write(size_t n_put, const uint64_t* put_keys, const float* put_values,
             const uint64_t* put_scores, size_t n_erase, const uint64_t* erase_keys) override {
    call("write", [&](py::function f) {
      f(view(put_keys, n_put, false), view(put_values, n_put, false, row_dim_),
        view(put_scores, n_put, false), view(erase_keys, n_erase, false));
    });
    std::lock_guard lock(stats_mutex_);
    ++stats_.writes;
    stats_.rows_written += n_put;
    stats_.rows_erased += n_erase;
    stats_.bytes_written += n_put * (row_dim_ * sizeof(float) + sizeof(uint64_t));
  }
  size_t scan(storage::ScanCursor& cursor, size_t max_rows, uint64_t* keys, float* values,
              uint64_t* scores) override {
    size_t count = 0;
    call("scan", [&](py::function f) {
      py::tuple r = f(py::bytes(cursor.position), max_rows, view(keys, max_rows, true),
                      view(values, max_rows, true, row_dim_), view(scores, max_rows, true));
      if (r.size() != 3) {
        throw InvalidArgument("Storage.scan must return (rows, position bytes, finished)");
      }
      count = py::cast<size_t>(r[0]);
      if (count > max_rows) {
        throw InvalidArgument("Storage.scan returned " + std::to_string(count) +
                              " rows, more than max_rows = " + std::to_string(max_rows));
      }
      cursor.position = py::cast<std::string>(py::bytes(r[1]));
      cursor.finished = py::cast<bool>(r[2]);
    });
    return count;
  }
  size_t size() override {
    size_t n = 0;
    call("size", [&](py::function f) { n = py::cast<size_t>(f()); });
    return n;
  }
  void flush() override {
    py::gil_scoped_acquire gil;
    if (py::get_override(static_cast<const storage::Storage*>(this), "flush")) {
      call("flush", [](py::function f) { f(); });
    }
  }
  void clear() override {
    call("clear", [](py::function f) { f(); });
  }
  storage::StorageStats stats() const override {
    std::lock_guard lock(stats_mutex_);
    return stats_;
  }

 private:
  // Calls the Python method `name` with the GIL; a missing method or a Python exception is a
  // StorageError naming the store and the call.
  template <class Body>
  void call(const char* name, Body&& body) {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const storage::Storage*>(this), name);
    if (!f) {
      throw NotAvailable("Storage subclass " +
                         std::string(py::str(py::type::of(py::cast(this)).attr("__name__"))) +
                         " does not implement " + name);
    }
    try {
      body(f);
    } catch (py::error_already_set& e) {
      const std::string what = e.what();
      {
        std::lock_guard lock(stats_mutex_);
        ++stats_.failures;
      }
      throw storage::StorageError("Storage." + std::string(name) + " (python) failed: " + what);
    }
  }

  uint32_t row_dim_;
  mutable std::mutex stats_mutex_;
  storage::StorageStats stats_{};
};

}  // namespace

py::dict storage_stats_dict(const storage::StorageStats& s) {
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

py::dict caching_stats_dict(const storage::CachingStats& s) {
  py::dict d;
  d["lookups"] = s.lookups;
  d["hits"] = s.hits;
  d["misses"] = s.misses;
  d["lower_hits"] = s.lower_hits;
  d["new_rows"] = s.new_rows;
  d["filtered"] = s.filtered;
  d["prefetched"] = s.prefetched;
  d["rows_up"] = s.rows_up;
  d["bytes_up"] = s.bytes_up;
  d["rows_down"] = s.rows_down;
  d["bytes_down"] = s.bytes_down;
  d["evictions_written"] = s.evictions_written;
  d["flushed_rows"] = s.flushed_rows;
  d["batch_evicted"] = s.batch_evicted;
  d["unsynced_calls"] = s.unsynced_calls;
  d["unserved"] = s.unserved;
  d["staged_prefetches"] = s.staged_prefetches;
  d["staged_fallbacks"] = s.staged_fallbacks;
  d["staged_calls"] = s.staged_calls;
  d["staged_call_fallbacks"] = s.staged_call_fallbacks;
  d["prefetch_refused"] = s.prefetch_refused;
  d["lower_failures"] = s.lower_failures;
  d["pending_rows"] = s.pending_rows;
  d["lower_wait_ns"] = s.lower_wait_ns;
  d["buffer_growths"] = s.buffer_growths;
  d["lower_evicted"] = s.lower.evicted;
  py::dict phases;
  phases["calls"] = s.phases.calls;
  phases["lookup_ns"] = s.phases.lookup_ns;
  phases["misses_ns"] = s.phases.misses_ns;
  phases["lower_read_ns"] = s.phases.lower_read_ns;
  phases["insert_ns"] = s.phases.insert_ns;
  phases["evicted_ns"] = s.phases.evicted_ns;
  phases["write_down_ns"] = s.phases.write_down_ns;
  phases["outputs_ns"] = s.phases.outputs_ns;
  phases["total_ns"] = s.phases.total_ns;
  d["phases"] = phases;
  py::dict fast;
  fast["evictions"] = s.fast.evictions;
  fast["refused"] = s.fast.refused;
  fast["reserved_keys"] = s.fast.reserved_keys;
  fast["rehashes"] = s.fast.rehashes;
  fast["erased"] = s.fast.erased;
  d["fast"] = fast;
  d["lower"] = storage_stats_dict(s.lower);
  return d;
}

void register_storage(py::module_& m) {
  py::class_<storage::Storage, PyStorage, std::shared_ptr<storage::Storage>>(
      m, "Storage",
      "A lower tier under a caching table: key -> (row, score), rows of row_dim floats. "
      "Subclass it in Python with find(keys, values, scores, founds), write(put_keys, "
      "put_values, put_scores, erase_keys), scan(position, max_rows, keys, values, scores) -> "
      "(rows, position, finished), size(), clear() (flush(), describe() optional), on NumPy "
      "arrays viewing dynemb's buffers (keys uint64, rows float32 [n, row_dim], scores uint64, "
      "founds bool)")
      .def(py::init<uint32_t>(), py::arg("row_dim"))
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
      .def("stats", [](const storage::Storage& s) { return storage_stats_dict(s.stats()); })
      .def("__repr__",
           [](const storage::Storage& s) { return "<dynemb.Storage " + s.describe() + ">"; });

  py::class_<storage::CachingOptions>(m, "CachingOptions",
                                      "Options of a caching table beyond its fast tier's")
      .def(py::init<>())
      .def_readwrite("private_store", &storage::CachingOptions::private_store)
      .def_readwrite("filter_log2_bits", &storage::CachingOptions::filter_log2_bits)
      .def_readwrite("stage_prefetch_on_device", &storage::CachingOptions::stage_prefetch_on_device)
      .def_readwrite("max_call_keys", &storage::CachingOptions::max_call_keys);
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

// The lower tiers of a caching table (host memory, RocksDB, Redis) as Python objects, and the
// factory that puts a caching table under a trainable table (docs/python.md, "Caching").
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>

#include "dynemb/embedding/embedding.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "dynemb/storage/storage.hpp"

namespace dynemb::python {

namespace py = pybind11;

// Makes the table under an Embedding a caching table: a fast tier of `fast_rows` slots (whole
// buckets) over `lower` (whose row_dim must be the embedding's row width; InvalidArgument
// naming both otherwise), with the `caching` options.
TableFactory<int64_t> caching_factory(std::shared_ptr<storage::Storage> lower, uint64_t fast_rows,
                                      const storage::CachingOptions& caching = {});

// A store's counts (StorageStats) as a dict with the struct's field names.
py::dict storage_stats_dict(const storage::StorageStats& s);
// A caching table's counts (CachingStats) as a dict: the struct's fields, lower_evicted, and
// the nested dicts phases (CachingPhaseTimes), fast (TableStats) and lower (StorageStats).
py::dict caching_stats_dict(const storage::CachingStats& s);

// Adds Storage, CachingOptions, HostStorage, RocksDbStorage, RedisStorage and embedding_row_dim to
// `m`.
void register_storage(py::module_& m);

}  // namespace dynemb::python

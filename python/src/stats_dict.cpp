#include "stats_dict.hpp"

namespace dynemb::python {

pybind11::dict table_stats_dict(const EmbeddingStats& e, uint64_t nonfinite_gradients, size_t size,
                                double load_factor, const Table<int64_t>& table) {
  pybind11::dict d;
  d["size"] = size;
  d["capacity"] = table.capacity();
  d["load_factor"] = load_factor;
  d["lookups"] = e.lookups;
  d["unique_lookups"] = e.unique_lookups;
  d["rows_created"] = e.rows_created;
  d["admission_pending"] = e.admission_pending;
  d["eval_misses"] = e.eval_misses;
  d["expired"] = e.expired;
  d["nonfinite_gradients"] = nonfinite_gradients;
  d["evictions"] = e.table.evictions;
  d["refused"] = e.table.refused;
  d["reserved_keys"] = e.table.reserved_keys;
  d["rehashes"] = e.table.rehashes;
  d["erased"] = e.table.erased;
  d["score"] = table.score();
  return d;
}

}  // namespace dynemb::python

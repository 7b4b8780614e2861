// The dict every Python table handle's stats() returns: one place for its keys.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>

#include "dynemb/embedding/embedding.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::python {

// The stats of one table: the Embedding's counts `e`, the table's (or, for a table of a
// collection, the collection's) `nonfinite_gradients`, and the size and load factor read under
// the handle's lock, beside `table`'s capacity and clock.
pybind11::dict table_stats_dict(const EmbeddingStats& e, uint64_t nonfinite_gradients, size_t size,
                                double load_factor, const Table<int64_t>& table);

}  // namespace dynemb::python

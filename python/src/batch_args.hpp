// One batch per table from Python ((indices, offsets, per_sample_weights or None, mode) tuples)
// and the output they fill, checked and borrowed without copies: what the grouped and the
// sharded collections take.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dynemb/embedding/embedding.hpp"
#include "tensor_arg.hpp"

namespace dynemb::python {

struct BatchArgs {
  std::vector<TensorArg> held;  // every borrowed tensor, alive as long as this
  std::vector<EmbeddingBatch<int64_t>> batches;
  int64_t rows = 0;          // output rows: bags (NONE: ids) of every table, in table order
  TensorArg* out = nullptr;  // [rows, dim] float32, row stride >= dim
  uint32_t out_stride = 0;
};

// Parses `batches` (one per table, `tables` of them) and `out` (a [rows, dim] float32 tensor in
// `placement`'s memory); throws InvalidArgument naming `where`, the batch and the argument.
BatchArgs parse_batches(py::list batches, size_t tables, py::handle out, uint32_t dim,
                        Placement placement, const std::string& where);

// Every table's batch cut from one keyed batch (what the grouped collections of dynemb.torch
// pass: three tensors, not three per table): table t's ids are indices[id_ranges[2t] ..
// id_ranges[2t + 1]) (weights alike), its offsets (bags[t] + 1 entries, each table's starting at
// 0) follow the previous tables' in `offsets`. Checks the cuts against the tensors and `out` as
// parse_batches does; throws InvalidArgument naming `where` and the argument.
BatchArgs parse_packed_batches(py::handle indices, py::handle offsets, py::handle weights,
                               const std::vector<int64_t>& id_ranges,
                               const std::vector<int64_t>& bags, PoolingMode mode, size_t tables,
                               py::handle out, uint32_t dim, Placement placement,
                               const std::string& where);

// Checks a gradient of the layout of a forward's output ([rows, dim], row stride >= dim) and
// returns its row stride.
uint32_t check_gradient(const TensorArg& grad, int64_t rows, uint32_t dim, Placement placement,
                        const std::string& where);

}  // namespace dynemb::python

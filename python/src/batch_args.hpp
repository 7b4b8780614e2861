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
  TensorArg* out = nullptr;  // [rows, dim] of the output type, row stride >= dim
  uint32_t out_stride = 0;   // in 32-bit words (word_stride)
};

// Parses `batches` (one per table, `tables` of them) and `out` (a [rows, dim] tensor of out_type's
// elements in `placement`'s memory); throws InvalidArgument naming `where`, the batch and the
// argument.
BatchArgs parse_batches(py::list batches, size_t tables, py::handle out, uint32_t dim,
                        Placement placement, const std::string& where,
                        ValueType out_type = ValueType::kFloat32);

// Every table's batch cut from one keyed batch (what the grouped collections of dynemb.torch
// pass: three tensors, not three per table): table t's ids are indices[id_ranges[2t] ..
// id_ranges[2t + 1]) (weights alike), its offsets (bags[t] + 1 entries, each table's starting at
// 0) follow the previous tables' in `offsets`. Checks the cuts against the tensors and `out` as
// parse_batches does; throws InvalidArgument naming `where` and the argument.
BatchArgs parse_packed_batches(py::handle indices, py::handle offsets, py::handle weights,
                               const std::vector<int64_t>& id_ranges,
                               const std::vector<int64_t>& bags, PoolingMode mode, size_t tables,
                               py::handle out, uint32_t dim, Placement placement,
                               const std::string& where, ValueType out_type = ValueType::kFloat32);

// Checks a gradient of the layout of a forward's output ([rows, dim] of type's elements, row
// stride >= dim) and returns its row stride in 32-bit words.
uint32_t check_gradient(const TensorArg& grad, int64_t rows, uint32_t dim, Placement placement,
                        const std::string& where, ValueType type = ValueType::kFloat32);

}  // namespace dynemb::python

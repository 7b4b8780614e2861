// Parsing of per-table batches from Python.
#include "batch_args.hpp"

#include "dynemb/core/error.hpp"

namespace dynemb::python {

namespace {

void require_shape(const TensorArg& t, int64_t rows, int64_t dim, const std::string& where,
                   const char* what) {
  if (t.size(0) != rows || t.size(1) != dim) {
    throw InvalidArgument(where + ": " + t.name() + ": shape = [" + std::to_string(t.size(0)) +
                          ", " + std::to_string(t.size(1)) + "], must be [" + std::to_string(rows) +
                          ", " + std::to_string(dim) + "] (" + what + ")");
  }
}

}  // namespace

BatchArgs parse_batches(py::list batches, size_t tables, py::handle out, uint32_t dim,
                        Placement placement, const std::string& where, ValueType out_type) {
  if (batches.size() != tables) {
    throw InvalidArgument(where + ": batches: " + std::to_string(batches.size()) +
                          " given, must be one per table (" + std::to_string(tables) + ")");
  }
  BatchArgs a;
  a.held.reserve(3 * tables + 1);  // references into `held` stay valid: no reallocation
  a.batches.resize(tables);
  for (size_t t = 0; t < tables; ++t) {
    const std::string at = where + ": batches[" + std::to_string(t) + "]";
    py::tuple b = py::cast<py::tuple>(batches[t]);
    if (b.size() != 4) {
      throw InvalidArgument(at + ": " + std::to_string(b.size()) +
                            " items, must be (indices, offsets, per_sample_weights, mode)");
    }
    const auto mode = py::cast<PoolingMode>(b[3]);
    TensorArg& ids = a.held.emplace_back(b[0], at, "indices");
    ids.require(Element::kInt64, 1, placement);
    TensorArg& offs = a.held.emplace_back(b[1], at, "offsets");
    offs.require(Element::kInt64, 1, placement);
    if (offs.size(0) < 1) throw InvalidArgument(at + ": offsets: shape[0] = 0, must be >= 1");
    EmbeddingBatch<int64_t>& e = a.batches[t];
    e.keys = ids.as<int64_t>();
    e.num_ids = static_cast<size_t>(ids.size(0));
    e.offsets = offs.as<int64_t>();
    e.num_bags = static_cast<size_t>(offs.size(0) - 1);
    e.mode = mode;
    if (!b[2].is_none()) {
      TensorArg& w = a.held.emplace_back(b[2], at, "per_sample_weights");
      w.require(Element::kFloat32, 1, placement);
      if (w.size(0) != ids.size(0)) {
        throw InvalidArgument(at + ": per_sample_weights: shape[0] = " + std::to_string(w.size(0)) +
                              ", must be " + std::to_string(ids.size(0)) + " (one per index)");
      }
      e.weights = w.as<float>();
    }
    a.rows += mode == PoolingMode::kNone ? ids.size(0) : offs.size(0) - 1;
  }
  a.out = &a.held.emplace_back(out, where, "out");
  a.out->require(element_of(out_type), 2, placement, /*strided_rows=*/true);
  require_shape(*a.out, a.rows, dim, where, "every table's rows, one after the other");
  a.out_stride = word_stride(*a.out, out_type, where, "out");
  return a;
}

BatchArgs parse_packed_batches(py::handle indices, py::handle offsets, py::handle weights,
                               const std::vector<int64_t>& id_ranges,
                               const std::vector<int64_t>& bags, PoolingMode mode, size_t tables,
                               py::handle out, uint32_t dim, Placement placement,
                               const std::string& where, ValueType out_type) {
  if (bags.size() != tables || id_ranges.size() != 2 * tables) {
    throw InvalidArgument(where + ": bags: " + std::to_string(bags.size()) + " and id_ranges: " +
                          std::to_string(id_ranges.size()) + " entries, must be " +
                          std::to_string(tables) + " and " + std::to_string(2 * tables) +
                          " (per table: its bags; the begin and end of its indices)");
  }
  BatchArgs a;
  a.held.reserve(4);  // references into `held` stay valid: no reallocation
  TensorArg& ids = a.held.emplace_back(indices, where, "indices");
  ids.require(Element::kInt64, 1, placement);
  TensorArg& offs = a.held.emplace_back(offsets, where, "offsets");
  offs.require(Element::kInt64, 1, placement);
  TensorArg* w = nullptr;
  if (!weights.is_none()) {
    w = &a.held.emplace_back(weights, where, "per_sample_weights");
    w->require(Element::kFloat32, 1, placement);
    if (w->size(0) != ids.size(0)) {
      throw InvalidArgument(where +
                            ": per_sample_weights: shape[0] = " + std::to_string(w->size(0)) +
                            ", must be " + std::to_string(ids.size(0)) + " (one per index)");
    }
  }
  a.batches.resize(tables);
  int64_t first_offset = 0;
  for (size_t t = 0; t < tables; ++t) {
    const int64_t begin = id_ranges[2 * t], end = id_ranges[2 * t + 1];
    if (begin < 0 || end < begin || end > ids.size(0)) {
      throw InvalidArgument(where + ": id_ranges[" + std::to_string(2 * t) + ", " +
                            std::to_string(2 * t + 1) + "] = [" + std::to_string(begin) + ", " +
                            std::to_string(end) + "), must be an ascending range within [0, " +
                            std::to_string(ids.size(0)) + "] (the indices)");
    }
    if (bags[t] < 0 || first_offset + bags[t] + 1 > offs.size(0)) {
      throw InvalidArgument(where + ": bags[" + std::to_string(t) + "] = " +
                            std::to_string(bags[t]) + ", the tables' offsets then need more than " +
                            "offsets: shape[0] = " + std::to_string(offs.size(0)) + " entries");
    }
    EmbeddingBatch<int64_t>& e = a.batches[t];
    e.keys = ids.as<int64_t>() + begin;
    e.num_ids = static_cast<size_t>(end - begin);
    e.offsets = offs.as<int64_t>() + first_offset;
    e.num_bags = static_cast<size_t>(bags[t]);
    e.weights = w != nullptr ? w->as<float>() + begin : nullptr;
    e.mode = mode;
    first_offset += bags[t] + 1;
    a.rows += mode == PoolingMode::kNone ? end - begin : bags[t];
  }
  if (first_offset != offs.size(0)) {
    throw InvalidArgument(where + ": offsets: shape[0] = " + std::to_string(offs.size(0)) +
                          ", must be " + std::to_string(first_offset) +
                          " (bags + 1 for every table)");
  }
  a.out = &a.held.emplace_back(out, where, "out");
  a.out->require(element_of(out_type), 2, placement, /*strided_rows=*/true);
  require_shape(*a.out, a.rows, dim, where, "every table's rows, one after the other");
  a.out_stride = word_stride(*a.out, out_type, where, "out");
  return a;
}

uint32_t check_gradient(const TensorArg& grad, int64_t rows, uint32_t dim, Placement placement,
                        const std::string& where, ValueType type) {
  grad.require(element_of(type), 2, placement, /*strided_rows=*/true);
  require_shape(grad, rows, dim, where, "the forward's output shape");
  return word_stride(grad, type, where, "grad");
}

}  // namespace dynemb::python

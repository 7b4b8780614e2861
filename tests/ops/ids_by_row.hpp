// A batch seen by the tests' references: its ids grouped by row (the grouped backward's layout) and
// a row's gradient in float64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include <vector>
#include "dynemb/ops/pooling.hpp"

namespace dynemb::ops_test {

struct IdsByRow {
  std::vector<uint32_t> ids_by_row;  // id positions, row by row, each row's in batch order
  std::vector<uint32_t> row_begin;   // row r's ids are ids_by_row[row_begin[r], row_begin[r + 1])
  std::vector<uint32_t> bag_by_row;  // the bag of each entry of ids_by_row
};

// Groups `indices` (bag b holds positions offsets[b] .. offsets[b + 1]) by row, num_rows rows.
inline IdsByRow group_ids_by_row(const std::vector<uint32_t>& indices,
                                 const std::vector<int64_t>& offsets, size_t num_rows) {
  IdsByRow g;
  const size_t n = indices.size();
  g.row_begin.assign(num_rows + 1, 0);
  for (uint32_t r : indices) ++g.row_begin[r + 1];
  for (size_t r = 0; r < num_rows; ++r) g.row_begin[r + 1] += g.row_begin[r];
  g.ids_by_row.resize(n);
  std::vector<uint32_t> fill(g.row_begin.begin(), g.row_begin.end() - 1);
  for (size_t i = 0; i < n; ++i) g.ids_by_row[fill[indices[i]]++] = static_cast<uint32_t>(i);
  std::vector<uint32_t> bag_of(n);
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) bag_of[i] = static_cast<uint32_t>(b);
  }
  g.bag_by_row.reserve(n);
  for (uint32_t id : g.ids_by_row) g.bag_by_row.push_back(bag_of[id]);
  return g;
}

// Fills a test setup's ids_by_row, row_begin and bag_by_row from its indices and offsets.
template <class Setup>
void group_setup_ids_by_row(Setup& s, size_t num_rows) {
  IdsByRow g = group_ids_by_row(s.indices, s.offsets, num_rows);
  s.ids_by_row = std::move(g.ids_by_row);
  s.row_begin = std::move(g.row_begin);
  s.bag_by_row = std::move(g.bag_by_row);
}

// Row `row`'s gradient in float64 by the published rule (weight, 1 / bag length for MEAN), each
// output-gradient element read through `read`; `In` holds indices, offsets, weights, grads and
// grad_stride.
template <class In, class Read>
std::vector<double> gradient64(const In& in, size_t row, uint32_t dim, PoolingMode mode,
                               bool weighted, Read read) {
  std::vector<double> sum(dim, 0.0);
  for (size_t b = 0; b + 1 < in.offsets.size(); ++b) {
    for (int64_t i = in.offsets[b]; i < in.offsets[b + 1]; ++i) {
      if (in.indices[i] != row) continue;
      double f = weighted ? in.weights[i] : 1.0;
      if (mode == PoolingMode::kMean) {
        f /= static_cast<double>(in.offsets[b + 1] - in.offsets[b]);
      }
      const size_t out = mode == PoolingMode::kNone ? static_cast<size_t>(i) : b;
      for (uint32_t j = 0; j < dim; ++j) sum[j] += f * read(in.grads[out * in.grad_stride + j]);
    }
  }
  return sum;
}

}  // namespace dynemb::ops_test

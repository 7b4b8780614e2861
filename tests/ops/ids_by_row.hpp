// A batch's ids grouped by the row they read, in the layout the grouped backward takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

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

}  // namespace dynemb::ops_test

// order_rows_by_first_id on the host: the ids walked in order, each row listed at its first id.
#include <algorithm>
#include <vector>

#include "cpu/cpu_kernels.hpp"

namespace dynemb::ops::detail {

void order_rows_by_first_id_cpu(size_t n, const uint32_t* inverse, size_t num_rows, IdGroups groups,
                                uint32_t* row_order) {
  std::vector<bool> first(n, false);
  for (size_t r = 0; r < num_rows; ++r) {
    if (groups.row_begin[r] < groups.row_begin[r + 1])
      first[groups.ids_by_row[groups.row_begin[r]]] = true;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    if (first[i]) row_order[k++] = inverse[i];
  }
}

}  // namespace dynemb::ops::detail

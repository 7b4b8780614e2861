// How a table's value rows split into an embedding and the optimizer state after it, for code
// that stores rows without knowing who trains them (checkpoints: docs/checkpoint_format.md).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dynemb {

struct RowLayout {
  uint32_t dim = 0;        // embedding floats at the start of each row
  uint32_t state_dim = 0;  // floats after them: optimizer state (and padding)
  std::string optimizer;   // the optimizer that owns the state ("" for a plain table)
  std::vector<std::pair<std::string, double>> optimizer_args;  // its hyper-parameters, by name
};

// A plain table's layout: every float is embedding, no state.
inline RowLayout plain_row_layout(uint32_t dim) {
  return RowLayout{dim, 0, {}, {}};
}

}  // namespace dynemb

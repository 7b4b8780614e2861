// How a table's value rows split into an embedding and the optimizer state after it, for code
// that stores rows without knowing who trains them (checkpoints: docs/checkpoint_format.md).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dynemb/core/value_type.hpp"

namespace dynemb {

struct RowLayout {
  uint32_t dim = 0;        // embedding elements at the start of each row
  uint32_t state_dim = 0;  // floats after them (at word value_words(value_type, dim)): state
  std::string optimizer;   // the optimizer that owns the state ("" for a plain table)
  std::vector<std::pair<std::string, double>> optimizer_args;  // its hyper-parameters, by name
  // What the embedding elements are stored as (16-bit types: two a 32-bit word).
  ValueType value_type = ValueType::kFloat32;

  // 32-bit words of the embedding part of a row.
  uint32_t embedding_words() const { return value_words(value_type, dim); }
  // 32-bit words of a whole row.
  uint32_t row_words() const { return embedding_words() + state_dim; }
};

// A plain table's layout: every float is embedding, no state.
inline RowLayout plain_row_layout(uint32_t dim) {
  return RowLayout{dim, 0, {}, {}, ValueType::kFloat32};
}

}  // namespace dynemb

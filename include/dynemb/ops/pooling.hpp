// Pooled and sequence lookup over jagged bags, and its backward: the reduction of output
// gradients to one gradient per row, deterministically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "dynemb/core/options.hpp"
#include "dynemb/core/value_type.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb {

// How a bag's rows become its output: summed, averaged, or kept one per id (sequence).
enum class PoolingMode : uint8_t { kSum, kMean, kNone };

// "sum", "mean", "none".
std::string to_string(PoolingMode mode);

// One feature of a lookup: bag b holds ids [offsets[b], offsets[b+1]); id i reads row
// indices[i] of `rows` (row r at rows + r * row_stride, `dim` floats), weighted by
// weights[i] when weights is not null. Pointers are in the backend's memory.
// Rows by address: when row_ptrs is not null, row r is at row_ptrs[r] instead (num_rows
// entries, e.g. a table's find_pointers output; rows and row_stride are not used) and a null
// row_ptrs[r] reads as zeros. The arithmetic is the same, so results are bit-identical to the
// dense layout holding the same rows (zeros for the null ones).
struct LookupFeature {
  const float* rows = nullptr;
  uint32_t row_stride = 0;
  const float* const* row_ptrs = nullptr;
  uint32_t dim = 0;
  size_t num_rows = 0;                // rows available: every index must be < num_rows
  const uint32_t* indices = nullptr;  // num_ids entries
  size_t num_ids = 0;
  const int64_t* offsets =
      nullptr;  // num_bags + 1: offsets[0] == 0, non-decreasing, last == num_ids
  size_t num_bags = 0;
  const float* weights = nullptr;
  PoolingMode mode = PoolingMode::kSum;
  // What the rows' `dim` elements are stored as: float32, or 16-bit elements packed two a 32-bit
  // word (row_stride still counts words). Outputs and gradients are float32 unless the
  // LookupOutput says otherwise.
  ValueType value_type = ValueType::kFloat32;
  // Optional, backend memory: how many of the num_rows rows are in use; the rows from there on
  // are padding no id refers to, which the fused backward skips (a step sized by its ids, whose
  // unique count only the device knows: EmbeddingCollection's host-sync-free step).
  const uint64_t* live_rows = nullptr;
  // GPU, SUM / MEAN over rows by address: pool with resident warps that walk their bags and issue
  // the next bags' loads ahead (same result). For a launch that shares the device with other
  // tables' work (one table's bags beside the others'); one launch over many tables' bags runs
  // faster without (docs/ops.md).
  bool pool_ahead = false;
};

// Where a feature's output goes: SUM/MEAN write bag b at out + b * out_stride; NONE writes id
// i at out + i * out_stride. Several features may share one buffer at different offsets
// (mixed dims in one output row).
// type: what the output's elements are stored as. float32 (the default); or, for a feature of
// 16-bit rows, the rows' own type, packed two a 32-bit word like a row (value_words; out and
// out_stride then count words): pooled sums are accumulated in float32 and rounded to nearest
// even once when written, and gradients of that type are converted to float32 as they are read
// (every sum stays float32, in the same order). Any other pairing is refused (InvalidArgument).
struct LookupOutput {
  float* out = nullptr;
  uint32_t out_stride = 0;
  ValueType type = ValueType::kFloat32;
};

// Checks features and outputs (shapes, offsets, indices) without computing anything; throws
// InvalidArgument naming `where`, the feature, the argument, its value and its limit.
void validate_lookup(Backend backend, std::span<const LookupFeature> features,
                     std::span<const LookupOutput> outputs, const char* where);

// Forward: for each feature, pools its bags into its output (an empty bag gives zeros).
// Validates offsets, indices and strides first (InvalidArgument naming feature, argument,
// value and limit; nothing written).
void pooled_lookup(Backend backend, std::span<const LookupFeature> features,
                   std::span<const LookupOutput> outputs, StreamHandle stream = nullptr);

// Backward: `grads[f]` holds the gradient of feature f's output in LookupOutput's layout.
// Writes row_grads[f] (num_rows x dim at row_grads[f].out + r * out_stride): the sum over
// every id i with indices[i] == r of weight_i * (1 / bag length for MEAN) * the gradient of
// i's bag (or of id i for NONE), the gradients read as grads[f].type converted to float32;
// row_grads are float32.
// Rows no id reads get zeros. The order of additions is fixed
// (kGradientChunk): a row's ids in ascending order are cut into chunks of that many, each
// chunk summed in order, then the chunk sums added in order; so the result is bit-identical
// run to run and backend to backend, and a hot row's ids are summed in parallel on the GPU.
void reduce_gradients(Backend backend, std::span<const LookupFeature> features,
                      std::span<const LookupOutput> grads, std::span<const LookupOutput> row_grads,
                      StreamHandle stream = nullptr);

// Ids per chunk of reduce_gradients' fixed summation order.
inline constexpr uint32_t kGradientChunk = 64;

}  // namespace dynemb

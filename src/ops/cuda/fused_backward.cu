// The gradient reduction fused with the optimizer, by address (reduce_and_optimize_row_ptrs) on
// the GPU: a row's gradient is summed in the fixed order of reduce_gradients into shared memory
// and the row is updated from there, by the same update_row as apply_optimizer_row_ptrs; so the
// rows end bit-identical to the two calls, and no per-row gradient goes to device memory.
#include <algorithm>

#include "cuda/cuda_kernels.hpp"
#include "cuda/gradient_chunks.cuh"
#include "cuda/launch.cuh"
#include "cuda/optimizer_warp.cuh"
#include "cuda/row_tiles.cuh"
#include "cuda/tile_lanes.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/prefetch.cuh"

namespace dynemb::ops::detail {
namespace {

using ops::cuda::add_hot_row;
using ops::cuda::as_stream;
using ops::cuda::gradient_nonfinite;
using ops::cuda::hot_row_count;
using ops::cuda::HotChunks;
using ops::cuda::is_hot_row;
using ops::cuda::kBlock;
using ops::cuda::lane_index;
using ops::cuda::StateTypes;
using ops::cuda::sum_ids;
using ops::cuda::update_row;

// Blocks that take the hot rows (grid-stride), ahead of the cold rows' blocks.
constexpr size_t kHotBlocks = 512;

// The address to update for row `row`: null when the row has none or skip[row] is set. Both
// loads are issued before either is tested, so neither waits on the other.
__device__ __forceinline__ float* updated_address(float* const* rows, const bool* skip,
                                                  size_t row) {
  float* p = rows[row];
  const bool skipped = skip != nullptr && skip[row];
  return skipped ? nullptr : p;
}

// The warp's update of the row at p (null: none) from its reduced gradient: skipped when the
// gradient holds a NaN or Inf (counted into *nonfinite when not null, as the guarded optimizer
// does) or when p is null.
template <OptimizerKind kKind, uint32_t kVec, ValueType kType,
          StateTypes kStates = StateTypes::kEither>
__device__ void optimize_reduced_row(const OptimizerOptions& o, float* p, const float* grad,
                                     uint32_t dim, unsigned long long* nonfinite) {
  if (nonfinite != nullptr && gradient_nonfinite<kVec>(grad, dim, nonfinite)) return;
  if (p == nullptr) return;
  update_row<kKind, kVec, true, kType, false, kStates>(o, p, grad, dim);
}

// Hot rows (blocks [0, hot_blocks), grid-stride over the hot rows): a row's chunk sums added in
// order, one thread per element, into shared memory; then the block's first warp updates the
// row from there.
template <OptimizerKind kKind, uint32_t kVec, ValueType kType>
__device__ void optimize_hot_rows(const OptimizerOptions& o, uint32_t dim, const HotChunks& h,
                                  float* const* rows, const bool* skip,
                                  unsigned long long* nonfinite, float* grad, uint32_t hot_blocks) {
  const size_t hot = hot_row_count(h);
  for (size_t k = blockIdx.x; k < hot; k += hot_blocks) {
    const uint32_t row = h.hot_rows[k];
    add_hot_row(h, row, dim, grad);
    __syncthreads();
    if (threadIdx.x < 32)
      optimize_reduced_row<kKind, kVec, kType>(o, updated_address(rows, skip, row), grad, dim,
                                               nonfinite);
    __syncthreads();
  }
}

// Cold rows (at most one chunk), one warp per row from block hot_blocks on: the row's lines asked
// of L2 first (their fetch from HBM overlaps the gradient's sum), its gradient summed into the
// warp's slice of shared memory (grad_stride floats), then the row updated from there. The
// prefetch comes before the hot / cold test, so the row's address, skip flag and bounds load
// together (a load after the test would wait for the bounds); a hot row's lines are asked for too,
// for the block that updates it.
template <OptimizerKind kKind, uint32_t kVec, ValueType kType, StateTypes kStates,
          ValueType kGradType>
__device__ void optimize_cold_row(const OptimizerOptions& o, const LookupFeature& x,
                                  const LookupOutput& g, const IdGroups& groups, const HotChunks& h,
                                  float* const* rows, const bool* skip,
                                  unsigned long long* nonfinite, float* grad, size_t row) {
  if (row >= x.num_rows) return;
  const uint32_t begin = groups.row_begin[row], end = groups.row_begin[row + 1];
  float* p = updated_address(rows, skip, row);
  if (p != nullptr) {
    const size_t row_bytes = (value_words(o.value_type, x.dim) +
                              optimizer_state_words(kKind, x.dim, state_value_type(o))) *
                             sizeof(float);
    core::cuda::prefetch_range_l2(p, row_bytes, lane_index(), 32);
  }
  if (is_hot_row(end - begin)) return;
  // 16-bit gradients 4 rows in flight, not the packed 8: the packed 8 spilled Adam's registers
  // (ptxas, sm_90, bf16 rows, cold rows alone, kVec 4: 68 / 520-536 bytes of spill stores / loads
  // packed, 8 / 12 with float32 state and 72 / 48 with bf16 state unpacked).
  sum_ids<kVec, kGradType, kGradType == ValueType::kFloat32>(x, g, groups.ids_by_row, h.bag_by_row,
                                                             begin, end, grad);
  __syncwarp();
  optimize_reduced_row<kKind, kVec, kType, kStates>(o, p, grad, x.dim, nonfinite);
}

// Which rows a launch of fused_row_kernel updates.
enum class FusedRows { kAll, kHot, kCold };

// The launch shape of fused_row_kernel: kThreads a block, and kMinBlocks blocks resident a
// multiprocessor in its launch bounds, so ptxas holds a thread to 65536 / (kThreads * kMinBlocks)
// registers (rounded down to a multiple of 8).
// - With the hot rows (kColdOnly false): 256 threads, 4 blocks, 64 registers, 32 warps. Left to
//   itself, ptxas gave the hot rows' 64 loads in flight 72 registers (24 warps); 5 blocks spill.
//   float32's cold rows take this kernel too: they are bound by their DRAM bytes (2.7 TB/s).
// - 16-bit rows' cold rows alone (kColdOnly): bound by latency (2.0 TB/s at 48% warps active
//   with the shape above), so more warps resident: 128 threads, 9 blocks, 56 registers, 36 warps
//   (ptxas: 80 registers unbounded; at 48 (42 warps) 580-840 bytes of spills loaded). Each such
//   kernel is compiled for one state type (StateTypes), so it holds that path's registers only:
//   bfloat16 Adam spills a 16-byte frame with either state type (32 compiled for both).
template <bool kColdOnly>
struct FusedShape {
  static constexpr int kThreads = kColdOnly ? 128 : kBlock;
  static constexpr int kMinBlocks = kColdOnly ? 9 : 4;
  static constexpr int kWarps = kThreads / 32;
};

// One launch for every row: the first hot_blocks blocks take the hot rows, so the longest of them
// starts first and overlaps the cold rows, which the other blocks take one warp each. kColdOnly:
// a launch of cold rows alone (hot_blocks 0), compiled without the hot rows' code, so its
// registers are the cold rows' alone. Gradients of kGradType (g.type: float32 or kType).
template <OptimizerKind kKind, uint32_t kVec, ValueType kType, bool kColdOnly,
          StateTypes kStates = StateTypes::kEither, ValueType kGradType = ValueType::kFloat32>
__global__ void __launch_bounds__(FusedShape<kColdOnly>::kThreads,
                                  FusedShape<kColdOnly>::kMinBlocks)
    fused_row_kernel(OptimizerOptions o, LookupFeature x, LookupOutput g, IdGroups groups,
                     HotChunks h, float* const* rows, const bool* skip,
                     unsigned long long* nonfinite, uint32_t grad_stride, uint32_t hot_blocks) {
  extern __shared__ float4 shared_grads[];
  float* shared = reinterpret_cast<float*>(shared_grads);
  if constexpr (!kColdOnly) {
    if (blockIdx.x < hot_blocks) {
      optimize_hot_rows<kKind, kVec, kType>(o, x.dim, h, rows, skip, nonfinite, shared, hot_blocks);
      return;
    }
  }
  // One row a warp; with live_rows (a grid capped below the row bound) each block takes its share
  // of consecutive rows in use, its warps striding inside it, and leaves the padding after them:
  // so the resident blocks work on neighbouring rows, one table's (whose bag gradients L2 then
  // holds), and move through the rows once (docs/ops.md).
  const size_t block = blockIdx.x - hot_blocks, block_warps = blockDim.x / 32;
  const size_t warp = threadIdx.x / 32;
  if (x.live_rows == nullptr) {
    optimize_cold_row<kKind, kVec, kType, kStates, kGradType>(
        o, x, g, groups, h, rows, skip, nonfinite, shared + warp * grad_stride,
        block * block_warps + warp);
    return;
  }
  const size_t live = *x.live_rows < x.num_rows ? *x.live_rows : x.num_rows;
  const size_t blocks = gridDim.x - hot_blocks;
  const size_t share = (live + blocks - 1) / blocks;
  const size_t end = min(block * share + share, live);
  for (size_t row = block * share + warp; row < end; row += block_warps) {
    optimize_cold_row<kKind, kVec, kType, kStates, kGradType>(
        o, x, g, groups, h, rows, skip, nonfinite, shared + warp * grad_stride, row);
    __syncwarp();
  }
}

// Waves of resident blocks over the cold rows when only the device knows the live rows. More
// waves make each block's share shorter: the window of rows in flight narrower (at 8, a quarter
// of a table, two tables' bag gradients were live at once) and the last wave's tail shorter
// (H100, 13.1M grouped step replayed, issue 35 round R4, one run each: float32 6.059 ms
// striding, 5.975 at 32 waves, 5.902 at 64, 5.875 at 128, 5.905 at 256; bf16
// rows 5.107, 5.026, 4.927 at 64).
constexpr size_t kColdWalkWaves = 128;

// Cold-row blocks of Shape for num_rows rows: one warp a row, or, for a launch whose live row
// count only the device knows (strided), kColdWalkWaves waves of the resident blocks over the
// rows in use.
template <class Shape>
unsigned cold_blocks_of(size_t num_rows, bool strided) {
  const size_t blocks = (num_rows + Shape::kWarps - 1) / Shape::kWarps;
  if (!strided) return static_cast<unsigned>(blocks);
  static const int multiprocessors = [] {
    int device = 0, count = 0;
    core::cuda::check(cudaGetDevice(&device), "cudaGetDevice");
    core::cuda::check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device),
                      "cudaDeviceGetAttribute (multiprocessors)");
    return count;
  }();
  const size_t waves = static_cast<size_t>(multiprocessors) * Shape::kMinBlocks * kColdWalkWaves;
  return static_cast<unsigned>(std::min(blocks, waves));
}

template <OptimizerKind kKind, uint32_t kVec, ValueType kType,
          ValueType kGradType = ValueType::kFloat32>
void launch_fused(FusedRows which, const OptimizerOptions& o, const LookupFeature& x,
                  IdGroups groups, const LookupOutput& g, const HotChunks& h, float* const* rows,
                  const bool* skip, unsigned long long* nonfinite, uint32_t grad_stride,
                  cudaStream_t stream) {
  const size_t row_bytes = size_t{grad_stride} * sizeof(float);
  const bool strided = x.live_rows != nullptr;
  // 16-bit rows: their cold rows alone, more warps resident, in a kernel compiled for the launch's
  // state type alone (H100, 13.1M grouped step replayed, same machine: bf16 rows 6.13 -> 6.03 ms
  // with the kernel compiled for either state, 5.80 -> 5.78 compiled for float32 state alone; bf16
  // rows with bf16 Adam state 5.93 -> 5.80 with the state decoded late, where compiled for either
  // state it was slower than the combined kernel, 5.89 -> 5.95).
  if constexpr (kType != ValueType::kFloat32) {
    if (which == FusedRows::kCold) {
      using Shape = FusedShape<true>;
      const unsigned blocks = cold_blocks_of<Shape>(x.num_rows, strided);
      if (blocks == 0) return;
      if (o.state_in_value_type) {
        fused_row_kernel<kKind, kVec, kType, true, StateTypes::kRowTypeLateDecode, kGradType>
            <<<blocks, Shape::kThreads, Shape::kWarps * row_bytes, stream>>>(
                o, x, g, groups, h, rows, skip, nonfinite, grad_stride, 0);
      } else {
        fused_row_kernel<kKind, kVec, kType, true, StateTypes::kFloat32, kGradType>
            <<<blocks, Shape::kThreads, Shape::kWarps * row_bytes, stream>>>(
                o, x, g, groups, h, rows, skip, nonfinite, grad_stride, 0);
      }
      core::cuda::check_launch("reduce_and_optimize: fused_row_kernel (cold rows)");
      return;
    }
  }
  using Shape = FusedShape<false>;
  const uint32_t hot_blocks =
      x.num_ids == 0 || which == FusedRows::kCold
          ? 0
          : static_cast<uint32_t>(std::min<size_t>(h.max_hot_rows, kHotBlocks));
  const unsigned cold_blocks =
      which == FusedRows::kHot ? 0 : cold_blocks_of<Shape>(x.num_rows, strided);
  if (hot_blocks + cold_blocks == 0) return;
  fused_row_kernel<kKind, kVec, kType, false, StateTypes::kEither, kGradType>
      <<<hot_blocks + cold_blocks, Shape::kThreads, Shape::kWarps * row_bytes, stream>>>(
          o, x, g, groups, h, rows, skip, nonfinite, grad_stride, hot_blocks);
  core::cuda::check_launch("reduce_and_optimize: fused_row_kernel");
}

}  // namespace

void reduce_and_optimize_row_ptrs_cuda(const OptimizerOptions& o, const LookupFeature& x,
                                       IdGroups groups, const LookupOutput& g, float* const* rows,
                                       const bool* skip, uint64_t* nonfinite,
                                       StepWorkspace& workspace, StreamHandle stream_handle) {
  if (x.num_rows == 0) return;
  const cudaStream_t stream = as_stream(stream_handle);
  const uint32_t grad_stride = (x.dim + 3) / 4 * 4;
  if (x.dim > kFusedMaxDim) {
    // Rows too wide for shared memory: the gradients go through the workspace.
    auto* row_grads = static_cast<float*>(
        workspace.scratch(x.num_rows * size_t{grad_stride} * sizeof(float), stream));
    reduce_gradients_grouped_cuda(x, groups, g, {row_grads, grad_stride}, stream_handle);
    apply_optimizer_row_ptrs_cuda(o, x.num_rows, rows, row_grads, grad_stride, x.dim, skip,
                                  nonfinite, stream_handle);
    return;
  }
  ops::cuda::keep_pool_memory(stream);
  const ops::cuda::HotChunkPlan plan(x, groups);
  void* chunks = workspace.scratch(plan.bytes(), stream_handle);
  // float4 lanes for the gradient rows read (and the shared rows, aligned, stride a multiple of
  // 4); the arithmetic is the same either way.
  const bool vec = ops::cuda::gradients_vec4_ok(g, x.dim);
  auto* bad = reinterpret_cast<unsigned long long*>(nonfinite);
  // The cold rows read only the groups (and the ids' bags, when the dedup brought them), not the
  // hot chunks: with the bags at hand the hot rows' chain (chunk sums, then their update) runs on
  // a high-priority side stream beside one pass over the cold rows, instead of before it.
  const bool side_by_side =
      x.num_ids > 0 && (groups.bag_by_row != nullptr || x.mode == PoolingMode::kNone);
  ops::detail::StreamFan* fan = nullptr;
  if (side_by_side) {
    if (workspace.priority_fan == nullptr) {
      int device = 0;
      core::cuda::check(cudaGetDevice(&device), "reduce_and_optimize: cudaGetDevice");
      workspace.priority_fan = make_stream_fan_cuda(1, device, true);
    }
    fan = workspace.priority_fan.get();
  }
  const cudaStream_t hot_stream = fan != nullptr ? ops::cuda::as_stream(fan->stream(0)) : stream;
  // One kernel per value type: a 16-bit row's update is inlined into its own kernel (an
  // out-of-line update took the float32 kernel's parameters through a stack frame).
  const auto launch = [&](auto type) {
    constexpr ValueType kType = decltype(type)::value;
    ops::cuda::with_optimizer_kind(o.kind, [&](auto kind) {
      constexpr OptimizerKind kKind = decltype(kind)::value;
      const auto fused = [&](FusedRows which, const HotChunks& h, cudaStream_t s) {
        // Gradients of the rows' own type (16-bit outputs) or float32.
        if constexpr (kType != ValueType::kFloat32) {
          if (g.type == kType) {
            if (vec) {
              launch_fused<kKind, 4, kType, kType>(which, o, x, groups, g, h, rows, skip, bad,
                                                   grad_stride, s);
            } else {
              launch_fused<kKind, 1, kType, kType>(which, o, x, groups, g, h, rows, skip, bad,
                                                   grad_stride, s);
            }
            return;
          }
        }
        if (vec) {
          launch_fused<kKind, 4, kType>(which, o, x, groups, g, h, rows, skip, bad, grad_stride, s);
        } else {
          launch_fused<kKind, 1, kType>(which, o, x, groups, g, h, rows, skip, bad, grad_stride, s);
        }
      };
      if (fan != nullptr) fan->fork(stream_handle);
      const HotChunks h = plan.issue(g, chunks, hot_stream);
      if (fan == nullptr) {
        fused(FusedRows::kAll, h, stream);
        return;
      }
      fused(FusedRows::kHot, h, hot_stream);
      HotChunks cold;
      cold.bag_by_row = groups.bag_by_row;
      fused(FusedRows::kCold, cold, stream);
      fan->join(stream_handle);
    });
  };
  switch (o.value_type) {
    case ValueType::kFloat16:
      return launch(std::integral_constant<ValueType, ValueType::kFloat16>{});
    case ValueType::kBFloat16:
      return launch(std::integral_constant<ValueType, ValueType::kBFloat16>{});
    default:
      return launch(std::integral_constant<ValueType, ValueType::kFloat32>{});
  }
}

}  // namespace dynemb::ops::detail

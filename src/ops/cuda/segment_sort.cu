// Segments sorted one by one with 10-bit digits (segment_sort.hpp). CUB's DeviceRadixSort picks
// 8-bit digits, so a 24-bit key (a table's 20 id bits under 4 table bits) takes three passes
// over every pair. A collection's narrow keys are already in table order, so each table's
// segment only needs its 20 id bits sorted: two passes of 10-bit digits, through CUB's radix
// sort dispatch with a policy of our own (256 threads of 20 pairs: 1024 digits' ranks fit the
// static shared memory).
#include <cub/device/dispatch/dispatch_radix_sort.cuh>

#include "cuda/launch.cuh"
#include "cuda/segment_sort.hpp"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/ops/step_workspace.hpp"
#include "dynemb/ops/stream_fan.hpp"

namespace dynemb::ops::detail {
namespace {

constexpr int kDigitBits = 10;

// CUB's tuned policies for 4-byte keys and values, with the one-sweep stages at 10-bit digits.
struct TenBitDigits {
  using Hub = cub::detail::radix::policy_hub<uint32_t, uint32_t, int>;
  using Sizes = cub::detail::radix::sm90_small_key_tuning<4, 4, 4>;
  struct MaxPolicy : cub::ChainedPolicy<900, MaxPolicy, MaxPolicy>,
                     Hub::OnesweepSmallKeyTunedPolicy<Sizes> {
    static constexpr bool ONESWEEP = true;
    static constexpr int ONESWEEP_RADIX_BITS = kDigitBits;
    using HistogramPolicy = cub::AgentRadixSortHistogramPolicy<128, 16, 1, uint32_t, kDigitBits>;
    using ExclusiveSumPolicy = cub::AgentRadixSortExclusiveSumPolicy<256, kDigitBits>;
    using OnesweepPolicy = cub::AgentRadixSortOnesweepPolicy<
        256, 20, uint32_t, 1, cub::RADIX_RANK_MATCH_EARLY_COUNTS_ANY,
        cub::BLOCK_SCAN_RAKING_MEMOIZE, cub::RADIX_SORT_STORE_DIRECT, kDigitBits>;
  };
};

using SegmentDispatch = cub::DispatchRadixSort<cub::SortOrder::Ascending, uint32_t, uint32_t, int,
                                               cub::detail::identity_decomposer_t, TenBitDigits>;

// Issues (temp null: sizes) segment s's sort; returns its scratch bytes.
size_t sort_one(std::span<const uint64_t> starts, size_t s, int bits, const uint32_t* keys_in,
                uint32_t* keys_out, const uint32_t* values_in, uint32_t* values_out, void* temp,
                cudaStream_t stream) {
  const uint64_t first = starts[s];
  const int count = static_cast<int>(starts[s + 1] - first);
  // Input and output apart: CUB's own scratch holds the pass between (is_overwrite_okay false),
  // and the sorted pairs end in the output, as cub::DeviceRadixSort::SortPairs leaves them.
  cub::DoubleBuffer<uint32_t> keys(const_cast<uint32_t*>(keys_in) + first, keys_out + first);
  cub::DoubleBuffer<uint32_t> values(const_cast<uint32_t*>(values_in) + first, values_out + first);
  size_t bytes = 0;
  core::cuda::check(
      SegmentDispatch::Dispatch(nullptr, bytes, keys, values, count, 0, bits, false, stream),
      "dedup: segment sort (size)");
  if (temp != nullptr) {
    core::cuda::check(
        SegmentDispatch::Dispatch(temp, bytes, keys, values, count, 0, bits, false, stream),
        "dedup: segment sort");
  }
  return bytes;
}

}  // namespace

bool segment_sort_fits(const SortSegments& segments, size_t n) {
  const auto& starts = segments.starts;
  if (segments.bits < 1 || segments.bits > kSegmentSortMaxBits || starts.size() < 2) return false;
  if (starts.front() != 0 || starts.back() != n) return false;
  for (size_t s = 0; s + 1 < starts.size(); ++s) {
    if (starts[s + 1] < starts[s] || starts[s + 1] - starts[s] > 0x7FFFFFFFull) return false;
  }
  return true;
}

size_t segment_sort_temp_bytes(std::span<const uint64_t> starts, int bits) {
  ScratchCarver measure;
  for (size_t s = 0; s + 1 < starts.size(); ++s) {
    if (starts[s + 1] == starts[s]) continue;
    measure.take<uint8_t>(
        sort_one(starts, s, bits, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr));
  }
  return measure.bytes();
}

void segment_sort_async(std::span<const uint64_t> starts, int bits, const uint32_t* keys_in,
                        uint32_t* keys_out, const uint32_t* values_in, uint32_t* values_out,
                        void* temp, StreamFan* fan, cudaStream_t stream) {
  const bool side = fan != nullptr && fan->size() > 0;
  if (side) fan->fork(stream);
  ScratchCarver place(temp);
  size_t issued = 0;
  for (size_t s = 0; s + 1 < starts.size(); ++s) {
    if (starts[s + 1] == starts[s]) continue;
    const cudaStream_t on = side ? ops::cuda::as_stream(fan->stream(issued % fan->size())) : stream;
    const size_t bytes =
        sort_one(starts, s, bits, keys_in, keys_out, values_in, values_out, nullptr, on);
    sort_one(starts, s, bits, keys_in, keys_out, values_in, values_out, place.take<uint8_t>(bytes),
             on);
    ++issued;
  }
  if (side) fan->join(stream);
}

}  // namespace dynemb::ops::detail

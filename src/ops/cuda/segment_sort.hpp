// The dedup's sort of a batch in segments (SortSegments, step_types.hpp): each segment's
// (key, value) pairs sorted on their low bits by CUB's one-sweep radix sort with 10-bit digits,
// two passes for up to 20 bits where the whole batch's 8-bit digits take three.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "dynemb/ops/step_types.hpp"

namespace dynemb::ops::detail {

// The most bits a segment's keys are sorted on (two passes of 10).
inline constexpr int kSegmentSortMaxBits = 20;

// Whether segment_sort_async takes these segments of a batch of n pairs: bits in [1, 20], the
// segments covering [0, n), none over 2^31 - 1 pairs.
bool segment_sort_fits(const SortSegments& segments, size_t n);

// The scratch bytes segment_sort_async needs for these segments (at most 2^31 - 1 pairs each).
size_t segment_sort_temp_bytes(std::span<const uint64_t> starts, int bits);

// Sorts the pairs (keys_in[i], values_in[i]) of each segment [starts[s], starts[s + 1]) stably on
// bits [0, bits) into keys_out / values_out at the same range, on `fan`'s streams forked from
// `stream` and joined back (null fan: on `stream`); temp holds segment_sort_temp_bytes.
void segment_sort_async(std::span<const uint64_t> starts, int bits, const uint32_t* keys_in,
                        uint32_t* keys_out, const uint32_t* values_in, uint32_t* values_out,
                        void* temp, StreamFan* fan, cudaStream_t stream);

}  // namespace dynemb::ops::detail

// HugeCTR gpu_cache's query figures on one H100 from ../shared/ANCHORS.md (measured by the
// project on a lent H100, not in this run): the peer the cache benchmark's JSON sets beside its
// own figures.
#pragma once

#include <cstdint>
#include <optional>

namespace dynemb::bench {

struct HugeCtrAnchor {
  uint32_t dim;
  uint64_t cache_rows;
  uint64_t batch;
  double mkeys_per_s;
  double hit_rate;
};

// Batches of distinct keys (HugeCTR's serving pipeline deduplicates first).
inline constexpr HugeCtrAnchor kHugeCtrDistinctAnchors[] = {
    {32, 1 << 20, 2048, 114, 0.84},     {32, 1 << 20, 65536, 742, 0.65},
    {32, 1 << 20, 1 << 20, 835, 0.31},  {32, 8 << 20, 2048, 167, 0.85},
    {32, 8 << 20, 65536, 858, 0.69},    {32, 8 << 20, 1 << 20, 920, 0.65},
    {128, 1 << 20, 2048, 113, 0.84},    {128, 1 << 20, 65536, 633, 0.65},
    {128, 1 << 20, 1 << 20, 764, 0.31}, {128, 8 << 20, 2048, 136, 0.85},
    {128, 8 << 20, 65536, 754, 0.69},   {128, 8 << 20, 1 << 20, 763, 0.65},
};
// Raw batches (with repeats): every size, both dims.
inline constexpr double kHugeCtrRawMinMkeys = 1.3;
inline constexpr double kHugeCtrRawMaxMkeys = 4.9;

// The distinct-key anchor of one cell, if ANCHORS.md has it.
inline std::optional<HugeCtrAnchor> hugectr_anchor(uint32_t dim, uint64_t rows, uint64_t batch) {
  for (const HugeCtrAnchor& a : kHugeCtrDistinctAnchors) {
    if (a.dim == dim && a.cache_rows == rows && a.batch == batch) return a;
  }
  return std::nullopt;
}

}  // namespace dynemb::bench

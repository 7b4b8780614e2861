// The per-sample math of the synthetic stream, one body for the host and the GPU, so both draw
// the same samples: splitmix64 draws, the Zipf inverse CDF in double, the growing vocabulary and
// the scrambled keys. (Device code must be compiled without FMA contraction, -fmad=false, for
// the double arithmetic to round as on the host; pow and exp may still differ in the last bit.)
#pragma once

#include <math.h>

#include <cstdint>

#include "dynemb/core/hash.hpp"
#include "dynemb/core/host_device.hpp"
#include "train/feature_key.hpp"

namespace dynemb::train::synthetic {

// The held-out stream draws sample t with the sequence of t + kEvalStreamOffset.
inline constexpr uint64_t kEvalStreamOffset = uint64_t{1} << 62;

// splitmix64: a fast, well-mixed generator; each call advances `state`.
DYNEMB_HD uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A uniform double in (0, 1).
DYNEMB_HD double uniform_open(uint64_t& state) {
  return (static_cast<double>(next_random(state) >> 11) + 0.5) * 0x1.0p-53;
}

// The generator state sample t starts from.
DYNEMB_HD uint64_t first_state(uint64_t seed, uint64_t t, bool eval) {
  return hash_key_bits((eval ? t + kEvalStreamOffset : t) ^ hash_key_bits(seed));
}

// The fraction of each field's vocabulary sample t draws from (1 for the held-out stream).
DYNEMB_HD double vocab_fraction(bool eval, uint64_t t, double start_vocab, uint64_t horizon) {
  if (eval) return 1.0;
  const double ratio = static_cast<double>(t) / static_cast<double>(horizon);
  const double progress = ratio < 1.0 ? ratio : 1.0;
  return start_vocab + (1.0 - start_vocab) * progress;
}

// The ranks a field of `card` ids draws from at `fraction`: the hidden FM's active ids are
// there from the start; the tail grows into the field.
DYNEMB_HD uint64_t field_vocab(uint64_t card, double fraction, uint64_t active_ids) {
  const auto grown = static_cast<uint64_t>(ceil(static_cast<double>(card) * fraction));
  const uint64_t active = card < active_ids ? card : active_ids;
  uint64_t n = grown > 1 ? grown : 1;
  return n > active ? n : active;
}

// A rank in [0, n) with P(r) ~ (r + 1)^-alpha (inverse CDF of the continuous power law on
// [1, n + 1), floored).
DYNEMB_HD uint64_t zipf_rank(double u, double alpha, uint64_t n) {
  const double one_minus = 1.0 - alpha;
  const double tail = pow(static_cast<double>(n) + 1.0, one_minus);
  const double x = pow(1.0 - u * (1.0 - tail), 1.0 / one_minus);
  const uint64_t r = static_cast<uint64_t>(x) - 1;
  return r < n - 1 ? r : n - 1;
}

// The table key of `rank` in `field`: a bijective scramble of (seed, field, rank), so ids carry
// no rank order.
DYNEMB_HD uint64_t key_of(uint64_t seed, uint32_t field, uint64_t rank) {
  return feature_key(
      field, hash_key_bits(rank ^ (seed * 0x9e3779b97f4a7c15ull) ^ (uint64_t{field} << 48)));
}

// The click probability of a true logit.
DYNEMB_HD double true_probability(double logit) {
  return 1.0 / (1.0 + exp(-logit));
}

}  // namespace dynemb::train::synthetic

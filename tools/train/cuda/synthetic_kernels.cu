// The synthetic stream on the GPU: one thread per sample computes exactly what
// SyntheticStream::generate computes on the host (synthetic_math.hpp, the hidden FM's logit in
// double in the same order), so GPU and CPU batches agree but for rare last-bit differences of
// pow / exp at a rank or label boundary.
#include "train/cuda/launch_check.cuh"
#include "train/gpu_kernels.hpp"
#include "train/synthetic_math.hpp"

namespace dynemb::train::gpu {
namespace {

constexpr unsigned kBlock = 128;

constexpr uint32_t kInactive = 0xffffffffu;  // ranks with parameters are < active_ids < 2^32 - 1

// rank_scratch[f * num_samples + s]: the rank of field f if it has parameters, else kInactive.
__global__ void generate_kernel(SyntheticArgs a, uint64_t first, size_t num_samples, uint64_t* keys,
                                int64_t* offsets, float* labels, float* true_probs,
                                uint32_t* rank_scratch) {
  const size_t s = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= num_samples) return;
  const uint64_t t = first + s;
  const uint32_t fields = a.num_fields;
  const uint32_t width = 1 + a.true_dim;
  uint64_t state = synthetic::first_state(a.seed, t, a.eval);
  const double fraction = synthetic::vocab_fraction(a.eval, t, a.start_vocab, a.horizon);
  // GroundTruthFm::logit's order: the linear part and the squares field by field ...
  double linear = a.bias, squares = 0.0;
  for (uint32_t f = 0; f < fields; ++f) {
    const uint64_t n = synthetic::field_vocab(a.cardinalities[f], fraction, a.active_ids);
    const uint64_t rank = synthetic::zipf_rank(synthetic::uniform_open(state), a.zipf_alpha, n);
    keys[s * fields + f] = synthetic::key_of(a.seed, f, rank);
    const bool active = rank < a.active[f];
    rank_scratch[f * num_samples + s] = active ? static_cast<uint32_t>(rank) : kInactive;
    if (!active) continue;
    const float* p = a.params + a.param_offsets[f] + rank * width;
    linear += p[0];
    for (uint32_t j = 0; j < a.true_dim; ++j) {
      squares += static_cast<double>(p[1 + j]) * p[1 + j];
    }
  }
  // ... then each factor's sum over the fields, in field order.
  double pairs = -squares;
  for (uint32_t j = 0; j < a.true_dim; ++j) {
    double sum = 0.0;
    for (uint32_t f = 0; f < fields; ++f) {
      const uint32_t rank = rank_scratch[f * num_samples + s];
      if (rank != kInactive) {
        sum += a.params[a.param_offsets[f] + static_cast<uint64_t>(rank) * width + 1 + j];
      }
    }
    pairs += sum * sum;
  }
  const double p = synthetic::true_probability(linear + 0.5 * pairs);
  true_probs[s] = static_cast<float>(p);
  labels[s] = synthetic::uniform_open(state) < p ? 1.0f : 0.0f;
  offsets[s + 1] = static_cast<int64_t>((s + 1) * fields);
  if (s == 0) offsets[0] = 0;
}

}  // namespace

void generate_synthetic(const SyntheticArgs& args, uint64_t first, size_t num_samples,
                        uint64_t* keys, int64_t* offsets, float* labels, float* true_probs,
                        uint32_t* rank_scratch) {
  if (num_samples == 0) return;
  generate_kernel<<<blocks_for(num_samples, kBlock), kBlock>>>(
      args, first, num_samples, keys, offsets, labels, true_probs, rank_scratch);
  check_launch("generate_kernel (synthetic stream)");
}

}  // namespace dynemb::train::gpu

// The trainer's CUDA kernels (tools/train/cuda/*.cu), behind plain C++ declarations so host code
// needs no CUDA headers. All pointers are device memory; every call is queued on the default
// stream (in order with the Embedding's work). Without the CUDA backend each throws NotAvailable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dynemb::train::gpu {

// The FM of one batch: `rows` holds the looked-up row ([w | v (factor_dim)], row_stride floats
// apart) of id i at i * row_stride and the bias row at num_ids * row_stride.
struct FmBatchArgs {
  const float* rows = nullptr;
  uint32_t row_stride = 0;
  uint32_t factor_dim = 0;
  const int64_t* offsets = nullptr;  // num_samples + 1
  const float* values = nullptr;     // nullptr: all 1
  size_t num_samples = 0;
  size_t num_ids = 0;
};

// Per-sample probabilities sigmoid(clamp(logit, +-40)) into probs.
void fm_predict(const FmBatchArgs& batch, float* probs);

// Probabilities, the log-loss gradient of every id row (grads, same layout as rows; the bias row
// gets the sum over samples of p - y, its factor part 0) and the summed log loss, written as one
// double to *loss_sum. sample_scratch needs 2 * num_samples doubles.
void fm_train(const FmBatchArgs& batch, const float* labels, float* probs, float* grads,
              double* sample_scratch, double* loss_sum);

// keys_out[0 .. n) = keys, keys_out[n] = last_key.
void copy_keys_and_append(const uint64_t* keys, size_t n, uint64_t last_key, uint64_t* keys_out);

// offsets[i] = i for i in [0, n].
void fill_identity_offsets(int64_t* offsets, size_t n);

// The synthetic stream's description for the generator kernel (see synthetic_math.hpp).
struct SyntheticArgs {
  uint64_t seed = 0;
  bool eval = false;
  uint32_t num_fields = 0;
  const uint64_t* cardinalities = nullptr;  // num_fields
  const uint64_t* active = nullptr;         // num_fields: ranks with hidden-FM parameters
  const uint64_t* param_offsets = nullptr;  // num_fields: where a field's rows start in params
  const float* params = nullptr;            // rows of [w | v (true_dim)] per field
  uint32_t true_dim = 0;
  uint64_t active_ids = 0;
  double zipf_alpha = 0.0, start_vocab = 0.0, bias = 0.0;
  uint64_t horizon = 1;
};

// Samples first .. first + num_samples - 1 of the stream: num_fields keys each (sample s's at
// keys[s * num_fields]), CSR offsets, labels and true probabilities. rank_scratch needs
// num_samples * num_fields uint32.
void generate_synthetic(const SyntheticArgs& args, uint64_t first, size_t num_samples,
                        uint64_t* keys, int64_t* offsets, float* labels, float* true_probs,
                        uint32_t* rank_scratch);

// What the metrics say about the GPU.
struct DeviceInfo {
  std::string name;
  uint64_t memory_bytes = 0;
  int multiprocessors = 0;
};
DeviceInfo device_info(int device);

}  // namespace dynemb::train::gpu

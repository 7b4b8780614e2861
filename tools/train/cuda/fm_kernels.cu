// The FM's math on the GPU, the same as FmModel's host math (fm_model.cpp): one warp per sample,
// lanes over the factor elements (32 at a time) and over the ids for the linear part.
#include <math.h>

#include "train/cuda/launch_check.cuh"
#include "train/gpu_kernels.hpp"

namespace dynemb::train::gpu {
namespace {

constexpr unsigned kWarp = 32;
constexpr unsigned kBlock = 256;
constexpr unsigned kSamplesPerBlock = kBlock / kWarp;
constexpr float kLogitLimit = 40.0f;  // as fm_model.cpp
constexpr unsigned kFullMask = 0xffffffffu;

__device__ float warp_sum(float v) {
  for (unsigned d = kWarp / 2; d > 0; d /= 2) v += __shfl_xor_sync(kFullMask, v, d);
  return v;
}

__device__ float value_of(const FmBatchArgs& a, int64_t i) {
  return a.values != nullptr ? a.values[i] : 1.0f;
}

// sum_i x_i v_ij over sample [begin, end) for factor j (the lane's), and sum_i (x_i v_ij)^2.
__device__ void factor_sums(const FmBatchArgs& a, int64_t begin, int64_t end, uint32_t j,
                            float& sum, float& squares) {
  sum = 0.0f;
  squares = 0.0f;
  if (j >= a.factor_dim) return;
  for (int64_t i = begin; i < end; ++i) {
    const float xv = value_of(a, i) * a.rows[i * a.row_stride + 1 + j];
    sum += xv;
    squares += xv * xv;
  }
}

// The clamped logit of sample s; every lane gets it.
__device__ float sample_logit(const FmBatchArgs& a, size_t s, unsigned lane) {
  const int64_t begin = a.offsets[s], end = a.offsets[s + 1];
  float linear = 0.0f;
  for (int64_t i = begin + lane; i < end; i += kWarp)
    linear += value_of(a, i) * a.rows[i * a.row_stride];
  float pairs = 0.0f;  // this lane's share of |sum_i x_i v_i|^2 - sum_i |x_i v_i|^2
  for (uint32_t j0 = 0; j0 < a.factor_dim; j0 += kWarp) {
    float sum, squares;
    factor_sums(a, begin, end, j0 + lane, sum, squares);
    pairs += sum * sum - squares;
  }
  const float bias = a.rows[a.num_ids * a.row_stride];
  const float z = bias + warp_sum(linear) + 0.5f * warp_sum(pairs);
  return fminf(fmaxf(z, -kLogitLimit), kLogitLimit);
}

__device__ float sigmoid(float z) {
  return 1.0f / (1.0f + expf(-z));
}

// log(1 + exp(z)) without overflow.
__device__ double softplus(double z) {
  return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z));
}

__global__ void predict_kernel(FmBatchArgs a, float* probs) {
  const size_t s = static_cast<size_t>(blockIdx.x) * kSamplesPerBlock + threadIdx.x / kWarp;
  if (s >= a.num_samples) return;
  const unsigned lane = threadIdx.x % kWarp;
  const float z = sample_logit(a, s, lane);
  if (lane == 0) probs[s] = sigmoid(z);
}

// Per sample: probability, p - y and the log loss (for the bias / loss reduction), and the
// gradient of each of its id rows: d/dw_i = g x_i, d/dv_ij = g x_i (sum_j - x_i v_ij).
__global__ void train_kernel(FmBatchArgs a, const float* labels, float* probs, float* grads,
                             double* sample_g, double* sample_loss) {
  const size_t s = static_cast<size_t>(blockIdx.x) * kSamplesPerBlock + threadIdx.x / kWarp;
  if (s >= a.num_samples) return;
  const unsigned lane = threadIdx.x % kWarp;
  const float z = sample_logit(a, s, lane);
  const float p = sigmoid(z);
  const float y = labels[s];
  const float g = p - y;
  if (lane == 0) {
    probs[s] = p;
    sample_g[s] = g;
    sample_loss[s] = softplus(z) - static_cast<double>(y) * z;
  }
  const int64_t begin = a.offsets[s], end = a.offsets[s + 1];
  for (int64_t i = begin + lane; i < end; i += kWarp) grads[i * a.row_stride] = g * value_of(a, i);
  for (uint32_t j0 = 0; j0 < a.factor_dim; j0 += kWarp) {
    const uint32_t j = j0 + lane;
    float sum, squares;
    factor_sums(a, begin, end, j, sum, squares);
    if (j >= a.factor_dim) continue;
    for (int64_t i = begin; i < end; ++i) {
      const float x = value_of(a, i);
      const float v = a.rows[i * a.row_stride + 1 + j];
      grads[i * a.row_stride + 1 + j] = g * x * (sum - x * v);
    }
  }
}

// One block: sums sample_g and sample_loss in a fixed order (deterministic), writes the bias
// row's gradient [sum g | 0 ...] and the loss sum.
constexpr unsigned kReduceBlock = 1024;

__global__ void bias_and_loss_kernel(const double* sample_g, const double* sample_loss, size_t n,
                                     float* bias_grad, uint32_t row_width, double* loss_sum) {
  __shared__ double g_part[kReduceBlock], loss_part[kReduceBlock];
  double g = 0.0, loss = 0.0;
  for (size_t i = threadIdx.x; i < n; i += kReduceBlock) {
    g += sample_g[i];
    loss += sample_loss[i];
  }
  g_part[threadIdx.x] = g;
  loss_part[threadIdx.x] = loss;
  __syncthreads();
  for (unsigned half = kReduceBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      g_part[threadIdx.x] += g_part[threadIdx.x + half];
      loss_part[threadIdx.x] += loss_part[threadIdx.x + half];
    }
    __syncthreads();
  }
  for (uint32_t j = threadIdx.x; j < row_width; j += kReduceBlock) {
    bias_grad[j] = j == 0 ? static_cast<float>(g_part[0]) : 0.0f;
  }
  if (threadIdx.x == 0) *loss_sum = loss_part[0];
}

__global__ void copy_keys_kernel(const uint64_t* keys, size_t n, uint64_t last_key, uint64_t* out) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = keys[i];
  if (i == n) out[n] = last_key;
}

__global__ void identity_offsets_kernel(int64_t* offsets, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i <= n) offsets[i] = static_cast<int64_t>(i);
}

}  // namespace

void fm_predict(const FmBatchArgs& batch, float* probs) {
  if (batch.num_samples == 0) return;
  predict_kernel<<<blocks_for(batch.num_samples, kSamplesPerBlock), kBlock>>>(batch, probs);
  check_launch("fm predict_kernel");
}

void fm_train(const FmBatchArgs& batch, const float* labels, float* probs, float* grads,
              double* sample_scratch, double* loss_sum) {
  const size_t b = batch.num_samples;
  double* sample_g = sample_scratch;
  double* sample_loss = sample_scratch + b;
  if (b > 0) {
    train_kernel<<<blocks_for(b, kSamplesPerBlock), kBlock>>>(batch, labels, probs, grads, sample_g,
                                                              sample_loss);
    check_launch("fm train_kernel");
  }
  bias_and_loss_kernel<<<1, kReduceBlock>>>(sample_g, sample_loss, b,
                                            grads + batch.num_ids * batch.row_stride,
                                            batch.factor_dim + 1, loss_sum);
  check_launch("fm bias_and_loss_kernel");
}

void copy_keys_and_append(const uint64_t* keys, size_t n, uint64_t last_key, uint64_t* keys_out) {
  copy_keys_kernel<<<blocks_for(n + 1, kBlock), kBlock>>>(keys, n, last_key, keys_out);
  check_launch("copy_keys_kernel");
}

void fill_identity_offsets(int64_t* offsets, size_t n) {
  identity_offsets_kernel<<<blocks_for(n + 1, kBlock), kBlock>>>(offsets, n);
  check_launch("identity_offsets_kernel");
}

}  // namespace dynemb::train::gpu

// A batch of CTR samples in GPU memory (the CSR layout of SampleBatch), for `--device cuda`:
// made there by the GPU synthetic stream, or uploaded from a host batch (file readers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "train/sample_batch.hpp"

namespace dynemb::train {

// Device pointers to one batch; sample s owns ids [offsets[s], offsets[s+1]).
struct DeviceBatchView {
  const uint64_t* keys = nullptr;
  const float* values = nullptr;  // nullptr: every value is 1 (categorical features only)
  const int64_t* offsets = nullptr;
  const float* labels = nullptr;
  size_t num_samples = 0;
  size_t num_ids = 0;
};

// Owns a batch's device buffers (grown on demand, never shrunk) and a host copy of its labels
// (and of the true probabilities where the source has them) for the metrics.
class DeviceBatch {
 public:
  // Device buffers on `device` (CUDA ordinal).
  explicit DeviceBatch(int device = 0) : device_(device) {}

  // Copies a host batch to the device (synchronous); labels are kept on the host too.
  void upload(const SampleBatch& batch);
  // Makes room for `num_samples` samples of `num_ids` ids in all and sets the sizes; the
  // caller fills the buffers (and host_labels).
  void resize(size_t num_samples, size_t num_ids, bool with_values);

  DeviceBatchView view() const;
  size_t size() const { return num_samples_; }
  uint64_t* keys() { return keys_.data(); }
  float* values() { return has_values_ ? values_.data() : nullptr; }
  int64_t* offsets() { return offsets_.data(); }
  float* labels() { return labels_.data(); }
  float* true_probs() { return true_probs_.data(); }

  std::vector<float> host_labels;  // num_samples labels, on the host

 private:
  int device_;
  size_t num_samples_ = 0, num_ids_ = 0;
  bool has_values_ = false;
  BackendBuffer<uint64_t> keys_;
  BackendBuffer<float> values_, labels_, true_probs_;
  BackendBuffer<int64_t> offsets_;
};

// Grows `buffer` (a CUDA buffer on `device`) to at least `count` elements; contents are not
// kept.
template <class T>
void grow_device_buffer(BackendBuffer<T>& buffer, size_t count, int device) {
  if (buffer.data() == nullptr || buffer.size() < count) {
    buffer = BackendBuffer<T>(Backend::kCuda, count + count / 4 + 16, device);
  }
}

}  // namespace dynemb::train

#include "train/device_batch.hpp"

namespace dynemb::train {

void DeviceBatch::resize(size_t num_samples, size_t num_ids, bool with_values) {
  grow_device_buffer(keys_, num_ids, device_);
  if (with_values) grow_device_buffer(values_, num_ids, device_);
  grow_device_buffer(offsets_, num_samples + 1, device_);
  grow_device_buffer(labels_, num_samples, device_);
  grow_device_buffer(true_probs_, num_samples, device_);
  num_samples_ = num_samples;
  num_ids_ = num_ids;
  has_values_ = with_values;
}

void DeviceBatch::upload(const SampleBatch& batch) {
  resize(batch.size(), batch.num_ids(), true);
  keys_.upload(batch.keys.data(), batch.num_ids());
  values_.upload(batch.values.data(), batch.num_ids());
  offsets_.upload(batch.offsets.data(), batch.size() + 1);
  labels_.upload(batch.labels.data(), batch.size());
  host_labels = batch.labels;
}

DeviceBatchView DeviceBatch::view() const {
  DeviceBatchView v;
  v.keys = keys_.data();
  v.values = has_values_ ? values_.data() : nullptr;
  v.offsets = offsets_.data();
  v.labels = labels_.data();
  v.num_samples = num_samples_;
  v.num_ids = num_ids_;
  return v;
}

}  // namespace dynemb::train

#include "train/gpu_synthetic_stream.hpp"

#include <vector>

#include "train/gpu_kernels.hpp"

namespace dynemb::train {
namespace {

template <class T>
BackendBuffer<T> device_copy(const std::vector<T>& host, int device) {
  BackendBuffer<T> buffer(Backend::kCuda, host.empty() ? 1 : host.size(), device);
  if (!host.empty()) buffer.upload(host.data(), host.size());
  return buffer;
}

}  // namespace

GpuSyntheticStream::GpuSyntheticStream(const SyntheticOptions& options, bool eval, int device)
    : host_(options, eval), device_(device) {
  const GroundTruthFm& truth = host_.truth();
  std::vector<uint64_t> active, offsets;
  std::vector<float> params;
  for (uint32_t f = 0; f < truth.num_fields(); ++f) {
    active.push_back(truth.active(f));
    offsets.push_back(params.size());
    params.insert(params.end(), truth.field_rows(f).begin(), truth.field_rows(f).end());
  }
  cardinalities_ = device_copy(options.cardinalities, device);
  active_ = device_copy(active, device);
  param_offsets_ = device_copy(offsets, device);
  params_ = device_copy(params, device);
}

size_t GpuSyntheticStream::next(DeviceBatch& batch, size_t max_samples) {
  const SyntheticOptions& o = host_.options();
  const uint32_t fields = host_.truth().num_fields();
  batch.resize(max_samples, max_samples * fields, false);
  grow_device_buffer(rank_scratch_, max_samples * fields, device_);
  gpu::SyntheticArgs args;
  args.seed = o.seed;
  args.eval = host_.eval();
  args.num_fields = fields;
  args.cardinalities = cardinalities_.data();
  args.active = active_.data();
  args.param_offsets = param_offsets_.data();
  args.params = params_.data();
  args.true_dim = o.true_dim;
  args.active_ids = o.active_ids;
  args.zipf_alpha = o.zipf_alpha;
  args.start_vocab = o.start_vocab;
  args.bias = o.bias;
  args.horizon = o.horizon;
  gpu::generate_synthetic(args, position_, max_samples, batch.keys(), batch.offsets(),
                          batch.labels(), batch.true_probs(), rank_scratch_.data());
  batch.host_labels.resize(max_samples);
  if (max_samples > 0) {
    copy_from_backend(Backend::kCuda, batch.host_labels.data(), batch.labels(),
                      max_samples * sizeof(float));
  }
  position_ += max_samples;
  return max_samples;
}

uint64_t GpuSyntheticStream::skip(uint64_t n) {
  position_ += n;
  return n;
}

}  // namespace dynemb::train

// The trainer's CUDA kernels in a build without the CUDA backend: every call is NotAvailable
// (validate_train_options refuses --device cuda before any of them is reached).
#include "dynemb/core/error.hpp"
#include "train/gpu_kernels.hpp"

namespace dynemb::train::gpu {
namespace {

[[noreturn]] void not_built(const char* what) {
  throw NotAvailable(std::string("dynemb train: ") + what +
                     " needs the CUDA backend, which this build does not have");
}

}  // namespace

void fm_predict(const FmBatchArgs&, float*) {
  not_built("fm_predict");
}

void fm_train(const FmBatchArgs&, const float*, float*, float*, double*, double*) {
  not_built("fm_train");
}

void copy_keys_and_append(const uint64_t*, size_t, uint64_t, uint64_t*) {
  not_built("copy_keys_and_append");
}

void fill_identity_offsets(int64_t*, size_t) {
  not_built("fill_identity_offsets");
}

void generate_synthetic(const SyntheticArgs&, uint64_t, size_t, uint64_t*, int64_t*, float*, float*,
                        uint32_t*) {
  not_built("generate_synthetic");
}

DeviceInfo device_info(int) {
  not_built("device_info");
}

}  // namespace dynemb::train::gpu

// The one place that names an ops backend.
#include "dynemb/ops/ops_backend.hpp"

#include "backend_instances.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb {

const OpsBackend& ops_backend(Backend backend) {
  if (backend == Backend::kCpu) return ops::detail::cpu_ops();
#if defined(DYNEMB_WITH_CUDA)
  if (backend == Backend::kCuda) return ops::detail::cuda_ops();
#endif
  throw NotAvailable("ops: backend = " + to_string(backend) +
                     ", but this build has no such backend (build with nvcc found, "
                     "DYNEMB_CUDA=AUTO/ON)");
}

}  // namespace dynemb

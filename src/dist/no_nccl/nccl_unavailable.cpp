// Without NCCL in the build (no CUDA backend, or no nccl.h): the factory says so.
#include "dynemb/core/error.hpp"
#include "dynemb/dist/nccl_communicator.hpp"

namespace dynemb::dist {

bool nccl_available() {
  return false;
}

std::unique_ptr<Communicator> make_nccl_communicator(uint32_t, uint32_t, IdExchanger&, int) {
  throw NotAvailable(
      "make_nccl_communicator: this build has no NCCL (needs the CUDA backend and the CUDA "
      "toolkit's nccl.h / libnccl)");
}

}  // namespace dynemb::dist

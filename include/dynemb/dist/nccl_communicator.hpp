// The NCCL communicator: device buffers, collectives ordered on CUDA streams. Built when the
// CUDA backend is on and the CUDA toolkit's NCCL is found (nccl_available()); otherwise the
// factory throws NotAvailable. NVLink multicast (NVLS) is switched off before NCCL starts.
#pragma once

#include <cstdint>
#include <memory>

#include "dynemb/dist/bootstrap.hpp"
#include "dynemb/dist/communicator.hpp"

namespace dynemb::dist {

// True when this binary was built with NCCL.
bool nccl_available();

// Joins rank `rank` of `world_size` on CUDA device `device`: rank 0 creates NCCL's unique id,
// `exchanger` hands it to every rank (MPI, a shared file or torch.distributed's store), then
// every rank initializes its NCCL communicator. Sets NCCL_NVLS_ENABLE=0 first. Throws
// InvalidArgument for a bad rank / world / device, Error naming the NCCL call that failed.
std::unique_ptr<Communicator> make_nccl_communicator(uint32_t rank, uint32_t world_size,
                                                     IdExchanger& exchanger, int device = 0);

}  // namespace dynemb::dist

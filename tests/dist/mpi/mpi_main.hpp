// The MPI test binary's shared state: the world communicator and a seed every rank agrees on.
#pragma once

#include "dynemb/dist/communicator.hpp"

namespace dynemb::dist::testing {

// Every process of the mpirun job.
Communicator& world();

// NCCL over one GPU per rank (device rank % devices), bootstrapped through MPI and made on
// first call (a collective: every rank calls it at the same point); null on every rank when
// the build lacks NCCL or CUDA, or the machine has fewer GPUs than ranks.
Communicator* nccl_world();

// Rank 0's fresh seed (printed, replayable through DYNEMB_TEST_SEED) on every rank.
uint64_t shared_seed();

}  // namespace dynemb::dist::testing

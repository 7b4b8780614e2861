// The MPI test binary's shared state: the world communicator and a seed every rank agrees on.
#pragma once

#include "dynemb/dist/communicator.hpp"

namespace dynemb::dist::testing {

// Every process of the mpirun job.
Communicator& world();

// Rank 0's fresh seed (printed, replayable through DYNEMB_TEST_SEED) on every rank.
uint64_t shared_seed();

}  // namespace dynemb::dist::testing

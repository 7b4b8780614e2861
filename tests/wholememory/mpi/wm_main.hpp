// The multi-process wholememory tests' shared state: the world communicator and a seed every
// rank agrees on.
#pragma once

#include <cstdint>

#include "dynemb/dist/communicator.hpp"

namespace dynemb::wholememory::testing {

// Every process of the job.
dist::Communicator& world();

// Rank 0's fresh seed (printed, replayable through DYNEMB_TEST_SEED) on every rank.
uint64_t shared_seed();

}  // namespace dynemb::wholememory::testing

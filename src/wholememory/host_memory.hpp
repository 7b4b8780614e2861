// Host-location WholeMemory: each rank's part is a memfd (POSIX shared memory) handed to every
// rank over a Unix socket; continuous maps every part into one reserved range, chunked maps
// each part on its own, distributed keeps only the local part (anonymous memory).
#pragma once

#include <memory>

#include "dynemb/wholememory/memory.hpp"

namespace dynemb::wholememory {

// Collective; the options are checked by the caller.
std::unique_ptr<WholeMemory> create_host_memory(dist::Communicator& comm,
                                                const MemoryOptions& options);

// The page size host parts are made of.
uint64_t host_page_bytes();

}  // namespace dynemb::wholememory

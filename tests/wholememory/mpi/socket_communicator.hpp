// A host communicator over Unix sockets between processes of one machine, for running the
// multi-process tests where no mpirun is installed (the GPU machines): the test binary forks
// its ranks itself (wm_main.cpp).
#pragma once

#include <memory>
#include <string>

#include "dynemb/dist/communicator.hpp"

namespace dynemb::wholememory::testing {

// Rank `rank` of `world` ranks that all pass the same `job` name; connects a full mesh of
// abstract Unix stream sockets (blocks until every rank is there, up to a minute).
std::unique_ptr<dist::Communicator> make_socket_communicator(const std::string& job, uint32_t rank,
                                                             uint32_t world);

}  // namespace dynemb::wholememory::testing

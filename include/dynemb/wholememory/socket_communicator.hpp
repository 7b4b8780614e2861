// A host communicator over Unix sockets between the processes of one node: WholeMemory needs
// nothing more (its ranks share a node), and it runs where no MPI is installed (the tests and
// the benchmark fork their ranks and join them with it).
#pragma once

#include <memory>
#include <string>

#include "dynemb/dist/communicator.hpp"

namespace dynemb::wholememory {

// Rank `rank` of `world` ranks that all pass the same `job` name (unique on the node, e.g. the
// launcher's pid); connects a full mesh of abstract Unix stream sockets (blocks until every
// rank is there; Error after a minute). Buffers are host memory; collectives are synchronous.
std::unique_ptr<dist::Communicator> make_socket_communicator(const std::string& job, uint32_t rank,
                                                             uint32_t world);

}  // namespace dynemb::wholememory

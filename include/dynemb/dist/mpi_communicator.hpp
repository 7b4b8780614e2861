// The MPI communicator (host buffers; Open MPI under mpirun) and the MPI rendezvous of bytes.
// Built when CMake finds MPI (mpi_available()); otherwise the factories throw NotAvailable.
#pragma once

#include <memory>

#include "dynemb/dist/bootstrap.hpp"
#include "dynemb/dist/communicator.hpp"

namespace dynemb::dist {

// True when this binary was built with MPI.
bool mpi_available();

// A communicator over every process of the MPI job (a duplicate of MPI_COMM_WORLD, so its
// traffic never mixes with the caller's). Initializes MPI (MPI_THREAD_FUNNELED is enough) if
// the caller has not; MPI is then finalized at process exit. Buffers are host memory.
std::unique_ptr<Communicator> make_mpi_communicator();

// A communicator over the ranks of `parent` (an MPI communicator) that pass the same `color`,
// ordered by their parent rank; nullptr on ranks that pass a negative color. Every rank of
// `parent` must call it.
std::unique_ptr<Communicator> split_mpi_communicator(Communicator& parent, int color);

// Shares rank 0's bytes over MPI (a broadcast on a duplicate of MPI_COMM_WORLD): for NCCL
// under mpirun.
std::unique_ptr<IdExchanger> make_mpi_id_exchanger();

}  // namespace dynemb::dist

// Without MPI in the build: the MPI factories say so.
#include "dynemb/core/error.hpp"
#include "dynemb/dist/mpi_communicator.hpp"

namespace dynemb::dist {

bool mpi_available() {
  return false;
}

std::unique_ptr<Communicator> make_mpi_communicator() {
  throw NotAvailable("make_mpi_communicator: this build has no MPI (install libopenmpi-dev)");
}

std::unique_ptr<Communicator> split_mpi_communicator(Communicator&, int) {
  throw NotAvailable("split_mpi_communicator: this build has no MPI (install libopenmpi-dev)");
}

std::unique_ptr<IdExchanger> make_mpi_id_exchanger() {
  throw NotAvailable("make_mpi_id_exchanger: this build has no MPI (install libopenmpi-dev)");
}

}  // namespace dynemb::dist

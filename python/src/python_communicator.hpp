// A dist::Communicator whose collectives are a Python object's methods: how the Python front end
// runs sharded tables on the CPU under torchrun, over the caller's torch.distributed process
// group (gloo), without MPI. Host buffers only; every collective moves bytes.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>

#include "dynemb/dist/communicator.hpp"

namespace dynemb::python {

namespace py = pybind11;

// `collectives` must have these methods, each a collective over the same group of `world_size`
// ranks, called in the same order on every rank; buffers arrive as DLPack capsules of uint8
// over dynemb's host memory (valid only during the call), counts as lists of byte counts:
//   all_to_all(send, send_counts, recv, recv_counts)  send's pieces in rank order, recv likewise
//   all_gather(send, recv)                            recv = every rank's send, rank-major
//   broadcast(buffer, root)                           buffer = root's buffer
//   barrier()
// An exception raised by a method becomes dynemb.Error naming the collective (after a failed
// collective the group is unusable, as torch.distributed's is). The all-reduce is an all-gather
// summed on each rank in the element type (the part uses it for a few control words).
std::shared_ptr<dist::Communicator> make_python_communicator(uint32_t rank, uint32_t world_size,
                                                             py::object collectives);

}  // namespace dynemb::python

// A tensor over a WholeMemory (1-D or 2-D, the first dimension partitioned: a row of the tensor
// is an entry of the memory), and gather / scatter of its rows by index (docs/wholememory.md).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dynemb/core/options.hpp"
#include "dynemb/dist/communicator.hpp"
#include "dynemb/wholememory/memory.hpp"

namespace dynemb::wholememory {

// What to create: shape {rows} or {rows, cols} of `dtype`.
struct TensorOptions {
  std::vector<uint64_t> shape;
  dist::DataType dtype = dist::DataType::kFloat32;
  MemoryType type = MemoryType::kContinuous;
  MemoryLocation location = MemoryLocation::kHost;
  int device = -1;  // as MemoryOptions::device
  bool register_host_with_cuda = true;
};

// A tensor owning its WholeMemory. Creating and destroying it are collective.
class WholeTensor {
 public:
  // Creates the memory for `options` on every rank of `comm` (InvalidArgument on a bad shape).
  WholeTensor(dist::Communicator& comm, const TensorOptions& options);

  WholeMemory& memory() const { return *memory_; }
  dist::DataType dtype() const { return dtype_; }
  const std::vector<uint64_t>& shape() const { return shape_; }
  uint64_t rows() const { return shape_[0]; }
  // Elements per row (1 for a 1-D tensor).
  uint64_t cols() const { return shape_.size() == 2 ? shape_[1] : 1; }
  uint64_t element_bytes() const { return dist::data_type_bytes(dtype_); }
  uint64_t row_bytes() const { return cols() * element_bytes(); }

 private:
  std::unique_ptr<WholeMemory> memory_;
  dist::DataType dtype_;
  std::vector<uint64_t> shape_;
};

// Columns [first, first + count) of every row (count 0: to the end of the row).
struct Columns {
  uint64_t first = 0;
  uint64_t count = 0;
};

// Where the indices and the dense rows are, and what runs the copy: kCpu = host memory, host
// threads (host location only); kCuda = memory of the tensor's device, a kernel on `stream`
// (the tensor must be cuda_accessible()).
using Executor = Backend;

// out row i (columns.count elements, dense) = tensor row indices[i], i < n. Continuous and
// chunked: local (each rank on its own). Distributed: collective (every rank calls it, with its
// own n), rows travel through the communicator. Throws InvalidArgument, before anything is
// copied, when an index is outside [0, rows) (distributed: on every rank).
void gather(const WholeTensor& tensor, const int64_t* indices, size_t n, void* out,
            Executor executor, StreamHandle stream = nullptr, Columns columns = {});

// tensor row indices[i] = in row i. Where an index repeats, one of its rows is written.
// Collective for distributed, as gather.
void scatter(WholeTensor& tensor, const void* in, const int64_t* indices, size_t n,
             Executor executor, StreamHandle stream = nullptr, Columns columns = {});

}  // namespace dynemb::wholememory

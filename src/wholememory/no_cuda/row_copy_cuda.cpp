// Without the CUDA backend: the device copies say so.
#include "dynemb/core/error.hpp"
#include "row_copy.hpp"

namespace dynemb::wholememory {

void copy_rows_cuda(const RowSpace&, const int64_t*, size_t, char*, uint64_t, bool, int,
                    StreamHandle) {
  throw NotAvailable(
      "wholememory: CUDA gather / scatter needs the CUDA backend (this build has none)");
}

uint64_t count_bad_indices_cuda(const int64_t*, size_t, uint64_t, int, StreamHandle) {
  throw NotAvailable(
      "wholememory: CUDA gather / scatter needs the CUDA backend (this build has none)");
}

}  // namespace dynemb::wholememory

// main() of the MPI tests: every rank runs every test in the same order (their collectives
// must match); the binary fails when any rank failed.
#include <gtest/gtest.h>

#include <iostream>

#include "core/test_random.hpp"
#include "dist/mpi/mpi_main.hpp"
#include "dynemb/dist/bootstrap.hpp"
#include "dynemb/dist/mpi_communicator.hpp"
#include "dynemb/dist/nccl_communicator.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::dist::testing {
std::unique_ptr<Communicator> g_world;  // set by main()
std::unique_ptr<Communicator> g_nccl;   // made by the first nccl_world()
bool g_nccl_tried = false;
namespace detail_main {

// On ranks other than 0: each failure, prefixed by the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(uint32_t rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::cerr << "rank " << rank_ << ": " << (r.file_name() ? r.file_name() : "?") << ":"
              << r.line_number() << ": Failure\n"
              << r.message() << std::endl;
  }

 private:
  uint32_t rank_;
};
}  // namespace detail_main
using detail_main::FailurePrinter;

Communicator& world() {
  return *g_world;
}

Communicator* nccl_world() {
  if (!g_nccl_tried) {
    g_nccl_tried = true;
    const uint32_t world_size = world().world_size();
    const int devices = cuda_device_count();
    if (nccl_available() && devices >= static_cast<int>(world_size)) {
      auto exchanger = make_mpi_id_exchanger();
      const int device = static_cast<int>(world().rank()) % devices;
      g_nccl = make_nccl_communicator(world().rank(), world_size, *exchanger, device);
    }
  }
  return g_nccl.get();
}

uint64_t shared_seed() {
  const uint64_t mine = dynemb::testing::test_seed();
  const std::vector<uint64_t> all = all_gather_values<uint64_t>(world(), {&mine, 1});
  if (world().rank() == 0) std::cout << "[   SEED   ] shared by every rank: " << all[0] << "\n";
  return all[0];
}

}  // namespace dynemb::dist::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  namespace dt = dynemb::dist::testing;
  dt::g_world = dynemb::dist::make_mpi_communicator();
  const uint32_t rank = dt::g_world->rank();
  if (rank != 0) {
    // Other ranks report only their failures (gtest's full printer stays on rank 0).
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new dt::FailurePrinter(rank));
  }
  const int rc = RUN_ALL_TESTS();
  const uint64_t failed = rc != 0 ? 1 : 0;
  const uint64_t failed_ranks =
      dynemb::dist::all_reduce_values<uint64_t>(*dt::g_world, {&failed, 1})[0];
  if (failed != 0) std::cerr << "rank " << rank << ": tests FAILED\n";
  if (rank == 0) {
    std::cout << "dist MPI tests: " << dt::g_world->world_size() << " ranks, " << failed_ranks
              << " failed\n";
  }
  dt::g_nccl.reset();
  dt::g_world.reset();
  return failed_ranks == 0 ? 0 : 1;
}

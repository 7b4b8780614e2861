// WholeMemory over an NCCL communicator (device buffers), one GPU per rank: the distributed
// path's rows then travel in device memory. Runs where the machine has a GPU per rank and NCCL
// is built in; skips (on every rank alike) elsewhere.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <numeric>
#include <random>

#include "dynemb/dist/nccl_communicator.hpp"
#include "wholememory/mpi/wm_main.hpp"
#include "wholememory/wm_test_support.hpp"

namespace dynemb::wholememory::testing {
namespace {

class WholeMemoryOverNccl : public ::testing::TestWithParam<MemoryType> {};

TEST_P(WholeMemoryOverNccl, GatherScatterAgainstReference) {
  dist::Communicator& comm = world();
  if (!dist::nccl_available() || cuda_device_count() < static_cast<int>(comm.world_size())) {
    GTEST_SKIP() << "needs NCCL and a GPU per rank";
  }
  const uint64_t seed = shared_seed();
  // NCCL's id through a file fresh to this test.
  std::string path;
  if (comm.rank() == 0) {
    path = (std::filesystem::temp_directory_path() /
            ("dynemb-wm-nccl-" + std::to_string(::getpid()) + "-" + std::to_string(seed)))
               .string();
  }
  path = dist::broadcast_string(comm, path);
  auto exchanger = dist::make_file_id_exchanger(path);
  const int device = static_cast<int>(comm.rank());
  auto nccl = dist::make_nccl_communicator(comm.rank(), comm.world_size(), *exchanger, device);
  {
    TensorOptions o;
    const uint64_t cols = 16;
    const uint64_t rows = comm.world_size() * ((4ull << 20) / (cols * sizeof(float)));
    o.shape = {rows, cols};
    o.type = GetParam();
    o.location = MemoryLocation::kDevice;
    o.device = device;
    WholeTensor t(*nccl, o);
    std::mt19937_64 rng(seed + comm.rank());
    std::vector<int64_t> mine;
    for (uint64_t i = comm.rank(); i < rows; i += comm.world_size())
      mine.push_back(static_cast<int64_t>(i));
    std::shuffle(mine.begin(), mine.end(), rng);
    scatter_host(t, reference_rows(seed, mine, 0, cols), mine, Backend::kCuda);
    nccl->barrier();
    std::vector<int64_t> ask(50000);
    for (auto& i : ask) i = static_cast<int64_t>(rng() % rows);
    EXPECT_EQ(gather_host(t, ask, Backend::kCuda), reference_rows(seed, ask, 0, cols));
    nccl->barrier();
  }
  nccl.reset();
  comm.barrier();
  if (comm.rank() == 0) {
    for (const auto& entry :
         std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
      if (entry.path().string().rfind(path, 0) == 0) std::filesystem::remove(entry.path());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, WholeMemoryOverNccl,
                         ::testing::Values(MemoryType::kContinuous, MemoryType::kChunked,
                                           MemoryType::kDistributed),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace dynemb::wholememory::testing

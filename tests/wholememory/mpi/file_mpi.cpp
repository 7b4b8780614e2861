// Files in and out of every memory type and location at 2 and 3 ranks: the bytes written are
// the rows in order, a list of files (cut anywhere) loads as their concatenation, a wrong size
// is refused on every rank with nothing read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "dynemb/core/error.hpp"
#include "dynemb/wholememory/file_io.hpp"
#include "wholememory/mpi/wm_main.hpp"
#include "wholememory/wm_test_support.hpp"

namespace dynemb::wholememory::testing {
namespace {

struct Kind {
  MemoryType type;
  MemoryLocation location;
};

std::string kind_name(const ::testing::TestParamInfo<Kind>& info) {
  return to_string(info.param.type) + "_" + to_string(info.param.location);
}

// A directory fresh to the test, made by rank 0, removed at the end.
class SharedDir {
 public:
  explicit SharedDir(dist::Communicator& comm) : comm_(comm) {
    std::string made;
    if (comm.rank() == 0) {
      char pattern[] = "/tmp/dynemb-wm-files-XXXXXX";
      made = ::mkdtemp(pattern) != nullptr ? pattern : "";
    }
    path_ = dist::broadcast_string(comm, made);
  }
  ~SharedDir() {
    comm_.barrier();
    if (comm_.rank() == 0 && !path_.empty()) std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  dist::Communicator& comm_;
  std::string path_;
};

class WholeFilesMpi : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (cuda_missing(GetParam().location, Backend::kCpu)) GTEST_SKIP() << "no CUDA device";
  }
  TensorOptions options(uint64_t rows, uint64_t cols, MemoryType type) const {
    TensorOptions o;
    o.shape = {rows, cols};
    o.type = type;
    o.location = GetParam().location;
    return o;
  }
  Executor executor() const { return default_executor(GetParam().location); }
};

std::vector<int64_t> all_rows(uint64_t rows) {
  std::vector<int64_t> all(rows);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

TEST_P(WholeFilesMpi, LoadListStoreAndReload) {
  dist::Communicator& comm = world();
  const uint64_t seed = shared_seed();
  std::mt19937_64 shared(seed);
  const uint64_t rows = std::uniform_int_distribution<uint64_t>(comm.world_size(), 5000)(shared);
  const uint64_t cols = std::uniform_int_distribution<uint64_t>(1, 24)(shared);
  SharedDir dir(comm);
  ASSERT_FALSE(dir.path().empty());
  const std::vector<float> reference = reference_rows(seed, all_rows(rows), 0, cols);

  // Rank 0 writes the reference as 1 to 4 files cut at random byte offsets (not row bounds).
  const size_t pieces = std::uniform_int_distribution<size_t>(1, 4)(shared);
  std::vector<uint64_t> cuts = {0, reference.size() * sizeof(float)};
  for (size_t i = 1; i < pieces; ++i)
    cuts.push_back(std::uniform_int_distribution<uint64_t>(0, cuts[1])(shared));
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::string> files;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    files.push_back(dir.path() + "/input_" + std::to_string(i) + ".bin");
    if (comm.rank() == 0) {
      std::ofstream(files.back(), std::ios::binary)
          .write(reinterpret_cast<const char*>(reference.data()) + cuts[i],
                 static_cast<std::streamsize>(cuts[i + 1] - cuts[i]));
    }
  }
  comm.barrier();

  WholeTensor t(comm, options(rows, cols, GetParam().type));
  load_from_files(t.memory(), files);
  EXPECT_EQ(gather_host(t, all_rows(rows), executor()), reference);

  // One file: the rows in order, byte for byte.
  const std::string one = dir.path() + "/whole.bin";
  store_to_file(t.memory(), one);
  if (comm.rank() == 0) {
    std::vector<float> read(reference.size());
    std::ifstream in(one, std::ios::binary);
    in.read(reinterpret_cast<char*>(read.data()),
            static_cast<std::streamsize>(read.size() * sizeof(float)));
    EXPECT_EQ(read, reference);
    EXPECT_EQ(std::filesystem::file_size(one), reference.size() * sizeof(float));
  }

  // A part per rank, loaded back into another type.
  const std::vector<std::string> parts = store_parts(t.memory(), dir.path() + "/parts");
  ASSERT_EQ(parts.size(), comm.world_size());
  for (MemoryType other :
       {MemoryType::kContinuous, MemoryType::kChunked, MemoryType::kDistributed}) {
    WholeTensor u(comm, options(rows, cols, other));
    load_from_files(u.memory(),
                    other == MemoryType::kChunked ? std::vector<std::string>{one} : parts);
    EXPECT_EQ(gather_host(u, all_rows(rows), executor()), reference) << to_string(other);
  }
  comm.barrier();
}

TEST_P(WholeFilesMpi, WrongSizeOrMissingFileReadsNothing) {
  dist::Communicator& comm = world();
  const uint64_t seed = shared_seed();
  const uint64_t rows = 64 * comm.world_size() + seed % 100;
  SharedDir dir(comm);
  WholeTensor t(comm, options(rows, 2, GetParam().type));
  std::vector<float> zeros(rows * 2, 0.0f);
  scatter_host(t, comm.rank() == 0 ? zeros : std::vector<float>{},
               comm.rank() == 0 ? all_rows(rows) : std::vector<int64_t>{}, executor());
  comm.barrier();
  const std::string short_file = dir.path() + "/short.bin";
  if (comm.rank() == 0) {
    std::vector<float> ones(rows * 2 - 1, 1.0f);  // one float short
    std::ofstream(short_file, std::ios::binary)
        .write(reinterpret_cast<const char*>(ones.data()),
               static_cast<std::streamsize>(ones.size() * sizeof(float)));
  }
  comm.barrier();
  EXPECT_THROW(load_from_files(t.memory(), {short_file}), InvalidArgument);
  EXPECT_THROW(load_from_files(t.memory(), {short_file, dir.path() + "/missing.bin"}),
               InvalidArgument);
  EXPECT_EQ(gather_host(t, all_rows(rows), executor()), zeros);
  comm.barrier();
}

INSTANTIATE_TEST_SUITE_P(Kinds, WholeFilesMpi,
                         ::testing::Values(Kind{MemoryType::kContinuous, MemoryLocation::kHost},
                                           Kind{MemoryType::kChunked, MemoryLocation::kHost},
                                           Kind{MemoryType::kDistributed, MemoryLocation::kHost},
                                           Kind{MemoryType::kContinuous, MemoryLocation::kDevice},
                                           Kind{MemoryType::kChunked, MemoryLocation::kDevice},
                                           Kind{MemoryType::kDistributed, MemoryLocation::kDevice}),
                         kind_name);

}  // namespace
}  // namespace dynemb::wholememory::testing

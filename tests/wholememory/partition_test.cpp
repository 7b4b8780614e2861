// The partition of a WholeMemory, the file layout (segments of a list of files), and every
// memory type on one rank (the local communicator), against plain host references.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/wholememory/file_io.hpp"
#include "dynemb/wholememory/partition.hpp"
#include "wholememory/wm_test_support.hpp"

namespace dynemb::wholememory {
namespace {

using dynemb::testing::TestRng;
using testing::reference_rows;

TEST(WholeMemoryPartition, EvenSplitRoundedToGranules) {
  const Partition p = make_partition(1000 * 12, 12, 3);
  EXPECT_EQ(p.rows, 1000u);
  EXPECT_EQ(p.rows_per_rank, 334u);
  EXPECT_EQ(p.rows_of(0), 334u);
  EXPECT_EQ(p.rows_of(2), 332u);
  EXPECT_EQ(p.first_row(2), 668u);
  EXPECT_EQ(p.offset_of(1), 334u * 12);
  EXPECT_EQ(p.owner(667), 1u);
  EXPECT_EQ(p.owner(668), 2u);
  // Parts of whole 4096-byte pages: 12-byte rows come in granules of 1024 rows.
  const Partition paged = make_partition(1000 * 12, 12, 3, 4096);
  EXPECT_EQ(paged.rows_per_rank, 1024u);
  EXPECT_EQ(paged.rows_of(0), 1000u);
  EXPECT_EQ(paged.rows_of(1), 0u);
  EXPECT_EQ(paged.first_row(2), 1000u);
}

TEST(WholeMemoryPartition, RandomShapesCoverEveryRowOnce) {
  TestRng rng;
  for (int trial = 0; trial < 500; ++trial) {
    const uint64_t entry = rng.uniform(1, 300);
    const uint64_t rows = rng.uniform(1, 100000);
    const uint32_t world = static_cast<uint32_t>(rng.uniform(1, 9));
    const uint64_t granularity = rng.chance(0.5) ? 1 : (1ull << rng.uniform(0, 21));
    const Partition p = make_partition(rows * entry, entry, world, granularity);
    uint64_t next = 0;
    for (uint32_t r = 0; r < world; ++r) {
      ASSERT_EQ(p.first_row(r), next);
      if (r + 1 < world && p.rows_of(r + 1) > 0) ASSERT_EQ(p.bytes_of(r) % granularity, 0u);
      for (uint64_t row : {p.first_row(r), p.first_row(r) + p.rows_of(r) - 1}) {
        if (p.rows_of(r) > 0) ASSERT_EQ(p.owner(row), r);
      }
      next += p.rows_of(r);
    }
    ASSERT_EQ(next, rows);
  }
}

TEST(WholeMemoryPartition, BadSizesNameArgumentValueAndLimit) {
  try {
    make_partition(1001, 12, 2);
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("size = 1001"), std::string::npos) << m;
    EXPECT_NE(m.find("multiple of entry_bytes = 12"), std::string::npos) << m;
  }
  EXPECT_THROW(make_partition(0, 4, 2), InvalidArgument);
  EXPECT_THROW(make_partition(8, 0, 2), InvalidArgument);
  EXPECT_THROW(make_partition(8, 4, 0), InvalidArgument);
  EXPECT_THROW(parse_memory_type("striped"), InvalidArgument);
  EXPECT_EQ(parse_memory_type("chunked"), MemoryType::kChunked);
  EXPECT_EQ(parse_memory_location("device"), MemoryLocation::kDevice);
}

TEST(WholeMemoryFiles, SegmentsOfAListOfFiles) {
  const std::vector<uint64_t> sizes = {10, 0, 5, 20};
  auto s = segments_of(sizes, 8, 10);  // bytes 8..17: file 0 [8,10), file 2 [0,5), file 3 [0,3)
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].file, 0u);
  EXPECT_EQ(s[0].offset, 8u);
  EXPECT_EQ(s[0].length, 2u);
  EXPECT_EQ(s[1].file, 2u);
  EXPECT_EQ(s[1].length, 5u);
  EXPECT_EQ(s[2].file, 3u);
  EXPECT_EQ(s[2].offset, 0u);
  EXPECT_EQ(s[2].length, 3u);
  EXPECT_TRUE(segments_of(sizes, 35, 0).empty());
  EXPECT_THROW(segments_of(sizes, 30, 6), InvalidArgument);
  // Random lists: the segments tile the range in order.
  TestRng rng;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint64_t> random_sizes(rng.uniform(1, 6));
    uint64_t total = 0;
    for (auto& v : random_sizes) total += (v = rng.uniform(0, 50));
    if (total == 0) continue;
    const uint64_t offset = rng.uniform(0, total - 1);
    const uint64_t length = rng.uniform(0, total - offset);
    uint64_t covered = 0;
    for (const FileSegment& seg : segments_of(random_sizes, offset, length)) {
      uint64_t start = 0;
      for (size_t f = 0; f < seg.file; ++f) start += random_sizes[f];
      ASSERT_EQ(start + seg.offset, offset + covered);
      ASSERT_LE(seg.offset + seg.length, random_sizes[seg.file]);
      covered += seg.length;
    }
    ASSERT_EQ(covered, length);
  }
}

class WholeMemoryOneRank : public ::testing::TestWithParam<MemoryType> {};

TEST_P(WholeMemoryOneRank, GatherScatterAndFilesAgainstReference) {
  TestRng rng;
  auto comm = dist::make_local_communicator(Backend::kCpu);
  const uint64_t rows = rng.uniform(1, 3000);
  const uint64_t cols = rng.uniform(1, 17);
  TensorOptions o;
  o.shape = {rows, cols};
  o.type = GetParam();
  o.register_host_with_cuda = false;
  WholeTensor t(*comm, o);
  EXPECT_EQ(t.memory().partition().rows_of(0), rows);
  std::vector<int64_t> all(rows);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng.engine());
  testing::scatter_host(t, reference_rows(rng.seed(), all, 0, cols), all, Backend::kCpu);
  std::vector<int64_t> ask(rng.uniform(0, 5000));
  for (auto& i : ask) i = static_cast<int64_t>(rng.uniform(0, rows - 1));
  EXPECT_EQ(testing::gather_host(t, ask, Backend::kCpu), reference_rows(rng.seed(), ask, 0, cols));
  ask.push_back(static_cast<int64_t>(rows));
  EXPECT_THROW(testing::gather_host(t, ask, Backend::kCpu), InvalidArgument);
  EXPECT_THROW(testing::gather_host(t, {0}, Backend::kCpu, {cols, 1}), InvalidArgument);
  EXPECT_THROW(testing::gather_host(t, {0}, Backend::kCuda), Error);  // host memory, unregistered

  // Store, then load into a fresh tensor.
  const std::string path = std::filesystem::temp_directory_path() /
                           ("dynemb-wm-one-" + std::to_string(::getpid()) + ".bin");
  store_to_file(t.memory(), path);
  EXPECT_EQ(std::filesystem::file_size(path), rows * cols * sizeof(float));
  WholeTensor u(*comm, o);
  load_from_files(u.memory(), {path});
  std::sort(all.begin(), all.end());
  EXPECT_EQ(testing::gather_host(u, all, Backend::kCpu), reference_rows(rng.seed(), all, 0, cols));
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Types, WholeMemoryOneRank,
                         ::testing::Values(MemoryType::kContinuous, MemoryType::kChunked,
                                           MemoryType::kDistributed),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace dynemb::wholememory

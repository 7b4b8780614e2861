// The RocksDB store's own promises: a directory that is not ours is refused, a corrupt one is a
// clear error, rows survive reopening, and what a caching table flushed survives SIGKILL.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "dynemb/storage/cached_table.hpp"
#include "storage/storage_kinds.hpp"

namespace dynemb::testing {
namespace {

using storage::RocksDbStorage;
using storage::RocksDbStorageOptions;
using storage::StorageError;

// Skips, saying why, in a build without RocksDB.
class RocksDbStore : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef DYNEMB_WITH_ROCKSDB
    GTEST_SKIP() << "built without RocksDB (librocksdb-dev)";
#endif
  }
};
using RocksDbKillChild = RocksDbStore;

RocksDbStorageOptions at(const std::filesystem::path& dir, uint32_t dim) {
  RocksDbStorageOptions o;
  o.directory = dir;
  o.row_dim = dim;
  return o;
}

// The message of what `f` throws as StorageError ("" if it throws nothing).
template <class F>
std::string storage_error_of(F&& f) {
  try {
    f();
  } catch (const StorageError& e) {
    return e.what();
  }
  return "";
}

TEST_F(RocksDbStore, RefusesADirectoryThatIsNotOurs) {
  StorageTempDir dir;
  std::ofstream(dir.path() / "notes.txt") << "someone else's files\n";
  const std::string why = storage_error_of([&] { RocksDbStorage s(at(dir.path(), 4)); });
  EXPECT_NE(why.find("not ours"), std::string::npos) << why;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "notes.txt"));  // left alone
}

TEST_F(RocksDbStore, RefusesADatabaseWithoutOurMarker) {
  if (std::system("command -v ldb > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "ldb (rocksdb-tools) missing";
  StorageTempDir dir;
  const auto db = dir.path() / "other";
  ASSERT_EQ(std::system(("ldb --db=" + db.string() +
                         " --create_if_missing put somekey somevalue > /dev/null")
                            .c_str()),
            0);
  const std::string why = storage_error_of([&] { RocksDbStorage s(at(db, 4)); });
  EXPECT_NE(why.find("marker"), std::string::npos) << why;
}

TEST_F(RocksDbStore, RefusesAnotherRowWidthAndKeepsRowsAcrossReopen) {
  StorageTempDir dir;
  const uint64_t keys[3] = {1, 1ull << 40, ~0ull - 100};
  const float rows[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const uint64_t scores[3] = {7, 8, 9};
  {
    RocksDbStorage s(at(dir.path(), 4));
    s.insert_or_assign(3, keys, rows, scores);
  }
  const std::string why = storage_error_of([&] { RocksDbStorage s(at(dir.path(), 8)); });
  EXPECT_NE(why.find("row_dim=4"), std::string::npos) << why;
  RocksDbStorage s(at(dir.path(), 4));
  float out[12] = {};
  uint64_t sc[3] = {};
  bool found[3] = {};
  s.find(3, keys, out, sc, found);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(found[i]);
    EXPECT_EQ(sc[i], scores[i]);
  }
  for (int i = 0; i < 12; ++i) EXPECT_EQ(out[i], rows[i]);
  EXPECT_EQ(s.size(), 3u);
}

TEST_F(RocksDbStore, CorruptDirectoryIsAClearError) {
  StorageTempDir dir;
  {
    RocksDbStorage s(at(dir.path(), 2));
    std::vector<uint64_t> keys(1000), scores(1000, 1);
    std::vector<float> rows(2000, 1.0f);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
    s.insert_or_assign(keys.size(), keys.data(), rows.data(), scores.data());
  }
  // Garble every file of the database (manifest, WAL, tables).
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (!entry.is_regular_file() || entry.path().filename() == "LOCK") continue;
    std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << "garbage garbage garbage";
  }
  const std::string why = storage_error_of([&] { RocksDbStorage s(at(dir.path(), 2)); });
  EXPECT_NE(why.find(dir.path().string()), std::string::npos) << why;
}

// --- SIGKILL: a child process streams rows through a caching table over RocksDB, flushing
// after each batch and then telling the parent; the parent kills it mid-stream and reopens. ----

constexpr uint32_t kDim = 3;
constexpr size_t kBatch = 500;

float row_value(uint64_t key, uint32_t c) {
  return static_cast<float>(key % 100000) * 0.5f + static_cast<float>(c);
}

// The child's body (runs only when started by the parent below).
TEST_F(RocksDbKillChild, StreamsUntilKilled) {
  const char* dir = std::getenv("DYNEMB_STORAGE_KILL_DIR");
  const char* fd = std::getenv("DYNEMB_STORAGE_KILL_FD");
  if (dir == nullptr || fd == nullptr)
    GTEST_SKIP() << "runs only as the child of RocksDbStore.WhatWasFlushedSurvivesSigkill";
  const int out = std::atoi(fd);
  TableOptions o;
  o.dim = kDim;
  o.init_capacity = o.max_capacity = 1024;
  o.max_load_factor = 1.0;
  o.score_policy = ScorePolicy::kStep;
  storage::CachedTable<uint64_t> t(Backend::kCpu, o,
                                   std::make_shared<RocksDbStorage>(at(dir, kDim)));
  std::vector<uint64_t> keys(kBatch);
  std::vector<float> rows(kBatch * kDim);
  for (uint32_t b = 0;; ++b) {
    for (size_t i = 0; i < kBatch; ++i) {
      keys[i] = b * kBatch + i;
      for (uint32_t c = 0; c < kDim; ++c) rows[i * kDim + c] = row_value(keys[i], c);
    }
    t.insert_or_assign(kBatch, keys.data(), rows.data());
    t.advance_step();
    t.flush();
    if (::write(out, &b, sizeof b) != sizeof b) std::_Exit(3);
  }
}

TEST_F(RocksDbStore, WhatWasFlushedSurvivesSigkill) {
  StorageTempDir dir;
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    ::setenv("DYNEMB_STORAGE_KILL_DIR", dir.path().c_str(), 1);
    ::setenv("DYNEMB_STORAGE_KILL_FD", std::to_string(pipe_fds[1]).c_str(), 1);
    const int null_fd = ::open("/dev/null", O_WRONLY);
    ::dup2(null_fd, 1);
    ::execl("/proc/self/exe", "dynemb_tests", "--gtest_filter=RocksDbKillChild.StreamsUntilKilled",
            static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::close(pipe_fds[1]);
  uint32_t acked = 0, got = 0;
  bool any = false;
  while (got < 30) {  // let it flush 30 batches, then kill it mid-stream
    uint32_t b = 0;
    if (::read(pipe_fds[0], &b, sizeof b) != sizeof b) break;
    acked = b;
    any = true;
    ++got;
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(pipe_fds[0]);
  ASSERT_TRUE(any) << "the child never flushed a batch";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  RocksDbStorage s(at(dir.path(), kDim));
  const size_t n = (acked + 1) * kBatch;
  std::vector<uint64_t> keys(n), scores(n);
  std::vector<float> rows(n * kDim);
  std::unique_ptr<bool[]> found(new bool[n]);
  for (size_t i = 0; i < n; ++i) keys[i] = i;
  s.find(n, keys.data(), rows.data(), scores.data(), found.get());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(found[i]) << "key " << i << " of the " << acked + 1 << " flushed batches is gone";
    for (uint32_t c = 0; c < kDim; ++c) ASSERT_EQ(rows[i * kDim + c], row_value(i, c));
  }
  EXPECT_GE(s.size(), n);
}

}  // namespace
}  // namespace dynemb::testing

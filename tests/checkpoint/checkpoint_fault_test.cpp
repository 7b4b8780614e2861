// Faults: a dump killed at random points never damages the previous checkpoint; truncated,
// bit-flipped, missing and mismatched files each give a clear error and leave the tables
// unchanged.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "checkpoint/checkpoint_test_util.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/embedding/embedding.hpp"

namespace dynemb::testing {
namespace {

using checkpoint::CheckpointError;
using checkpoint::LoadOptions;
using checkpoint::named;
namespace fs = std::filesystem;

constexpr uint32_t kDim = 8;

// A table whose contents are a function of `seed` (for parent and child of a fork).
std::unique_ptr<Embedding<int64_t>> seeded_embedding(uint64_t seed, size_t rows) {
  EmbeddingOptions eo;
  eo.dim = kDim;
  eo.table = small_table_options(0, ScorePolicy::kStep, 1u << 18);
  eo.optimizer.kind = OptimizerKind::kAdaGrad;
  auto e = std::make_unique<Embedding<int64_t>>(Backend::kCpu, eo);
  std::mt19937_64 gen(seed);
  std::vector<int64_t> keys(rows);
  std::vector<float> values(rows * e->row_dim());
  for (auto& k : keys) k = static_cast<int64_t>(gen() >> 2);
  for (auto& v : values) v = static_cast<float>(gen() % 1000) * 0.001f;
  e->table().insert_or_assign(rows, keys.data(), values.data());
  e->table().set_score(seed % 1000 + 1);
  return e;
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Every data file of a checkpoint directory.
std::vector<fs::path> data_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != "manifest.json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class CheckpointFaults : public ::testing::Test {
 protected:
  // A good two-rank checkpoint of two tables, and a target filled with other contents.
  void SetUp() override {
    source_ = seeded_embedding(rng_.next(), 1500);
    other_ = make_table<int64_t>(Backend::kCpu, small_table_options(3, ScorePolicy::kLfu));
    fill_random(*other_, rng_, 400, true);
    auto half = seeded_embedding(rng_.next(), 700);
    checkpoint::dump_sharded(dir_ / "good", {{named("emb", *source_), named("plain", *other_)},
                                             {named("emb", *half), named("plain", *other_)}});
    target_ = seeded_embedding(rng_.next(), 300);
    target_plain_ = make_table<int64_t>(Backend::kCpu, small_table_options(3, ScorePolicy::kLfu));
    fill_random(*target_plain_, rng_, 20, true);
    before_ = snapshot(target_->table());
    before_plain_ = snapshot(*target_plain_);
  }

  // A fresh copy of the good checkpoint to damage.
  fs::path copy_good(const std::string& name) {
    const fs::path p = dir_ / name;
    fs::copy(dir_ / "good", p, fs::copy_options::recursive);
    return p;
  }

  // Loading `path` fails with a message holding `expected`, and no table changed.
  // `damaged`: the file that was damaged (a rank of the same world size reads only its own
  // shard's files, so that rank is the one that loads), or empty.
  void expect_clean_failure(const fs::path& path, const std::string& expected,
                            checkpoint::VerifyMode mode = checkpoint::VerifyMode::kBeforeLoading,
                            const fs::path& damaged = {}) {
    LoadOptions o;
    o.verify = mode;
    o.world_size = static_cast<uint32_t>(rng_.uniform(1, 3));
    o.rank = static_cast<uint32_t>(rng_.uniform(0, o.world_size - 1));
    if (o.world_size == 2 && !damaged.empty()) {
      o.rank = damaged.filename().string().find("rank-00001") == 0 ? 1 : 0;
    }
    try {
      checkpoint::load(path, {named("emb", *target_), named("plain", *target_plain_)}, o);
      ADD_FAILURE() << "load of a damaged checkpoint succeeded (expected: " << expected << ")";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
          << "message: " << e.what() << "\nexpected to contain: " << expected;
    }
    EXPECT_EQ(snapshot(target_->table()), before_);
    EXPECT_EQ(snapshot(*target_plain_), before_plain_);
  }

  fs::path random_file(const fs::path& ckpt) {
    const auto files = data_files(ckpt);
    return files[rng_.uniform(0, files.size() - 1)];
  }

  TestRng rng_;
  TempDir dir_;
  std::unique_ptr<Embedding<int64_t>> source_, target_;
  std::unique_ptr<Table<int64_t>> other_, target_plain_;
  Snapshot<int64_t> before_, before_plain_;
};

TEST_F(CheckpointFaults, GoodCheckpointLoads) {
  const auto r = checkpoint::inspect(dir_ / "good");
  EXPECT_TRUE(r.verified) << r.problem;
  LoadOptions o;
  o.world_size = 2;
  checkpoint::load(dir_ / "good", {named("emb", *target_), named("plain", *target_plain_)}, o);
}

TEST_F(CheckpointFaults, TruncatedFile) {
  const fs::path ckpt = copy_good("truncated");
  const fs::path file = random_file(ckpt);
  const auto size = fs::file_size(file);
  fs::resize_file(file, size - rng_.uniform(1, size));
  expect_clean_failure(ckpt, "truncated");
  EXPECT_FALSE(checkpoint::inspect(ckpt).verified);
}

TEST_F(CheckpointFaults, ExtraBytes) {
  const fs::path ckpt = copy_good("extra");
  const fs::path file = random_file(ckpt);
  auto bytes = read_bytes(file);
  bytes.resize(bytes.size() + rng_.uniform(1, 100), 0);
  write_bytes(file, bytes);
  expect_clean_failure(ckpt, "extra bytes");
}

TEST_F(CheckpointFaults, FlippedPayloadBit) {
  for (auto mode :
       {checkpoint::VerifyMode::kBeforeLoading, checkpoint::VerifyMode::kWhileLoading}) {
    const fs::path ckpt = copy_good("payload_flip" + std::to_string(int(mode)));
    fs::path file;
    std::vector<uint8_t> bytes;
    do {  // a file with a payload
      file = random_file(ckpt);
      bytes = read_bytes(file);
    } while (bytes.size() <= checkpoint::kHeaderBytes);
    const size_t at = rng_.uniform(checkpoint::kHeaderBytes, bytes.size() - 1);
    bytes[at] ^= static_cast<uint8_t>(1u << rng_.uniform(0, 7));
    write_bytes(file, bytes);
    expect_clean_failure(ckpt, "checksum mismatch", mode, file);
  }
}

// kWhileLoading into empty targets: a corrupt file is found during the load and the targets
// are emptied again.
TEST_F(CheckpointFaults, FlippedBitWhileLoadingLeavesEmptyTargetsEmpty) {
  const fs::path ckpt = copy_good("late_flip");
  const fs::path file = ckpt / "emb" / "rank-00000.values";
  auto bytes = read_bytes(file);
  bytes[bytes.size() - 1 - rng_.uniform(0, 100)] ^= 0x10;
  write_bytes(file, bytes);
  EmbeddingOptions eo = source_->options();
  Embedding<int64_t> empty(Backend::kCpu, eo);
  LoadOptions o;
  o.verify = checkpoint::VerifyMode::kWhileLoading;
  o.world_size = 2;
  o.chunk_rows = 100;
  EXPECT_THROW(checkpoint::load(ckpt, {named("emb", empty)}, o), CheckpointError);
  EXPECT_EQ(empty.table().size(), 0u);
}

TEST_F(CheckpointFaults, FlippedHeaderBit) {
  const fs::path ckpt = copy_good("header_flip");
  const fs::path file = random_file(ckpt);
  auto bytes = read_bytes(file);
  const size_t at = rng_.uniform(0, 59);
  bytes[at] ^= static_cast<uint8_t>(1u << rng_.uniform(0, 7));
  write_bytes(file, bytes);
  expect_clean_failure(ckpt, at < 8 ? "magic" : "header checksum",
                       checkpoint::VerifyMode::kBeforeLoading, file);
}

TEST_F(CheckpointFaults, MissingFile) {
  const fs::path ckpt = copy_good("missing");
  fs::remove(random_file(ckpt));
  expect_clean_failure(ckpt, "missing");
}

TEST_F(CheckpointFaults, MissingOrCorruptManifest) {
  const fs::path ckpt = copy_good("no_manifest");
  fs::remove(ckpt / "manifest.json");
  expect_clean_failure(ckpt, "manifest.json: missing");
  const fs::path bad = copy_good("bad_manifest");
  auto text = read_bytes(bad / "manifest.json");
  text.resize(rng_.uniform(0, text.size() - 2));
  write_bytes(bad / "manifest.json", text);
  expect_clean_failure(bad, "not valid JSON");
}

// A file of another rank, table or checkpoint in the place of the right one.
TEST_F(CheckpointFaults, MismatchedFiles) {
  const fs::path swapped = copy_good("swapped");
  const fs::path a = swapped / "plain" / "rank-00000.keys";
  const fs::path b = swapped / "plain" / "rank-00001.keys";
  const fs::path tmp = swapped / "plain" / "tmp";
  fs::rename(a, tmp);
  fs::rename(b, a);
  fs::rename(tmp, b);
  expect_clean_failure(swapped, "header rank");

  // The same file from a checkpoint of other contents (same size): only the checksum tells.
  auto other = seeded_embedding(rng_.next(), 1500);
  auto half = seeded_embedding(rng_.next(), 700);
  checkpoint::dump_sharded(dir_ / "other", {{named("emb", *other), named("plain", *other_)},
                                            {named("emb", *half), named("plain", *other_)}});
  const fs::path foreign = copy_good("foreign");
  const std::string rel = "emb/rank-00000.optimizer_state";
  if (fs::file_size(dir_ / "other" / rel) == fs::file_size(foreign / rel)) {
    fs::copy_file(dir_ / "other" / rel, foreign / rel, fs::copy_options::overwrite_existing);
    expect_clean_failure(foreign, "checksum mismatch", checkpoint::VerifyMode::kBeforeLoading,
                         foreign / rel);
  }

  // A table whose dim or key type differs from the checkpoint's.
  auto wrong_dim = make_table<int64_t>(Backend::kCpu, small_table_options(4, ScorePolicy::kLfu));
  fill_random(*wrong_dim, rng_, 10, true);
  const auto wrong_before = snapshot(*wrong_dim);
  LoadOptions o;
  o.world_size = 2;
  try {
    checkpoint::load(dir_ / "good", {named("emb", *target_), named("plain", *wrong_dim)}, o);
    ADD_FAILURE() << "dim mismatch accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("dim is 3, the target's is 4"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(snapshot(*wrong_dim), wrong_before);
  EXPECT_EQ(snapshot(target_->table()), before_);
  auto wrong_key = make_table<uint64_t>(Backend::kCpu, small_table_options(3, ScorePolicy::kLfu));
  EXPECT_THROW(checkpoint::load(dir_ / "good", {named("plain", *wrong_key)}, o), CheckpointError);
  EXPECT_EQ(wrong_key->size(), 0u);
}

// A dump killed (SIGKILL) at a random moment leaves the previous checkpoint whole: it loads and
// equals either the old contents or, if the kill came after the rename, the new ones.
TEST(CheckpointCrash, KilledDumpNeverDamagesThePreviousCheckpoint) {
  TestRng rng;
  TempDir dir;
  const fs::path path = dir / "ckpt";
  constexpr size_t kRows = 20000;
  uint64_t current_seed = rng.next();
  checkpoint::dump(path, {named("emb", *seeded_embedding(current_seed, kRows))});

  auto run_child_dump = [&](uint64_t seed) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        auto e = seeded_embedding(seed, kRows);
        checkpoint::DumpOptions o;
        o.chunk_slots = 1024;
        o.overwrite = true;
        checkpoint::dump(path, {named("emb", *e)}, o);
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    return pid;
  };
  // How long one dump takes here, to spread the kills over it.
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t timing_seed = rng.next();
  int status = 0;
  ::waitpid(run_child_dump(timing_seed), &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  current_seed = timing_seed;
  const auto dump_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count();

  int old_seen = 0, new_seen = 0;
  for (int round = 0; round < 12; ++round) {
    const uint64_t seed = rng.next();
    const pid_t pid = run_child_dump(seed);
    std::this_thread::sleep_for(std::chrono::microseconds(rng.uniform(0, dump_us * 12 / 10)));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);

    auto loaded = seeded_embedding(0, 0);
    ASSERT_NO_THROW(checkpoint::load(path, {named("emb", *loaded)})) << "round " << round;
    const auto got = snapshot(loaded->table());
    if (got == snapshot(seeded_embedding(current_seed, kRows)->table())) {
      ++old_seen;
    } else {
      ASSERT_EQ(got, snapshot(seeded_embedding(seed, kRows)->table())) << "round " << round;
      current_seed = seed;
      ++new_seen;
    }
  }
  std::cout << "[   INFO   ] dump " << dump_us << " us; after the kill: previous checkpoint "
            << old_seen << "x, completed new one " << new_seen << "x\n";
  // Staging directories of killed dumps stay behind; the checkpoint itself is whole.
  EXPECT_TRUE(checkpoint::inspect(path).verified);
}

}  // namespace
}  // namespace dynemb::testing

// The dump's file operations under injected faults: a dump killed (SIGKILL) or failing at each
// one of its file operations in turn leaves the path holding the complete previous checkpoint
// or the complete new one; staging left by a killed dump is removed by the next dump; a path
// that exists is only replaced when asked.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "checkpoint/checkpoint_test_util.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/checkpoint/file_ops.hpp"
#include "dynemb/embedding/embedding.hpp"

namespace dynemb::testing {
namespace {

using checkpoint::CheckpointError;
using checkpoint::FileOp;
using checkpoint::named;
namespace fs = std::filesystem;

constexpr uint32_t kDim = 6;
constexpr size_t kRows = 3000;

// An embedding whose rows are a function of `seed`.
std::unique_ptr<Embedding<int64_t>> seeded(uint64_t seed) {
  EmbeddingOptions eo;
  eo.dim = kDim;
  eo.table = small_table_options(0, ScorePolicy::kStep, 1u << 14);
  eo.optimizer.kind = OptimizerKind::kAdam;
  auto e = std::make_unique<Embedding<int64_t>>(Backend::kCpu, eo);
  std::mt19937_64 gen(seed);
  std::vector<int64_t> keys(kRows);
  std::vector<float> values(kRows * e->row_dim());
  for (auto& k : keys) k = static_cast<int64_t>(gen() >> 2);
  for (auto& v : values) v = static_cast<float>(gen() % 1000) * 0.001f;
  e->table().insert_or_assign(kRows, keys.data(), values.data());
  e->table().set_score(seed % 1000 + 1);
  return e;
}

checkpoint::DumpOptions replacing() {
  checkpoint::DumpOptions o;
  o.overwrite = true;
  o.chunk_slots = 512;
  o.metadata = R"({"owner":"file_ops_test"})";
  return o;
}

// Restores the previous hook when the test ends.
struct HookGuard {
  explicit HookGuard(checkpoint::FileOpHook h)
      : previous(checkpoint::set_file_op_hook(std::move(h))) {}
  ~HookGuard() { checkpoint::set_file_op_hook(std::move(previous)); }
  checkpoint::FileOpHook previous;
};

size_t staging_entries(const fs::path& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".dynemb-tmp-") != std::string::npos) ++n;
  }
  return n;
}

// The operations of one dump over an existing checkpoint, in order.
std::vector<std::pair<FileOp, std::string>> ops_of_a_dump(const fs::path& scratch) {
  checkpoint::dump(scratch, {named("emb", *seeded(1))}, replacing());
  std::vector<std::pair<FileOp, std::string>> ops;
  HookGuard guard([&](FileOp op, const fs::path& p) { ops.emplace_back(op, p.filename()); });
  checkpoint::dump(scratch, {named("emb", *seeded(2))}, replacing());
  return ops;
}

TEST(CheckpointFileOps, DumpKilledAtEveryFileOperationLeavesOldOrNew) {
  TestRng rng;
  TempDir dir;
  const auto ops = ops_of_a_dump(dir / "count");
  ASSERT_GE(ops.size(), 20u);
  std::map<FileOp, int> kinds;
  for (const auto& [op, name] : ops) ++kinds[op];
  EXPECT_EQ(kinds[FileOp::kExchange], 1);
  EXPECT_GE(kinds[FileOp::kFsyncFile], 5);  // 4 data files and the manifest
  EXPECT_GE(kinds[FileOp::kFsyncDirectory], 3);

  const uint64_t old_seed = rng.next() | 1, new_seed = old_seed + 1;
  const auto old_rows = snapshot(seeded(old_seed)->table());
  const auto new_rows = snapshot(seeded(new_seed)->table());
  int old_seen = 0, new_seen = 0;
  for (size_t kill_at = 0; kill_at <= ops.size(); ++kill_at) {
    SCOPED_TRACE("killed before operation " + std::to_string(kill_at) + " of " +
                 std::to_string(ops.size()) +
                 (kill_at < ops.size()
                      ? " (" + to_string(ops[kill_at].first) + " " + ops[kill_at].second + ")"
                      : std::string(" (after the last)")));
    const fs::path path = dir / ("k" + std::to_string(kill_at));
    checkpoint::dump(path, {named("emb", *seeded(old_seed))}, replacing());
    const pid_t pid = ::fork();
    if (pid == 0) {
      size_t seen = 0;
      checkpoint::set_file_op_hook([&](FileOp, const fs::path&) {
        if (seen++ == kill_at) ::raise(SIGKILL);
      });
      try {
        checkpoint::dump(path, {named("emb", *seeded(new_seed))}, replacing());
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (kill_at < ops.size()) {
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    } else {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    }
    const auto inspected = checkpoint::inspect(path);
    ASSERT_TRUE(inspected.verified) << inspected.problem;
    EXPECT_EQ(inspected.manifest.metadata, R"({"owner":"file_ops_test"})");
    auto loaded = seeded(0);
    loaded->table().clear();
    ASSERT_NO_THROW(checkpoint::load(path, {named("emb", *loaded)}));
    const auto got = snapshot(loaded->table());
    if (got == old_rows) {
      ++old_seen;
    } else {
      ASSERT_EQ(got, new_rows);
      ++new_seen;
    }
    // The next dump removes what the killed one left behind.
    checkpoint::dump(path, {named("emb", *seeded(new_seed))}, replacing());
    EXPECT_EQ(staging_entries(dir.path()), 0u);
    fs::remove_all(path);
  }
  std::cout << "[   INFO   ] " << ops.size() << " file operations per dump; after the kill: old "
            << old_seen << "x, new " << new_seen << "x\n";
  EXPECT_GT(old_seen, 0);
  EXPECT_GT(new_seen, 0);
}

TEST(CheckpointFileOps, DumpFailingAtEveryFileOperationLeavesOldOrNewAndNoStaging) {
  TempDir dir;
  const auto ops = ops_of_a_dump(dir / "count");
  const size_t exchange_at = static_cast<size_t>(
      std::find_if(ops.begin(), ops.end(),
                   [](const auto& op) { return op.first == FileOp::kExchange; }) -
      ops.begin());
  ASSERT_EQ(exchange_at + 3, ops.size());  // exchange, fsync of the parent, removal of the old
  const auto old_rows = snapshot(seeded(11)->table());
  const auto new_rows = snapshot(seeded(12)->table());
  for (size_t fail_at = 0; fail_at < ops.size(); ++fail_at) {
    SCOPED_TRACE("failing operation " + std::to_string(fail_at) + " (" +
                 to_string(ops[fail_at].first) + " " + ops[fail_at].second + ")");
    const fs::path path = dir / "f";
    checkpoint::dump(path, {named("emb", *seeded(11))}, replacing());
    bool threw = false;
    {
      size_t seen = 0;
      HookGuard guard([&](FileOp op, const fs::path& p) {
        if (seen++ == fail_at)
          throw CheckpointError("injected failure at " + to_string(op) + " " + p.string());
      });
      try {
        checkpoint::dump(path, {named("emb", *seeded(12))}, replacing());
      } catch (const CheckpointError& e) {
        threw = true;
        EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << e.what();
      }
    }
    auto loaded = seeded(0);
    loaded->table().clear();
    checkpoint::load(path, {named("emb", *loaded)});
    const auto got = snapshot(loaded->table());
    // An error before the exchange keeps the old checkpoint; once exchanged, the new one
    // stands (an error from the fsync after it is still reported).
    EXPECT_EQ(got, fail_at <= exchange_at ? old_rows : new_rows);
    EXPECT_EQ(threw, fail_at <= exchange_at + 1);
    // An uncommitted dump removes its staging directory; only a failed removal of the replaced
    // checkpoint leaves one (removed by the next dump from another process).
    EXPECT_EQ(staging_entries(dir.path()), fail_at == exchange_at + 2 ? 1u : 0u);
    for (const auto& e : fs::directory_iterator(dir.path())) {
      if (e.path().filename().string().find(".dynemb-tmp-") != std::string::npos) {
        fs::remove_all(e.path());
      }
    }
    fs::remove_all(path);
  }
}

TEST(CheckpointFileOps, ExistingPathIsOnlyReplacedWhenAsked) {
  TempDir dir;
  const fs::path path = dir / "ckpt";
  checkpoint::dump(path, {named("emb", *seeded(5))});
  try {
    checkpoint::dump(path, {named("emb", *seeded(6))});
    ADD_FAILURE() << "overwrote without overwrite = true";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("overwrite"), std::string::npos) << e.what();
  }
  auto loaded = seeded(0);
  loaded->table().clear();
  checkpoint::load(path, {named("emb", *loaded)});
  EXPECT_EQ(snapshot(loaded->table()), snapshot(seeded(5)->table()));
  // Something that is not a checkpoint is never replaced, even when asked.
  fs::create_directories(dir / "mine");
  std::ofstream(dir / "mine" / "notes.txt") << "keep me\n";
  EXPECT_THROW(checkpoint::dump(dir / "mine", {named("emb", *seeded(6))}, replacing()),
               InvalidArgument);
  EXPECT_TRUE(fs::exists(dir / "mine" / "notes.txt"));
  // Metadata that is not a JSON object is refused before anything is written.
  checkpoint::DumpOptions bad = replacing();
  bad.metadata = "[1, 2]";
  EXPECT_THROW(checkpoint::dump(dir / "new", {named("emb", *seeded(6))}, bad), InvalidArgument);
  EXPECT_FALSE(fs::exists(dir / "new"));
  bad = replacing();
  bad.chunk_slots = 0;
  EXPECT_THROW(checkpoint::dump(dir / "new", {named("emb", *seeded(6))}, bad), InvalidArgument);
  EXPECT_FALSE(fs::exists(dir / "new"));
  checkpoint::LoadOptions zero_chunk;
  zero_chunk.chunk_rows = 0;
  EXPECT_THROW(checkpoint::load(path, {named("emb", *loaded)}, zero_chunk), InvalidArgument);
}

TEST(CheckpointFileOps, EditedManifestIsNotVerifiedAndNotLoaded) {
  TempDir dir;
  const fs::path path = dir / "ckpt";
  checkpoint::dump(path, {named("emb", *seeded(7))});
  std::string text;
  {
    std::ifstream in(path / "manifest.json");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("\"optimizer\": \"adam\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 19, "\"optimizer\": \"sgd\" ");
  std::ofstream(path / "manifest.json", std::ios::trunc) << text;
  const auto r = checkpoint::inspect(path);
  EXPECT_FALSE(r.verified);
  EXPECT_NE(r.problem.find("manifest_crc32c"), std::string::npos) << r.problem;
  EXPECT_EQ(r.manifest.tables.at(0).optimizer, "sgd");  // still shown
  auto loaded = seeded(0);
  loaded->table().clear();
  EXPECT_THROW(checkpoint::load(path, {named("emb", *loaded)}), CheckpointError);
  EXPECT_EQ(loaded->table().size(), 0u);
}

}  // namespace
}  // namespace dynemb::testing

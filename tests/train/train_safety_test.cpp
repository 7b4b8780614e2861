// `dynemb train`'s data safety: a checkpoint directory holding a run is not overwritten unless
// asked, deltas belong to one run, a save killed at any file operation leaves a resumable
// checkpoint that ends where an uninterrupted run ends, a resume with other settings is refused
// naming both values, the trainer state is validated, a diverging run stops with a clear error.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/checkpoint/file_ops.hpp"
#include "dynemb/core/error.hpp"
#include "train/metrics.hpp"
#include "train/stop_request.hpp"
#include "train/text_readers.hpp"
#include "train/train_state.hpp"
#include "train/trainer.hpp"

namespace dynemb::train {
namespace {

namespace fs = std::filesystem;
using Rows = std::map<uint64_t, std::vector<float>>;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("dynemb_train_safety_" + name + "_" +
                                                    std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  return dir;
}

uint64_t fresh_seed() {
  const uint64_t seed = std::random_device{}();
  std::cout << "[   SEED   ] data seed " << seed << std::endl;
  return seed;
}

// A small synthetic run writing into `ckpt`.
TrainOptions small_run(const fs::path& out, const fs::path& ckpt, uint64_t seed) {
  TrainOptions o;
  o.init_capacity = 1 << 14;
  o.capacity = 1 << 20;
  o.progress = "none";
  o.output_dir = (out / "outputs").string();
  o.eval_every = 0;
  o.batch_size = 1000;
  o.eval_samples = 1000;
  o.synthetic.horizon = 40'000;
  o.synthetic.seed = seed;
  o.checkpoint_dir = ckpt.string();
  return o;
}

Rows rows_of(FmModel& model) {
  Rows rows;
  model.embedding().table().for_each([&](uint64_t key, std::span<const float> row, uint64_t) {
    rows[key].assign(row.begin(), row.end());
  });
  return rows;
}

std::string message_of(const TrainOptions& o, std::ostream& log) {
  try {
    run_training(o, {.log = &log});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

size_t staging_entries(const fs::path& dir) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.path().filename().string().find(".dynemb-tmp-") != std::string::npos) ++n;
  }
  return n;
}

TEST(TrainSafety, CheckpointDirHoldingARunIsOnlyReplacedWithOverwrite) {
  const fs::path out = fresh_dir("overwrite");
  const fs::path ckpt = out / "ckpt";
  const uint64_t seed = fresh_seed();
  std::ostringstream log;
  TrainOptions a = small_run(out, ckpt, seed);
  a.samples = 30'000;
  a.incremental_every = 10'000;
  const TrainReport ra = run_training(a, {.log = &log});
  ASSERT_TRUE(fs::exists(ckpt / "incremental" / "30"));
  auto store = make_checkpoint_store();
  const TrainState held = *store->read_state(ckpt.string());
  EXPECT_EQ(held.run_id, ra.run_id);
  EXPECT_EQ(held.progress.samples, 30'000u);

  // Another run without --resume: refused, naming both ways out; nothing changed.
  TrainOptions b = small_run(out, ckpt, seed);
  b.samples = 12'000;
  const std::string refused = message_of(b, log);
  EXPECT_NE(refused.find("holds another run"), std::string::npos) << refused;
  EXPECT_NE(refused.find("--overwrite"), std::string::npos) << refused;
  EXPECT_NE(refused.find("--resume"), std::string::npos) << refused;
  EXPECT_EQ(store->read_state(ckpt.string())->run_id, ra.run_id);
  EXPECT_TRUE(fs::exists(ckpt / "incremental" / "30"));

  // With --overwrite: the old run's deltas go, the new run's state and deltas are all there is.
  b.overwrite = true;
  b.incremental_every = 4'000;
  const TrainReport rb = run_training(b, {.log = &log});
  EXPECT_EQ(rb.incremental_dumps_removed, 3u);
  const TrainState now = *store->read_state(ckpt.string());
  EXPECT_EQ(now.run_id, rb.run_id);
  EXPECT_NE(now.run_id, ra.run_id);
  EXPECT_EQ(now.progress.samples, 12'000u);
  std::vector<std::string> deltas;
  for (const auto& e : fs::directory_iterator(ckpt / "incremental")) {
    deltas.push_back(e.path().filename());
    const auto m = checkpoint::read_manifest(e.path());
    EXPECT_NE(m.metadata.find(rb.run_id), std::string::npos) << e.path();
  }
  std::sort(deltas.begin(), deltas.end());
  EXPECT_EQ(deltas, (std::vector<std::string>{"12", "4", "8"}));
  fs::remove_all(out);
}

TEST(TrainSafety, ResumeRefusesOtherSettingsNamingBothValues) {
  const fs::path out = fresh_dir("resume_checks");
  const fs::path ckpt = out / "ckpt";
  const uint64_t seed = fresh_seed();
  std::ostringstream log;
  TrainOptions a = small_run(out, ckpt, seed);
  a.samples = 10'000;
  run_training(a, {.log = &log});

  TrainOptions r = small_run(out, ckpt, seed);
  r.resume = ckpt.string();
  r.samples = 15'000;
  auto expect_refused = [&](const TrainOptions& o, std::vector<std::string> fragments) {
    const std::string m = message_of(o, log);
    for (const std::string& f : fragments) EXPECT_NE(m.find(f), std::string::npos) << m;
  };
  TrainOptions o = r;
  o.optimizer = "sgd";
  expect_refused(o, {"--optimizer = sgd", "--optimizer ftrl", "--reset-optimizer"});
  o = r;
  o.synthetic.seed = seed + 1;
  expect_refused(o, {"--data-seed = " + std::to_string(seed + 1), std::to_string(seed),
                     "--allow-different-data"});
  o = r;
  o.batch_size = 500;
  expect_refused(o, {"--batch-size = 500", "--batch-size 1000", "--allow-different-batch-size"});
  o = r;
  o.dim = 16;
  expect_refused(o, {"--dim = 16", "--dim 8"});
  // A refusal changed nothing.
  auto store = make_checkpoint_store();
  EXPECT_EQ(store->read_state(ckpt.string())->progress.samples, 10'000u);

  // Each allowed when asked; a new optimizer starts from fresh state and is recorded.
  o = r;
  o.optimizer = "adam";
  o.reset_optimizer = true;
  const TrainReport switched = run_training(o, {.log = &log});
  EXPECT_EQ(switched.progress.samples, 15'000u);
  EXPECT_NE(log.str().find("--reset-optimizer: the checkpoint's ftrl state is dropped"),
            std::string::npos);
  EXPECT_EQ(store->read_state(ckpt.string())->optimizer, "adam");
  o = r;
  o.optimizer = "adam";
  o.samples = 20'000;
  o.synthetic.seed = seed + 1;
  o.allow_different_data = true;
  o.batch_size = 500;
  o.allow_different_batch_size = true;
  const TrainReport other = run_training(o, {.log = &log});
  EXPECT_EQ(other.progress.samples, 20'000u);
  EXPECT_EQ(other.progress.steps, 15u + 10u);
  fs::remove_all(out);
}

TEST(TrainSafety, TrainerStateIsValidated) {
  const std::string good =
      R"({"run_id":"0123456789abcdef0123456789abcdef","samples":5000,"steps":5,)"
      R"("incremental_threshold":0,"dim":8,"batch_size":1000,"optimizer":"ftrl",)"
      R"("stream":{"--data":"synthetic","--data-seed":"1"}})";
  const TrainState s = state_from_json(good, "state");
  EXPECT_EQ(s.progress.steps, 5u);
  auto rejected = [&](const std::string& field, const std::string& value) {
    nlohmann::json j = nlohmann::json::parse(good);
    if (value.empty()) {
      j.erase(field);
    } else {
      j[field] = nlohmann::json::parse(value);
    }
    try {
      state_from_json(j.dump(), "state");
      ADD_FAILURE() << field << " = " << value << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("\"" + field + "\""), std::string::npos) << e.what();
    }
  };
  rejected("steps", "-5");
  rejected("steps", "6000");  // more steps than samples
  rejected("steps", "0");     // samples without a step
  rejected("steps", "\"5\"");
  rejected("samples", "1.5");
  rejected("samples", "");
  rejected("run_id", "\"../x\"");
  rejected("dim", "0");
  rejected("dim", "2000");
  rejected("batch_size", "0");
  rejected("optimizer", "\"lbfgs\"");
  rejected("stream", "[]");
  rejected("stream", R"({"--data-seed":"1"})");
  rejected("incremental_threshold", "-1");
}

TEST(TrainSafety, DivergingRunStopsNamingTheStepAndWhatToLower) {
  const fs::path out = fresh_dir("diverge");
  TrainOptions o = small_run(out, out / "ckpt", fresh_seed());
  o.samples = 200'000;
  o.learning_rate = 100;
  o.init_stddev = 10;
  o.optimizer = "sgd";
  std::ostringstream log;
  const std::string m = message_of(o, log);
  EXPECT_NE(m.find("diverged at step"), std::string::npos) << m;
  EXPECT_NE(m.find("--lr (now 100)"), std::string::npos) << m;
  EXPECT_NE(m.find("--init-stddev (now 10)"), std::string::npos) << m;
  // Nothing was saved from the diverged model.
  EXPECT_FALSE(fs::exists(out / "ckpt" / "model"));
  fs::remove_all(out);
}

TEST(TrainSafety, StopRequestEndsSetupLoops) {
  const fs::path out = fresh_dir("stop");
  const fs::path file = out / "t.libsvm";
  {
    std::ofstream f(file);
    for (int i = 0; i < 200'000; ++i) f << (i % 2) << " " << i % 97 << ":1\n";
  }
  TextFileStream stream(file.string(), TextFormat::kLibsvm, "--train-file");
  set_stop_requested(true);
  EXPECT_THROW(stream.skip(200'000), Interrupted);
  std::vector<float> scores(3u << 20, 0.5f), labels(scores.size(), 1.0f);
  labels[0] = 0;
  EXPECT_THROW(roc_auc(scores, labels), Interrupted);
  set_stop_requested(false);
  EXPECT_NEAR(roc_auc(scores, labels), 0.5, 1e-12);
  fs::remove_all(out);
}

TEST(TrainSafety, FileProgressShowsTheFileNotASampleTarget) {
  const fs::path out = fresh_dir("progress");
  const fs::path file = out / "t.libsvm";
  {
    std::ofstream f(file);
    std::mt19937 gen(fresh_seed());
    for (int i = 0; i < 5000; ++i) f << (gen() % 2) << " " << gen() % 97 << ":1\n";
  }
  TrainOptions o;
  o.data = "libsvm";
  o.train_file = file.string();
  o.progress = "lines";
  o.progress_seconds = 1e-9;
  o.batch_size = 500;
  o.output_dir = (out / "o").string();
  std::ostringstream log;
  run_training(o, {.log = &log});
  EXPECT_EQ(log.str().find("/4.00M"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("100% of the file"), std::string::npos) << log.str();
  fs::remove_all(out);
}

// --- a save killed at every file operation ----------------------------------------------------

constexpr char kKillDirEnv[] = "DYNEMB_TRAIN_KILL_DIR";
constexpr char kKillAtEnv[] = "DYNEMB_TRAIN_KILL_AT";
constexpr char kKillSeedEnv[] = "DYNEMB_TRAIN_KILL_SEED";

// The leg that is killed: resume at 20k samples, one step, its incremental dump and the final
// full save (every file operation of both saves).
TrainOptions killed_leg(const fs::path& ckpt, uint64_t seed) {
  TrainOptions o = small_run(ckpt.parent_path(), ckpt, seed);
  o.resume = ckpt.string();
  o.samples = 21'000;
  o.incremental_every = 1'000;
  o.eval_samples = 200;
  return o;
}

// Runs in a fresh process started by the test below (exec of this binary), never on its own.
TEST(TrainKilledSave, ChildProcess) {
  const char* dir = std::getenv(kKillDirEnv);
  if (dir == nullptr) GTEST_SKIP() << "runs only as the child of TrainKilledSave.*";
  const uint64_t kill_at = std::strtoull(std::getenv(kKillAtEnv), nullptr, 10);
  const uint64_t seed = std::strtoull(std::getenv(kKillSeedEnv), nullptr, 10);
  uint64_t seen = 0;
  checkpoint::set_file_op_hook([&](checkpoint::FileOp, const fs::path&) {
    if (seen++ == kill_at) ::raise(SIGKILL);
  });
  std::ostringstream log;
  run_training(killed_leg(dir, seed), {.log = &log, .handle_signals = false});
  checkpoint::set_file_op_hook({});
}

TEST(TrainKilledSave, EveryFileOperationLeavesAResumableCheckpoint) {
  const fs::path out = fresh_dir("killed");
  const uint64_t seed = fresh_seed();
  std::ostringstream log;
  // The run to 20k samples, with deltas.
  const fs::path base = out / "base";
  TrainOptions first = small_run(out, base, seed);
  first.samples = 20'000;
  first.incremental_every = 5'000;
  run_training(first, {.log = &log});

  // The killed leg once without a kill: its file operations and the rows it ends with.
  const fs::path counted = out / "counted";
  fs::copy(base, counted, fs::copy_options::recursive);
  std::vector<std::string> ops;
  Rows final_rows;
  {
    checkpoint::set_file_op_hook([&](checkpoint::FileOp op, const fs::path& p) {
      ops.push_back(checkpoint::to_string(op) + " " + p.filename().string());
    });
    run_training(killed_leg(counted, seed),
                 {.log = &log,
                  .on_finish = [&](FmModel& m, const TrainReport&) { final_rows = rows_of(m); }});
    checkpoint::set_file_op_hook({});
  }
  ASSERT_GE(ops.size(), 30u);
  std::cout << "[   INFO   ] the killed leg has " << ops.size() << " file operations\n";

  int old_seen = 0, new_seen = 0;
  for (size_t kill_at = 0; kill_at < ops.size(); ++kill_at) {
    SCOPED_TRACE("killed before operation " + std::to_string(kill_at) + ": " + ops[kill_at]);
    const fs::path ckpt = out / ("k" + std::to_string(kill_at));
    fs::copy(base, ckpt, fs::copy_options::recursive);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv(kKillDirEnv, ckpt.c_str(), 1);
      ::setenv(kKillAtEnv, std::to_string(kill_at).c_str(), 1);
      ::setenv(kKillSeedEnv, std::to_string(seed).c_str(), 1);
      const int null_fd = ::open("/dev/null", O_WRONLY);
      ::dup2(null_fd, 1);
      ::execl("/proc/self/exe", "dynemb_tests", "--gtest_filter=TrainKilledSave.ChildProcess",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;

    // Whole: the old checkpoint (20k) or the new one (21k), verified, with its state.
    auto store = make_checkpoint_store();
    const TrainState state = *store->read_state(ckpt.string());
    ASSERT_TRUE(state.progress.samples == 20'000 || state.progress.samples == 21'000)
        << state.progress.samples;
    (state.progress.samples == 20'000 ? old_seen : new_seen)++;
    const auto inspected = checkpoint::inspect(ckpt / "model");
    ASSERT_TRUE(inspected.verified) << inspected.problem;

    // Resumable, and the resumed run ends exactly where the uninterrupted one did.
    TrainOptions again = killed_leg(ckpt, seed);
    Rows rows;
    const TrainReport r = run_training(
        again,
        {.log = &log, .on_finish = [&](FmModel& m, const TrainReport&) { rows = rows_of(m); }});
    EXPECT_EQ(r.progress.samples, 21'000u);
    EXPECT_EQ(r.progress.steps, 21u);
    EXPECT_TRUE(rows == final_rows) << "rows differ from the uninterrupted run";
    EXPECT_EQ(staging_entries(ckpt), 0u);
    for (const auto& e : fs::directory_iterator(ckpt / "incremental")) {
      EXPECT_NE(checkpoint::read_manifest(e.path()).metadata.find(state.run_id), std::string::npos);
    }
    fs::remove_all(ckpt);
  }
  std::cout << "[   INFO   ] after the kill: old checkpoint " << old_seen << "x, new " << new_seen
            << "x\n";
  EXPECT_GT(old_seen, 0);
  EXPECT_GT(new_seen, 0);
  fs::remove_all(out);
}

}  // namespace
}  // namespace dynemb::train

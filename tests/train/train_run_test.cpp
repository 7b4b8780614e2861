// `dynemb train` end to end: the small libsvm / libffm / Criteo files train and learn; a run
// resumed from a checkpoint continues with the same rows and step and ends where a straight run
// ends; options are validated with messages naming the flag.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "dynemb/core/error.hpp"
#include "dynemb/table/table.hpp"
#include "train/trainer.hpp"

namespace dynemb::train {
namespace {

namespace fs = std::filesystem;

// $DYNEMB_TEST_DATA_DIR (a binary built on another machine: scripts/gpu_check.sh sets it to the
// checkout it runs in), else tests/data of the source tree this binary was configured from.
fs::path data_dir() {
  if (const char* dir = std::getenv("DYNEMB_TEST_DATA_DIR"); dir != nullptr && *dir != '\0')
    return fs::path(dir);
  return fs::path(DYNEMB_TEST_DATA_SOURCE_DIR);
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       ("dynemb_train_test_" + name + "_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  return dir;
}

TrainOptions small_options(const fs::path& out) {
  TrainOptions o;
  o.init_capacity = 1 << 14;
  o.capacity = 1 << 20;
  o.progress = "none";
  o.output_dir = out.string();
  o.eval_every = 0;
  return o;
}

struct FileCase {
  const char* format;
  const char* file;
};

class TrainOnFile : public testing::TestWithParam<FileCase> {};

TEST_P(TrainOnFile, TrainsEndToEndAndWritesOutputs) {
  const fs::path out = fresh_dir(GetParam().format);
  TrainOptions o = small_options(out);
  o.data = GetParam().format;
  o.train_file = (data_dir() / GetParam().file).string();
  o.epochs = 5;
  o.batch_size = 64;
  o.eval_every = 2000;
  o.seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(o.seed));
  std::ostringstream log;
  const TrainReport r = run_training(o, {.log = &log});
  EXPECT_GT(r.progress.samples, 1000u);
  EXPECT_GT(r.eval_samples, 50u);
  EXPECT_GT(r.eval_auc, 0.7) << log.str();
  EXPECT_FALSE(r.ground_truth_auc.has_value());
  EXPECT_GT(r.rows, 10u);
  // The metrics file holds the result and the curve; the plot is an SVG.
  std::ifstream in(r.metrics_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["result"]["samples"].get<uint64_t>(), r.progress.samples);
  EXPECT_NEAR(j["result"]["eval_auc"].get<double>(), r.eval_auc, 1e-12);
  EXPECT_GE(j["curve"].size(), 2u);
  EXPECT_GT(j["throughput"]["cpu"]["samples_per_second"].get<double>(), 0.0);
  std::ifstream svg(r.plot_path);
  std::string head(4, '\0');
  svg.read(head.data(), 4);
  EXPECT_EQ(head, "<svg");
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Files, TrainOnFile,
                         testing::Values(FileCase{"libsvm", "train_small.libsvm"},
                                         FileCase{"libffm", "train_small.libffm"},
                                         FileCase{"criteo", "train_small_criteo.tsv"}),
                         [](const auto& info) { return std::string(info.param.format); });

// A checkpoint store in memory: every row with its score, the table's step, the state.
class MemoryStore final : public CheckpointStore {
 public:
  struct Saved {
    std::map<uint64_t, std::vector<float>> rows;
    uint64_t table_score = 0;
    TrainState state;
  };
  std::map<std::string, Saved> saved;
  bool loaded_rows_match = false;

  static std::map<uint64_t, std::vector<float>> rows_of(FmModel& model) {
    std::map<uint64_t, std::vector<float>> rows;
    model.embedding().table().for_each([&](uint64_t key, std::span<const float> row, uint64_t) {
      rows[key].assign(row.begin(), row.end());
    });
    return rows;
  }
  std::optional<TrainState> read_state(const std::string& dir) override {
    const auto it = saved.find(dir);
    if (it == saved.end()) return std::nullopt;
    return it->second.state;
  }
  size_t prepare(const std::string&, const TrainState&) override { return 0; }
  void save(const std::string& dir, FmModel& model, const TrainState& state) override {
    saved[dir] = {rows_of(model), model.embedding().table().score(), state};
  }
  uint64_t save_incremental(const std::string&, FmModel& model, const TrainState&,
                            uint64_t) override {
    return model.embedding().table().score();
  }
  void load(const std::string& dir, FmModel& model, bool) override {
    const Saved& s = saved.at(dir);
    Table<uint64_t>& table = model.embedding().table();
    for (const auto& [key, row] : s.rows) table.insert_or_assign(1, &key, row.data());
    table.set_score(s.table_score);
    loaded_rows_match = rows_of(model) == s.rows && table.score() == s.table_score;
  }
};

TEST(TrainResume, ContinuesWithTheSameRowsAndStep) {
  const fs::path out = fresh_dir("resume");
  const fs::path checkpoint = out / "ckpt";
  fs::create_directories(checkpoint);
  TrainOptions o = small_options(out);
  o.batch_size = 1000;
  o.eval_samples = 5000;
  o.synthetic.horizon = 120'000;
  o.synthetic.seed = std::random_device{}();
  SCOPED_TRACE("data seed " + std::to_string(o.synthetic.seed));
  std::ostringstream log;
  MemoryStore store;

  TrainOptions first = o;
  first.samples = 60'000;
  first.checkpoint_dir = checkpoint.string();
  const TrainReport a = run_training(first, {.store = &store, .log = &log});
  ASSERT_EQ(store.saved.at(checkpoint.string()).state.progress.samples, 60'000u);
  EXPECT_EQ(a.progress.steps, 60u);

  TrainOptions second = o;
  second.samples = 120'000;
  second.resume = checkpoint.string();
  std::map<uint64_t, std::vector<float>> resumed_rows, straight_rows;
  uint64_t resumed_step = 0, straight_step = 0;
  const TrainReport b = run_training(
      second, {.store = &store, .log = &log, .on_finish = [&](FmModel& m, const TrainReport&) {
                 resumed_rows = MemoryStore::rows_of(m);
                 resumed_step = m.embedding().table().score();
               }});
  EXPECT_TRUE(store.loaded_rows_match);
  EXPECT_EQ(b.progress.samples, 120'000u);
  EXPECT_EQ(b.progress.steps, 120u);
  EXPECT_EQ(b.samples_this_run, 60'000u);

  TrainOptions straight = o;
  straight.samples = 120'000;
  const TrainReport c =
      run_training(straight, {.log = &log, .on_finish = [&](FmModel& m, const TrainReport&) {
                                straight_rows = MemoryStore::rows_of(m);
                                straight_step = m.embedding().table().score();
                              }});
  EXPECT_EQ(resumed_step, straight_step);
  ASSERT_EQ(resumed_rows.size(), straight_rows.size());
  for (const auto& [key, row] : straight_rows) {
    const auto it = resumed_rows.find(key);
    ASSERT_NE(it, resumed_rows.end()) << "key " << key;
    for (size_t j = 0; j < row.size(); ++j) EXPECT_FLOAT_EQ(it->second[j], row[j]) << key;
  }
  EXPECT_NEAR(b.eval_auc, c.eval_auc, 1e-6);
  fs::remove_all(out);
}

// The same through the library's checkpoint format on disk, with periodic and incremental dumps.
TEST(TrainResume, ThroughTheCheckpointFormat) {
  const fs::path out = fresh_dir("resume_disk");
  TrainOptions o = small_options(out);
  o.batch_size = 1000;
  o.eval_samples = 5000;
  o.synthetic.horizon = 80'000;
  o.synthetic.seed = std::random_device{}();
  SCOPED_TRACE("data seed " + std::to_string(o.synthetic.seed));
  std::ostringstream log;
  TrainOptions first = o;
  first.samples = 40'000;
  first.checkpoint_dir = (out / "ckpt").string();
  first.checkpoint_every = 20'000;
  first.incremental_every = 10'000;
  std::map<uint64_t, std::vector<float>> saved_rows;
  run_training(first, {.log = &log, .on_finish = [&](FmModel& m, const TrainReport&) {
                         saved_rows = MemoryStore::rows_of(m);
                       }});
  EXPECT_TRUE(fs::exists(out / "ckpt" / "model" / "manifest.json"));
  EXPECT_TRUE(fs::exists(out / "ckpt" / "incremental" / "30" / "manifest.json"));

  TrainOptions second = o;
  second.resume = (out / "ckpt").string();
  second.eval_samples = 1;
  second.samples = 40'000;  // nothing left to train: the loaded model is evaluated as it is
  std::map<uint64_t, std::vector<float>> loaded_rows;
  uint64_t loaded_step = 0;
  const TrainReport b =
      run_training(second, {.log = &log, .on_finish = [&](FmModel& m, const TrainReport&) {
                              loaded_rows = MemoryStore::rows_of(m);
                              loaded_step = m.embedding().table().score();
                            }});
  EXPECT_EQ(b.progress.samples, 40'000u);
  EXPECT_EQ(b.progress.steps, 40u);
  EXPECT_EQ(b.samples_this_run, 0u);
  EXPECT_EQ(loaded_step, 40u);
  EXPECT_EQ(loaded_rows, saved_rows);

  TrainOptions third = o;
  third.samples = 80'000;
  third.resume = (out / "ckpt").string();
  const TrainReport c = run_training(third, {.log = &log});
  EXPECT_EQ(c.progress.steps, 80u);
  EXPECT_EQ(c.samples_this_run, 40'000u);
  fs::remove_all(out);
}

TEST(TrainOptionsValidation, NamesTheFlag) {
  auto message_of = [](const TrainOptions& o) -> std::string {
    try {
      validate_train_options(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  TrainOptions o;
  o.batch_size = (1u << 22) + 1;
  EXPECT_NE(message_of(o).find("--batch-size"), std::string::npos);
  o = {};
  o.device = "cuda";
  o.admit_threshold = 2;  // counter admission runs on both backends
  EXPECT_EQ(message_of(o).find("--admit-threshold"), std::string::npos);
  o = {};
  o.data = "parquet";
  EXPECT_NE(message_of(o).find("--data"), std::string::npos);
  o = {};
  o.data = "libsvm";
  EXPECT_NE(message_of(o).find("--train-file"), std::string::npos);
  o = {};
  o.capacity = 1000;
  EXPECT_NE(message_of(o).find("--capacity"), std::string::npos);
  o = {};
  o.checkpoint_every = 10;
  EXPECT_NE(message_of(o).find("--checkpoint-dir"), std::string::npos);
  o = {};
  o.memory_mode = "hybrid";
  EXPECT_NE(message_of(o).find("--device cuda"), std::string::npos);
  o = {};
  o.device = "cuda";
  if (cuda_backend_available()) {
    EXPECT_EQ(message_of(o), "");
  } else {
    EXPECT_THROW(validate_train_options(o), NotAvailable);
  }
  o = {};
  o.memory_mode = "caching";
  EXPECT_THROW(validate_train_options(o), NotAvailable);
  o = {};
  o.overwrite = true;
  EXPECT_NE(message_of(o).find("--overwrite"), std::string::npos);
  o = {};
  o.reset_optimizer = true;
  EXPECT_NE(message_of(o).find("--reset-optimizer"), std::string::npos);
  o = {};
  o.allow_different_data = true;
  EXPECT_NE(message_of(o).find("--allow-different-data"), std::string::npos);
  o = {};
  o.allow_different_batch_size = true;
  EXPECT_NE(message_of(o).find("--allow-different-batch-size"), std::string::npos);
  o = {};
  o.plot = "curve.png";
  EXPECT_NE(message_of(o).find("--plot"), std::string::npos);
  EXPECT_EQ(message_of(TrainOptions{}), "");
}

TEST(TrainOptionsBatch, ZeroIsTheDevicesDefault) {
  TrainOptions o;
  EXPECT_EQ(o.batch_size, 0u);
  EXPECT_EQ(effective_batch_size(o), kCpuDefaultBatch);
  o.device = "cuda";
  EXPECT_EQ(effective_batch_size(o), kCudaDefaultBatch);
  EXPECT_EQ(default_synthetic_samples(o), kCudaDefaultSteps * kCudaDefaultBatch);
  o.batch_size = 777;
  EXPECT_EQ(effective_batch_size(o), 777u);
  EXPECT_EQ(default_synthetic_samples(o), TrainOptions{}.samples);  // never below the cpu's
  o.device = "cpu";
  EXPECT_EQ(default_synthetic_samples(o), TrainOptions{}.samples);
}

TEST(TrainSynthetic, LearnsTowardTheGroundTruth) {
  const fs::path out = fresh_dir("synthetic");
  TrainOptions o = small_options(out);
  o.samples = 300'000;
  o.eval_samples = 20'000;
  o.synthetic.horizon = o.samples;
  o.synthetic.seed = std::random_device{}();
  SCOPED_TRACE("data seed " + std::to_string(o.synthetic.seed));
  std::ostringstream log;
  const TrainReport r = run_training(o, {.log = &log});
  ASSERT_TRUE(r.ground_truth_auc.has_value());
  EXPECT_GT(*r.ground_truth_auc, 0.75);
  EXPECT_GT(r.eval_auc, 0.5 + 0.75 * (*r.ground_truth_auc - 0.5)) << log.str();
  EXPECT_LT(r.eval_auc, *r.ground_truth_auc + 0.01);
  fs::remove_all(out);
}

// --device cuda: the synthetic stream generated on the GPU and the FM kernels give the run the cpu
// gives (same held-out set, the same rows, an AUC within float noise); hybrid memory (most values
// in host memory) gives the same as all-HBM; a file trains through host batches copied over.
class TrainCuda : public testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA GPU";
  }
};

TEST_F(TrainCuda, SyntheticRunMatchesTheCpuRun) {
  const fs::path out = fresh_dir("cuda_synthetic");
  TrainOptions o = small_options(out);
  o.samples = 400'000;
  o.batch_size = 2048;
  o.eval_samples = 30'000;
  o.synthetic.horizon = o.samples;
  o.synthetic.seed = std::random_device{}();
  SCOPED_TRACE("data seed " + std::to_string(o.synthetic.seed));
  std::ostringstream cpu_log, gpu_log, hybrid_log;
  const TrainReport cpu = run_training(o, {.log = &cpu_log});
  o.device = "cuda";
  const TrainReport gpu = run_training(o, {.log = &gpu_log});
  EXPECT_EQ(gpu.progress.samples, cpu.progress.samples);
  EXPECT_EQ(gpu.progress.steps, cpu.progress.steps);
  ASSERT_TRUE(gpu.ground_truth_auc.has_value());
  EXPECT_EQ(*gpu.ground_truth_auc, *cpu.ground_truth_auc);
  // A GPU sample may differ from the host's at a rare pow / exp rounding boundary.
  EXPECT_NEAR(static_cast<double>(gpu.rows), static_cast<double>(cpu.rows), 1e-4 * cpu.rows);
  EXPECT_NEAR(gpu.eval_auc, cpu.eval_auc, 0.003) << gpu_log.str() << cpu_log.str();
  EXPECT_NEAR(gpu.eval_log_loss, cpu.eval_log_loss, 0.003);
  EXPECT_EQ(gpu.nonfinite_gradients, 0u);
  std::ifstream in(gpu.metrics_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_GT(j["throughput"]["cuda"]["samples_per_second"].get<double>(), 0.0);
  EXPECT_FALSE(j["throughput"]["cuda"]["device_name"].get<std::string>().empty());
  EXPECT_EQ(j["throughput"]["cuda"]["data_generated_on"].get<std::string>(), "gpu");
  EXPECT_EQ(j["options"]["batch_size"].get<uint32_t>(), 2048u);

  o.memory_mode = "hybrid";
  o.hbm_budget_gb = 0.004;  // ~4 MiB of values in HBM, the rest in pinned host memory
  const TrainReport hybrid = run_training(o, {.log = &hybrid_log});
  EXPECT_EQ(hybrid.rows, gpu.rows);
  EXPECT_NEAR(hybrid.eval_auc, gpu.eval_auc, 0.002) << hybrid_log.str();
  fs::remove_all(out);
}

TEST_F(TrainCuda, FileTrainsThroughHostBatches) {
  const fs::path out = fresh_dir("cuda_libsvm");
  TrainOptions o = small_options(out);
  o.data = "libsvm";
  o.train_file = (data_dir() / "train_small.libsvm").string();
  o.epochs = 5;
  o.batch_size = 64;
  o.device = "cuda";
  o.seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(o.seed));
  std::ostringstream log;
  const TrainReport r = run_training(o, {.log = &log});
  EXPECT_GT(r.progress.samples, 1000u);
  EXPECT_GT(r.eval_auc, 0.7) << log.str();
  std::ifstream in(r.metrics_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["throughput"]["cuda"]["data_generated_on"].get<std::string>(), "host");
  fs::remove_all(out);
}

}  // namespace
}  // namespace dynemb::train

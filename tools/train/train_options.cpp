#include "train/train_options.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "dynemb/core/error.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::train {
namespace {

constexpr const char* kWhere = "dynemb train";

void check(bool ok, const char* flag, const std::string& value, const std::string& limit) {
  require(ok, kWhere, flag, value, limit);
}

std::string str(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

uint32_t launched_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE"}) {
    if (const char* v = std::getenv(name)) {
      const long n = std::strtol(v, nullptr, 10);
      if (n > 1) return static_cast<uint32_t>(n);
    }
  }
  return 1;
}

void validate_train_options(const TrainOptions& o) {
  const ValueType value_type = parse_value_type(o.value_type, kWhere, "--value-type");
  check(!o.stochastic_rounding || value_type != ValueType::kFloat32, "--stochastic-rounding",
        "true", "needs --value-type float16 or bfloat16 (is " + o.value_type + ")");
  check(!o.state_in_value_type || value_type == ValueType::kBFloat16, "--state-in-value-type",
        "true", "needs --value-type bfloat16 (is " + o.value_type + ")");
  const bool synthetic = o.data == "synthetic";
  check(synthetic || o.data == "criteo" || o.data == "libsvm" || o.data == "libffm", "--data",
        o.data, "must be one of synthetic, criteo, libsvm, libffm");
  if (synthetic) {
    check(o.train_file.empty(), "--train-file", o.train_file, "is for --data criteo|libsvm|libffm");
    check(o.eval_file.empty(), "--eval-file", o.eval_file, "is for --data criteo|libsvm|libffm");
    check(o.samples >= 1, "--samples", std::to_string(o.samples),
          "must be >= 1 for synthetic data");
    check(o.epochs == 1, "--epochs", std::to_string(o.epochs),
          "must be 1 for the synthetic stream");
    validate_synthetic_options(o.synthetic);
  } else {
    check(!o.train_file.empty(), "--train-file", "''", "is required with --data " + o.data);
    check(std::filesystem::is_regular_file(o.train_file), "--train-file", o.train_file,
          "must be a readable file");
    check(o.eval_file.empty() || std::filesystem::is_regular_file(o.eval_file), "--eval-file",
          o.eval_file, "must be a readable file");
    check(o.epochs >= 1 && o.epochs <= 1000, "--epochs", std::to_string(o.epochs),
          "must be in [1, 1000]");
    check(!o.eval_file.empty() || (o.holdout_every >= 2 && o.holdout_every <= 1000000),
          "--holdout-every", std::to_string(o.holdout_every), "must be in [2, 1000000]");
  }
  check(o.eval_samples >= 1 && o.eval_samples <= 100'000'000, "--eval-samples",
        std::to_string(o.eval_samples), "must be in [1, 1e8]");
  check(o.dim >= 1 && o.dim <= 1024, "--dim", std::to_string(o.dim), "must be in [1, 1024]");
  check(o.batch_size <= (1u << 22), "--batch-size", std::to_string(o.batch_size),
        "must be in [1, 4194304] (0: the device's default)");
  const OptimizerKind kind = parse_optimizer(o.optimizer);
  (void)kind;
  check(std::isfinite(o.learning_rate) && o.learning_rate > 0 && o.learning_rate <= 100, "--lr",
        str(o.learning_rate), "must be in (0, 100]");
  check(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "--weight-decay", str(o.weight_decay),
        "must be >= 0");
  check(std::isfinite(o.init_stddev) && o.init_stddev >= 0 && o.init_stddev <= 10, "--init-stddev",
        str(o.init_stddev), "must be in [0, 10]");

  const Backend backend = parse_backend(o.device);
  const bool known_mode = o.memory_mode == "device" || o.memory_mode == "hbm" ||
                          o.memory_mode == "hybrid" || o.memory_mode == "caching";
  check(known_mode, "--memory-mode", o.memory_mode,
        "must be one of device (alias hbm), hybrid, caching");
  check(o.lower_tier == "host" || o.lower_tier == "rocksdb" || o.lower_tier == "redis",
        "--lower-tier", o.lower_tier, "must be one of host, rocksdb, redis");
  check(o.memory_mode == "caching" || o.lower_tier == "host", "--lower-tier", o.lower_tier,
        "is for --memory-mode caching");
  check(o.memory_mode == "caching" || o.lower_tier_path.empty(), "--lower-tier-path",
        o.lower_tier_path, "is for --memory-mode caching");
  check(std::isfinite(o.hbm_budget_gb) && o.hbm_budget_gb >= 0, "--hbm-budget-gb",
        str(o.hbm_budget_gb), "must be >= 0");
  check(o.hbm_budget_gb == 0 || o.memory_mode == "hybrid", "--hbm-budget-gb", str(o.hbm_budget_gb),
        "is for --memory-mode hybrid");
  if (o.memory_mode == "hybrid") {
    check(backend == Backend::kCuda, "--memory-mode", "hybrid",
          "needs --device cuda (on the cpu every row is in host memory already)");
    check(o.hbm_budget_gb > 0, "--hbm-budget-gb", str(o.hbm_budget_gb),
          "must be > 0 with --memory-mode hybrid");
  }
  check(o.capacity >= 128 && o.capacity % 128 == 0, "--capacity", std::to_string(o.capacity),
        "must be a multiple of 128, >= 128");
  check(o.init_capacity >= 128 && o.init_capacity % 128 == 0 && o.init_capacity <= o.capacity,
        "--init-capacity", std::to_string(o.init_capacity),
        "must be a multiple of 128 in [128, --capacity = " + std::to_string(o.capacity) + "]");
  const ScorePolicy policy = parse_score_policy(o.score_policy);
  check(policy != ScorePolicy::kCustomized, "--score-policy", o.score_policy,
        "must be step, timestamp or lfu (the trainer sets no custom scores)");
  check(o.ttl_steps == 0 || policy == ScorePolicy::kStep, "--ttl-steps",
        std::to_string(o.ttl_steps), "needs --score-policy step");
  check(o.threads <= 1024, "--threads", std::to_string(o.threads), "must be <= 1024");

  const bool checkpoints = !o.checkpoint_dir.empty();
  check(checkpoints || o.checkpoint_every == 0, "--checkpoint-every",
        std::to_string(o.checkpoint_every), "needs --checkpoint-dir");
  check(checkpoints || o.incremental_every == 0, "--incremental-every",
        std::to_string(o.incremental_every), "needs --checkpoint-dir");
  check(o.resume.empty() || std::filesystem::is_directory(o.resume), "--resume", o.resume,
        "must be an existing checkpoint directory");
  check(checkpoints || !o.overwrite, "--overwrite", "true", "needs --checkpoint-dir");
  const bool resuming = !o.resume.empty();
  check(resuming || !o.reset_optimizer, "--reset-optimizer", "true", "needs --resume");
  check(resuming || !o.allow_different_data, "--allow-different-data", "true", "needs --resume");
  check(resuming || !o.allow_different_batch_size, "--allow-different-batch-size", "true",
        "needs --resume");
  check(
      o.progress == "auto" || o.progress == "bar" || o.progress == "lines" || o.progress == "none",
      "--progress", o.progress, "must be one of auto, bar, lines, none");
  check(std::isfinite(o.progress_seconds) && o.progress_seconds > 0, "--progress-seconds",
        str(o.progress_seconds), "must be > 0");
  const std::string plot = plot_path(o);
  check(ends_with(plot, ".svg"), "--plot", plot, "must end in .svg (the plot is written as SVG)");
  check(!o.output_dir.empty() || (!o.metrics_json.empty() && !o.plot.empty()), "--output-dir", "''",
        "must be given unless --metrics-json and --plot are");

  // Choices the options already name but this build cannot run yet.
  if (o.memory_mode == "caching") {
    throw NotAvailable(
        "dynemb train: --memory-mode = caching, the storage tiers (host, rocksdb, "
        "redis) are not built yet; use --memory-mode device");
  }
  if (backend == Backend::kCuda && !cuda_backend_available()) {
    throw NotAvailable(
        "dynemb train: --device = cuda, this binary has no CUDA backend or no GPU is visible; "
        "use --device cpu");
  }
  if (launched_world_size() > 1) {
    throw NotAvailable("dynemb train: world size = " + std::to_string(launched_world_size()) +
                       " (from the launcher's environment), multi-process training needs the "
                       "dist part, which is not built yet; run one process");
  }
}

uint32_t effective_batch_size(const TrainOptions& o) {
  if (o.batch_size != 0) return o.batch_size;
  return parse_backend(o.device) == Backend::kCuda ? kCudaDefaultBatch : kCpuDefaultBatch;
}

uint64_t default_synthetic_samples(const TrainOptions& o) {
  const uint64_t cpu = TrainOptions{}.samples;
  if (parse_backend(o.device) != Backend::kCuda) return cpu;
  return std::max<uint64_t>(cpu, kCudaDefaultSteps * effective_batch_size(o));
}

EmbeddingOptions embedding_options(const TrainOptions& o) {
  EmbeddingOptions e;
  e.dim = o.dim + 1;
  e.table.init_capacity = o.init_capacity;
  e.table.max_capacity = o.capacity;
  e.table.score_policy = parse_score_policy(o.score_policy);
  e.table.safe_check = SafeCheck::kIgnore;  // refusals are counted and shown, not fatal
  e.table.initializer.kind = InitializerKind::kNormal;
  e.table.initializer.mean = 0.0f;
  e.table.initializer.stddev = o.init_stddev;
  e.table.initializer.seed = o.seed;
  e.table.num_threads = o.threads;
  e.table.device = 0;
  // device (hbm): every value row in HBM (the table's default, no budget); hybrid: values past
  // the budget go to pinned host memory.
  if (o.memory_mode == "hybrid") {
    e.table.max_hbm_for_values = static_cast<uint64_t>(o.hbm_budget_gb * (1ull << 30));
  }
  e.optimizer.kind = parse_optimizer(o.optimizer);
  e.optimizer.learning_rate = o.learning_rate;
  e.optimizer.weight_decay = o.weight_decay;
  e.value_type = parse_value_type(o.value_type, kWhere, "--value-type");
  e.stochastic_rounding = o.stochastic_rounding;
  e.state_in_value_type = o.state_in_value_type;
  e.admit_threshold = o.admit_threshold;
  e.ttl_steps = o.ttl_steps;
  e.gradient_check = SafeCheck::kWarning;
  return e;
}

std::string metrics_path(const TrainOptions& o) {
  return !o.metrics_json.empty() ? o.metrics_json
                                 : (std::filesystem::path(o.output_dir) / "metrics.json").string();
}

std::string plot_path(const TrainOptions& o) {
  return !o.plot.empty() ? o.plot
                         : (std::filesystem::path(o.output_dir) / "learning_curve.svg").string();
}

}  // namespace dynemb::train

// Everything `dynemb train` can be told, with the defaults a newcomer's first run uses.
#pragma once

#include <cstdint>
#include <string>

#include "dynemb/embedding/embedding.hpp"
#include "train/synthetic_stream.hpp"

namespace dynemb::train {

struct TrainOptions {
  // --- data ---
  std::string data = "synthetic";  // synthetic | criteo | libsvm | libffm
  std::string train_file;          // the training file (file formats)
  std::string eval_file;         // held-out file; empty: every holdout_every-th line of train_file
  uint64_t samples = 4'000'000;  // training samples (file formats: at most this many; 0 = all)
  uint32_t epochs = 1;           // passes over train_file
  uint32_t holdout_every = 10;
  uint64_t eval_samples = 100'000;  // held-out samples (file formats: at most)
  uint64_t eval_every = 1'000'000;  // samples between evaluations (0: only at the end)
  SyntheticOptions synthetic{};

  // --- model and optimizer ---
  uint32_t dim = 8;         // FM factor dimension (a table row is [w | v] = dim + 1 floats)
  uint32_t batch_size = 0;  // samples per step; 0: the device's default (default_batch_size)
  std::string optimizer = "ftrl";
  float learning_rate = 0.05f;
  float weight_decay = 0.0f;
  float init_stddev = 0.01f;           // new rows: w and v drawn from N(0, init_stddev^2)
  std::string value_type = "float32";  // what rows store: float32 | float16 | bfloat16
  bool stochastic_rounding = false;    // 16-bit rows: round updates stochastically
  bool state_in_value_type = false;    // 16-bit rows: optimizer state in the rows' type too
  uint64_t seed = 1;

  // --- tables and memory ---
  std::string device = "cpu";  // cpu | cuda
  std::string memory_mode =
      "device";                     // device (all rows in the device's memory) | hybrid | caching
  double hbm_budget_gb = 0.0;       // hybrid: GiB of values in HBM, the rest in pinned host memory
  std::string lower_tier = "host";  // caching: host | rocksdb | redis
  std::string lower_tier_path;      // caching: RocksDB directory or Redis address
  uint64_t capacity = uint64_t{1} << 24;  // most rows the table holds (then it evicts)
  uint64_t init_capacity = uint64_t{1} << 20;
  std::string score_policy = "step";
  uint32_t admit_threshold = 0;  // a key gets a row once seen this many times (<= 1: at once)
  uint64_t ttl_steps = 0;        // rows untouched for this many steps expire (0: never)
  uint32_t threads = 0;          // CPU table threads (0: all)

  // --- checkpoints ---
  std::string checkpoint_dir;
  uint64_t checkpoint_every = 0;      // samples between full checkpoints (0: only at the end)
  uint64_t incremental_every = 0;     // samples between incremental dumps (0: none)
  std::string resume;                 // a checkpoint directory to continue from
  bool overwrite = false;             // replace the run held in checkpoint_dir (else refused)
  bool reset_optimizer = false;       // resume with another --optimizer, its state starting fresh
  bool allow_different_data = false;  // resume onto another data stream
  bool allow_different_batch_size = false;  // resume with another --batch-size

  // --- output ---
  std::string output_dir = "train_output";  // metrics.json and learning_curve.svg go here
  std::string metrics_json;                 // overrides <output_dir>/metrics.json
  std::string plot;                         // overrides <output_dir>/learning_curve.svg (.svg)
  std::string progress = "auto";            // auto | bar | lines | none
  double progress_seconds = 0.5;            // between progress updates
};

// Throws InvalidArgument naming the first bad option (as its command-line flag), its value and
// its limit; NotAvailable for a choice this build cannot run yet (cuda, caching, ...).
void validate_train_options(const TrainOptions& options);

// Samples per step when --batch-size is not given: small on the CPU (the best AUC per sample),
// large on the GPU (a step has a fixed cost of kernel launches and synchronizations that a
// large batch amortizes; docs/train.md gives the measurements behind the choice).
inline constexpr uint32_t kCpuDefaultBatch = 1024;
inline constexpr uint32_t kCudaDefaultBatch = 65536;
// Synthetic samples when --samples is not given with --device cuda: this many steps' worth
// (65.5M at the default batch), never fewer than the cpu's 4M. What brings the held-out AUC
// close to the ground truth is the number of steps, not of samples (docs/train.md).
inline constexpr uint64_t kCudaDefaultSteps = 1000;

// The batch size a run uses: --batch-size, or the device's default.
uint32_t effective_batch_size(const TrainOptions& options);

// The training samples of a synthetic run whose --samples was not given: TrainOptions{}.samples
// on the cpu, max(that, kCudaDefaultSteps * batch) on cuda.
uint64_t default_synthetic_samples(const TrainOptions& options);

// The embedding options (table, optimizer, initializer) the options describe.
EmbeddingOptions embedding_options(const TrainOptions& options);

// The path of the metrics file and of the plot.
std::string metrics_path(const TrainOptions& options);
std::string plot_path(const TrainOptions& options);

// Ranks of a multi-process launch read from the environment (mpirun / torchrun): 1 if none.
uint32_t launched_world_size();

}  // namespace dynemb::train

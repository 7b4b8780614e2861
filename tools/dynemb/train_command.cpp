// `dynemb train`: trains a factorization-machine CTR model whose parameters all live in dynamic
// tables, on a synthetic Criteo-like stream or on Criteo TSV / libsvm / libffm files.
#include <iostream>
#include <memory>
#include <string>

#include "cli_checks.hpp"
#include "command_registry.hpp"
#include "dynemb/core/error.hpp"
#include "train/trainer.hpp"

namespace {

using dynemb::tools::fits;
using dynemb::train::TrainOptions;

void install(CLI::App& cmd) {
  auto o = std::make_shared<TrainOptions>();
  auto horizon = std::make_shared<uint64_t>(0);
  const TrainOptions d;
  cmd.footer(
      "With no options: trains on " + std::to_string(d.samples / 1000000) +
      "M samples of a synthetic Criteo-like stream (26 fields, cardinalities 3..40M, Zipf ids, "
      "new ids over time) whose labels come from a hidden FM, on the CPU (--device cuda: on the "
      "GPU, the stream generated there too), then reports held-out "
      "AUC against the ground-truth AUC and writes " +
      d.output_dir +
      "/metrics.json and learning_curve.svg. Ctrl-C stops after the current step, evaluates, "
      "writes the final checkpoint (with --checkpoint-dir) and the outputs; a second Ctrl-C "
      "exits at once (status 130). A run whose loss stops being finite stops with an error "
      "naming the step. Usage errors exit with status 2.");

  auto* data = cmd.add_option_group("data");
  data->add_option("--data", o->data, "synthetic | criteo | libsvm | libffm")
      ->capture_default_str();
  data->add_option("--train-file", o->train_file, "training file (criteo, libsvm, libffm)");
  data->add_option("--eval-file", o->eval_file,
                   "held-out file; default: every --holdout-every-th line of --train-file");
  auto* samples =
      data->add_option("--samples", o->samples,
                       "training samples (files: at most; 0 = all); default " +
                           std::to_string(d.samples / 1000000) + "M; synthetic on cuda: " +
                           std::to_string(dynemb::train::kCudaDefaultSteps) +
                           " batches, at least " + std::to_string(d.samples / 1000000) + "M")
          ->check(fits(o->samples));
  data->add_option("--epochs", o->epochs, "passes over --train-file")
      ->capture_default_str()
      ->check(fits(o->epochs));
  data->add_option("--holdout-every", o->holdout_every, "hold out every n-th line of --train-file")
      ->capture_default_str()
      ->check(fits(o->holdout_every));
  data->add_option("--eval-samples", o->eval_samples, "held-out samples (files: at most)")
      ->capture_default_str()
      ->check(fits(o->eval_samples));
  data->add_option("--eval-every", o->eval_every, "samples between evaluations (0: at the end)")
      ->capture_default_str()
      ->check(fits(o->eval_every));
  data->add_option("--zipf-alpha", o->synthetic.zipf_alpha, "synthetic: Zipf exponent of ids")
      ->capture_default_str();
  data->add_option("--active-ids", o->synthetic.active_ids,
                   "synthetic: ids per field with weights in the hidden FM")
      ->capture_default_str()
      ->check(fits(o->synthetic.active_ids));
  data->add_option("--true-dim", o->synthetic.true_dim, "synthetic: the hidden FM's dim")
      ->capture_default_str()
      ->check(fits(o->synthetic.true_dim));
  data->add_option("--start-vocab", o->synthetic.start_vocab,
                   "synthetic: fraction of each field's ids drawn at the start")
      ->capture_default_str();
  data->add_option("--vocab-horizon", *horizon,
                   "synthetic: samples until every id can appear (default: --samples)")
      ->check(fits(*horizon));
  data->add_option("--truth-linear-std", o->synthetic.linear_std,
                   "synthetic: stddev of the hidden FM's linear weights")
      ->capture_default_str();
  data->add_option("--truth-factor-std", o->synthetic.factor_std,
                   "synthetic: stddev of the hidden FM's factor elements")
      ->capture_default_str();
  data->add_option("--truth-bias", o->synthetic.bias, "synthetic: the hidden FM's bias")
      ->capture_default_str();
  data->add_option("--data-seed", o->synthetic.seed, "synthetic: seed of the stream and hidden FM")
      ->capture_default_str()
      ->check(fits(o->synthetic.seed));

  auto* model = cmd.add_option_group("model");
  model->add_option("--dim", o->dim, "FM factor dim (rows are [w | v] = dim + 1 floats)")
      ->capture_default_str()
      ->check(fits(o->dim));
  model
      ->add_option("--batch-size", o->batch_size,
                   "samples per step (default: " + std::to_string(dynemb::train::kCpuDefaultBatch) +
                       " on cpu, " + std::to_string(dynemb::train::kCudaDefaultBatch) + " on cuda)")
      ->check(fits(o->batch_size));
  model
      ->add_option("--optimizer", o->optimizer,
                   "sgd | adam | adagrad | rowwise_adagrad | rmsprop | ftrl")
      ->capture_default_str();
  model->add_option("--lr", o->learning_rate, "learning rate")->capture_default_str();
  model
      ->add_option("--value-type", o->value_type,
                   "what rows store: float32 | float16 (fp16) | bfloat16 (bf16); optimizer state "
                   "stays float32 unless --state-in-value-type")
      ->capture_default_str();
  model->add_flag("--stochastic-rounding", o->stochastic_rounding,
                  "16-bit rows: round each update stochastically instead of to nearest even");
  model->add_flag("--state-in-value-type", o->state_in_value_type,
                  "bfloat16 rows: keep the optimizer state in bfloat16 too (rounded "
                  "stochastically), halving its bytes");
  model->add_option("--weight-decay", o->weight_decay, "L2 on touched rows")->capture_default_str();
  model->add_option("--init-stddev", o->init_stddev, "new rows ~ N(0, s^2)")->capture_default_str();
  model->add_option("--seed", o->seed, "initializer seed")
      ->capture_default_str()
      ->check(fits(o->seed));

  auto* tables = cmd.add_option_group("tables and memory");
  tables->add_option("--device", o->device, "cpu | cuda")->capture_default_str();
  tables
      ->add_option("--memory-mode", o->memory_mode,
                   "device (all rows in the device's memory; alias hbm) | hybrid (cuda: values "
                   "past --hbm-budget-gb in pinned host memory) | caching (a fast table over "
                   "--lower-tier)")
      ->capture_default_str();
  tables->add_option("--hbm-budget-gb", o->hbm_budget_gb, "hybrid: GiB of values kept in HBM");
  tables->add_option("--lower-tier", o->lower_tier, "caching: host | rocksdb | redis")
      ->capture_default_str();
  tables->add_option("--lower-tier-path", o->lower_tier_path,
                     "caching: RocksDB directory or Redis host:port");
  tables->add_option("--capacity", o->capacity, "most rows the table holds, then it evicts")
      ->capture_default_str()
      ->check(fits(o->capacity));
  tables
      ->add_option("--init-capacity", o->init_capacity, "table slots at start (grows by doubling)")
      ->capture_default_str()
      ->check(fits(o->init_capacity));
  tables->add_option("--score-policy", o->score_policy, "step | timestamp | lfu (eviction order)")
      ->capture_default_str();
  tables
      ->add_option("--admit-threshold", o->admit_threshold,
                   "a key gets a row once seen this many times")
      ->capture_default_str()
      ->check(fits(o->admit_threshold));
  tables
      ->add_option("--ttl-steps", o->ttl_steps, "rows untouched this many steps expire (0: never)")
      ->capture_default_str()
      ->check(fits(o->ttl_steps));
  tables->add_option("--threads", o->threads, "CPU table threads (0: all)")
      ->capture_default_str()
      ->check(fits(o->threads));

  auto* ckpt = cmd.add_option_group("checkpoints");
  auto* checkpoint_dir = ckpt->add_option("--checkpoint-dir", o->checkpoint_dir,
                                          "where checkpoints go (final one at exit)");
  ckpt->add_option("--checkpoint-every", o->checkpoint_every, "samples between full checkpoints")
      ->check(fits(o->checkpoint_every));
  ckpt->add_option("--incremental-every", o->incremental_every,
                   "samples between incremental dumps (rows touched since the last)")
      ->check(fits(o->incremental_every));
  auto* resume = ckpt->add_option("--resume", o->resume, "continue from this checkpoint directory");
  ckpt->add_flag("--overwrite", o->overwrite,
                 "replace the run held in --checkpoint-dir (otherwise refused)");
  ckpt->add_flag("--reset-optimizer", o->reset_optimizer,
                 "resume with another --optimizer (the checkpoint's optimizer state is dropped)");
  ckpt->add_flag("--allow-different-data", o->allow_different_data,
                 "resume onto another data stream (--data, --data-seed, --train-file, ...)");
  ckpt->add_flag("--allow-different-batch-size", o->allow_different_batch_size,
                 "resume with another --batch-size");

  auto* out = cmd.add_option_group("output");
  out->add_option("--output-dir", o->output_dir, "metrics.json and learning_curve.svg go here")
      ->capture_default_str();
  out->add_option("--metrics-json", o->metrics_json,
                  "metrics file (default <output-dir>/metrics.json)");
  out->add_option("--plot", o->plot, "plot file, .svg (default <output-dir>/learning_curve.svg)");
  out->add_option("--progress", o->progress, "auto | bar | lines | none")->capture_default_str();
  out->add_option("--progress-seconds", o->progress_seconds, "seconds between progress updates")
      ->capture_default_str();

  cmd.callback([o, horizon, samples, checkpoint_dir, resume] {
    TrainOptions options = *o;
    // An empty path given on purpose is a mistake, not "no checkpoints".
    for (const CLI::Option* path : {checkpoint_dir, resume}) {
      if (path->count() > 0 && path->as<std::string>().empty()) {
        throw dynemb::InvalidArgument("dynemb train: " + path->get_name() +
                                      " = '', must be a directory path (leave the option out "
                                      "for none)");
      }
    }
    if (samples->count() == 0 && options.data == "synthetic") {
      options.samples = dynemb::train::default_synthetic_samples(options);
    }
    options.synthetic.horizon = *horizon != 0 ? *horizon : std::max<uint64_t>(options.samples, 1);
    dynemb::train::run_training(options);
  });
}

const bool registered =
    dynemb::tools::register_command({{"train"},
                                     "Train a factorization-machine CTR model in dynamic tables "
                                     "(synthetic, Criteo, libsvm, libffm)",
                                     install});

}  // namespace

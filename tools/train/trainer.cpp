#include "train/trainer.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dynemb/core/error.hpp"
#include "train/gpu_kernels.hpp"
#include "train/gpu_synthetic_stream.hpp"
#include "train/metrics.hpp"
#include "train/progress_bar.hpp"
#include "train/stop_request.hpp"
#include "train/synthetic_stream.hpp"
#include "train/text_readers.hpp"

namespace dynemb::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// --- data --------------------------------------------------------------------------------------

std::unique_ptr<SampleStream> make_training_stream(const TrainOptions& o) {
  if (o.data == "synthetic") {
    SyntheticOptions s = o.synthetic;
    return std::make_unique<SyntheticStream>(s, false);
  }
  const TextFormat format = parse_text_format(o.data, "--data");
  const LineSelection selection =
      o.eval_file.empty() ? LineSelection::kTraining : LineSelection::kAll;
  return std::make_unique<TextFileStream>(o.train_file, format, "--train-file", selection,
                                          o.holdout_every, o.epochs);
}

// The held-out set, in chunks of at most `chunk` samples.
std::vector<SampleBatch> load_eval_set(const TrainOptions& o, size_t chunk) {
  std::unique_ptr<SampleStream> stream;
  if (o.data == "synthetic") {
    stream = std::make_unique<SyntheticStream>(o.synthetic, true);
  } else if (!o.eval_file.empty()) {
    stream = std::make_unique<TextFileStream>(o.eval_file, parse_text_format(o.data, "--data"),
                                              "--eval-file");
  } else {
    stream = std::make_unique<TextFileStream>(o.train_file, parse_text_format(o.data, "--data"),
                                              "--train-file", LineSelection::kHeldOut,
                                              o.holdout_every, 1);
  }
  std::vector<SampleBatch> chunks;
  uint64_t loaded = 0;
  while (loaded < o.eval_samples) {
    throw_if_stop_requested("loading the held-out set");
    SampleBatch b;
    const size_t got =
        stream->next(b, static_cast<size_t>(std::min<uint64_t>(chunk, o.eval_samples - loaded)));
    if (got == 0) break;
    loaded += got;
    chunks.push_back(std::move(b));
  }
  return chunks;
}

struct Evaluation {
  double auc = NAN, log_loss = NAN;
  uint64_t nan_predictions = 0;  // left out of both
};

Evaluation evaluate(FmModel& model, const std::vector<SampleBatch>& eval_set) {
  std::vector<float> probs, all_probs, labels, chunk_probs;
  for (const SampleBatch& b : eval_set) {
    throw_if_stop_requested("evaluating");
    model.predict(b, chunk_probs);
    all_probs.insert(all_probs.end(), chunk_probs.begin(), chunk_probs.end());
    labels.insert(labels.end(), b.labels.begin(), b.labels.end());
  }
  Evaluation e;
  e.auc = roc_auc(all_probs, labels, &e.nan_predictions);
  e.log_loss = log_loss(all_probs, labels);
  return e;
}

// Stops a run whose loss or predictions stopped being finite: nothing it would learn or save
// from here on is usable.
void check_finite_step(const TrainOptions& o, const TrainProgress& before, double loss,
                       const float* probs, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += std::isfinite(probs[i]) ? 0 : 1;
  if (std::isfinite(loss) && bad == 0) return;
  char line[640];
  std::snprintf(line, sizeof line,
                "dynemb train: training diverged at step %llu (samples %llu-%llu): the batch's "
                "log loss is %g and %zu of %zu predictions are not finite. Lower --lr (now %g) "
                "or --init-stddev (now %g)%s; no checkpoint was written from the diverged model",
                static_cast<unsigned long long>(before.steps + 1),
                static_cast<unsigned long long>(before.samples + 1),
                static_cast<unsigned long long>(before.samples + n), loss, bad, n,
                static_cast<double>(o.learning_rate), static_cast<double>(o.init_stddev),
                o.optimizer == "sgd" ? "" : ", or try --optimizer sgd with a small --lr");
  throw Error(line);
}

std::optional<Evaluation> ground_truth(const std::vector<SampleBatch>& eval_set) {
  std::vector<float> probs, labels;
  for (const SampleBatch& b : eval_set) {
    if (b.true_probs.size() != b.size()) return std::nullopt;
    probs.insert(probs.end(), b.true_probs.begin(), b.true_probs.end());
    labels.insert(labels.end(), b.labels.begin(), b.labels.end());
  }
  if (probs.empty()) return std::nullopt;
  return Evaluation{roc_auc(probs, labels), log_loss(probs, labels)};
}

// --- outputs -----------------------------------------------------------------------------------

nlohmann::json json_number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

std::string read_first_line_with(const char* path, const std::string& prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "";
}

nlohmann::json machine_json() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  nlohmann::json m;
  m["hostname"] = host;
  m["cpu"] = read_first_line_with("/proc/cpuinfo", "model name");
  m["hardware_threads"] = std::thread::hardware_concurrency();
  return m;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buffer;
}

nlohmann::json options_json(const TrainOptions& o) {
  nlohmann::json j;
  j["data"] = o.data;
  j["train_file"] = o.train_file;
  j["eval_file"] = o.eval_file;
  j["samples"] = o.samples;
  j["epochs"] = o.epochs;
  j["holdout_every"] = o.holdout_every;
  j["eval_samples"] = o.eval_samples;
  j["eval_every"] = o.eval_every;
  j["dim"] = o.dim;
  j["batch_size"] = effective_batch_size(o);
  j["optimizer"] = o.optimizer;
  j["value_type"] = o.value_type;
  j["stochastic_rounding"] = o.stochastic_rounding;
  j["state_in_value_type"] = o.state_in_value_type;
  j["lr"] = o.learning_rate;
  j["weight_decay"] = o.weight_decay;
  j["init_stddev"] = o.init_stddev;
  j["seed"] = o.seed;
  j["device"] = o.device;
  j["memory_mode"] = o.memory_mode;
  j["hbm_budget_gb"] = o.hbm_budget_gb;
  j["capacity"] = o.capacity;
  j["init_capacity"] = o.init_capacity;
  j["score_policy"] = o.score_policy;
  j["admit_threshold"] = o.admit_threshold;
  j["ttl_steps"] = o.ttl_steps;
  j["threads"] = o.threads;
  j["checkpoint_dir"] = o.checkpoint_dir;
  j["checkpoint_every"] = o.checkpoint_every;
  j["incremental_every"] = o.incremental_every;
  j["resume"] = o.resume;
  j["overwrite"] = o.overwrite;
  j["reset_optimizer"] = o.reset_optimizer;
  j["allow_different_data"] = o.allow_different_data;
  j["allow_different_batch_size"] = o.allow_different_batch_size;
  if (o.data == "synthetic") {
    const SyntheticOptions& s = o.synthetic;
    j["synthetic"] = {{"seed", s.seed},
                      {"cardinalities", s.cardinalities},
                      {"zipf_alpha", s.zipf_alpha},
                      {"active_ids", s.active_ids},
                      {"true_dim", s.true_dim},
                      {"linear_std", s.linear_std},
                      {"factor_std", s.factor_std},
                      {"bias", s.bias},
                      {"start_vocab", s.start_vocab},
                      {"horizon", s.horizon}};
  }
  return j;
}

void write_metrics_json(const std::string& path, const TrainOptions& o, const TrainReport& r) {
  nlohmann::json j;
  j["tool"] = "dynemb train";
  j["date"] = utc_now();
  j["machine"] = machine_json();
  j["options"] = options_json(o);
  j["result"] = {
      {"samples", r.progress.samples},
      {"steps", r.progress.steps},
      {"samples_this_run", r.samples_this_run},
      {"wall_seconds", r.wall_seconds},
      {"train_seconds", r.train_seconds},
      {"samples_per_second", r.samples_per_second},
      {"eval_samples", r.eval_samples},
      {"eval_auc", json_number(r.eval_auc)},
      {"eval_log_loss", json_number(r.eval_log_loss)},
      {"eval_nan_predictions", r.eval_nan_predictions},
      {"ground_truth_auc", r.ground_truth_auc ? json_number(*r.ground_truth_auc) : nullptr},
      {"ground_truth_log_loss",
       r.ground_truth_log_loss ? json_number(*r.ground_truth_log_loss) : nullptr},
      {"auc_gap_to_ground_truth",
       r.ground_truth_auc ? json_number(*r.ground_truth_auc - r.eval_auc) : nullptr},
      {"rows", r.rows},
      {"evictions", r.evictions},
      {"refused", r.refused},
      {"nonfinite_gradients", r.nonfinite_gradients},
      {"interrupted", r.interrupted}};
  // Throughput by device: samples per second of training steps, and what ran them.
  nlohmann::json throughput = {{"samples_per_second", r.samples_per_second},
                               {"batch_size", effective_batch_size(o)},
                               {"hardware_threads", std::thread::hardware_concurrency()}};
  if (parse_backend(o.device) == Backend::kCuda) {
    const gpu::DeviceInfo gpu = gpu::device_info(0);
    throughput["device_name"] = gpu.name;
    throughput["device_memory_bytes"] = gpu.memory_bytes;
    throughput["multiprocessors"] = gpu.multiprocessors;
    throughput["data_generated_on"] = o.data == "synthetic" ? "gpu" : "host";
  } else {
    throughput["device_name"] = read_first_line_with("/proc/cpuinfo", "model name");
  }
  j["throughput"] = {{o.device, throughput}};
  nlohmann::json curve = nlohmann::json::array();
  for (const CurvePoint& c : r.curve) {
    curve.push_back({{"samples", c.samples},
                     {"seconds", c.seconds},
                     {"eval_auc", json_number(c.eval_auc)},
                     {"eval_log_loss", json_number(c.eval_log_loss)},
                     {"train_auc", json_number(c.train_auc)},
                     {"train_log_loss", json_number(c.train_log_loss)},
                     {"rows", c.rows},
                     {"evictions", c.evictions}});
  }
  j["curve"] = curve;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw Error("dynemb train: cannot write the metrics to '" + path + "'");
}

void make_parent_dir(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
}

}  // namespace

TrainReport run_training(const TrainOptions& o, const TrainHooks& hooks) {
  const auto start = Clock::now();
  validate_train_options(o);
  std::ostream& log = hooks.log != nullptr ? *hooks.log : std::cerr;
  TrainReport report;
  report.metrics_path = metrics_path(o);
  report.plot_path = plot_path(o);

  // Checkpoint store: asked for before anything heavy happens, so a missing part fails fast.
  std::unique_ptr<CheckpointStore> owned_store;
  CheckpointStore* store = hooks.store;
  const bool checkpoints = !o.checkpoint_dir.empty() || !o.resume.empty();
  if (checkpoints && store == nullptr) {
    owned_store = make_checkpoint_store();
    store = owned_store.get();
  }

  const Backend backend = parse_backend(o.device);
  const uint32_t batch_size = effective_batch_size(o);
  FmModel model(backend, embedding_options(o));
  // On the GPU the synthetic stream is generated there; files are read on the host (and each
  // batch copied to the device by the model).
  const bool gpu_data = backend == Backend::kCuda && o.data == "synthetic";
  std::unique_ptr<SampleStream> stream = gpu_data ? nullptr : make_training_stream(o);
  std::unique_ptr<GpuSyntheticStream> gpu_stream =
      gpu_data ? std::make_unique<GpuSyntheticStream>(o.synthetic, false) : nullptr;
  DeviceBatch device_batch;
  StopSignals signals(hooks.handle_signals);
  TrainState state = initial_state(o);
  if (!o.resume.empty()) {
    const std::optional<TrainState> saved = store->read_state(o.resume);
    if (!saved) {
      throw InvalidArgument("--resume = '" + o.resume +
                            "' holds no dynemb train checkpoint (no model/ with a manifest)");
    }
    check_resume_compatible(*saved, state, o);
    const bool reset_optimizer = saved->optimizer != state.optimizer;
    store->load(o.resume, model, reset_optimizer);
    if (reset_optimizer) {
      log << "--reset-optimizer: the checkpoint's " << saved->optimizer << " state is dropped; "
          << o.optimizer << " starts from fresh state\n";
    }
    state.run_id = saved->run_id;
    state.progress = saved->progress;
    state.incremental_threshold = saved->incremental_threshold;
    throw_if_stop_requested("loading the checkpoint");
    const uint64_t samples = state.progress.samples;
    const uint64_t skipped = gpu_stream ? gpu_stream->skip(samples) : stream->skip(samples);
    require(skipped == samples, "--resume", "samples", std::to_string(samples),
            "the data has only " + std::to_string(skipped) + " samples");
    log << "resumed run " << state.run_id << " from " << o.resume << " at " << samples
        << " samples, step " << state.progress.steps << ", " << model.embedding().table().size()
        << " rows\n";
  }
  if (!o.checkpoint_dir.empty()) {
    // The directory holds one run: this one (resumed) or, with --overwrite, the one replacing it.
    std::optional<TrainState> held;
    try {
      held = store->read_state(o.checkpoint_dir);
    } catch (const Error& e) {
      if (!o.overwrite) {
        throw InvalidArgument("--checkpoint-dir = '" + o.checkpoint_dir +
                              "' holds a checkpoint that cannot be read (" + e.what() +
                              "); pass --overwrite to replace it");
      }
    }
    if (held && held->run_id != state.run_id) {
      if (!o.overwrite) {
        throw InvalidArgument("--checkpoint-dir = '" + o.checkpoint_dir + "' holds another run (" +
                              held->run_id + ", " + std::to_string(held->progress.samples) +
                              " samples, step " + std::to_string(held->progress.steps) +
                              "); pass --resume " + o.checkpoint_dir +
                              " to continue it, or --overwrite to replace it");
      }
      log << "--overwrite: run " << held->run_id << " in " << o.checkpoint_dir
          << " is replaced by run " << state.run_id << " at its first checkpoint\n";
    }
    report.incremental_dumps_removed = store->prepare(o.checkpoint_dir, state);
    if (report.incremental_dumps_removed > 0) {
      log << "removed " << report.incremental_dumps_removed << " incremental dump(s) from "
          << o.checkpoint_dir << " that belong to another run, cannot be read, or lie past step "
          << state.progress.steps << " (redone by this run)\n";
    }
  }
  report.run_id = state.run_id;
  TrainProgress& progress = state.progress;
  const std::vector<SampleBatch> eval_set = load_eval_set(o, 65536);
  for (const SampleBatch& b : eval_set) report.eval_samples += b.size();
  require(
      report.eval_samples > 0, "dynemb train", "held-out samples", "0",
      "the held-out set is empty (use a larger file, --eval-file or a smaller --holdout-every)");
  if (const auto truth = ground_truth(eval_set)) {
    report.ground_truth_auc = truth->auc;
    report.ground_truth_log_loss = truth->log_loss;
  }
  log << "dynemb train: " << (gpu_stream ? gpu_stream->describe() : stream->describe()) << "\n"
      << "  FM dim " << o.dim << ", batch " << batch_size << ", " << o.optimizer << " lr "
      << o.learning_rate << ", device " << o.device << ", table capacity "
      << human_count(static_cast<double>(o.capacity)) << " rows, " << report.eval_samples
      << " held-out samples\n";

  ProgressBar bar(log, parse_progress_style(o.progress), o.progress_seconds);
  RunningAuc running(100'000);
  SampleBatch batch;
  std::vector<float> probs;
  const uint64_t target = o.samples;
  const uint64_t first_sample = progress.samples;
  double train_seconds = 0.0, loss_since_point = 0.0;
  uint64_t samples_since_point = 0;
  auto next_due = [&](uint64_t every) {
    return every == 0 ? UINT64_MAX : (progress.samples / every + 1) * every;
  };
  uint64_t next_eval = next_due(o.eval_every);
  uint64_t next_checkpoint = next_due(o.checkpoint_every);
  uint64_t next_incremental = next_due(o.incremental_every);

  auto table_counts = [&](uint64_t& rows, uint64_t& evictions) {
    rows = model.embedding().table().size();
    evictions = model.embedding().stats().table.evictions;
  };
  Evaluation last_evaluation;
  auto add_curve_point = [&] {
    const Evaluation e = evaluate(model, eval_set);
    CurvePoint p;
    p.samples = progress.samples;
    p.seconds = seconds_since(start);
    p.eval_auc = e.auc;
    p.eval_log_loss = e.log_loss;
    p.train_auc = running.value();
    p.train_log_loss = samples_since_point > 0 ? loss_since_point / samples_since_point : NAN;
    table_counts(p.rows, p.evictions);
    report.curve.push_back(p);
    loss_since_point = 0.0;
    samples_since_point = 0;
    last_evaluation = e;
    return e;
  };
  auto show = [&](bool force) {
    if (!force && !bar.due()) return;
    ProgressState s;
    s.samples = progress.samples;
    s.total = gpu_stream || o.data == "synthetic" ? target : 0;
    if (stream && s.total == 0) {
      // A file: how much of it was read (or of --samples, whichever ends the run first).
      s.fraction = stream->fraction_read();
      if (target > 0 && s.fraction >= 0) {
        s.fraction = std::max(s.fraction, static_cast<double>(progress.samples) / target);
      }
    }
    s.samples_per_second =
        train_seconds > 0 ? (progress.samples - first_sample) / train_seconds : 0;
    table_counts(s.rows, s.evictions);
    s.running_auc = running.value();
    s.elapsed_seconds = seconds_since(start);
    bar.update(s, force);
  };

  while (!stop_requested() && (target == 0 || progress.samples < target)) {
    const auto step_start = Clock::now();
    const uint64_t want =
        target == 0 ? batch_size : std::min<uint64_t>(batch_size, target - progress.samples);
    size_t got = 0;
    double loss = 0.0;
    const float* labels = nullptr;
    if (gpu_stream) {
      got = gpu_stream->next(device_batch, static_cast<size_t>(want));
      if (got == 0) break;
      loss = model.train_step(device_batch.view(), probs);
      labels = device_batch.host_labels.data();
    } else {
      batch.clear();
      got = stream->next(batch, static_cast<size_t>(want));
      if (got == 0) break;
      loss = model.train_step(batch, probs);
      labels = batch.labels.data();
    }
    train_seconds += seconds_since(step_start);
    check_finite_step(o, progress, loss, probs.data(), got);
    running.add(probs.data(), labels, got);
    loss_since_point += loss;
    samples_since_point += got;
    progress.samples += got;
    ++progress.steps;
    show(false);
    if (progress.samples >= next_eval) {
      try {
        add_curve_point();
      } catch (const Interrupted&) {
        break;  // Ctrl-C during the evaluation: finish up as after a step
      }
      next_eval = next_due(o.eval_every);
    }
    if (progress.samples >= next_checkpoint) {
      store->save(o.checkpoint_dir, model, state);
      next_checkpoint = next_due(o.checkpoint_every);
    }
    if (progress.samples >= next_incremental) {
      state.incremental_threshold =
          store->save_incremental(o.checkpoint_dir, model, state, state.incremental_threshold);
      next_incremental = next_due(o.incremental_every);
    }
  }
  show(true);
  bar.finish();
  report.interrupted = stop_requested();
  // From here a (second) Ctrl-C ends the run at once: Interrupted from the evaluation, or the
  // handler's exit.
  set_stop_requested(false);
  if (report.interrupted)
    log << "interrupted at " << progress.samples << " samples: finishing up\n";

  const bool evaluated_here =
      !report.curve.empty() && report.curve.back().samples == progress.samples;
  const Evaluation final_eval = evaluated_here ? last_evaluation : add_curve_point();
  if (!o.checkpoint_dir.empty()) {
    store->save(o.checkpoint_dir, model, state);
    log << "checkpoint written to " << o.checkpoint_dir << " (" << progress.samples
        << " samples)\n";
  }

  const EmbeddingStats stats = model.embedding().stats();
  report.progress = progress;
  report.samples_this_run = progress.samples - first_sample;
  report.train_seconds = train_seconds;
  report.samples_per_second = train_seconds > 0 ? report.samples_this_run / train_seconds : 0.0;
  report.eval_auc = final_eval.auc;
  report.eval_log_loss = final_eval.log_loss;
  report.eval_nan_predictions = final_eval.nan_predictions;
  report.rows = model.embedding().table().size();
  report.evictions = stats.table.evictions;
  report.refused = stats.table.refused;
  report.nonfinite_gradients = stats.nonfinite_gradients;
  report.wall_seconds = seconds_since(start);

  make_parent_dir(report.metrics_path);
  make_parent_dir(report.plot_path);
  std::string title = "dynemb train: FM on " + o.data + ", " +
                      human_count(static_cast<double>(progress.samples)) + " samples";
  write_learning_curve_svg(report.plot_path, report.curve, report.ground_truth_auc, title);
  report.wall_seconds = seconds_since(start);
  write_metrics_json(report.metrics_path, o, report);
  if (hooks.on_finish) hooks.on_finish(model, report);

  char line[512];
  std::snprintf(
      line, sizeof line,
      "done: %llu samples in %.1f s (%.1f s training, %s samples/s), %s rows, %s evicted\n"
      "  held-out AUC %.4f, log loss %.4f",
      static_cast<unsigned long long>(progress.samples), report.wall_seconds, report.train_seconds,
      human_count(report.samples_per_second).c_str(),
      human_count(static_cast<double>(report.rows)).c_str(),
      human_count(static_cast<double>(report.evictions)).c_str(), report.eval_auc,
      report.eval_log_loss);
  log << line;
  if (report.ground_truth_auc) {
    std::snprintf(line, sizeof line, "; ground truth AUC %.4f (gap %.4f), log loss %.4f",
                  *report.ground_truth_auc, *report.ground_truth_auc - report.eval_auc,
                  *report.ground_truth_log_loss);
    log << line;
  }
  if (report.eval_nan_predictions > 0) {
    log << "\n  " << report.eval_nan_predictions
        << " held-out predictions were NaN and are left out of the AUC and log loss";
  }
  log << "\n  metrics: " << report.metrics_path << ", plot: " << report.plot_path << "\n";
  return report;
}

}  // namespace dynemb::train

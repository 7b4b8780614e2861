#include "bench/train/train_bench.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>

#include "bench/table/machine_info.hpp"
#include "bench/table/result_file.hpp"
#include "bench/train/step_graph.hpp"
#include "bench/train/table_workers.hpp"
#include "bench/train/zipf.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding.hpp"
#include "dynemb/embedding/embedding_collection.hpp"

namespace dynemb::bench {
namespace {

constexpr int kBatchSets = 3;  // distinct batches per table, rotated over the steps

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes (read + written) per second of a large synchronous copy in the backend's memory,
// best of 5.
double measure_copy_bandwidth(Backend backend) {
  const size_t bytes = size_t{1} << 30;
  BackendBuffer<uint8_t> a(backend, bytes), b(backend, bytes);
  backend_zero(backend, a.data(), bytes);
  backend_zero(backend, b.data(), bytes);
  backend_synchronize(backend);
  double best = 0.0;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    copy_within_backend(backend, b.data(), a.data(), bytes);
    backend_synchronize(backend);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(bytes) / s);
  }
  return best;
}

uint64_t table_capacity(const TrainBenchConfig& c) {
  uint64_t cap = 128;
  while (cap < 2 * c.rows_per_table) cap *= 2;  // load factor <= 0.5 when every id is stored
  return cap;
}

}  // namespace

TrainBenchConfig train_bench_config_13m() {
  return TrainBenchConfig{};
}

TrainBenchConfig train_bench_config_1m() {
  TrainBenchConfig c;
  c.batch = 5120;  // 10 tables x 5,120 bags x 20 ids = 1,024,000 lookups
  return c;
}

void validate_step_shape(const char* where, uint32_t tables, uint64_t rows, uint64_t batch,
                         uint32_t ids_per_bag, double alpha) {
  require(tables >= 1 && tables <= 1024, where, "--tables", std::to_string(tables),
          "must be in [1, 1024]");
  require(rows >= 1 && rows <= (1ull << 32), where, "--rows", std::to_string(rows),
          "must be in [1, 2^32]");
  require(batch >= 1, where, "--batch", std::to_string(batch), "must be >= 1");
  require(ids_per_bag >= 1 && ids_per_bag <= 4096, where, "--ids-per-bag",
          std::to_string(ids_per_bag), "must be in [1, 4096]");
  require(alpha > 0.0 && alpha < 10.0, where, "--alpha", std::to_string(alpha),
          "must be in (0, 10)");
}

void validate_train_bench_config(const TrainBenchConfig& c) {
  constexpr const char* w = "bench train";
  validate_step_shape(w, c.tables, c.rows_per_table, c.batch, c.ids_per_bag, c.zipf_alpha);
  require(c.dim >= 1 && c.dim <= 4096, w, "--dim", std::to_string(c.dim), "must be in [1, 4096]");
  require(c.batch * c.ids_per_bag < (1ull << 31), w, "--batch x --ids-per-bag",
          std::to_string(c.batch * c.ids_per_bag), "must be < 2^31 ids per table");
  require(c.steps >= 1, w, "--steps", std::to_string(c.steps), "must be >= 1");
  require(!(c.grouped_tables && c.concurrent_tables), w, "--grouped-tables", "set",
          "runs every table on one stream: it cannot be combined with --concurrent-tables");
  require(!c.graph || (c.grouped_tables && c.host_sync_free && c.backend == Backend::kCuda), w,
          "--graph", "set",
          "captures the grouped host-sync-free step on cuda: needs --backend cuda and "
          "--grouped-tables, without --host-sync");
}

TrainBenchReport run_train_bench(const TrainBenchConfig& config, std::ostream& progress) {
  validate_train_bench_config(config);
  TrainBenchReport r;
  r.config = config;
  r.machine = query_machine_info();
  r.gpu = config.backend == Backend::kCuda ? query_gpu_info(0) : std::nullopt;
  r.git_commit = git_commit(DYNEMB_SOURCE_DIR);
  r.date_utc = utc_now_iso8601();
  const Backend backend = config.backend;
  auto clock = make_bench_clock(backend);
  const StreamHandle stream = clock->stream();
  r.copy_bandwidth = measure_copy_bandwidth(backend);
  progress << "copy bandwidth " << r.copy_bandwidth / 1e9 << " GB/s (read + written)\n";

  EmbeddingOptions eo;
  eo.dim = config.dim;
  eo.table.init_capacity = eo.table.max_capacity = table_capacity(config);
  eo.table.score_policy = ScorePolicy::kStep;
  eo.table.safe_check = SafeCheck::kWarning;
  eo.table.num_threads = config.threads;
  eo.table.initializer.kind = InitializerKind::kUniform;
  eo.optimizer.kind = config.optimizer;
  eo.optimizer.learning_rate = 1e-3f;
  eo.gradient_check = SafeCheck::kIgnore;
  eo.value_type = config.value_type;
  eo.state_in_value_type = config.state_in_value_type;
  eo.output_type = config.output_type;
  eo.deterministic_backward = config.deterministic_backward;
  const bool grouped = config.grouped_tables;
  // One host thread drives the collection on one stream: its tables need no cross-stream order
  // (and a graph capture could not wait on an event recorded outside it).
  if (grouped) eo.table.thread_safe = false;
  std::vector<std::unique_ptr<Embedding<int64_t>>> tables;
  std::unique_ptr<EmbeddingCollection<int64_t>> collection;
  if (grouped) {
    collection = std::make_unique<EmbeddingCollection<int64_t>>(
        backend, std::vector<EmbeddingOptions>(config.tables, eo));
    // Ids are below rows_per_table: the step's key bits, declared (no refusal possible).
    const auto key_bits =
        static_cast<uint32_t>(std::max<int>(1, std::bit_width(config.rows_per_table - 1)));
    collection->set_host_sync_free(config.host_sync_free, key_bits, config.lookup_streams);
    r.row_dim = collection->row_dim();
  } else {
    for (uint32_t t = 0; t < config.tables; ++t) {
      tables.push_back(std::make_unique<Embedding<int64_t>>(backend, eo));
    }
    r.row_dim = tables.front()->row_dim();
  }

  // Batches drawn once on the host and moved to the backend.
  const uint64_t ids = config.batch * config.ids_per_bag;
  r.lookups_per_step = ids * config.tables;
  std::mt19937_64 rng(config.seed != 0 ? config.seed : std::random_device{}());
  const ZipfSampler zipf(config.rows_per_table, config.zipf_alpha);
  std::vector<std::vector<BackendBuffer<int64_t>>> keys(config.tables);
  std::vector<int64_t> host_keys(ids);
  for (uint32_t t = 0; t < config.tables; ++t) {
    for (int g = 0; g < kBatchSets; ++g) {
      // Separate tables' ids carry their table in bit 40 and up; a collection's need not.
      const uint64_t tag = grouped ? 0 : uint64_t{t} << 40;
      for (auto& k : host_keys) k = static_cast<int64_t>(tag | zipf(rng));
      keys[t].emplace_back(backend, ids);
      keys[t].back().upload(host_keys.data(), ids);
    }
  }
  std::vector<int64_t> host_offsets(config.batch + 1);
  for (uint64_t b = 0; b <= config.batch; ++b)
    host_offsets[b] = static_cast<int64_t>(b * config.ids_per_bag);
  BackendBuffer<int64_t> offsets(backend, config.batch + 1);
  offsets.upload(host_offsets.data(), host_offsets.size());
  // A gradient of each table's pooled output, as a model's backward gives each table its own:
  // io_stride words a bag (output_type's elements, 16-bit ones packed two a word).
  const uint32_t io_stride = value_words(config.output_type, config.dim);
  std::vector<float> host_grad(config.batch * io_stride);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  // A collection takes every table's gradient in one buffer, table after table.
  std::vector<BackendBuffer<float>> grads;
  BackendBuffer<float> all_grads;
  if (grouped) all_grads = BackendBuffer<float>(backend, host_grad.size() * config.tables);
  for (uint32_t t = 0; t < config.tables; ++t) {
    for (uint64_t b = 0; b < config.batch; ++b) {
      for (uint32_t j = 0; j < config.dim; ++j)
        store_value(config.output_type, &host_grad[b * io_stride], j, normal(rng));
    }
    if (grouped) {
      copy_to_backend(backend, all_grads.data() + t * host_grad.size(), host_grad.data(),
                      host_grad.size() * sizeof(float));
    } else {
      grads.emplace_back(backend, host_grad.size());
      grads.back().upload(host_grad.data(), host_grad.size());
    }
  }

  // Concurrent tables: a clock (its own stream) and an output buffer per table, one host thread
  // each. Otherwise every table works on the run's clock stream and shares one output.
  const bool concurrent = config.concurrent_tables;
  std::vector<std::unique_ptr<BenchClock>> table_clocks;
  std::vector<BackendBuffer<float>> outs;
  for (uint32_t t = 0; t < (concurrent ? config.tables : 1u); ++t) {
    if (concurrent) table_clocks.push_back(make_bench_clock(backend));
    outs.emplace_back(backend, host_grad.size() * (grouped ? config.tables : 1u));
  }
  auto stream_of = [&](uint32_t t) { return concurrent ? table_clocks[t]->stream() : stream; };
  auto synchronize_all = [&] {
    clock->synchronize();
    for (auto& c : table_clocks) c->synchronize();
  };
  std::unique_ptr<TableWorkers> workers;
  if (concurrent) workers = std::make_unique<TableWorkers>(config.tables);

  auto table_step = [&](uint32_t t, int set, bool backward) {
    const EmbeddingBatch<int64_t> batch{keys[t][set].data(), ids,     offsets.data(),
                                        config.batch,        nullptr, PoolingMode::kSum};
    const StreamHandle s = stream_of(t);
    tables[t]->forward(batch, outs[concurrent ? t : 0].data(), io_stride, true, s);
    if (backward) {
      tables[t]->backward(grads[t].data(), io_stride, s);
      tables[t]->end_step();
    }
  };
  auto collection_step = [&](int set, bool backward) {
    std::vector<EmbeddingBatch<int64_t>> batches;
    for (uint32_t t = 0; t < config.tables; ++t) {
      batches.push_back(
          {keys[t][set].data(), ids, offsets.data(), config.batch, nullptr, PoolingMode::kSum});
    }
    collection->forward(batches, outs[0].data(), io_stride, true, stream);
    if (backward) {
      collection->backward(all_grads.data(), io_stride, stream);
      collection->end_step();
    }
  };
  // One step over every table; concurrent: returns once every table's stream is done.
  auto run_step = [&](int set, bool backward) {
    if (grouped) return collection_step(set, backward);
    if (!concurrent) {
      for (uint32_t t = 0; t < config.tables; ++t) table_step(t, set, backward);
      return;
    }
    workers->run([&](uint32_t t) {
      table_step(t, set, backward);
      table_clocks[t]->synchronize();
    });
  };
  // Seconds of one step: CUDA events on the one stream, or the host's wall clock around the
  // concurrent step (which ends with every stream done).
  auto timed_step = [&](int set, bool backward) {
    if (!concurrent) {
      clock->start();
      run_step(set, backward);
      return clock->stop();
    }
    const auto start = std::chrono::steady_clock::now();
    run_step(set, backward);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto unique_total = [&] {
    uint64_t u = 0;
    if (grouped) {
      for (const EmbeddingStats& t : collection->stats().tables) u += t.unique_lookups;
    }
    for (auto& t : tables) u += t->stats().unique_lookups;
    return u;
  };

  for (uint32_t s = 0; s < config.warmup_steps; ++s) run_step(s % kBatchSets, true);
  synchronize_all();
  progress << "warm-up done: " << config.warmup_steps << " steps"
           << (concurrent ? " (tables side by side)" : "") << "\n";

  std::vector<double> step_times, forward_times;
  const uint64_t unique_before = unique_total();
  for (uint32_t s = 0; s < config.steps; ++s)
    step_times.push_back(timed_step(s % kBatchSets, true));
  r.unique_per_step = double(unique_total() - unique_before) / config.steps;
  for (uint32_t s = 0; s < config.steps; ++s) {
    forward_times.push_back(timed_step(s % kBatchSets, false));
  }
  r.step_seconds = median(step_times);
  r.forward_seconds = median(forward_times);

  // --graph: one step and one forward captured, then replayed on each batch set.
  auto time_graphs = [&] {
    // The captured step reads its batch from fixed buffers: each replay's batch is copied there
    // first (on the stream, before the clock starts), as a model's input would be.
    std::vector<BackendBuffer<int64_t>> fixed;
    std::vector<EmbeddingBatch<int64_t>> batches;
    for (uint32_t t = 0; t < config.tables; ++t) {
      fixed.emplace_back(backend, ids);
      batches.push_back(
          {fixed[t].data(), ids, offsets.data(), config.batch, nullptr, PoolingMode::kSum});
    }
    auto load = [&](int set) {
      for (uint32_t t = 0; t < config.tables; ++t) {
        copy_within_backend(backend, fixed[t].data(), keys[t][set].data(), ids * sizeof(int64_t),
                            stream);
      }
    };
    load(0);
    collection->forward(batches, outs[0].data(), io_stride, true, stream);  // warm, not captured
    collection->backward(all_grads.data(), io_stride, stream);
    collection->end_step();
    clock->synchronize();
    StepGraph step_graph(stream, [&] {
      collection->forward(batches, outs[0].data(), io_stride, true, stream);
      collection->backward(all_grads.data(), io_stride, stream);
    });
    StepGraph forward_graph(
        stream, [&] { collection->forward(batches, outs[0].data(), io_stride, true, stream); });
    r.graph_nodes = step_graph.nodes();
    std::vector<double> graph_steps, graph_forwards;
    for (uint32_t s = 0; s < config.steps; ++s) {
      load(s % kBatchSets);
      clock->start();
      step_graph.replay(stream);
      graph_steps.push_back(clock->stop());
      collection->end_step();
    }
    for (uint32_t s = 0; s < config.steps; ++s) {
      load(s % kBatchSets);
      clock->start();
      forward_graph.replay(stream);
      graph_forwards.push_back(clock->stop());
    }
    r.graph_step_seconds = median(graph_steps);
    r.graph_forward_seconds = median(graph_forwards);
    const EmbeddingCollectionStats after = collection->stats();
    require(after.refused_batches == 0, "bench train", "--graph", "replayed steps",
            "refused " + std::to_string(after.refused_batches) +
                " batches (keys wider than "
                "the warm-up's): the timed work is not a training step");
    progress << "graph: " << r.graph_nodes << " nodes, step " << r.graph_step_seconds * 1e3
             << " ms, forward " << r.graph_forward_seconds * 1e3 << " ms\n";
  };
  // The graph's timings, or (its capture or a replay failed) the error, in the report.
  if (config.graph) {
    try {
      time_graphs();
    } catch (const std::exception& e) {
      r.graph_error = e.what();
      progress << "graph: failed: " << r.graph_error << "\n";
      synchronize_all();
    }
  }

  // Profiled steps: one table after the other, a sync of its stream after every stage, times
  // summed over the tables.
  std::map<std::string, std::vector<double>> stage_samples;
  const uint32_t profiled = std::min<uint32_t>(config.steps, 3);
  for (uint32_t s = 0; s < profiled; ++s) {
    std::map<std::string, double> step_stage;
    auto last = std::chrono::steady_clock::now();
    // Times each stage up to the end of its work on `stage_clock`'s stream.
    auto observer = [&](BenchClock* stage_clock) {
      return [&, stage_clock](const char* stage) {
        stage_clock->synchronize();
        const auto now = std::chrono::steady_clock::now();
        step_stage[stage] += std::chrono::duration<double>(now - last).count();
        last = now;
      };
    };
    if (grouped) collection->set_stage_observer(observer(clock.get()));
    for (uint32_t t = 0; t < tables.size(); ++t) {
      tables[t]->set_stage_observer(observer(concurrent ? table_clocks[t].get() : clock.get()));
    }
    synchronize_all();
    last = std::chrono::steady_clock::now();
    if (grouped) {
      collection_step(s % kBatchSets, true);
    } else {
      for (uint32_t t = 0; t < config.tables; ++t) table_step(t, s % kBatchSets, true);
    }
    for (auto& [stage, seconds] : step_stage) stage_samples[stage].push_back(seconds);
  }
  synchronize_all();
  for (auto& t : tables) t->set_stage_observer(nullptr);
  if (grouped) collection->set_stage_observer(nullptr);
  for (auto& [stage, samples] : stage_samples) r.stage_seconds[stage] = median(samples);

  const double u = r.unique_per_step;
  // A pooled output or gradient row (--output-type).
  const double dim_bytes = 4.0 * value_words(config.output_type, config.dim);
  // An embedding's elements as stored (--value-type).
  const double value_bytes = 4.0 * value_words(config.value_type, config.dim);
  r.forward_floor_bytes = double(r.lookups_per_step) * 8 + u * value_bytes +
                          double(config.batch) * config.tables * dim_bytes;
  // The rows' useful bytes (embedding + optimizer state as stored), not the padding align_rows
  // adds: the floor stays the same whatever the layout.
  const double useful_row_bytes =
      value_bytes + 4.0 * optimizer_state_words(
                              config.optimizer, config.dim,
                              config.state_in_value_type ? config.value_type : ValueType::kFloat32);
  r.step_floor_bytes = r.forward_floor_bytes + double(config.batch) * config.tables * dim_bytes +
                       u * useful_row_bytes * 2;
  r.forward_floor_seconds = r.forward_floor_bytes / r.copy_bandwidth;
  r.step_floor_seconds = r.step_floor_bytes / r.copy_bandwidth;
  for (uint32_t t = 0; t < config.tables; ++t) {
    r.rows_after +=
        grouped ? collection->table(t).size(stream) : tables[t]->table().size(stream_of(t));
  }
  return r;
}

std::string report_train_bench(const TrainBenchReport& r, std::ostream& out) {
  const TrainBenchConfig& c = r.config;
  out << std::fixed << std::setprecision(3);
  out << "\ndynemb bench train (" << to_string(c.backend) << ", " << to_string(c.optimizer)
      << "): " << c.tables << " tables x dim " << c.dim << ", batch " << c.batch << " x "
      << c.ids_per_bag << " ids, Zipf " << c.zipf_alpha << " over " << c.rows_per_table
      << " ids: " << r.lookups_per_step << " lookups, " << std::setprecision(0) << r.unique_per_step
      << " unique per step, rows of " << r.row_dim << " floats"
      << (c.concurrent_tables ? ", tables side by side" : "")
      << (c.grouped_tables ? ", one collection of every table" : "") << "\n"
      << std::setprecision(3);
  out << "| stage | ms | floor ms | ms / floor |\n| --- | --- | --- | --- |\n";
  auto row = [&](const std::string& name, double s, double floor) {
    out << "| " << name << " | " << s * 1e3 << " | ";
    if (floor > 0) {
      out << floor * 1e3 << " | " << s / floor << " |\n";
    } else {
      out << "- | - |\n";
    }
  };
  row("step (forward + backward + " + to_string(c.optimizer) + ")", r.step_seconds,
      r.step_floor_seconds);
  row("forward only", r.forward_seconds, r.forward_floor_seconds);
  if (c.graph) {
    row("step, CUDA graph replay", r.graph_step_seconds, r.step_floor_seconds);
    row("forward only, CUDA graph replay", r.graph_forward_seconds, r.forward_floor_seconds);
  }
  for (const auto& [stage, s] : r.stage_seconds) row("  " + stage + " (profiled)", s, 0.0);
  out << "copy bandwidth " << r.copy_bandwidth / 1e9 << " GB/s (read + written)\n";

  nlohmann::json j;
  j["benchmark"] = "dynemb bench train";
  j["machine"] = machine_json(r.machine);
  j["gpu"] = gpu_json(r.gpu);
  j["git_commit"] = r.git_commit;
  j["date_utc"] = r.date_utc;
  j["parameters"] = {
      {"backend", to_string(c.backend)},
      {"tables", c.tables},
      {"rows_per_table", c.rows_per_table},
      {"dim", c.dim},
      {"batch", c.batch},
      {"ids_per_bag", c.ids_per_bag},
      {"zipf_alpha", c.zipf_alpha},
      {"optimizer", to_string(c.optimizer)},
      {"warmup_steps", c.warmup_steps},
      {"steps", c.steps},
      {"threads", c.threads},
      {"concurrent_tables", c.concurrent_tables},
      {"grouped_tables", c.grouped_tables},
      {"host_sync_free", c.grouped_tables && c.host_sync_free},
      {"lookup_streams", c.grouped_tables && c.host_sync_free ? c.lookup_streams : 0},
      {"key_bits", c.grouped_tables && c.host_sync_free
                       ? std::max<int>(1, std::bit_width(c.rows_per_table - 1))
                       : 0},
      {"graph", c.graph},
      {"value_type", to_string(c.value_type)},
      {"state_in_value_type", c.state_in_value_type},
      {"output_type", to_string(c.output_type)},
      {"deterministic_backward", c.deterministic_backward},
      {"table_thread_safe", !c.grouped_tables},
      {"key_table_tag", c.grouped_tables ? "none" : "table << 40"},
      {"pooling", "sum"},
      {"gradients", c.grouped_tables ? "one buffer, table after table" : "one buffer per table"},
      {"score_policy", "step"},
      {"key_type", "int64"}};
  j["results"] = {{"lookups_per_step", r.lookups_per_step},
                  {"unique_per_step", r.unique_per_step},
                  {"step_ms_median", r.step_seconds * 1e3},
                  {"forward_ms_median", r.forward_seconds * 1e3},
                  {"copy_bandwidth_gb_s", r.copy_bandwidth / 1e9},
                  {"step_floor_bytes", r.step_floor_bytes},
                  {"step_floor_ms", r.step_floor_seconds * 1e3},
                  {"forward_floor_bytes", r.forward_floor_bytes},
                  {"forward_floor_ms", r.forward_floor_seconds * 1e3},
                  {"step_over_floor", r.step_seconds / r.step_floor_seconds},
                  {"forward_over_floor", r.forward_seconds / r.forward_floor_seconds},
                  {"rows_after", r.rows_after},
                  {"row_dim", r.row_dim}};
  for (const auto& [stage, s] : r.stage_seconds) j["results"]["stages_ms"][stage] = s * 1e3;
  if (c.graph) {
    j["results"]["graph_step_ms_median"] = r.graph_step_seconds * 1e3;
    j["results"]["graph_forward_ms_median"] = r.graph_forward_seconds * 1e3;
    j["results"]["graph_nodes"] = r.graph_nodes;
    if (!r.graph_error.empty()) j["results"]["graph_error"] = r.graph_error;
  }
  const std::string path =
      !c.json_path.empty()
          ? c.json_path
          : default_result_path(
                DYNEMB_SOURCE_DIR,
                "train-" + to_string(c.backend) + "-" + std::to_string(r.lookups_per_step / 1000) +
                    "k" + (c.grouped_tables ? "-grouped" : "") + (c.graph ? "-graph" : "") +
                    (c.value_type != ValueType::kFloat32 ? "-" + to_string(c.value_type)
                                                         : std::string()) +
                    (c.state_in_value_type ? "-state16" : "") +
                    (c.output_type != ValueType::kFloat32 ? "-out-" + to_string(c.output_type)
                                                          : std::string()) +
                    (c.deterministic_backward ? "" : "-unordered"),
                r.machine.hostname);
  write_json_file(path, j);
  out << "wrote " << path << "\n";
  return path;
}

}  // namespace dynemb::bench

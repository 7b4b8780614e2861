// dynemb_bench_dist: training steps of a ShardedEmbeddingCollection over the processes of an
// mpirun job, with each stage's time (dedup, exchange, lookup, pool, backward, optimizer),
// beside the same rank's batch stepped by one EmbeddingCollection with no communication (the
// peer, measured in the same run). Each rank draws its own batches (weak scaling: the batch per
// rank is fixed). On the CPU the ranks talk over MPI (host memory); with --backend cuda over
// NCCL, one GPU per rank, and the run also measures NCCL's all-to-all bandwidth at the
// exchange's message size and a sweep of sizes. Rank 0 prints a table and writes JSON naming
// the machine, GPU, commit, date and every parameter. bench/dist/run.sh runs it at 1, 2 and 3
// ranks on the CPU; scripts/gpu_check_multi.sh at 1 and 2 GPUs.
//
// Usage: mpirun -np N dynemb_bench_dist [--backend cpu|cuda] [--shape 13m] [--tables T]
//        [--dim D] [--bags B] [--ids-per-bag L] [--keys K] [--alpha A] [--steps S]
//        [--warmup W] [--profile-steps P] [--seed X] [--exchange rows|pooled_on_owner]
//        [--peer on|off] [--json PATH]
//   --shape 13m: ANCHORS.md's step per rank: 10 tables x 65,536 bags x 20 ids (13.1M lookups),
//   dim 128, 1M keys per table, Zipf 1.05.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "bench/table/bench_clock.hpp"
#include "bench/table/machine_info.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/dist/mpi_communicator.hpp"
#include "dynemb/dist/nccl_communicator.hpp"
#include "dynemb/dist/sharded_collection.hpp"
#include "dynemb/table/table.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace dynemb;

struct Args {
  Backend backend = Backend::kCpu;
  uint32_t tables = 4;
  uint32_t dim = 32;
  uint32_t bags = 2048;  // per table and rank
  uint32_t ids_per_bag = 8;
  uint64_t keys = 2'000'000;  // key space per table
  double alpha = 1.05;        // Zipf exponent of the key draw (0: uniform)
  uint32_t steps = 20;
  uint32_t warmup = 3;
  uint32_t profile_steps = 3;  // steps with a device sync after every stage (the breakdown)
  uint64_t seed = 1;
  std::string exchange = "rows";  // or "pooled_on_owner"
  bool peer = true;
  std::string json;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--backend") {
      const std::string b = value();
      if (b != "cpu" && b != "cuda") throw std::runtime_error("--backend " + b + ": cpu or cuda");
      a.backend = b == "cpu" ? Backend::kCpu : Backend::kCuda;
    } else if (flag == "--shape") {
      const std::string shape = value();
      if (shape != "13m") throw std::runtime_error("--shape " + shape + ": only 13m");
      a.tables = 10;
      a.dim = 128;
      a.bags = 65536;
      a.ids_per_bag = 20;
      a.keys = 1 << 20;
      a.alpha = 1.05;
    } else if (flag == "--tables")
      a.tables = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--dim")
      a.dim = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--bags")
      a.bags = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--ids-per-bag")
      a.ids_per_bag = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--keys")
      a.keys = std::stoull(value());
    else if (flag == "--alpha")
      a.alpha = std::stod(value());
    else if (flag == "--steps")
      a.steps = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--warmup")
      a.warmup = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--profile-steps")
      a.profile_steps = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--peer") {
      const std::string v = value();
      if (v != "on" && v != "off") throw std::runtime_error("--peer " + v + ": on or off");
      a.peer = v == "on";
    } else if (flag == "--seed")
      a.seed = std::stoull(value());
    else if (flag == "--exchange")
      a.exchange = value();
    else if (flag == "--json")
      a.json = value();
    else
      throw std::runtime_error("unknown option " + flag);
  }
  return a;
}

// Zipf(alpha) over [0, n) by inverting the continuous approximation of its CDF, then spread
// over the key space by a fixed odd multiplier (hot keys are not the small ones).
class KeyDraw {
 public:
  KeyDraw(uint64_t n, double alpha) : n_(n), alpha_(alpha) {}
  int64_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    uint64_t rank;
    if (alpha_ <= 0.0) {
      rank = static_cast<uint64_t>(u * n_);
    } else if (std::fabs(alpha_ - 1.0) < 1e-9) {
      rank = static_cast<uint64_t>(std::exp(u * std::log(static_cast<double>(n_) + 1.0)) - 1.0);
    } else {
      const double a = 1.0 - alpha_;
      rank = static_cast<uint64_t>(
          std::pow(u * (std::pow(static_cast<double>(n_) + 1.0, a) - 1.0) + 1.0, 1.0 / a) - 1.0);
    }
    rank = std::min(rank, n_ - 1);
    return static_cast<int64_t>((rank * 0x9E3779B97F4A7C15ull) >> 8);
  }

 private:
  uint64_t n_;
  double alpha_;
};

// One step's batches: drawn on the host, kept in the backend's memory.
struct Batches {
  std::vector<std::vector<int64_t>> keys, offsets;
  std::vector<BackendBuffer<int64_t>> device_keys, device_offsets;
  std::vector<EmbeddingBatch<int64_t>> views;
};

Batches draw(const Args& a, const KeyDraw& key, std::mt19937_64& rng, int device) {
  Batches b;
  b.keys.resize(a.tables);
  b.offsets.resize(a.tables);
  for (uint32_t t = 0; t < a.tables; ++t) {
    b.offsets[t].push_back(0);
    b.keys[t].reserve(static_cast<size_t>(a.bags) * a.ids_per_bag);
    for (uint32_t i = 0; i < a.bags; ++i) {
      for (uint32_t j = 0; j < a.ids_per_bag; ++j) b.keys[t].push_back(key(rng));
      b.offsets[t].push_back(static_cast<int64_t>(b.keys[t].size()));
    }
    const int64_t* keys = b.keys[t].data();
    const int64_t* offsets = b.offsets[t].data();
    if (a.backend != Backend::kCpu) {
      b.device_keys.emplace_back(a.backend, b.keys[t].size(), device);
      b.device_keys.back().upload(b.keys[t].data(), b.keys[t].size());
      b.device_offsets.emplace_back(a.backend, b.offsets[t].size(), device);
      b.device_offsets.back().upload(b.offsets[t].data(), b.offsets[t].size());
      keys = b.device_keys.back().data();
      offsets = b.device_offsets.back().data();
    }
    b.views.push_back({keys, b.keys[t].size(), offsets, a.bags, nullptr, PoolingMode::kSum});
  }
  return b;
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Table slots for `rows` stored rows at load factor <= 0.5 (bench train's rule).
uint64_t capacity_for(uint64_t rows) {
  uint64_t cap = 1024;
  while (cap < 2 * rows) cap *= 2;
  return cap;
}

// The communicator of this rank: MPI on the CPU; on CUDA, NCCL on GPU rank % devices,
// bootstrapped over MPI (which `mpi` keeps alive).
std::unique_ptr<dist::Communicator> make_comm(const Args& a, dist::Communicator& mpi) {
  if (a.backend == Backend::kCpu) return nullptr;
  const int devices = cuda_device_count();
  if (devices < 1) throw std::runtime_error("--backend cuda: no CUDA device visible");
  auto exchanger = dist::make_mpi_id_exchanger();
  return dist::make_nccl_communicator(mpi.rank(), mpi.world_size(), *exchanger,
                                      static_cast<int>(mpi.rank()) % devices);
}

// One all-to-all of `chunk` bytes to every rank (self included), repeated: seconds per call.
double time_all_to_all(dist::Communicator& comm, size_t chunk, int reps) {
  const uint32_t W = comm.world_size();
  const Backend backend = comm.backend();
  BackendBuffer<uint8_t> send(backend, chunk * W + 1, comm.device());
  BackendBuffer<uint8_t> recv(backend, chunk * W + 1, comm.device());
  std::vector<size_t> counts(W, chunk), displs(W);
  for (uint32_t r = 0; r < W; ++r) displs[r] = r * chunk;
  auto once = [&] {
    comm.all_to_all_v(send.data(), counts.data(), displs.data(), recv.data(), counts.data(),
                      displs.data(), dist::DataType::kUint8);
  };
  for (int i = 0; i < 3; ++i) once();
  backend_synchronize(backend);
  comm.barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) once();
  backend_synchronize(backend);
  const double mine = since(t0) / reps;
  // The slowest rank's time is the collective's.
  const auto all = dist::all_gather_values<double>(comm, std::vector<double>{mine});
  return *std::max_element(all.begin(), all.end());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    auto mpi = dist::make_mpi_communicator();
    auto nccl = make_comm(a, *mpi);
    dist::Communicator* comm = nccl ? nccl.get() : mpi.get();
    const uint32_t rank = comm->rank(), world = comm->world_size();
    const int device = comm->device();
    const Backend backend = a.backend;
    // Each rank's shard holds about 1 / world of the keys; the peer (one process alone) all.
    auto table_options = [&](uint64_t rows) {
      std::vector<EmbeddingOptions> options(a.tables);
      for (uint32_t t = 0; t < a.tables; ++t) {
        EmbeddingOptions& o = options[t];
        o.dim = a.dim;
        o.optimizer.kind = OptimizerKind::kAdam;
        o.optimizer.learning_rate = 1e-3f;
        o.table.init_capacity = o.table.max_capacity = capacity_for(rows);
        o.table.score_policy = ScorePolicy::kStep;
        o.table.safe_check = SafeCheck::kWarning;
        o.table.initializer.seed = 100 + t;
        o.table.device = backend == Backend::kCpu ? 0 : device;
        o.gradient_check = SafeCheck::kIgnore;
      }
      return options;
    };
    const std::vector<EmbeddingOptions> options = table_options((a.keys + world - 1) / world);
    if (a.exchange != "rows" && a.exchange != "pooled_on_owner") {
      throw std::runtime_error("--exchange " + a.exchange + ": rows or pooled_on_owner");
    }
    const dist::ShardedExchange exchange =
        a.exchange == "rows" ? dist::ShardedExchange::kRows : dist::ShardedExchange::kPooledOnOwner;
    dist::ShardedEmbeddingCollection<int64_t> sharded(*comm, options, dist::KeyRouter::hash(),
                                                      exchange);
    std::unique_ptr<EmbeddingCollection<int64_t>> peer;
    if (a.peer) {
      peer = std::make_unique<EmbeddingCollection<int64_t>>(backend, table_options(a.keys));
    }
    const KeyDraw key(a.keys, a.alpha);
    std::mt19937_64 rng(a.seed * 1000003 + rank);
    // Two batch sets drawn up front, used in turn (drawing 13M Zipf keys takes longer than a
    // step).
    std::vector<Batches> sets;
    for (int i = 0; i < 2; ++i) sets.push_back(draw(a, key, rng, device));
    const size_t out_rows = static_cast<size_t>(a.tables) * a.bags;
    std::vector<float> host_grad(out_rows * a.dim);
    for (float& g : host_grad) g = std::uniform_real_distribution<float>(-1e-2f, 1e-2f)(rng);
    std::vector<float> host_out;
    BackendBuffer<float> device_out, device_grad;
    float* out = nullptr;
    const float* grad = host_grad.data();
    if (backend == Backend::kCpu) {
      host_out.resize(out_rows * a.dim);
      out = host_out.data();
    } else {
      device_out = BackendBuffer<float>(backend, out_rows * a.dim, device);
      device_grad = BackendBuffer<float>(backend, out_rows * a.dim, device);
      device_grad.upload(host_grad.data(), host_grad.size());
      out = device_out.data();
      grad = device_grad.data();
    }
    auto sharded_step = [&](const Batches& b) {
      sharded.forward(b.views, out, a.dim, true);
      sharded.backward(grad, a.dim);
      sharded.end_step();
      backend_synchronize(backend);
    };
    double sharded_s = 0, peer_s = 0;
    dist::ShardedTraffic traffic_start{};
    for (uint32_t step = 0; step < a.warmup + a.steps; ++step) {
      if (step == a.warmup) traffic_start = sharded.traffic();
      const Batches& b = sets[step % sets.size()];
      comm->barrier();
      auto t0 = Clock::now();
      sharded_step(b);
      const double s = since(t0);
      double p = 0;
      if (peer) {
        t0 = Clock::now();
        peer->forward(b.views, out, a.dim, true);
        peer->backward(grad, a.dim);
        peer->end_step();
        backend_synchronize(backend);
        p = since(t0);
      }
      if (step >= a.warmup) {
        sharded_s += s;
        peer_s += p;
      }
    }
    const dist::ShardedTraffic traffic_end = sharded.traffic();
    // The breakdown: more steps with a device sync after every stage.
    sharded.set_synchronize_stages(true);
    sharded.reset_stage_times();
    for (uint32_t step = 0; step < a.profile_steps; ++step) {
      comm->barrier();
      sharded_step(sets[step % sets.size()]);
    }
    const auto& st = sharded.stage_times();
    // Per rank and step: keys, rows and gradients this rank sent to other ranks (rows exchange:
    // each remote unique key's key out, its row back, its gradient out; so about
    // keys_to_others x (8 + 2 x 4 x dim) bytes leave a rank when traffic is symmetric).
    const double n = a.steps, np = std::max<uint32_t>(a.profile_steps, 1);
    const double remote_keys =
        static_cast<double>(traffic_end.keys_to_others - traffic_start.keys_to_others) / n;
    const double unique_keys =
        static_cast<double>(traffic_end.unique_keys - traffic_start.unique_keys) / n;
    const double exchange_bytes = remote_keys * (sizeof(int64_t) + 2.0 * sizeof(float) * a.dim);
    const std::vector<double> mine{
        sharded_s / n,    peer_s / n,        st.dedup / np,
        st.exchange / np, st.lookup / np,    st.pool / np,
        st.backward / np, st.optimizer / np, remote_keys / std::max(unique_keys, 1.0),
        exchange_bytes};
    const std::vector<double> all = dist::all_gather_values<double>(*comm, mine);
    const std::vector<uint64_t> sizes = sharded.global_sizes();
    // All-to-all bandwidth of the same communicator: the forward rows message of this run
    // (a chunk per peer) and a sweep.
    nlohmann::json a2a = nlohmann::json::array();
    if (world > 1) {
      double rows_chunk = 0;
      for (uint32_t r = 0; r < world; ++r) rows_chunk += all[r * mine.size() + 9];
      rows_chunk = rows_chunk / world / (sizeof(int64_t) + 2.0 * sizeof(float) * a.dim) *
                   sizeof(float) * a.dim / (world - 1);  // one rank's rows to one peer
      std::vector<size_t> chunks{static_cast<size_t>(rows_chunk), 1 << 20, 16 << 20, 64 << 20,
                                 256 << 20};
      if (backend == Backend::kCpu) chunks = {static_cast<size_t>(rows_chunk), 1 << 20, 16 << 20};
      for (size_t c : chunks) {
        if (c == 0) continue;
        const double t = time_all_to_all(*comm, c, 10);
        const double bytes = static_cast<double>(c) * world;  // a rank's send buffer
        a2a.push_back({{"bytes_per_peer", c},
                       {"seconds", t},
                       {"algbw_bytes_per_s", bytes / t},
                       {"busbw_bytes_per_s", bytes / t * (world - 1) / world},
                       {"matches_exchange", c == chunks.front()}});
      }
    }
    if (rank == 0) {
      const char* names[] = {
          "step", "peer_step", "dedup",     "exchange",        "lookup",
          "pool", "backward",  "optimizer", "remote_fraction", "exchange_bytes_to_others"};
      const size_t k = mine.size();
      nlohmann::json ranks = nlohmann::json::array();
      std::vector<double> mean(k, 0), worst(k, 0);
      for (uint32_t r = 0; r < world; ++r) {
        nlohmann::json jr;
        for (size_t i = 0; i < k; ++i) {
          const double v = all[r * k + i];
          jr[names[i]] = v;
          mean[i] += v / world;
          worst[i] = std::max(worst[i], v);
        }
        ranks.push_back(jr);
      }
      const double ids = static_cast<double>(a.tables) * a.bags * a.ids_per_bag * world;
      std::printf(
          "dist bench (%s, %s exchange): %u ranks, %u tables x %u bags x %u ids per rank, dim "
          "%u, Adam, keys %llu (zipf %.2f), %u steps (+%u profiled)\n",
          comm->name().c_str(), a.exchange.c_str(), world, a.tables, a.bags, a.ids_per_bag, a.dim,
          static_cast<unsigned long long>(a.keys), a.alpha, a.steps, a.profile_steps);
      std::printf("%-12s %12s %12s\n", "stage", "mean ms", "max ms");
      for (size_t i = 0; i < 8; ++i) {
        std::printf("%-12s %12.3f %12.3f\n", names[i], mean[i] * 1e3, worst[i] * 1e3);
      }
      std::printf("(step: unsynchronized steps; dedup..optimizer: the profiled steps)\n");
      std::printf("ids/s over the job: %.3g (sharded), the peer one rank alone: %.3g\n",
                  ids / worst[0], a.peer ? ids / world / mean[1] : 0.0);
      std::printf("keys sent to another rank: %.1f%% of unique keys; %.1f MB per rank and step\n",
                  mean[8] * 100, mean[9] / 1e6);
      double exchange_bw = 0, a2a_bw = 0;
      if (!a2a.empty()) {
        exchange_bw = mean[9] / mean[3];
        a2a_bw = a2a.front()["busbw_bytes_per_s"].get<double>();
        for (const auto& m : a2a) {
          std::printf("all-to-all %10.1f KB per peer: %8.3f ms, busbw %7.2f GB/s\n",
                      m["bytes_per_peer"].get<double>() / 1e3, m["seconds"].get<double>() * 1e3,
                      m["busbw_bytes_per_s"].get<double>() / 1e9);
        }
        std::printf(
            "exchange: %.2f GB/s of bytes to other ranks over the exchange stage (%.0f%% of the "
            "all-to-all busbw at its message size)\n",
            exchange_bw / 1e9, 100 * exchange_bw / a2a_bw);
      }
      if (!a.json.empty()) {
        const auto machine = bench::query_machine_info();
        const auto gpu = backend == Backend::kCpu ? std::nullopt : bench::query_gpu_info(device);
        nlohmann::json j;
        j["benchmark"] = "dist";
        j["date"] = bench::utc_now_iso8601();
        j["commit"] = bench::git_commit(DYNEMB_SOURCE_DIR);
        j["machine"] = {{"hostname", machine.hostname},
                        {"cpu", machine.cpu_model},
                        {"cores", machine.cores},
                        {"memory_bytes", machine.memory_bytes},
                        {"load_averages", bench::load_averages()}};
        if (gpu) {
          j["gpu"] = {{"name", gpu->name},
                      {"memory_bytes", gpu->memory_bytes},
                      {"compute_capability", std::to_string(gpu->compute_capability_major) + "." +
                                                 std::to_string(gpu->compute_capability_minor)},
                      {"multiprocessors", gpu->multiprocessors},
                      {"devices", cuda_device_count()}};
        } else {
          j["gpu"] = nullptr;
        }
        j["communicator"] = comm->name();
        j["parameters"] = {
            {"backend", to_string(backend)},
            {"world_size", world},
            {"tables", a.tables},
            {"dim", a.dim},
            {"bags_per_table_and_rank", a.bags},
            {"ids_per_bag", a.ids_per_bag},
            {"lookups_per_rank_and_step", static_cast<uint64_t>(a.tables) * a.bags * a.ids_per_bag},
            {"key_space", a.keys},
            {"zipf_alpha", a.alpha},
            {"steps", a.steps},
            {"warmup", a.warmup},
            {"profile_steps", a.profile_steps},
            {"seed", a.seed},
            {"optimizer", "adam"},
            {"pooling", "sum"},
            {"router", sharded.router().name()},
            {"exchange", a.exchange},
            {"shard_capacity", options.front().table.max_capacity}};
        nlohmann::json m, w;
        for (size_t i = 0; i < k; ++i) {
          m[names[i]] = mean[i];
          w[names[i]] = worst[i];
        }
        j["seconds_per_step_mean_over_ranks"] = m;
        j["seconds_per_step_max_over_ranks"] = w;
        j["stage_times_from"] = "profiled steps, a device sync after every stage";
        j["per_rank"] = ranks;
        j["ids_per_second_job"] = ids / worst[0];
        j["all_to_all"] = a2a;
        if (!a2a.empty()) {
          j["exchange_bandwidth_bytes_per_s"] = exchange_bw;
          j["exchange_fraction_of_all_to_all_busbw"] = exchange_bw / a2a_bw;
        }
        if (a.peer) {
          j["peer"] = {{"what",
                        "one EmbeddingCollection stepping the same rank's batch, no "
                        "communication, same process and device"},
                       {"seconds_per_step_mean", mean[1]}};
        }
        j["rows_stored"] = sizes;
        std::ofstream(a.json) << j.dump(2) << "\n";
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dynemb_bench_dist: %s\n", e.what());
    return 1;
  }
}

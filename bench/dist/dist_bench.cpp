// dynemb_bench_dist: training steps of a ShardedEmbeddingCollection over the processes of an
// mpirun job (MPI, host memory), with each stage's time (dedup, exchange, lookup, pool,
// backward, optimizer), beside the same rank's batch stepped by one EmbeddingCollection with no
// communication (the peer, measured in the same run). Each rank draws its own batch (weak
// scaling: the batch per rank is fixed). Rank 0 prints a table and writes JSON naming the
// machine, commit, date and every parameter. bench/dist/run.sh runs it at 1, 2 and 3 ranks.
//
// Usage: mpirun -np N dynemb_bench_dist [--tables T] [--dim D] [--bags B] [--ids-per-bag L]
//        [--keys K] [--alpha A] [--steps S] [--warmup W] [--seed X]
//        [--exchange rows|pooled_on_owner] [--json PATH]
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

#include "bench/table/machine_info.hpp"
#include "dynemb/dist/mpi_communicator.hpp"
#include "dynemb/dist/sharded_collection.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace dynemb;

struct Args {
  uint32_t tables = 4;
  uint32_t dim = 32;
  uint32_t bags = 2048;  // per table and rank
  uint32_t ids_per_bag = 8;
  uint64_t keys = 2'000'000;  // key space per table
  double alpha = 1.05;        // Zipf exponent of the key draw (0: uniform)
  uint32_t steps = 20;
  uint32_t warmup = 3;
  uint64_t seed = 1;
  std::string exchange = "rows";  // or "pooled_on_owner"
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
    if (flag == "--tables")
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
    else if (flag == "--seed")
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

struct Batches {
  std::vector<std::vector<int64_t>> keys, offsets;
  std::vector<EmbeddingBatch<int64_t>> views;
};

Batches draw(const Args& a, const KeyDraw& key, std::mt19937_64& rng) {
  Batches b;
  b.keys.resize(a.tables);
  b.offsets.resize(a.tables);
  for (uint32_t t = 0; t < a.tables; ++t) {
    b.offsets[t].push_back(0);
    for (uint32_t i = 0; i < a.bags; ++i) {
      for (uint32_t j = 0; j < a.ids_per_bag; ++j) b.keys[t].push_back(key(rng));
      b.offsets[t].push_back(static_cast<int64_t>(b.keys[t].size()));
    }
    b.views.push_back({b.keys[t].data(), b.keys[t].size(), b.offsets[t].data(), a.bags, nullptr,
                       PoolingMode::kSum});
  }
  return b;
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    auto comm = dist::make_mpi_communicator();
    const uint32_t rank = comm->rank(), world = comm->world_size();
    std::vector<EmbeddingOptions> options(a.tables);
    for (uint32_t t = 0; t < a.tables; ++t) {
      EmbeddingOptions& o = options[t];
      o.dim = a.dim;
      o.optimizer.kind = OptimizerKind::kAdam;
      o.table.init_capacity = 1 << 16;
      o.table.max_capacity = 1ull << 24;
      o.table.score_policy = ScorePolicy::kStep;
      o.table.initializer.seed = 100 + t;
    }
    if (a.exchange != "rows" && a.exchange != "pooled_on_owner") {
      throw std::runtime_error("--exchange " + a.exchange + ": rows or pooled_on_owner");
    }
    const dist::ShardedExchange exchange =
        a.exchange == "rows" ? dist::ShardedExchange::kRows : dist::ShardedExchange::kPooledOnOwner;
    dist::ShardedEmbeddingCollection<int64_t> sharded(*comm, options, dist::KeyRouter::hash(),
                                                      exchange);
    EmbeddingCollection<int64_t> peer(Backend::kCpu, options);
    const KeyDraw key(a.keys, a.alpha);
    std::mt19937_64 rng(a.seed * 1000003 + rank);
    const size_t out_rows = static_cast<size_t>(a.tables) * a.bags;
    std::vector<float> out(out_rows * a.dim), grad(out_rows * a.dim);
    for (float& g : grad) g = std::uniform_real_distribution<float>(-1, 1)(rng);
    double sharded_s = 0, peer_s = 0;
    for (uint32_t step = 0; step < a.warmup + a.steps; ++step) {
      if (step == a.warmup) sharded.reset_stage_times();
      const Batches b = draw(a, key, rng);
      comm->barrier();
      auto t0 = Clock::now();
      sharded.forward(b.views, out.data(), a.dim, true);
      sharded.backward(grad.data(), a.dim);
      sharded.end_step();
      const double s = since(t0);
      t0 = Clock::now();
      peer.forward(b.views, out.data(), a.dim, true);
      peer.backward(grad.data(), a.dim);
      peer.end_step();
      const double p = since(t0);
      if (step >= a.warmup) {
        sharded_s += s;
        peer_s += p;
      }
    }
    // Per rank: step seconds, stage seconds (per step), traffic.
    const auto& st = sharded.stage_times();
    const auto& tr = sharded.traffic();
    const double n = a.steps;
    const std::vector<double> mine{
        sharded_s / n,   peer_s / n,       st.dedup / n,
        st.exchange / n, st.lookup / n,    st.pool / n,
        st.backward / n, st.optimizer / n, static_cast<double>(tr.keys_to_others) / tr.unique_keys};
    const std::vector<double> all = dist::all_gather_values<double>(*comm, mine);
    const std::vector<uint64_t> sizes = sharded.global_sizes();
    if (rank == 0) {
      const char* names[] = {"step", "peer_step", "dedup",     "exchange",       "lookup",
                             "pool", "backward",  "optimizer", "remote_fraction"};
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
          "dist bench (%s exchange): %u ranks, %u tables x %u bags x %u ids per rank, dim %u, "
          "Adam, keys %llu (zipf %.2f), %u steps\n",
          a.exchange.c_str(), world, a.tables, a.bags, a.ids_per_bag, a.dim,
          static_cast<unsigned long long>(a.keys), a.alpha, a.steps);
      std::printf("%-12s %12s %12s\n", "stage", "mean ms", "max ms");
      for (size_t i = 0; i + 1 < k; ++i) {
        std::printf("%-12s %12.3f %12.3f\n", names[i], mean[i] * 1e3, worst[i] * 1e3);
      }
      std::printf("ids/s over the job: %.3g (sharded), the peer one rank alone: %.3g\n",
                  ids / worst[0], ids / world / mean[1]);
      std::printf("keys sent to another rank: %.1f%% of unique keys\n", mean[k - 1] * 100);
      if (!a.json.empty()) {
        const auto machine = bench::query_machine_info();
        nlohmann::json j;
        j["benchmark"] = "dist";
        j["date"] = bench::utc_now_iso8601();
        j["commit"] = bench::git_commit(DYNEMB_SOURCE_DIR);
        j["machine"] = {{"hostname", machine.hostname},
                        {"cpu", machine.cpu_model},
                        {"cores", machine.cores},
                        {"memory_bytes", machine.memory_bytes},
                        {"load_averages", bench::load_averages()}};
        j["gpu"] = nullptr;
        j["communicator"] = comm->name();
        j["parameters"] = {{"world_size", world},
                           {"tables", a.tables},
                           {"dim", a.dim},
                           {"bags_per_table_and_rank", a.bags},
                           {"ids_per_bag", a.ids_per_bag},
                           {"key_space", a.keys},
                           {"zipf_alpha", a.alpha},
                           {"steps", a.steps},
                           {"warmup", a.warmup},
                           {"seed", a.seed},
                           {"optimizer", "adam"},
                           {"pooling", "sum"},
                           {"router", sharded.router().name()},
                           {"exchange", a.exchange}};
        nlohmann::json m, w;
        for (size_t i = 0; i < k; ++i) {
          m[names[i]] = mean[i];
          w[names[i]] = worst[i];
        }
        j["seconds_per_step_mean_over_ranks"] = m;
        j["seconds_per_step_max_over_ranks"] = w;
        j["per_rank"] = ranks;
        j["ids_per_second_job"] = ids / worst[0];
        j["peer"] = {{"what",
                      "one EmbeddingCollection stepping the same rank's batch, no "
                      "communication, same process"},
                     {"seconds_per_step_mean", mean[1]}};
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

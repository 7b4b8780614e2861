// dynemb_bench_wholememory: gather and scatter bandwidth of WholeMemory tensors (every type and
// location, dims 32 / 128 / 512 by default, 1M random rows per call) beside the copy bandwidth
// cudaMemcpy reaches in the same run on the same bytes: device to device (device location),
// registered host to device (host location), and, with several ranks on different GPUs, a
// peer GPU's part to this one (NVLink). One process per rank: --ranks N forks N processes joined
// by the socket communicator, rank r on device r % device count. Rank 0 prints a table and
// writes JSON naming the machine, GPU, commit, date and every parameter.
//
// Usage: dynemb_bench_wholememory [--ranks N] [--dims 32,128,512] [--rows-per-call 1000000]
//        [--table-mib 2048] [--iters 10] [--warmup 2] [--types continuous,chunked,distributed]
//        [--locations device,host] [--seed S] [--json PATH]
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/table/machine_info.hpp"
#include "bench/table/result_file.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/wholememory/socket_communicator.hpp"
#include "dynemb/wholememory/tensor.hpp"

namespace {

using namespace dynemb;
using namespace dynemb::wholememory;
using Clock = std::chrono::steady_clock;

struct Args {
  uint32_t ranks = 1;
  std::vector<uint64_t> dims = {32, 128, 512};
  uint64_t rows_per_call = 1'000'000;
  uint64_t table_mib = 2048;  // per tensor, all ranks together
  uint32_t iters = 10;
  uint32_t warmup = 2;
  std::vector<std::string> types = {"continuous", "chunked", "distributed"};
  std::vector<std::string> locations = {"device", "host"};
  uint64_t seed = 1;
  std::string json;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--ranks")
      a.ranks = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--dims") {
      a.dims.clear();
      for (const auto& d : split(value())) a.dims.push_back(std::stoull(d));
    } else if (flag == "--rows-per-call")
      a.rows_per_call = std::stoull(value());
    else if (flag == "--table-mib")
      a.table_mib = std::stoull(value());
    else if (flag == "--iters")
      a.iters = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--warmup")
      a.warmup = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--types")
      a.types = split(value());
    else if (flag == "--locations")
      a.locations = split(value());
    else if (flag == "--seed")
      a.seed = std::stoull(value());
    else if (flag == "--json")
      a.json = value();
    else
      throw std::runtime_error("unknown flag " + flag);
  }
  return a;
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// Seconds per call of `op` (the slowest rank's mean over iters, after warmup).
template <class Op>
double time_calls(dist::Communicator& comm, const Args& a, Op&& op) {
  for (uint32_t i = 0; i < a.warmup; ++i) op();
  check(cudaDeviceSynchronize(), "sync");
  comm.barrier();
  const auto start = Clock::now();
  for (uint32_t i = 0; i < a.iters; ++i) op();
  check(cudaDeviceSynchronize(), "sync");
  double seconds = std::chrono::duration<double>(Clock::now() - start).count() / a.iters;
  const std::vector<double> all = dist::all_gather_values<double>(comm, {&seconds, 1});
  return *std::max_element(all.begin(), all.end());
}

int run_rank(const Args& a, dist::Communicator& comm) {
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  const int device = static_cast<int>(comm.rank() % static_cast<uint32_t>(devices));
  check(cudaSetDevice(device), "cudaSetDevice");
  nlohmann::json results = nlohmann::json::array();
  if (comm.rank() == 0) {
    std::printf("%-12s %-7s %5s %12s %12s %12s %12s %12s %9s %9s\n", "type", "where", "dim",
                "gather GB/s", "sorted GB/s", "scatter GB/s", "copy GB/s", "peer GB/s", "gather/cp",
                "scat/cp");
  }
  for (const std::string& location_name : a.locations) {
    for (const std::string& type_name : a.types) {
      for (uint64_t dim : a.dims) {
        TensorOptions o;
        const uint64_t row_bytes = dim * sizeof(float);
        o.shape = {std::max<uint64_t>(comm.world_size(), (a.table_mib << 20) / row_bytes), dim};
        o.type = parse_memory_type(type_name);
        o.location = parse_memory_location(location_name);
        o.device = device;
        WholeTensor t(comm, o);
        const uint64_t n = a.rows_per_call;
        std::mt19937_64 rng(a.seed + comm.rank());
        std::vector<int64_t> host_indices(n);
        for (auto& i : host_indices) i = static_cast<int64_t>(rng() % t.rows());
        BackendBuffer<int64_t> indices(Backend::kCuda, n, device);
        indices.upload(host_indices.data(), n);
        BackendBuffer<float> rows(Backend::kCuda, n * dim, device);
        check(cudaMemset(rows.data(), 0, n * row_bytes), "cudaMemset");
        const double gather_s =
            time_calls(comm, a, [&] { gather(t, indices.data(), n, rows.data(), Backend::kCuda); });
        // The same rows asked in ascending order (the sort itself not timed): what sorting the
        // indices first could gain at best.
        std::vector<int64_t> sorted_indices = host_indices;
        std::sort(sorted_indices.begin(), sorted_indices.end());
        BackendBuffer<int64_t> sorted(Backend::kCuda, n, device);
        sorted.upload(sorted_indices.data(), n);
        const double sorted_s =
            time_calls(comm, a, [&] { gather(t, sorted.data(), n, rows.data(), Backend::kCuda); });
        const double scatter_s = time_calls(
            comm, a, [&] { scatter(t, rows.data(), indices.data(), n, Backend::kCuda); });
        // The copy peer: the same bytes by cudaMemcpy, from this rank's part (device to device,
        // or registered host to device) into the dense buffer.
        const uint64_t bytes = n * row_bytes;
        const uint64_t local = std::min<uint64_t>(bytes, t.memory().local_bytes());
        double copy_s = 0;
        if (local > 0) {
          copy_s = time_calls(comm, a, [&] {
            for (uint64_t done = 0; done < bytes; done += local) {
              check(cudaMemcpyAsync(reinterpret_cast<char*>(rows.data()) + done,
                                    t.memory().local_data(), std::min(local, bytes - done),
                                    cudaMemcpyDefault, nullptr),
                    "cudaMemcpyAsync");
            }
          });
        } else {
          copy_s = time_calls(comm, a, [] {});
        }
        // The peer GPU's part, where another rank's GPU is mapped here (NVLink / PCIe).
        double peer_s = 0;
        const uint32_t next = (comm.rank() + 1) % comm.world_size();
        const bool has_peer = comm.world_size() > 1 && o.type != MemoryType::kDistributed &&
                              t.memory().partition().bytes_of(next) > 0;
        const uint64_t peer_bytes =
            has_peer ? std::min<uint64_t>(bytes, t.memory().partition().bytes_of(next)) : 0;
        if (comm.world_size() > 1 && o.type != MemoryType::kDistributed) {
          peer_s = time_calls(comm, a, [&] {
            if (!has_peer) return;
            for (uint64_t done = 0; done < bytes; done += peer_bytes) {
              check(cudaMemcpyAsync(reinterpret_cast<char*>(rows.data()) + done,
                                    t.memory().part_data(next), std::min(peer_bytes, bytes - done),
                                    cudaMemcpyDefault, nullptr),
                    "cudaMemcpyAsync");
            }
          });
        }
        const double gb = static_cast<double>(bytes) / 1e9;
        const double copy_gbs = local > 0 ? gb / copy_s : 0;
        if (comm.rank() == 0) {
          std::printf("%-12s %-7s %5llu %12.1f %12.1f %12.1f %12.1f %12.1f %9.2f %9.2f\n",
                      type_name.c_str(), location_name.c_str(),
                      static_cast<unsigned long long>(dim), gb / gather_s, gb / sorted_s,
                      gb / scatter_s, copy_gbs, peer_s > 0 ? gb / peer_s : 0.0,
                      copy_gbs > 0 ? gb / gather_s / copy_gbs : 0.0,
                      copy_gbs > 0 ? gb / scatter_s / copy_gbs : 0.0);
          std::fflush(stdout);
        }
        results.push_back({{"type", type_name},
                           {"location", location_name},
                           {"dim", dim},
                           {"table_rows", t.rows()},
                           {"rows_per_call", n},
                           {"bytes_per_call", bytes},
                           {"gather_seconds", gather_s},
                           {"scatter_seconds", scatter_s},
                           {"gather_gb_per_s", gb / gather_s},
                           {"gather_sorted_indices_gb_per_s", gb / sorted_s},
                           {"scatter_gb_per_s", gb / scatter_s},
                           {"copy_gb_per_s", copy_gbs},
                           {"peer_copy_gb_per_s", peer_s > 0 ? gb / peer_s : 0.0}});
      }
    }
  }
  if (comm.rank() == 0 && !a.json.empty()) {
    const auto machine = bench::query_machine_info();
    nlohmann::json j;
    j["benchmark"] = "wholememory";
    j["date"] = bench::utc_now_iso8601();
    j["commit"] = bench::git_commit(DYNEMB_SOURCE_DIR);
    j["machine"] = bench::machine_json(machine);
    j["gpu"] = bench::gpu_json(bench::query_gpu_info(device));
    j["gpus_used"] = std::min<uint32_t>(comm.world_size(), static_cast<uint32_t>(devices));
    j["communicator"] = comm.name();
    j["parameters"] = {{"ranks", comm.world_size()},
                       {"dims", a.dims},
                       {"rows_per_call", a.rows_per_call},
                       {"table_mib", a.table_mib},
                       {"iters", a.iters},
                       {"warmup", a.warmup},
                       {"types", a.types},
                       {"locations", a.locations},
                       {"seed", a.seed},
                       {"indices", "uniform random over the table's rows, per rank"},
                       {"executor", "cuda"},
                       {"dtype", "float32"}};
    j["peer"] = {{"copy",
                  "cudaMemcpy of the same bytes from this rank's part into the dense "
                  "buffer (device to device, or registered host to device), same run"},
                 {"peer_copy",
                  "cudaMemcpy of the same bytes from the next rank's part (another "
                  "GPU over NVLink / PCIe when ranks sit on different GPUs)"}};
    j["results"] = results;
    bench::write_text_file(a.json, j.dump(2) + "\n");
    std::printf("wrote %s\n", a.json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    const std::string job = "bench" + std::to_string(::getpid());
    std::vector<pid_t> children;
    uint32_t rank = 0;
    bool child = a.ranks == 1;
    for (uint32_t r = 0; r < a.ranks && !child; ++r) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        rank = r;
        child = true;
      } else {
        children.push_back(pid);
      }
    }
    if (!child) {
      int failed = 0;
      for (pid_t pid : children) {
        int status = 0;
        ::waitpid(pid, &status, 0);
        failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      }
      return failed == 0 ? 0 : 1;
    }
    // One rank: a device-memory local communicator, so distributed memory's rows stay in HBM
    // (its indices are still routed on the host). Several: the socket communicator (host).
    auto comm = a.ranks == 1 ? dist::make_local_communicator(Backend::kCuda)
                             : make_socket_communicator(job, rank, a.ranks);
    return run_rank(a, *comm);
  } catch (const std::exception& e) {
    std::cerr << "dynemb_bench_wholememory: " << e.what() << "\n";
    return 1;
  }
}

// HugeCTR's gpu_cache driven exactly as `dynemb bench cache` drives dynemb's cache: the same key
// batches (same seed), the same warm-up and timed queries. It serves one command a line on stdin
// and answers each with one line on stdout, so that the benchmark can interleave its rounds with
// dynemb's (docs/cache.md, "Benchmark"). Built by build.sh against a HugeCTR checkout kept
// outside the repository (never committed).
#include <cuda_runtime_api.h>

// gpu_cache's header names cuda::atomic and cuda::binary_semaphore without including them.
#include <cuda/atomic>
#include <cuda/semaphore>
#include <nv_gpu_cache.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cache/key_stream.hpp"

namespace {

using Cache = gpu_cache::gpu_cache<long long, uint64_t, std::numeric_limits<long long>::max(),
                                   SET_ASSOCIATIVITY, SLAB_SIZE>;
using dynemb::bench::KeyBatch;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "hugectr peer: %s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

std::vector<uint64_t> parse_list(const char* text) {
  std::vector<uint64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoull(item));
  return out;
}

float row_value(int64_t key, uint32_t j) {
  return static_cast<float>((static_cast<uint64_t>(key) * 131 + j) & 0xFFFFFF);
}

struct Device {
  long long *keys, *missing;
  uint64_t* positions;
  size_t* count;
  float *values, *rows;
  cudaStream_t stream;
  cudaEvent_t begin, end;
};

// Uploads from pageable memory, then waits until the copy has arrived (cudaMemcpy may return
// before its DMA is done, and the non-blocking stream is not ordered after it), as dynemb bench
// cache does.
void upload(void* to, const void* from, size_t bytes, const char* what) {
  check(cudaMemcpy(to, from, bytes, cudaMemcpyHostToDevice), what);
  check(cudaDeviceSynchronize(), what);
}

// One Query as dynemb bench cache times its own: CUDA events around the call on the stream
// (*seconds), and the time the call took to return (*host_seconds).
size_t query(Cache& cache, Device& d, const KeyBatch& b, double* seconds,
             double* host_seconds = nullptr) {
  const size_t n = b.keys.size();
  upload(d.keys, b.keys.data(), n * sizeof(long long), "keys");
  check(cudaEventRecord(d.begin, d.stream), "event");
  const auto called = std::chrono::steady_clock::now();
  cache.Query(d.keys, n, d.values, d.positions, d.missing, d.count, d.stream);
  if (host_seconds != nullptr) {
    *host_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - called).count();
  }
  check(cudaEventRecord(d.end, d.stream), "event");
  check(cudaEventSynchronize(d.end), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, d.begin, d.end), "elapsed");
  if (seconds != nullptr) *seconds = ms * 1e-3;
  size_t misses = 0;
  check(cudaMemcpy(&misses, d.count, sizeof(misses), cudaMemcpyDeviceToHost), "count");
  return misses;
}

// Seconds per call of `calls` Query calls of `b` back to back, timed together.
double pipelined_seconds(Cache& cache, Device& d, const KeyBatch& b, uint32_t calls) {
  const size_t n = b.keys.size();
  upload(d.keys, b.keys.data(), n * sizeof(long long), "keys");
  check(cudaEventRecord(d.begin, d.stream), "event");
  for (uint32_t c = 0; c < calls; ++c) {
    cache.Query(d.keys, n, d.values, d.positions, d.missing, d.count, d.stream);
  }
  check(cudaEventRecord(d.end, d.stream), "event");
  check(cudaEventSynchronize(d.end), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, d.begin, d.end), "elapsed");
  return ms * 1e-3 / calls;
}

void replace_misses(Cache& cache, Device& d, size_t misses, uint32_t dim) {
  if (misses == 0) return;
  std::vector<long long> keys(misses);
  check(cudaMemcpy(keys.data(), d.missing, misses * sizeof(long long), cudaMemcpyDeviceToHost),
        "missing");
  std::vector<float> rows(misses * dim);
  for (size_t i = 0; i < misses; ++i) {
    for (uint32_t j = 0; j < dim; ++j) rows[i * dim + j] = row_value(keys[i], j);
  }
  upload(d.rows, rows.data(), rows.size() * sizeof(float), "rows");
  cache.Replace(d.missing, misses, d.rows, d.stream);
  check(cudaStreamSynchronize(d.stream), "replace");
}

// The numbers as a JSON array (17 significant digits).
std::string json_list(const std::vector<double>& values) {
  std::ostringstream out;
  out.precision(17);
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  out << "]";
  return out.str();
}

}  // namespace

// usage: hugectr_cache_peer IDS ALPHA SEED BATCHES ROUNDS WARM WARM_DRAWS TIMED RAW_TIMED
// (BATCHES and ROUNDS comma-separated, ROUNDS[s] timed rounds of TIMED distinct batches for
// BATCHES[s] keys a call; RAW_TIMED timed raw batches per raw cell). Then commands, one a line on
// stdin, each answered by one line on stdout:
//   open DIM ROWS         build a cache of ROWS rows and warm it             -> ready
//   first SIZE            one untimed query of SIZE keys                     -> ok
//   time SIZE MODE ROUND  time the round's batches (MODE distinct or raw)    -> {"seconds": [..],
//                         "host_seconds": [..], "keys": K, "hits": H}
//   pipe SIZE CALLS       CALLS queries of one batch back to back, per call  -> {"pipelined_us": x}
//   close                 free the cache                                     -> ok
//   quit (or the end of stdin)
int main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr,
                 "usage: %s IDS ALPHA SEED BATCHES ROUNDS WARM WARM_DRAWS TIMED RAW_TIMED, then "
                 "commands on stdin (see peer_main.cu)\n",
                 argv[0]);
    return 2;
  }
  const dynemb::bench::KeyStreamSpec spec{std::stoull(argv[1]), std::stod(argv[2]),
                                          std::stoull(argv[3])};
  const std::vector<uint64_t> batches = parse_list(argv[4]);
  const std::vector<uint64_t> rounds = parse_list(argv[5]);
  const auto warm_batches = static_cast<uint32_t>(std::stoul(argv[6]));
  const uint64_t warm_draws = std::stoull(argv[7]);
  const auto timed = static_cast<uint32_t>(std::stoul(argv[8]));
  const auto raw_timed = static_cast<uint32_t>(std::stoul(argv[9]));
  if (rounds.size() != batches.size() || timed == 0 || raw_timed == 0) {
    std::fprintf(stderr,
                 "hugectr peer: ROUNDS needs one count per batch size; TIMED and "
                 "RAW_TIMED must be > 0\n");
    return 2;
  }

  // The same batches as dynemb bench cache draws (stream ids 1, 100 + s, 200 + s).
  const auto warm_set = dynemb::bench::deduplicated_batches(spec, 1, warm_batches, warm_draws);
  std::map<uint64_t, std::vector<KeyBatch>> distinct, raw;
  for (size_t s = 0; s < batches.size(); ++s) {
    distinct[batches[s]] = dynemb::bench::distinct_batches(
        spec, 100 + s, static_cast<uint32_t>(rounds[s]) * timed, batches[s]);
    // The first raw_timed of the raw batches dynemb times (the same draws).
    raw[batches[s]] = dynemb::bench::raw_batches(spec, 200 + s, raw_timed, batches[s]);
  }
  const uint64_t max_batch =
      std::max(*std::max_element(batches.begin(), batches.end()), warm_draws);
  Device d{};
  uint64_t max_dim = 0;
  check(cudaMalloc(&d.keys, max_batch * sizeof(long long)), "malloc");
  check(cudaMalloc(&d.missing, max_batch * sizeof(long long)), "malloc");
  check(cudaMalloc(&d.positions, max_batch * sizeof(uint64_t)), "malloc");
  check(cudaMalloc(&d.count, sizeof(size_t)), "malloc");
  check(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), "stream");
  check(cudaEventCreate(&d.begin), "event");
  check(cudaEventCreate(&d.end), "event");

  std::unique_ptr<Cache> cache;
  uint32_t dim = 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "quit") break;
    if (command != "open" && command != "close" && !cache) {
      std::fprintf(stderr, "hugectr peer: '%s' before 'open'\n", line.c_str());
      std::cout << "error" << std::endl;
      continue;
    }
    if (command == "open") {
      uint64_t rows = 0;
      in >> dim >> rows;
      if (dim > max_dim) {
        if (max_dim != 0) {
          check(cudaFree(d.values), "free");
          check(cudaFree(d.rows), "free");
        }
        max_dim = dim;
        check(cudaMalloc(&d.values, max_batch * max_dim * sizeof(float)), "malloc");
        check(cudaMalloc(&d.rows, max_batch * max_dim * sizeof(float)), "malloc");
      }
      cache.reset();
      cache = std::make_unique<Cache>(std::max<uint64_t>(rows / (SET_ASSOCIATIVITY * SLAB_SIZE), 1),
                                      dim);
      for (const auto& b : warm_set) replace_misses(*cache, d, query(*cache, d, b, nullptr), dim);
      std::cout << "ready" << std::endl;
    } else if (command == "first") {
      uint64_t size = 0;
      in >> size;
      query(*cache, d, distinct.at(size).front(), nullptr);
      std::cout << "ok" << std::endl;
    } else if (command == "time") {
      uint64_t size = 0;
      std::string mode;
      uint32_t round = 0;
      in >> size >> mode >> round;
      const auto& all = mode == "distinct" ? distinct.at(size) : raw.at(size);
      const uint32_t per_round = mode == "distinct" ? timed : raw_timed;
      std::vector<double> seconds, host_seconds;
      uint64_t keys = 0, hits = 0;
      for (uint32_t b = round * per_round; b < (round + 1) * per_round && b < all.size(); ++b) {
        double t = 0, host = 0;
        const size_t misses = query(*cache, d, all[b], &t, &host);
        seconds.push_back(t);
        host_seconds.push_back(host);
        keys += all[b].keys.size();
        hits += all[b].keys.size() - misses;
      }
      std::cout << "{\"seconds\": " << json_list(seconds)
                << ", \"host_seconds\": " << json_list(host_seconds) << ", \"keys\": " << keys
                << ", \"hits\": " << hits << "}" << std::endl;
    } else if (command == "pipe") {
      uint64_t size = 0;
      uint32_t calls = 0;
      in >> size >> calls;
      const double s = pipelined_seconds(*cache, d, distinct.at(size).front(), calls);
      std::ostringstream out;
      out.precision(17);
      out << "{\"pipelined_us\": " << s * 1e6 << "}";
      std::cout << out.str() << std::endl;
    } else if (command == "close") {
      cache.reset();
      std::cout << "ok" << std::endl;
    } else {
      std::fprintf(stderr, "hugectr peer: unknown command '%s'\n", line.c_str());
      std::cout << "error" << std::endl;
    }
  }
  return 0;
}

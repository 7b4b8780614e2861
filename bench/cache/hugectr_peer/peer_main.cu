// HugeCTR's gpu_cache driven exactly as `dynemb bench cache` drives dynemb's cache: the same key
// batches (same seed), the same warm-up and timed queries; writes the cells as JSON. Built by
// build.sh against a HugeCTR checkout kept outside the repository (never committed); run by
// `dynemb bench cache --peer BINARY` in the same run.
#include <cuda_runtime_api.h>

// gpu_cache's header names cuda::atomic and cuda::binary_semaphore without including them.
#include <cuda/atomic>
#include <cuda/semaphore>
#include <nv_gpu_cache.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cache/key_stream.hpp"

namespace {

using Cache = gpu_cache::gpu_cache<long long, uint64_t, std::numeric_limits<long long>::max(),
                                   SET_ASSOCIATIVITY, SLAB_SIZE>;

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

// One timed Query as dynemb bench cache times its own: CUDA events around the call on the
// stream (*seconds), and the time the call took to return (*host_seconds).
size_t query(Cache& cache, Device& d, const dynemb::bench::KeyBatch& b, double* seconds,
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
double pipelined_seconds(Cache& cache, Device& d, const dynemb::bench::KeyBatch& b,
                         uint32_t calls) {
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

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace

// usage: hugectr_cache_peer IDS ALPHA SEED DIMS ROWS BATCHES WARM WARM_DRAWS TIMED OUT.json
//        [RAW_TIMED [PIPELINED]]
// (lists comma-separated; RAW_TIMED: timed calls per raw cell, 0 or absent = TIMED; PIPELINED:
// back-to-back calls timed together per distinct cell, 0 or absent = none)
int main(int argc, char** argv) {
  if (argc < 11 || argc > 13) {
    std::fprintf(stderr,
                 "usage: %s IDS ALPHA SEED DIMS ROWS BATCHES WARM WARM_DRAWS TIMED OUT "
                 "[RAW_TIMED [PIPELINED]]\n",
                 argv[0]);
    return 2;
  }
  const dynemb::bench::KeyStreamSpec spec{std::stoull(argv[1]), std::stod(argv[2]),
                                          std::stoull(argv[3])};
  const std::vector<uint64_t> dims = parse_list(argv[4]);
  const std::vector<uint64_t> cache_rows = parse_list(argv[5]);
  const std::vector<uint64_t> batches = parse_list(argv[6]);
  const auto warm_batches = static_cast<uint32_t>(std::stoul(argv[7]));
  const uint64_t warm_draws = std::stoull(argv[8]);
  const auto timed = static_cast<uint32_t>(std::stoul(argv[9]));
  const auto raw_arg = argc > 11 ? static_cast<uint32_t>(std::stoul(argv[11])) : 0u;
  const uint32_t raw_timed = raw_arg == 0 ? timed : std::min(raw_arg, timed);
  const auto pipelined = argc > 12 ? static_cast<uint32_t>(std::stoul(argv[12])) : 0u;

  // The same batches as dynemb bench cache draws (stream ids 1, 100 + s, 200 + s).
  const auto warm_set = dynemb::bench::deduplicated_batches(spec, 1, warm_batches, warm_draws);
  std::map<uint64_t, std::vector<dynemb::bench::KeyBatch>> distinct, raw;
  for (size_t s = 0; s < batches.size(); ++s) {
    distinct[batches[s]] = dynemb::bench::distinct_batches(spec, 100 + s, timed, batches[s]);
    // The first raw_timed of the batches dynemb times (the same draws).
    raw[batches[s]] = dynemb::bench::raw_batches(spec, 200 + s, raw_timed, batches[s]);
  }
  const uint64_t max_batch =
      std::max(*std::max_element(batches.begin(), batches.end()), warm_draws);
  const uint64_t max_dim = *std::max_element(dims.begin(), dims.end());
  Device d{};
  check(cudaMalloc(&d.keys, max_batch * sizeof(long long)), "malloc");
  check(cudaMalloc(&d.missing, max_batch * sizeof(long long)), "malloc");
  check(cudaMalloc(&d.positions, max_batch * sizeof(uint64_t)), "malloc");
  check(cudaMalloc(&d.count, sizeof(size_t)), "malloc");
  check(cudaMalloc(&d.values, max_batch * max_dim * sizeof(float)), "malloc");
  check(cudaMalloc(&d.rows, max_batch * max_dim * sizeof(float)), "malloc");
  check(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), "stream");
  check(cudaEventCreate(&d.begin), "event");
  check(cudaEventCreate(&d.end), "event");

  std::ostringstream json;
  json << "{\"peer\": \"HugeCTR gpu_cache " << SET_ASSOCIATIVITY << " slabs of " << SLAB_SIZE
       << " per set\", \"cells\": [";
  bool first = true;
  for (const uint64_t dim : dims) {
    for (const uint64_t rows : cache_rows) {
      Cache cache(std::max<uint64_t>(rows / (SET_ASSOCIATIVITY * SLAB_SIZE), 1), dim);
      for (const auto& b : warm_set) replace_misses(cache, d, query(cache, d, b, nullptr), dim);
      for (const uint64_t size : batches) {
        query(cache, d, distinct[size].front(), nullptr);  // untimed, as dynemb's first call
        for (const char* mode : {"distinct", "raw"}) {
          const auto& list = std::string(mode) == "distinct" ? distinct[size] : raw[size];
          std::vector<double> seconds, host_seconds;
          uint64_t keys = 0, hits = 0;
          for (const auto& b : list) {
            double t = 0, host = 0;
            const size_t misses = query(cache, d, b, &t, &host);
            seconds.push_back(t);
            host_seconds.push_back(host);
            keys += b.keys.size();
            hits += b.keys.size() - misses;
          }
          double total = 0;
          for (double t : seconds) total += t;
          json << (first ? "" : ",") << "\n {\"dim\": " << dim << ", \"cache_rows\": " << rows
               << ", \"batch\": " << size << ", \"mode\": \"" << mode
               << "\", \"calls\": " << seconds.size() << ", \"keys\": " << keys
               << ", \"seconds\": " << total << ", \"mkeys_per_s\": " << keys / total / 1e6
               << ", \"hit_rate\": " << static_cast<double>(hits) / keys
               << ", \"latency_us\": {\"p50\": " << percentile(seconds, 0.5) * 1e6
               << ", \"p99\": " << percentile(seconds, 0.99) * 1e6
               << "}, \"host_us_p50\": " << percentile(host_seconds, 0.5) * 1e6;
          if (pipelined > 0 && std::string(mode) == "distinct") {
            json << ", \"pipelined_us\": "
                 << pipelined_seconds(cache, d, list.front(), pipelined) * 1e6;
          }
          json << "}";
          first = false;
          std::fprintf(stderr, "hugectr dim %lu rows %lu batch %lu %s: %.1f M keys/s, hit %.3f\n",
                       static_cast<unsigned long>(dim), static_cast<unsigned long>(rows),
                       static_cast<unsigned long>(size), mode, keys / total / 1e6,
                       static_cast<double>(hits) / keys);
        }
      }
    }
  }
  json << "\n]}\n";
  std::ofstream(argv[10]) << json.str();
  return 0;
}

// How fast a kernel can gather random rows from pinned host memory, by how that memory was
// allocated and how the kernel reads a row. Hybrid tables read their host-resident rows this
// way; the table benchmark compares them with a bulk copy's bandwidth (the PCIe floor).
//
// Usage: dynemb_bench_host_gather [--gib N] [--rows N] [--row-bytes N] [--out FILE]
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/table/machine_info.hpp"
#include "bench/table/random_rows.hpp"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Pinned, mapped host memory obtained one way; `ptr` is null when that way is unavailable.
struct HostBlock {
  std::string method;
  void* ptr = nullptr;
  size_t bytes = 0;
  bool registered = false;  // cudaHostRegister'ed mmap memory (else cudaHostAlloc)
  std::string note;
};

HostBlock allocate(const std::string& method, size_t bytes) {
  HostBlock b{method, nullptr, bytes, false, ""};
  if (method == "cudaHostAlloc") {
    check(cudaHostAlloc(&b.ptr, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc");
    return b;
  }
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (method == "mmap_hugetlb_2m") flags |= MAP_HUGETLB;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) {
    b.note = std::string("mmap failed: ") + std::strerror(errno);
    return b;
  }
  if (method == "mmap_thp") madvise(p, bytes, MADV_HUGEPAGE);
  if (method == "mmap_4k") madvise(p, bytes, MADV_NOHUGEPAGE);
  std::memset(p, 0, bytes);  // fault every page in before registering
  const cudaError_t e =
      cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    b.note = std::string("cudaHostRegister: ") + cudaGetErrorString(e);
    munmap(p, bytes);
    return b;
  }
  b.ptr = p;
  b.registered = true;
  return b;
}

void release(HostBlock& b) {
  if (b.ptr == nullptr) return;
  if (b.registered) {
    cudaHostUnregister(b.ptr);
    munmap(b.ptr, b.bytes);
  } else {
    cudaFreeHost(b.ptr);
  }
  b.ptr = nullptr;
}

// Huge pages backing [p, p + bytes) according to /proc/self/smaps (AnonHugePages, kB).
long anon_huge_kb(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  const auto want = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 &&
        line.find(' ') != std::string::npos && line.find(':') > line.find(' ')) {
      inside = want >= lo && want < hi;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::strtol(line.c_str() + 14, nullptr, 10);
    }
  }
  return -1;
}

// Bulk host-to-device copy bandwidth from the block (bytes per second, best of 3).
double copy_bandwidth(const void* host, void* dev, size_t bytes) {
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return static_cast<double>(bytes) / best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t gib = 16;
  uint64_t rows = 1 << 20;
  uint32_t row_bytes = 256;
  std::string out_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--gib")
      gib = std::stoull(argv[i + 1]);
    else if (a == "--rows")
      rows = std::stoull(argv[i + 1]);
    else if (a == "--row-bytes")
      row_bytes = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    else if (a == "--out")
      out_path = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (row_bytes % 16 != 0 || row_bytes == 0) {
    std::fprintf(stderr, "--row-bytes must be a positive multiple of 16, got %u\n", row_bytes);
    return 2;
  }
  const size_t bytes = gib << 30;
  const uint64_t host_rows = bytes / row_bytes;

  std::vector<uint64_t> idx(rows);
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<uint64_t> pick(0, host_rows - 1);
  for (auto& v : idx) v = pick(rng);
  uint64_t* d_idx = nullptr;
  float4* d_out = nullptr;
  void* d_copy = nullptr;
  const size_t copy_bytes = size_t{1} << 30;
  check(cudaMalloc(&d_idx, rows * 8), "cudaMalloc");
  check(cudaMalloc(&d_out, rows * row_bytes), "cudaMalloc");
  check(cudaMalloc(&d_copy, copy_bytes), "cudaMalloc");
  check(cudaMemcpy(d_idx, idx.data(), rows * 8, cudaMemcpyHostToDevice), "cudaMemcpy");

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const auto machine = dynemb::bench::query_machine_info();
  nlohmann::json report = {
      {"benchmark", "host_gather"},
      {"machine", {{"hostname", machine.hostname}, {"cpu", machine.cpu_model}}},
      {"gpu", prop.name},
      {"git_commit", dynemb::bench::git_commit(DYNEMB_SOURCE_DIR)},
      {"date", dynemb::bench::utc_now_iso8601()},
      {"params",
       {{"host_gib", gib},
        {"rows_per_call", rows},
        {"row_bytes", row_bytes},
        {"index", "uniform random over the block"},
        {"timing", "best of 3 after a warm-up"}}},
      {"results", nlohmann::json::array()}};
  std::printf("| allocation | huge kB | copy GB/s | tile 8 GB/s | tile 16 GB/s | warp GB/s |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const std::string method : {"cudaHostAlloc", "mmap_4k", "mmap_thp", "mmap_hugetlb_2m"}) {
    HostBlock b = allocate(method, bytes);
    nlohmann::json r = {{"allocation", method}};
    if (b.ptr == nullptr) {
      r["unavailable"] = b.note;
      std::printf("| %s | unavailable: %s | | | | |\n", method.c_str(), b.note.c_str());
    } else {
      void* dev = nullptr;
      check(cudaHostGetDevicePointer(&dev, b.ptr, 0), "cudaHostGetDevicePointer");
      const void* host = dev;
      const double moved = static_cast<double>(rows) * row_bytes;
      const double copy = copy_bandwidth(b.ptr, d_copy, copy_bytes);
      auto gather_rate = [&](uint32_t threads_per_row) {
        return moved / dynemb::bench::time_row_moves(host, d_idx, d_out, nullptr, rows, row_bytes,
                                                     threads_per_row);
      };
      const double t8 = gather_rate(8), t16 = gather_rate(16), t32 = gather_rate(32);
      const long huge = anon_huge_kb(b.ptr);
      r.update({{"anon_huge_kb", huge},
                {"copy_bytes_per_s", copy},
                {"gather_tile8_bytes_per_s", t8},
                {"gather_tile16_bytes_per_s", t16},
                {"gather_warp_bytes_per_s", t32}});
      std::printf("| %s | %ld | %.1f | %.1f | %.1f | %.1f |\n", method.c_str(), huge, copy / 1e9,
                  t8 / 1e9, t16 / 1e9, t32 / 1e9);
    }
    report["results"].push_back(r);
    release(b);
  }
  if (!out_path.empty()) std::ofstream(out_path) << report.dump(2) << "\n";
  return 0;
}

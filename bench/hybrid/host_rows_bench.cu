// How fast kernels read and write rows of pinned host memory at random positions, by how the
// memory was allocated (one region or slices, flags, page size), the order the rows are visited
// in (random or ascending address), and how a row is accessed (threads per row, bytes per access,
// rows a group of threads has in flight). Hybrid tables reach their host-resident rows this way
// (docs/cuda_table.md, "Hybrid tables").
//
// Usage: dynemb_bench_host_rows [--gib N] [--rows N] [--allocs a,b,..] [--seed N] [--json FILE]
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/table/machine_info.hpp"

namespace {

constexpr uint32_t kRowBytes = 256;  // a row of 64 floats
constexpr int kMaxSlices = 256;
constexpr unsigned kBlockThreads = 256;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Where row r of a host region lives: slice r >> rows_shift, row r & (2^rows_shift - 1) in it
// (device addresses).
struct SliceTable {
  char* base[kMaxSlices];
  uint32_t rows_shift;
};

// Pinned host memory obtained one way, as slices of equal power-of-two size.
struct HostRegion {
  std::string alloc;
  std::vector<void*> host;  // host pointers of the slices
  size_t slice_bytes = 0;
  bool registered = false;  // mmap + cudaHostRegister (else cudaHostAlloc / cudaMallocHost)
  std::string note;         // why it is unavailable (host empty)
  double seconds = 0;       // allocation time
};

// "hostalloc_mapped_portable", "hostalloc_mapped", "mallochost" (default flags),
// "register_4k", "register_thp" (mmap + madvise + cudaHostRegister), each followed by
// "_slices_<MiB>" for slices of that size (else one region).
HostRegion allocate(const std::string& name, size_t bytes) {
  HostRegion r;
  r.alloc = name;
  std::string kind = name;
  r.slice_bytes = bytes;
  if (const auto at = name.find("_slices_"); at != std::string::npos) {
    kind = name.substr(0, at);
    r.slice_bytes = std::stoull(name.substr(at + 8)) << 20;
  }
  if (r.slice_bytes == 0 || (r.slice_bytes & (r.slice_bytes - 1)) != 0 ||
      bytes % r.slice_bytes != 0 || bytes / r.slice_bytes > kMaxSlices) {
    r.note = "slice size must be a power of two dividing the region into at most 256 slices";
    return r;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t done = 0; done < bytes; done += r.slice_bytes) {
    void* p = nullptr;
    cudaError_t e = cudaSuccess;
    if (kind == "hostalloc_mapped_portable") {
      e = cudaHostAlloc(&p, r.slice_bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    } else if (kind == "hostalloc_mapped") {
      e = cudaHostAlloc(&p, r.slice_bytes, cudaHostAllocMapped);
    } else if (kind == "mallochost") {
      e = cudaMallocHost(&p, r.slice_bytes);
    } else if (kind == "register_4k" || kind == "register_thp") {
      r.registered = true;
      p = mmap(nullptr, r.slice_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        r.note = std::string("mmap: ") + std::strerror(errno);
        p = nullptr;
        break;
      }
      madvise(p, r.slice_bytes, kind == "register_thp" ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
      std::memset(p, 0, r.slice_bytes);  // fault every page in before registering
      e = cudaHostRegister(p, r.slice_bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
      if (e != cudaSuccess) munmap(p, r.slice_bytes);
    } else {
      r.note = "unknown allocation " + kind;
      break;
    }
    if (e != cudaSuccess) {
      r.note = std::string("allocation failed: ") + cudaGetErrorString(e);
      cudaGetLastError();
      break;
    }
    r.host.push_back(p);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.note.empty()) {
    for (void* p : r.host) {
      if (r.registered) {
        cudaHostUnregister(p);
        munmap(p, r.slice_bytes);
      } else {
        cudaFreeHost(p);
      }
    }
    r.host.clear();
  }
  return r;
}

void release(HostRegion& r) {
  for (void* p : r.host) {
    if (r.registered) {
      cudaHostUnregister(p);
      munmap(p, r.slice_bytes);
    } else {
      cudaFreeHost(p);
    }
  }
  r.host.clear();
}

SliceTable device_slices(const HostRegion& r) {
  SliceTable t{};
  for (size_t i = 0; i < r.host.size(); ++i) {
    void* d = nullptr;
    check(cudaHostGetDevicePointer(&d, r.host[i], 0), "cudaHostGetDevicePointer");
    t.base[i] = static_cast<char*>(d);
  }
  uint32_t shift = 0;
  while ((uint64_t{kRowBytes} << shift) < r.slice_bytes) ++shift;
  t.rows_shift = shift;
  return t;
}

char* host_row(const HostRegion& r, uint64_t row) {
  const uint64_t per_slice = r.slice_bytes / kRowBytes;
  return static_cast<char*>(r.host[row / per_slice]) + (row % per_slice) * kRowBytes;
}

// NUMA node of a sample of the region's pages (move_pages with no target nodes only reports).
std::map<int, int> numa_nodes(const HostRegion& r, int samples) {
  std::map<int, int> count;
  const uint64_t rows = r.host.size() * (r.slice_bytes / kRowBytes);
  std::vector<void*> pages(samples);
  std::vector<int> status(samples, -1);
  for (int i = 0; i < samples; ++i) pages[i] = host_row(r, rows / samples * i);
  if (syscall(SYS_move_pages, 0, static_cast<unsigned long>(samples), pages.data(), nullptr,
              status.data(), 0) != 0) {
    count[-1] = samples;
    return count;
  }
  for (int s : status) ++count[s];
  return count;
}

template <uint32_t kBytes>
struct Word;
template <>
struct Word<4> {
  using type = uint32_t;
};
template <>
struct Word<8> {
  using type = uint2;
};
template <>
struct Word<16> {
  using type = uint4;
};

// Groups of kThreads threads; group g moves list entries g*kInFlight .. g*kInFlight+kInFlight-1:
// it issues every load of those rows before the first store. kToHost: dense device row i ->
// host row rows[i]; else host row rows[i] -> dense device row i.
template <uint32_t kThreads, uint32_t kBytes, uint32_t kInFlight, bool kToHost>
__global__ void __launch_bounds__(kBlockThreads)
    move_rows_kernel(SliceTable host, char* dense, const uint64_t* rows, uint64_t n) {
  using W = typename Word<kBytes>::type;
  constexpr uint32_t kPerThread = kRowBytes / (kThreads * kBytes);  // words per thread per row
  static_assert(kPerThread >= 1 && kRowBytes % (kThreads * kBytes) == 0);
  const uint64_t thread = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t first = thread / kThreads * kInFlight;
  const uint32_t lane = threadIdx.x % kThreads;
  W held[kInFlight][kPerThread];
  W* to[kInFlight];
#pragma unroll
  for (uint32_t u = 0; u < kInFlight; ++u) {
    const uint64_t i = first + u;
    to[u] = nullptr;
    if (i >= n) continue;
    const uint64_t r = rows[i];
    char* h =
        host.base[r >> host.rows_shift] + (r & ((uint64_t{1} << host.rows_shift) - 1)) * kRowBytes;
    char* d = dense + i * kRowBytes;
    const W* from = reinterpret_cast<const W*>(kToHost ? d : h);
    to[u] = reinterpret_cast<W*>(kToHost ? h : d);
#pragma unroll
    for (uint32_t j = 0; j < kPerThread; ++j) held[u][j] = from[lane + j * kThreads];
  }
#pragma unroll
  for (uint32_t u = 0; u < kInFlight; ++u) {
    if (to[u] == nullptr) continue;
#pragma unroll
    for (uint32_t j = 0; j < kPerThread; ++j) to[u][lane + j * kThreads] = held[u][j];
  }
}

using Launcher = void (*)(const SliceTable&, char*, const uint64_t*, uint64_t, cudaStream_t);

template <uint32_t kThreads, uint32_t kBytes, uint32_t kInFlight, bool kToHost>
void launch(const SliceTable& host, char* dense, const uint64_t* rows, uint64_t n, cudaStream_t s) {
  const uint64_t groups = (n + kInFlight - 1) / kInFlight;
  const uint64_t blocks = (groups * kThreads + kBlockThreads - 1) / kBlockThreads;
  move_rows_kernel<kThreads, kBytes, kInFlight, kToHost>
      <<<static_cast<unsigned>(blocks), kBlockThreads, 0, s>>>(host, dense, rows, n);
}

// An access method: threads per row, bytes per access, rows in flight per group.
struct Method {
  std::string name;
  Launcher read;
  Launcher write;
};

template <uint32_t kThreads, uint32_t kBytes, uint32_t kInFlight>
Method method() {
  std::string name = "t" + std::to_string(kThreads) + "x" + std::to_string(kBytes);
  if (kInFlight > 1) name += "u" + std::to_string(kInFlight);
  return {name, &launch<kThreads, kBytes, kInFlight, false>,
          &launch<kThreads, kBytes, kInFlight, true>};
}

// t<threads per row>x<bytes per access>[u<rows in flight per group>]. t8x16 is the table's tile
// of 8 threads with float4s; t64x4 is one thread per float (a copy kernel over n * dim floats).
std::vector<Method> methods() {
  return {method<8, 16, 1>(),  method<16, 16, 1>(), method<32, 8, 1>(), method<64, 4, 1>(),
          method<32, 4, 1>(),  method<4, 16, 1>(),  method<8, 16, 2>(), method<8, 16, 4>(),
          method<16, 16, 4>(), method<4, 16, 4>()};
}

// Median seconds of 5 timed launches after a warm-up.
double time_launch(const Launcher& f, const SliceTable& host, char* dense, const uint64_t* rows,
                   uint64_t n) {
  cudaEvent_t b, e;
  check(cudaEventCreate(&b), "cudaEventCreate");
  check(cudaEventCreate(&e), "cudaEventCreate");
  std::vector<double> t;
  for (int rep = 0; rep < 6; ++rep) {
    check(cudaEventRecord(b), "cudaEventRecord");
    f(host, dense, rows, n, nullptr);
    check(cudaGetLastError(), "move_rows_kernel launch");
    check(cudaEventRecord(e), "cudaEventRecord");
    check(cudaEventSynchronize(e), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, b, e), "cudaEventElapsedTime");
    if (rep > 0) t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(b);
  cudaEventDestroy(e);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A row's bytes as written by fill(): its index and the round, repeated.
void fill_row(char* row, uint64_t index, uint32_t round) {
  uint64_t words[kRowBytes / 8];
  for (uint32_t j = 0; j < kRowBytes / 8; ++j) words[j] = index * 1000003u + j * 7919u + round;
  std::memcpy(row, words, kRowBytes);
}

// Rows of the list, distinct, uniform over [0, limit); `sorted` ascending, else shuffled.
std::vector<uint64_t> draw_rows(uint64_t count, uint64_t limit, std::mt19937_64& rng) {
  std::uniform_int_distribution<uint64_t> pick(0, limit - 1);
  std::vector<uint64_t> rows(count);
  for (auto& r : rows) r = pick(rng);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

struct Device {
  char* dense = nullptr;
  uint64_t* rows = nullptr;
  ~Device() {
    cudaFree(dense);
    cudaFree(rows);
  }
};

// Checks that `method` moved every row both ways (host rows filled with round `round`).
bool verify(const HostRegion& region, const SliceTable& slices, const Method& m,
            const std::vector<uint64_t>& rows, Device& dev, uint32_t round) {
  const uint64_t n = rows.size();
  for (uint64_t i = 0; i < n; ++i) fill_row(host_row(region, rows[i]), rows[i], round);
  check(cudaMemset(dev.dense, 0xAB, n * kRowBytes), "cudaMemset");
  m.read(slices, dev.dense, dev.rows, n, nullptr);
  check(cudaDeviceSynchronize(), "read");
  std::vector<char> got(n * kRowBytes), want(kRowBytes);
  check(cudaMemcpy(got.data(), dev.dense, got.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (uint64_t i = 0; i < n; ++i) {
    fill_row(want.data(), rows[i], round);
    if (std::memcmp(got.data() + i * kRowBytes, want.data(), kRowBytes) != 0) return false;
  }
  // Write back rows of round + 1 from the device.
  for (uint64_t i = 0; i < n; ++i) fill_row(got.data() + i * kRowBytes, rows[i], round + 1);
  check(cudaMemcpy(dev.dense, got.data(), got.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  m.write(slices, dev.dense, dev.rows, n, nullptr);
  check(cudaDeviceSynchronize(), "write");
  for (uint64_t i = 0; i < n; ++i) {
    fill_row(want.data(), rows[i], round + 1);
    if (std::memcmp(host_row(region, rows[i]), want.data(), kRowBytes) != 0) return false;
  }
  return true;
}

// Bulk copy bandwidth of the first slice's first `bytes` (best of 3), both directions.
std::pair<double, double> copy_bandwidth(const HostRegion& r, void* dev, size_t bytes) {
  double h2d = 1e30, d2h = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    check(cudaMemcpy(dev, r.host[0], bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    h2d =
        std::min(h2d, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    t0 = std::chrono::steady_clock::now();
    check(cudaMemcpy(r.host[0], dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    d2h =
        std::min(d2h, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return {bytes / h2d, bytes / d2h};
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  size_t gib = 16;
  uint64_t rows_per_call = uint64_t{1} << 19;
  uint64_t seed = 0;
  std::string out_path;
  std::vector<std::string> allocs = {"hostalloc_mapped_portable", "mallochost_slices_2048",
                                     "register_thp", "hostalloc_mapped_portable_slices_128"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--gib") {
      gib = std::stoull(argv[i + 1]);
    } else if (a == "--rows") {
      rows_per_call = std::stoull(argv[i + 1]);
    } else if (a == "--allocs") {
      allocs = split(argv[i + 1]);
    } else if (a == "--seed") {
      seed = std::stoull(argv[i + 1]);
    } else if (a == "--json") {
      out_path = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (gib == 0 || rows_per_call == 0 || rows_per_call > (gib << 30) / kRowBytes / 4) {
    std::fprintf(stderr, "--gib must be > 0 and --rows in [1, a quarter of the region's rows]\n");
    return 2;
  }
  if (seed == 0) seed = std::random_device{}() | 1;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const size_t bytes = gib << 30;
  std::mt19937_64 rng(seed);

  // Row lists: sorted and shuffled, over the whole region and over its first 1 and 4 GiB.
  std::map<size_t, std::vector<uint64_t>> sorted_rows;
  for (size_t span_gib : {size_t{1}, size_t{4}, gib}) {
    if (span_gib > gib) continue;
    sorted_rows[span_gib] =
        draw_rows(rows_per_call, (span_gib << 30) / kRowBytes, rng);  // may lose a few repeats
  }
  auto shuffled = [&](const std::vector<uint64_t>& v) {
    std::vector<uint64_t> s = v;
    std::shuffle(s.begin(), s.end(), rng);
    return s;
  };

  Device dev;
  check(cudaMalloc(&dev.dense, rows_per_call * kRowBytes), "cudaMalloc");
  check(cudaMalloc(&dev.rows, rows_per_call * sizeof(uint64_t)), "cudaMalloc");
  void* copy_buffer = nullptr;
  const size_t copy_bytes = std::min<size_t>(size_t{1} << 30, bytes / 2);
  check(cudaMalloc(&copy_buffer, copy_bytes), "cudaMalloc");

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const auto machine = dynemb::bench::query_machine_info();
  nlohmann::json report = {
      {"benchmark", "host_rows"},
      {"machine", {{"hostname", machine.hostname}, {"cpu", machine.cpu_model}}},
      {"gpu", prop.name},
      {"git_commit", dynemb::bench::git_commit(DYNEMB_SOURCE_DIR)},
      {"date", dynemb::bench::utc_now_iso8601()},
      {"params",
       {{"host_gib", gib},
        {"rows_per_call", rows_per_call},
        {"row_bytes", kRowBytes},
        {"seed", seed},
        {"rows",
         "distinct, uniform over the region (or its first 1 / 4 GiB); 'random' visits "
         "them shuffled, 'sorted' by ascending address"},
        {"methods", "t<threads per row>x<bytes per access>[u<rows in flight per group>]"},
        {"timing", "median of 5 launches after a warm-up, events"}}},
      {"results", nlohmann::json::array()}};
  const std::vector<Method> all = methods();
  std::printf(
      "GB/s = 1e9 bytes/s of rows moved; %llu rows of %u bytes per launch, %zu GiB region\n",
      static_cast<unsigned long long>(rows_per_call), kRowBytes, gib);
  std::printf("| allocation | span GiB | order | dir |");
  for (const Method& m : all) std::printf(" %s |", m.name.c_str());
  std::printf("\n| --- | --- | --- | --- |");
  for (size_t i = 0; i < all.size(); ++i) std::printf(" --- |");
  std::printf("\n");
  uint32_t round = 1;
  bool first_region = true;
  for (const std::string& name : allocs) {
    HostRegion region = allocate(name, bytes);
    nlohmann::json entry = {{"allocation", name}};
    if (region.host.empty()) {
      entry["unavailable"] = region.note;
      std::printf("| %s | unavailable: %s |\n", name.c_str(), region.note.c_str());
      report["results"].push_back(entry);
      continue;
    }
    const SliceTable slices = device_slices(region);
    const auto [h2d, d2h] =
        copy_bandwidth(region, copy_buffer, std::min(copy_bytes, region.slice_bytes));
    nlohmann::json numa = nlohmann::json::object();
    for (const auto& [node, pages] : numa_nodes(region, 256)) numa[std::to_string(node)] = pages;
    entry.update({{"alloc_seconds", region.seconds},
                  {"slices", region.host.size()},
                  {"copy_h2d_gb_s", h2d / 1e9},
                  {"copy_d2h_gb_s", d2h / 1e9},
                  {"numa_nodes_of_256_pages", numa},
                  {"cells", nlohmann::json::array()}});
    std::printf("| %s | alloc %.1f s, %zu slices, copy %.1f / %.1f GB/s, numa %s |\n", name.c_str(),
                region.seconds, region.host.size(), h2d / 1e9, d2h / 1e9, numa.dump().c_str());
    // Every method is checked once per allocation (both directions, whole-region rows).
    bool ok = true;
    for (const Method& m : all) {
      const std::vector<uint64_t> list = shuffled(sorted_rows[gib]);
      check(cudaMemcpy(dev.rows, list.data(), list.size() * 8, cudaMemcpyHostToDevice),
            "cudaMemcpy");
      if (!verify(region, slices, m, list, dev, round)) {
        std::printf("| %s | %s MOVED WRONG BYTES |\n", name.c_str(), m.name.c_str());
        ok = false;
      }
      round += 2;
    }
    entry["verified"] = ok;
    // Spans below the whole region only on the first allocation (the translation reach).
    for (const auto& [span, sorted] : sorted_rows) {
      if (span != gib && !first_region) continue;
      // window 0: shuffled; 1: ascending; w > 1: ascending, shuffled inside windows of w rows
      // (a kernel that keeps about w rows in flight while it walks an ascending list).
      std::vector<uint64_t> windows = {0, 1};
      if (first_region && span == gib)
        windows.insert(windows.end(), {uint64_t{1} << 12, uint64_t{1} << 15, uint64_t{1} << 17});
      for (const uint64_t window : windows) {
        std::vector<uint64_t> list = window == 0 ? shuffled(sorted) : sorted;
        for (uint64_t at = 0; window > 1 && at < list.size(); at += window) {
          const auto end = list.begin() + std::min<uint64_t>(at + window, list.size());
          std::shuffle(list.begin() + at, end, rng);
        }
        const std::string order = window == 0   ? "random"
                                  : window == 1 ? "sorted"
                                                : "sorted/" + std::to_string(window >> 10) + "K";
        check(cudaMemcpy(dev.rows, list.data(), list.size() * 8, cudaMemcpyHostToDevice),
              "cudaMemcpy");
        for (const bool to_host : {false, true}) {
          nlohmann::json cell = {{"span_gib", span},
                                 {"order", order},
                                 {"direction", to_host ? "write" : "read"},
                                 {"gb_s", nlohmann::json::object()}};
          std::printf("| %s | %zu | %s | %s |", name.c_str(), span, order.c_str(),
                      to_host ? "write" : "read");
          for (const Method& m : all) {
            const double s =
                time_launch(to_host ? m.write : m.read, slices, dev.dense, dev.rows, list.size());
            const double gbs = static_cast<double>(list.size()) * kRowBytes / s / 1e9;
            cell["gb_s"][m.name] = gbs;
            std::printf(" %.1f |", gbs);
          }
          std::printf("\n");
          std::fflush(stdout);
          entry["cells"].push_back(cell);
        }
      }
    }
    first_region = false;
    report["results"].push_back(entry);
    release(region);
  }
  cudaFree(copy_buffer);
  if (!out_path.empty()) std::ofstream(out_path) << report.dump(2) << "\n";
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "dynemb_bench_host_rows: %s\n", e.what());
  return 1;
}

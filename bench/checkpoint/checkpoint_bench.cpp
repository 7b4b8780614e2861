// dynemb_bench_checkpoint: dumps and loads one trainable table ([embedding | Adam state] rows)
// through dynemb's checkpoint format and reports GB/s beside the disk's own sequential speed,
// measured with dd in the same run. Writes JSON naming the machine, commit, date and every
// parameter.
//
// Usage: dynemb_bench_checkpoint [--rows N] [--dim D] [--dir PATH] [--json PATH]
//                                [--dd-gib G] [--chunk SLOTS] [--buffered]
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/table/machine_info.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/embedding/embedding.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using dynemb::checkpoint::named;

struct Args {
  uint64_t rows = 10'000'000;
  uint32_t dim = 128;
  std::string dir = "/tmp/dynemb-checkpoint-bench";
  std::string json;
  uint32_t dd_gib = 4;
  uint64_t chunk = 1u << 16;
  bool direct_io = true;
  uint32_t threads = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--rows")
      a.rows = std::stoull(value());
    else if (flag == "--dim")
      a.dim = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--dir")
      a.dir = value();
    else if (flag == "--json")
      a.json = value();
    else if (flag == "--dd-gib")
      a.dd_gib = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--chunk")
      a.chunk = std::stoull(value());
    else if (flag == "--threads")
      a.threads = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--buffered")
      a.direct_io = false;
    else
      throw std::runtime_error("unknown option " + flag);
  }
  return a;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs dd and returns its own "copied, X s, Y GB/s" line plus the rate in GB/s (1e9 B/s).
std::pair<std::string, double> run_dd(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {"popen failed", 0.0};
  char line[512];
  while (std::fgets(line, sizeof line, p) != nullptr) out = line;  // the last line
  ::pclose(p);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  // "... copied, 2.26 s, 1.9 GB/s": bytes / seconds is exact.
  double rate = 0.0;
  unsigned long long bytes = 0;
  double secs = 0.0;
  const auto comma = out.find("copied, ");
  if (std::sscanf(out.c_str(), "%llu bytes", &bytes) == 1 && comma != std::string::npos &&
      std::sscanf(out.c_str() + comma + 8, "%lf s", &secs) == 1 && secs > 0) {
    rate = static_cast<double>(bytes) / secs / 1e9;
  }
  return {out, rate};
}

// The next key (splitmix64) that fits its bucket: fills a fixed-capacity table exactly,
// without evictions, to a high load factor.
struct KeySource {
  uint64_t state = 0x9E3779B97F4A7C15ull;
  uint64_t num_buckets;
  uint32_t bucket_capacity;
  std::vector<uint16_t> fill;
  KeySource(uint64_t buckets, uint32_t cap)
      : num_buckets(buckets), bucket_capacity(cap), fill(buckets) {}
  int64_t next() {
    for (;;) {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      z >>= 2;  // never reserved
      const uint64_t b = dynemb::bucket_of_hash(dynemb::hash_key_bits(z), num_buckets);
      if (fill[b] < bucket_capacity) {
        ++fill[b];
        return static_cast<int64_t>(z);
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  namespace fs = std::filesystem;
  fs::create_directories(a.dir);
  const fs::path ckpt = fs::path(a.dir) / "ckpt";

  // The disk first: dd's own sequential write (O_DIRECT and through the page cache) and read.
  const std::string dd_file = (fs::path(a.dir) / "dd.bin").string();
  const std::string count = std::to_string(a.dd_gib * 64);
  const auto dd_direct = run_dd("dd if=/dev/zero of=" + dd_file + " bs=16M count=" + count +
                                " oflag=direct conv=fdatasync");
  const auto dd_read = run_dd("dd if=" + dd_file + " of=/dev/null bs=16M iflag=direct");
  fs::remove(dd_file);
  const auto dd_buffered =
      run_dd("dd if=/dev/zero of=" + dd_file + " bs=16M count=" + count + " conv=fdatasync");
  fs::remove(dd_file);
  std::cout << "dd write, O_DIRECT:    " << dd_direct.first << "\n"
            << "dd write, page cache:  " << dd_buffered.first << "\n"
            << "dd read, O_DIRECT:     " << dd_read.first << "\n";

  // The table: Adam rows [w (dim) | m | v | step], filled without evictions.
  dynemb::EmbeddingOptions eo;
  eo.dim = a.dim;
  eo.optimizer.kind = dynemb::OptimizerKind::kAdam;
  const uint32_t bucket_capacity = 128;
  const uint64_t buckets =
      (static_cast<uint64_t>(a.rows / 0.95) + bucket_capacity - 1) / bucket_capacity;
  eo.table.init_capacity = eo.table.max_capacity = buckets * bucket_capacity;
  eo.table.bucket_capacity = bucket_capacity;
  eo.table.max_load_factor = 1.0;
  eo.table.score_policy = dynemb::ScorePolicy::kStep;
  eo.table.num_threads = a.threads;
  dynemb::Embedding<int64_t> emb(dynemb::Backend::kCpu, eo);
  const uint32_t row_dim = emb.row_dim();
  std::cout << "table: " << a.rows << " rows x " << row_dim << " floats (dim " << a.dim
            << " + Adam state " << row_dim - a.dim << "), capacity " << emb.table().capacity()
            << "\n";
  const auto fill_start = Clock::now();
  KeySource keys(buckets, bucket_capacity);
  const size_t batch = 1u << 16;
  std::vector<int64_t> k(batch);
  std::vector<float> v(batch * row_dim);
  for (uint64_t done = 0; done < a.rows; done += batch) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(batch, a.rows - done));
    for (size_t i = 0; i < n; ++i) {
      k[i] = keys.next();
      float* row = &v[i * row_dim];
      for (uint32_t j = 0; j < row_dim; ++j) row[j] = static_cast<float>((k[i] + j) & 0xFFFF);
    }
    emb.table().insert_or_assign(n, k.data(), v.data());
    if ((done / batch) % 16 == 0) emb.table().advance_step();
  }
  const double fill_s = seconds_since(fill_start);
  const uint64_t stored = emb.table().size();
  std::cout << "filled " << stored << " rows in " << fill_s << " s\n";

  std::error_code ec;
  fs::remove_all(ckpt, ec);
  dynemb::checkpoint::DumpOptions dump_options;
  dump_options.chunk_slots = a.chunk;
  dump_options.direct_io = a.direct_io;
  auto t0 = Clock::now();
  const auto dumped = dynemb::checkpoint::dump(ckpt, {named("emb", emb)}, dump_options);
  const double dump_s = seconds_since(t0);
  const double gb = static_cast<double>(dumped.bytes) / 1e9;
  std::cout << "dump: " << dumped.rows << " rows, " << gb << " GB in " << dump_s
            << " s = " << gb / dump_s << " GB/s\n";

  auto timed_load = [&](dynemb::checkpoint::VerifyMode mode) {
    emb.table().clear();
    dynemb::checkpoint::LoadOptions o;
    o.verify = mode;
    o.chunk_rows = a.chunk;
    o.direct_io = a.direct_io;
    const auto start = Clock::now();
    const auto r = dynemb::checkpoint::load(ckpt, {named("emb", emb)}, o);
    const double s = seconds_since(start);
    if (r.rows_loaded != stored || emb.table().size() != stored) {
      throw std::runtime_error("load lost rows: " + std::to_string(emb.table().size()));
    }
    return std::pair<double, bool>{s, r.verified_first};
  };
  const auto [load_one_pass_s, one_pass_verified_first] =
      timed_load(dynemb::checkpoint::VerifyMode::kWhileLoading);
  std::cout << "load, checksums while loading (1 read): " << load_one_pass_s
            << " s = " << gb / load_one_pass_s << " GB/s\n";
  const auto [load_two_pass_s, two_pass_verified_first] =
      timed_load(dynemb::checkpoint::VerifyMode::kBeforeLoading);
  std::cout << "load, checksums before loading (2 reads): " << load_two_pass_s
            << " s = " << gb / load_two_pass_s << " GB/s\n";
  // Spot check: a row reads back as it was written.
  {
    KeySource again(buckets, bucket_capacity);
    std::vector<int64_t> probe(1024);
    for (auto& key : probe) key = again.next();
    std::vector<float> rows(probe.size() * row_dim);
    auto founds = std::make_unique<bool[]>(probe.size());
    emb.table().find(probe.size(), probe.data(), rows.data(), founds.get(), nullptr);
    for (size_t i = 0; i < probe.size(); ++i) {
      if (!founds[i] || rows[i * row_dim + 5] != static_cast<float>((probe[i] + 5) & 0xFFFF)) {
        throw std::runtime_error("row " + std::to_string(probe[i]) + " did not round-trip");
      }
    }
  }
  fs::remove_all(ckpt, ec);

  const dynemb::bench::MachineInfo machine = dynemb::bench::query_machine_info();
  nlohmann::json j{{"benchmark", "checkpoint"},
                   {"date", dynemb::bench::utc_now_iso8601()},
                   {"commit", dynemb::bench::git_commit(DYNEMB_SOURCE_DIR)},
                   {"machine",
                    {{"hostname", machine.hostname},
                     {"cpu", machine.cpu_model},
                     {"cores", machine.cores},
                     {"memory_bytes", machine.memory_bytes},
                     {"load_average", dynemb::bench::load_averages()}}},
                   {"parameters",
                    {{"rows", a.rows},
                     {"dim", a.dim},
                     {"optimizer", "adam"},
                     {"row_floats", row_dim},
                     {"key_type", "int64"},
                     {"backend", "cpu"},
                     {"capacity", emb.table().capacity()},
                     {"chunk", a.chunk},
                     {"direct_io", a.direct_io},
                     {"directory", a.dir}}},
                   {"disk_dd",
                    {{"write_direct_GBps", dd_direct.second},
                     {"write_direct_line", dd_direct.first},
                     {"write_page_cache_fdatasync_GBps", dd_buffered.second},
                     {"write_page_cache_fdatasync_line", dd_buffered.first},
                     {"read_direct_GBps", dd_read.second},
                     {"read_direct_line", dd_read.first},
                     {"gib", a.dd_gib}}},
                   {"results",
                    {{"rows", dumped.rows},
                     {"bytes", dumped.bytes},
                     {"fill_seconds", fill_s},
                     {"dump_seconds", dump_s},
                     {"dump_GBps", gb / dump_s},
                     {"load_one_pass_seconds", load_one_pass_s},
                     {"load_one_pass_GBps", gb / load_one_pass_s},
                     {"load_one_pass_verified_first", one_pass_verified_first},
                     {"load_verify_first_seconds", load_two_pass_s},
                     {"load_verify_first_GBps", gb / load_two_pass_s},
                     {"load_verify_first_verified_first", two_pass_verified_first}}}};
  if (!a.json.empty()) {
    std::ofstream(a.json) << j.dump(2) << "\n";
    std::cout << "wrote " << a.json << "\n";
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "dynemb_bench_checkpoint: " << e.what() << "\n";
  return 1;
}

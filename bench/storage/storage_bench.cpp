// dynemb_bench_storage: the RocksDB and Redis tiers (RocksDbStorage, RedisStorage) writing and
// reading rows of [dim floats | score] in batches, against the stores' own tools run in the same
// program on the same machine: db_bench (fillrandom with WriteBatch, multireadrandom with
// MultiGet) and redis-benchmark (pipelined MSET / MGET, one connection) with the same value size
// and rows per round trip. Prints a table and writes JSON naming the machine, commit, date and
// every parameter.
//
// Each pair is measured --repeat times, ours and the tool's runs alternating (which goes first
// alternates too); the table shows medians, the JSON every run.
//
// Usage: dynemb_bench_storage [--rows N] [--dim D] [--batch B] [--repeat R] [--dir PATH]
//                             [--json PATH] [--no-rocksdb] [--no-redis]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/table/machine_info.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/storage/redis_storage.hpp"
#include "dynemb/storage/rocksdb_storage.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using dynemb::storage::Storage;

struct Args {
  uint64_t rows = 200'000;
  uint32_t dim = 128;
  uint32_t batch = 1000;
  std::string dir = "/tmp/dynemb-storage-bench";
  std::string json;
  bool rocksdb = true;
  bool redis = true;
  uint32_t repeat = 3;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
      return argv[++i];
    };
    if (k == "--rows")
      a.rows = std::stoull(value());
    else if (k == "--dim")
      a.dim = static_cast<uint32_t>(std::stoul(value()));
    else if (k == "--batch")
      a.batch = static_cast<uint32_t>(std::stoul(value()));
    else if (k == "--dir")
      a.dir = value();
    else if (k == "--json")
      a.json = value();
    else if (k == "--no-rocksdb")
      a.rocksdb = false;
    else if (k == "--no-redis")
      a.redis = false;
    else if (k == "--repeat")
      a.repeat = static_cast<uint32_t>(std::stoul(value()));
    else
      throw std::runtime_error("unknown argument " + k);
  }
  if (a.rows == 0 || a.dim == 0 || a.batch == 0 || a.repeat == 0)
    throw std::runtime_error("--rows, --dim, --batch, --repeat must be > 0");
  return a;
}

// Runs a shell command; returns its standard output.
std::string run(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) throw std::runtime_error("cannot run " + command);
  char buf[4096];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  const int rc = ::pclose(p);
  if (rc != 0)
    throw std::runtime_error("`" + command.substr(0, 120) + "...` exited with " +
                             std::to_string(rc));
  return out;
}

// The "ops/sec" figure of a db_bench result line for `name`.
double db_bench_ops(const std::string& output, const std::string& name, std::string& line) {
  std::istringstream in(output);
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const size_t at = line.find(" ops/sec");
    if (at == std::string::npos) continue;
    size_t start = line.rfind(' ', at - 1);
    return std::stod(line.substr(start + 1, at - start - 1));
  }
  throw std::runtime_error("db_bench printed no result for " + name + ":\n" + output);
}

struct Measured {
  double write_rows_per_s = 0;
  double read_rows_per_s = 0;
  uint64_t rows_found = 0;
};

// Writes `rows` rows in batches, then reads `rows` random stored keys in batches.
Measured measure(Storage& s, const Args& a) {
  std::mt19937_64 rng(42);
  const uint32_t dim = a.dim;
  std::vector<uint64_t> keys(a.batch), scores(a.batch, 1);
  std::vector<float> rows(a.batch * dim);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : rows) v = u(rng);
  auto key_of = [](uint64_t i) { return dynemb::hash_key_bits(i) >> 1; };
  Measured m;
  auto t0 = Clock::now();
  for (uint64_t done = 0; done < a.rows; done += a.batch) {
    const size_t n = std::min<uint64_t>(a.batch, a.rows - done);
    for (size_t i = 0; i < n; ++i) keys[i] = key_of(done + i);
    rows[0] = static_cast<float>(done);  // rows differ from batch to batch
    s.insert_or_assign(n, keys.data(), rows.data(), scores.data());
  }
  m.write_rows_per_s =
      static_cast<double>(a.rows) / std::chrono::duration<double>(Clock::now() - t0).count();
  std::unique_ptr<bool[]> found(new bool[a.batch]);
  t0 = Clock::now();
  for (uint64_t done = 0; done < a.rows; done += a.batch) {
    const size_t n = std::min<uint64_t>(a.batch, a.rows - done);
    for (size_t i = 0; i < n; ++i) keys[i] = key_of(rng() % a.rows);
    s.find(n, keys.data(), rows.data(), scores.data(), found.get());
    for (size_t i = 0; i < n; ++i) m.rows_found += found[i];
  }
  m.read_rows_per_s =
      static_cast<double>(a.rows) / std::chrono::duration<double>(Clock::now() - t0).count();
  if (m.rows_found != a.rows)
    throw std::runtime_error("read back " + std::to_string(m.rows_found) + " of " +
                             std::to_string(a.rows) + " rows");
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A redis-server of this run on loopback (no persistence), stopped when destroyed.
struct RedisProcess {
  int port = free_port();
  pid_t pid = -1;
  RedisProcess() {
    std::fflush(stdout);  // the child must not write our buffered lines again
    pid = ::fork();
    if (pid == 0) {
      std::freopen("/dev/null", "w", stdout);
      const std::string p = std::to_string(port);
      ::execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save",
               "", "--appendonly", "no", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    for (int i = 0; i < 500; ++i) {
      if (std::system(
              ("redis-cli -p " + std::to_string(port) + " ping > /dev/null 2>&1").c_str()) == 0)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("redis-server did not start");
  }
  ~RedisProcess() {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
  }
};

// The "requests per second" of a redis-benchmark --csv line.
double redis_benchmark_rps(const std::string& output, std::string& line) {
  std::istringstream in(output);
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '"' || line.rfind("\"test\"", 0) == 0) continue;
    const size_t a = line.find("\",\"");
    const size_t b = line.find('"', a + 3);
    return std::stod(line.substr(a + 3, b - a - 3));
  }
  throw std::runtime_error("redis-benchmark printed no result:\n" + output);
}

// Stores `value` under every key redis-benchmark's k:__rand_int__ can name for -r rows
// ("k:" + 12 zero-padded digits), through `redis-cli --pipe`.
void fill_redis_benchmark_keys(int port, uint64_t rows, const std::string& value) {
  const std::string command = "redis-cli -p " + std::to_string(port) + " --pipe > /dev/null";
  FILE* p = ::popen(command.c_str(), "w");
  if (p == nullptr) throw std::runtime_error("cannot run " + command);
  const std::string value_arg = "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n";
  char key[32];
  for (uint64_t i = 0; i < rows; ++i) {
    std::snprintf(key, sizeof key, "k:%012llu", static_cast<unsigned long long>(i));
    std::fprintf(p, "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n", std::strlen(key), key);
    std::fwrite(value_arg.data(), 1, value_arg.size(), p);
  }
  if (::pclose(p) != 0) throw std::runtime_error("`" + command + "` failed");
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  const uint32_t value_bytes = 8 + 4 * a.dim;
  nlohmann::json results = nlohmann::json::object();
  std::printf("%-10s %-8s %16s %16s %8s\n", "tier", "op", "dynemb rows/s", "tool rows/s", "ratio");

  if (a.rocksdb) {
    const std::string cmd =
        "db_bench --db=" + (fs::path(a.dir) / "db_bench").string() +
        " --benchmarks=fillrandom,multireadrandom --num=" + std::to_string(a.rows) +
        " --reads=" + std::to_string(a.rows) +
        " --key_size=9 --value_size=" + std::to_string(value_bytes) +
        " --batch_size=" + std::to_string(a.batch) +
        " --multiread_batched=true --threads=1 --compression_ratio=1.0 --disable_wal=false"
        " --sync=false --use_existing_db=false 2>&1";
    std::vector<double> ow, orr, tw, tr;
    std::vector<std::string> lines;
    for (uint32_t r = 0; r < a.repeat; ++r) {
      for (int turn = 0; turn < 2; ++turn) {
        fs::remove_all(a.dir);
        fs::create_directories(a.dir);
        if ((turn == 0) == (r % 2 == 0)) {
          dynemb::storage::RocksDbStorageOptions o;
          o.directory = fs::path(a.dir) / "dynemb";
          o.row_dim = a.dim;
          dynemb::storage::RocksDbStorage s(o);
          const Measured m = measure(s, a);
          ow.push_back(m.write_rows_per_s);
          orr.push_back(m.read_rows_per_s);
        } else {
          const std::string out = run(cmd);
          std::string fill_line, read_line;
          tw.push_back(db_bench_ops(out, "fillrandom", fill_line));
          tr.push_back(db_bench_ops(out, "multireadrandom", read_line));
          lines.push_back(fill_line);
          lines.push_back(read_line);
        }
      }
    }
    fs::remove_all(a.dir);
    const double w = median(ow), rd = median(orr), fill = median(tw), read = median(tr);
    std::printf("%-10s %-8s %16.0f %16.0f %8.2f\n", "rocksdb", "write", w, fill, w / fill);
    std::printf("%-10s %-8s %16.0f %16.0f %8.2f\n", "rocksdb", "read", rd, read, rd / read);
    results["rocksdb"] = {{"dynemb_write_rows_per_s", w},
                          {"dynemb_read_rows_per_s", rd},
                          {"db_bench_fillrandom_ops_per_s", fill},
                          {"db_bench_multireadrandom_ops_per_s", read},
                          {"write_ratio", w / fill},
                          {"read_ratio", rd / read},
                          {"runs",
                           {{"dynemb_write", ow},
                            {"dynemb_read", orr},
                            {"db_bench_fillrandom", tw},
                            {"db_bench_multireadrandom", tr}}},
                          {"db_bench_command", cmd},
                          {"db_bench_lines", lines}};
  }

  if (a.redis) {
    RedisProcess server;
    // The tool: one connection, `pairs` keys per MSET / MGET and `pipeline` commands per round
    // trip, so a round trip moves `batch` rows as ours does. Values are printable bytes of the
    // same size (a command line cannot carry NULs).
    const uint32_t pairs = 50, pipeline = std::max<uint32_t>(1, a.batch / pairs);
    const std::string value(value_bytes, 'v');
    std::string mset = "MSET", mget = "MGET";
    for (uint32_t i = 0; i < pairs; ++i) {
      mset += " k:__rand_int__ " + value;
      mget += " k:__rand_int__";
    }
    const uint64_t requests = std::max<uint64_t>(1, a.rows / pairs);
    const std::string base = "redis-benchmark -h 127.0.0.1 -p " + std::to_string(server.port) +
                             " -c 1 -P " + std::to_string(pipeline) + " -n " +
                             std::to_string(requests) + " -r " + std::to_string(a.rows) + " --csv ";
    std::vector<double> ow, orr, tw, tr;
    std::vector<std::string> lines;
    for (uint32_t r = 0; r < a.repeat; ++r) {
      for (int turn = 0; turn < 2; ++turn) {
        run("redis-cli -p " + std::to_string(server.port) + " FLUSHALL > /dev/null");
        if ((turn == 0) == (r % 2 == 0)) {
          dynemb::storage::RedisStorageOptions o;
          o.servers = {"127.0.0.1:" + std::to_string(server.port)};
          o.row_dim = a.dim;
          dynemb::storage::RedisStorage s(o);
          const Measured m = measure(s, a);
          ow.push_back(m.write_rows_per_s);
          orr.push_back(m.read_rows_per_s);
        } else {
          std::string set_line, get_line;
          tw.push_back(redis_benchmark_rps(run(base + mset + " 2>&1"), set_line) * pairs);
          // MSET of random keys leaves about 37% of [0, rows) unwritten; ours reads stored rows
          // only, so every key the tool's MGET may draw is given a row first (not timed).
          fill_redis_benchmark_keys(server.port, a.rows, value);
          tr.push_back(redis_benchmark_rps(run(base + mget + " 2>&1"), get_line) * pairs);
          lines.push_back(set_line);
          lines.push_back(get_line);
        }
      }
    }
    const double w = median(ow), rd = median(orr), set_rows = median(tw), get_rows = median(tr);
    std::printf("%-10s %-8s %16.0f %16.0f %8.2f\n", "redis", "write", w, set_rows, w / set_rows);
    std::printf("%-10s %-8s %16.0f %16.0f %8.2f\n", "redis", "read", rd, get_rows, rd / get_rows);
    results["redis"] = {{"dynemb_write_rows_per_s", w},
                        {"dynemb_read_rows_per_s", rd},
                        {"redis_benchmark_mset_rows_per_s", set_rows},
                        {"redis_benchmark_mget_rows_per_s", get_rows},
                        {"write_ratio", w / set_rows},
                        {"read_ratio", rd / get_rows},
                        {"runs",
                         {{"dynemb_write", ow},
                          {"dynemb_read", orr},
                          {"redis_benchmark_mset", tw},
                          {"redis_benchmark_mget", tr}}},
                        {"keys_per_command", pairs},
                        {"pipeline", pipeline},
                        {"redis_benchmark_lines", lines},
                        {"note",
                         "before its MGET run every key redis-benchmark may draw ([0, rows)) "
                         "holds a row (written untimed through redis-cli --pipe), as every key "
                         "ours reads does: no nil replies"}};
  }

  const dynemb::bench::MachineInfo machine = dynemb::bench::query_machine_info();
  const nlohmann::json j{{"benchmark", "storage"},
                         {"date", dynemb::bench::utc_now_iso8601()},
                         {"commit", dynemb::bench::git_commit(DYNEMB_SOURCE_DIR)},
                         {"machine",
                          {{"hostname", machine.hostname},
                           {"cpu", machine.cpu_model},
                           {"cores", machine.cores},
                           {"memory_bytes", machine.memory_bytes},
                           {"gpu", "none"},
                           {"load_average", dynemb::bench::load_averages()}}},
                         {"parameters",
                          {{"rows", a.rows},
                           {"dim", a.dim},
                           {"value_bytes", value_bytes},
                           {"batch", a.batch},
                           {"repeat", a.repeat},
                           {"directory", a.dir}}},
                         {"results", results}};
  if (!a.json.empty()) {
    std::ofstream(a.json) << j.dump(2) << "\n";
    std::cout << "wrote " << a.json << "\n";
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "dynemb_bench_storage: " << e.what() << "\n";
  return 1;
}

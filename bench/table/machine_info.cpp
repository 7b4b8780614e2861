#include "bench/table/machine_info.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <thread>

namespace dynemb::bench {
namespace {

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

std::string format_utc(const char* pattern) {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::array<char, 64> text{};
  std::strftime(text.data(), text.size(), pattern, &utc);
  return text.data();
}

// Quotes `s` for a POSIX shell.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

MachineInfo query_machine_info() {
  MachineInfo info;
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) == 0) info.hostname = host.data();
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      info.cpu_model = trim(line.substr(line.find(':') + 1));
      break;
    }
  }
  info.cores = std::thread::hardware_concurrency();
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) info.memory_bytes = uint64_t(pages) * uint64_t(page_size);
  return info;
}

std::vector<double> load_averages() {
  std::ifstream file("/proc/loadavg");
  std::vector<double> out(3);
  if (!(file >> out[0] >> out[1] >> out[2])) return {};
  return out;
}

std::string git_commit(const std::string& directory) {
  if (const char* named = std::getenv("DYNEMB_GIT_COMMIT"); named != nullptr && *named != '\0')
    return named;
  const std::string command =
      "git -C " + shell_quote(directory) + " rev-parse --short HEAD 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return "unknown";
  std::array<char, 128> buffer{};
  std::string out;
  while (std::fgets(buffer.data(), buffer.size(), pipe.get()) != nullptr) out += buffer.data();
  out = trim(out);
  return out.empty() ? "unknown" : out;
}

std::string utc_now_iso8601() {
  return format_utc("%Y-%m-%dT%H:%M:%SZ");
}

}  // namespace dynemb::bench

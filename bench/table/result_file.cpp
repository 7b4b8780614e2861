#include "bench/table/result_file.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "dynemb/core/error.hpp"

namespace dynemb::bench {

nlohmann::json machine_json(const MachineInfo& m) {
  return {{"hostname", m.hostname},
          {"cpu_model", m.cpu_model},
          {"cores", m.cores},
          {"memory_bytes", m.memory_bytes}};
}

nlohmann::json gpu_json(const std::optional<GpuInfo>& gpu) {
  if (!gpu) return nullptr;
  return {{"name", gpu->name},
          {"memory_bytes", gpu->memory_bytes},
          {"compute_capability", std::to_string(gpu->compute_capability_major) + "." +
                                     std::to_string(gpu->compute_capability_minor)},
          {"multiprocessors", gpu->multiprocessors}};
}

std::string machine_label(const std::string& hostname) {
  const char* label = std::getenv("DYNEMB_BENCH_MACHINE");
  return label != nullptr && *label != '\0' ? std::string(label) : hostname;
}

std::string default_result_path(const std::string& source_dir, const std::string& stem,
                                const std::string& hostname) {
  return source_dir + "/bench/results/" + stem + "-" + machine_label(hostname) + ".json";
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream file(p);
  file << text;
  if (!file) throw Error("dynemb bench: cannot write " + path);
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  write_text_file(path, j.dump(2) + "\n");
}

}  // namespace dynemb::bench

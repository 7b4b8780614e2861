#include "train/checkpoint_store.hpp"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTableName = "fm";
constexpr const char* kModelDir = "model";
constexpr const char* kStateFile = "trainer_state.json";

// Writes `text` to `path` through a temporary file and a rename, so readers see all or nothing.
void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path staging = path.string() + ".tmp";
  {
    std::ofstream out(staging, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw Error("dynemb train: cannot write '" + staging.string() + "'");
  }
  fs::rename(staging, path);
}

class LibraryCheckpointStore final : public CheckpointStore {
 public:
  void save(const std::string& dir, FmModel& model, const TrainProgress& progress) override {
    fs::create_directories(dir);
    const checkpoint::DumpReport report = checkpoint::dump(
        fs::path(dir) / kModelDir, {checkpoint::named(kTableName, model.embedding())});
    const nlohmann::json state = {{"samples", progress.samples},
                                  {"steps", progress.steps},
                                  {"model_dump_time_ns", report.manifest.dump_time_ns},
                                  {"rows", report.rows}};
    write_atomically(fs::path(dir) / kStateFile, state.dump(2) + "\n");
  }

  uint64_t save_incremental(const std::string& dir, FmModel& model, const TrainProgress& progress,
                            uint64_t since) override {
    checkpoint::DumpOptions options;
    options.min_score = since;
    const fs::path path = fs::path(dir) / "incremental" / std::to_string(progress.steps);
    fs::create_directories(path.parent_path());
    const checkpoint::DumpReport report =
        checkpoint::dump(path, {checkpoint::named(kTableName, model.embedding())}, options);
    const auto& table = report.manifest.tables.at(0);
    return table.next_min_score.value_or(since);
  }

  TrainProgress load(const std::string& dir, FmModel& model) override {
    const fs::path state_path = fs::path(dir) / kStateFile;
    std::ifstream in(state_path);
    if (!in) {
      throw InvalidArgument("--resume = '" + dir + "', no " + kStateFile +
                            " in it: not a dynemb train checkpoint directory");
    }
    nlohmann::json state;
    try {
      state = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw InvalidArgument("--resume: " + state_path.string() + " is not valid JSON: " + e.what());
    }
    const fs::path model_path = fs::path(dir) / kModelDir;
    const checkpoint::Manifest manifest = checkpoint::read_manifest(model_path);
    if (state.value("model_dump_time_ns", uint64_t{0}) != manifest.dump_time_ns) {
      throw InvalidArgument("--resume = '" + dir + "', " + kStateFile +
                            " does not belong to the model checkpoint next to it (dump times " +
                            std::to_string(state.value("model_dump_time_ns", uint64_t{0})) +
                            " vs " + std::to_string(manifest.dump_time_ns) +
                            "): the run stopped while saving");
    }
    checkpoint::load(model_path, {checkpoint::named(kTableName, model.embedding())});
    TrainProgress progress;
    progress.samples = state.at("samples").get<uint64_t>();
    progress.steps = state.at("steps").get<uint64_t>();
    return progress;
  }
};

}  // namespace

std::unique_ptr<CheckpointStore> make_checkpoint_store() {
  return std::make_unique<LibraryCheckpointStore>();
}

}  // namespace dynemb::train

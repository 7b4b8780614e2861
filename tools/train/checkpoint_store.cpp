#include "train/checkpoint_store.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/checkpoint/file_ops.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTableName = "fm";
constexpr const char* kModelDir = "model";
constexpr const char* kIncrementalDir = "incremental";
constexpr const char* kMetadataKey = "dynemb_train";

std::string metadata_of(const TrainState& state) {
  return std::string("{\"") + kMetadataKey + "\":" + state_to_json(state) + "}";
}

// The trainer state of the checkpoint at `path`, checked against its manifest's table.
TrainState state_of(const fs::path& path) {
  const checkpoint::Manifest m = checkpoint::read_manifest(path);
  const std::string where = (path / checkpoint::kManifestName).string() + " metadata";
  const nlohmann::json metadata = nlohmann::json::parse(m.metadata, nullptr, false);
  if (metadata.is_discarded() || !metadata.contains(kMetadataKey)) {
    throw InvalidArgument(where + ": no \"" + std::string(kMetadataKey) +
                          "\" object: not a checkpoint written by dynemb train");
  }
  TrainState s = state_from_json(metadata.at(kMetadataKey).dump(), where + "." + kMetadataKey);
  const auto table =
      std::find_if(m.tables.begin(), m.tables.end(),
                   [](const checkpoint::TableEntry& t) { return t.name == kTableName; });
  if (table == m.tables.end()) {
    throw InvalidArgument(where + ": the checkpoint has no table \"" + kTableName + "\"");
  }
  if (table->dim != s.dim + 1) {
    throw InvalidArgument(where + ": dim = " + std::to_string(s.dim) +
                          ", but the table's rows hold " + std::to_string(table->dim) +
                          " floats (expected dim + 1)");
  }
  if (table->optimizer != s.optimizer) {
    throw InvalidArgument(where + ": optimizer = " + s.optimizer +
                          ", but the table was dumped with " + table->optimizer);
  }
  if (!m.delta && table->score_policy == "step" && table->score != s.progress.steps) {
    throw InvalidArgument(where + ": steps = " + std::to_string(s.progress.steps) +
                          ", but the table's step clock is " + std::to_string(table->score));
  }
  return s;
}

// The incremental dumps under `dir`, by step (staging directories left out).
std::map<uint64_t, fs::path> incremental_dumps(const fs::path& dir, std::vector<fs::path>* others) {
  std::map<uint64_t, fs::path> dumps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir / kIncrementalDir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.front() == '.') continue;
    uint64_t step = 0;
    const auto [end, err] = std::from_chars(name.data(), name.data() + name.size(), step);
    if (err == std::errc() && end == name.data() + name.size()) {
      dumps[step] = entry.path();
    } else if (others != nullptr) {
      others->push_back(entry.path());
    }
  }
  return dumps;
}

class LibraryCheckpointStore final : public CheckpointStore {
 public:
  std::optional<TrainState> read_state(const std::string& dir) override {
    const fs::path model = fs::path(dir) / kModelDir;
    std::error_code ec;
    if (fs::exists(model, ec)) return state_of(model);
    const auto dumps = incremental_dumps(dir, nullptr);
    if (dumps.empty()) return std::nullopt;
    return state_of(dumps.rbegin()->second);
  }

  size_t prepare(const std::string& dir, const TrainState& state) override {
    std::vector<fs::path> doomed;
    const auto dumps = incremental_dumps(dir, &doomed);
    for (const auto& [step, path] : dumps) {
      bool keep = false;
      try {
        const TrainState s = state_of(path);
        keep = s.run_id == state.run_id && step <= state.progress.steps;
      } catch (const Error&) {
        keep = false;  // unreadable: not this run's
      }
      if (!keep) doomed.push_back(path);
    }
    for (const fs::path& p : doomed) checkpoint::remove_directory_durably(p);
    std::error_code ec;
    if (fs::is_directory(fs::path(dir) / kIncrementalDir, ec)) {
      checkpoint::remove_stale_staging(fs::path(dir) / kIncrementalDir);
    }
    if (fs::is_directory(dir, ec)) checkpoint::remove_stale_staging(dir);
    return doomed.size();
  }

  void save(const std::string& dir, FmModel& model, const TrainState& state) override {
    checkpoint::DumpOptions options;
    options.overwrite = true;  // the trainer checked that `dir` holds this run (or --overwrite)
    options.metadata = metadata_of(state);
    checkpoint::dump(fs::path(dir) / kModelDir, {checkpoint::named(kTableName, model.embedding())},
                     options);
  }

  uint64_t save_incremental(const std::string& dir, FmModel& model, const TrainState& state,
                            uint64_t since) override {
    checkpoint::DumpOptions options;
    options.min_score = since;
    options.overwrite = true;
    options.metadata = metadata_of(state);
    const fs::path path = fs::path(dir) / kIncrementalDir / std::to_string(state.progress.steps);
    const checkpoint::DumpReport report =
        checkpoint::dump(path, {checkpoint::named(kTableName, model.embedding())}, options);
    return report.manifest.tables.at(0).next_min_score.value_or(since);
  }

  void load(const std::string& dir, FmModel& model, bool reset_optimizer) override {
    checkpoint::LoadOptions options;
    options.optimizer_state = !reset_optimizer;
    options.convert_value_type = true;  // a resume may change --value-type (rows rounded)
    checkpoint::load(fs::path(dir) / kModelDir, {checkpoint::named(kTableName, model.embedding())},
                     options);
  }
};

}  // namespace

std::unique_ptr<CheckpointStore> make_checkpoint_store() {
  return std::make_unique<LibraryCheckpointStore>();
}

}  // namespace dynemb::train

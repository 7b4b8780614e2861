// The trainer's checkpoint hooks: where --checkpoint-dir, --checkpoint-every,
// --incremental-every and --resume go. make_checkpoint_store() implements them over the
// library's checkpoint part (include/dynemb/checkpoint); tests may plug in their own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "train/fm_model.hpp"
#include "train/train_state.hpp"

namespace dynemb::train {

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  // The state of the run held in `dir`: its full checkpoint's, or without one its newest
  // incremental dump's; nullopt when `dir` holds no run. Throws (naming the file and field) when
  // what is there cannot be read or is inconsistent.
  virtual std::optional<TrainState> read_state(const std::string& dir) = 0;
  // Makes `dir` hold run `state.run_id` only: removes incremental dumps of other runs (and
  // unreadable ones) and this run's dumps past state.progress.steps (they are redone). Returns
  // how many it removed.
  virtual size_t prepare(const std::string& dir, const TrainState& state) = 0;
  // Writes a full checkpoint of the model and `state` into `dir`; model and state replace the
  // previous ones together, in one atomic step, only once both are complete and durable.
  virtual void save(const std::string& dir, FmModel& model, const TrainState& state) = 0;
  // Writes the rows whose score is >= `since` as an incremental dump under `dir`, tagged with
  // `state`; returns the threshold to pass next time.
  virtual uint64_t save_incremental(const std::string& dir, FmModel& model, const TrainState& state,
                                    uint64_t since) = 0;
  // Loads the full checkpoint in `dir` into `model` (whose table must be empty), with its
  // optimizer state unless `reset_optimizer`.
  virtual void load(const std::string& dir, FmModel& model, bool reset_optimizer) = 0;
};

// The store over the library's checkpoint part. A checkpoint directory holds `model/` (a
// dynemb checkpoint of the FM table, rows with optimizer state and the STEP clock, whose
// manifest metadata "dynemb_train" is the TrainState) and `incremental/<step>/` (delta
// checkpoints of the rows touched since the previous dump, tagged with the run's state).
std::unique_ptr<CheckpointStore> make_checkpoint_store();

}  // namespace dynemb::train

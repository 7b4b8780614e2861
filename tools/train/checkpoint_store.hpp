// The trainer's checkpoint hooks: where --checkpoint-dir, --checkpoint-every,
// --incremental-every and --resume go. make_checkpoint_store() implements them over the
// library's checkpoint part (include/dynemb/checkpoint); tests may plug in their own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "train/fm_model.hpp"

namespace dynemb::train {

// Where a run stands: enough to continue it exactly.
struct TrainProgress {
  uint64_t samples = 0;  // training samples consumed from the stream
  uint64_t steps = 0;    // training steps taken (the table's STEP score follows it)
};

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  // Writes a full checkpoint of the model and `progress` into `dir`, replacing any previous one
  // only once the new one is complete.
  virtual void save(const std::string& dir, FmModel& model, const TrainProgress& progress) = 0;
  // Writes the rows whose score is >= `since` as an incremental dump under `dir`; returns the
  // threshold to pass next time.
  virtual uint64_t save_incremental(const std::string& dir, FmModel& model,
                                    const TrainProgress& progress, uint64_t since) = 0;
  // Loads the checkpoint in `dir` into `model` (whose table must be empty) and returns the
  // progress it recorded.
  virtual TrainProgress load(const std::string& dir, FmModel& model) = 0;
};

// The store over the library's checkpoint part. A checkpoint directory holds `model/` (a
// dynemb checkpoint of the FM table, rows with optimizer state and the STEP clock),
// `trainer_state.json` (samples and steps, tied to the model's dump time) and `incremental/<step>/`
// (delta checkpoints of the rows touched since the previous dump).
std::unique_ptr<CheckpointStore> make_checkpoint_store();

}  // namespace dynemb::train

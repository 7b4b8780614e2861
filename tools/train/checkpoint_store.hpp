// The trainer's checkpoint hooks: where --checkpoint-dir, --checkpoint-every,
// --incremental-every and --resume go. The library's checkpoint part (include/dynemb/checkpoint)
// will implement this; until it lands, make_checkpoint_store() says it is not available.
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

// The store over the library's checkpoint part. Throws NotAvailable (naming `option`) while that
// part is not built.
std::unique_ptr<CheckpointStore> make_checkpoint_store(const char* option);

}  // namespace dynemb::train

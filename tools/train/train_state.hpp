// What a `dynemb train` checkpoint records besides the model: where the run stands and what it
// was trained with, stored as the "dynemb_train" object of the model checkpoint's manifest
// metadata (so model and state are written, checksummed and switched together), and the checks
// that decide whether a run may continue from it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "train/train_options.hpp"

namespace dynemb::train {

// Where a run stands: enough to continue it exactly.
struct TrainProgress {
  uint64_t samples = 0;  // training samples consumed from the stream
  uint64_t steps = 0;    // training steps taken (the table's STEP score follows it)
};

struct TrainState {
  std::string run_id;  // 32 hex digits, drawn when a run starts fresh; kept across resumes
  TrainProgress progress;
  uint64_t incremental_threshold = 0;  // min score of the next incremental dump
  uint32_t dim = 0;                    // --dim (table rows are dim + 1 floats)
  uint32_t batch_size = 0;             // samples per step
  std::string optimizer;               // --optimizer
  // The data stream, as (flag, value) pairs: --data, the synthetic stream's parameters or the
  // training file (path and size), --holdout-every, --epochs, --eval-file.
  std::vector<std::pair<std::string, std::string>> stream;
};

// A fresh run id (32 hex digits).
std::string new_run_id();
// The state of a fresh run of `options` (progress 0, a new run id).
TrainState initial_state(const TrainOptions& options);
// The JSON object text stored in the manifest metadata under "dynemb_train".
std::string state_to_json(const TrainState& state);
// Parses and validates (types, ranges, consistency) the state; InvalidArgument naming `where`,
// the field, its value and the limit otherwise.
TrainState state_from_json(const std::string& text, const std::string& where);

// Refuses (InvalidArgument naming both values and the flag that allows it) to continue
// `saved` with `current`'s settings: another --dim always; another --optimizer unless
// options.reset_optimizer; another data stream unless options.allow_different_data; another
// batch size unless options.allow_different_batch_size.
void check_resume_compatible(const TrainState& saved, const TrainState& current,
                             const TrainOptions& options);

}  // namespace dynemb::train

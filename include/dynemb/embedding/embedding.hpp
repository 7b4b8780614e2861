// A trainable embedding table: each value row is [embedding | optimizer state] in one table
// row, so one lookup finds both and eviction drops both together.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "dynemb/core/memory.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/ops/optimizer.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/table/row_layout.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb {

namespace embedding::detail {
template <TableKey K>
class AdmissionCounter;
}  // namespace embedding::detail

// Everything that shapes a trainable table.
struct EmbeddingOptions {
  uint32_t dim = 0;  // embedding floats per row
  // The table: its dim is set to dim + optimizer state, its initializer draws only the
  // embedding part (state starts at 0).
  TableOptions table{};
  OptimizerOptions optimizer{};
  // What evaluation reads for keys without a row (and training reads for keys not yet
  // admitted). Default: zeros.
  InitializerOptions eval_initializer{InitializerKind::kConstant};
  // Counter admission: a key gets a row only once it was seen this many times (<= 1: at
  // once). Until then it reads eval_initializer and gets no gradient.
  uint32_t admit_threshold = 0;
  // Slots of the admission counter table (0: table.max_capacity). Its lowest counts are
  // evicted when it is full.
  uint64_t admission_capacity = 0;
  // Expiry: rows not touched for this many steps (STEP policy) or seconds (TIMESTAMP policy)
  // are erased by end_step(). 0 = off.
  uint64_t ttl_steps = 0;
  double ttl_seconds = 0.0;
  // NaN / Inf gradients: ERROR throws before any row changes (one host synchronization per
  // backward); WARNING / IGNORE skip the row (counted on the device; WARNING logs the count at
  // the next forward).
  SafeCheck gradient_check = SafeCheck::kWarning;
  // Pad each table row with zeros to a multiple of 4 floats (16 bytes) when dim is a multiple
  // of 4, so every row, its embedding and its state arrays start 16-byte aligned and the GPU
  // kernels move them as float4. The padding is part of the table's dim (row_dim()), so
  // checkpoints and stats see it as optimizer state; false keeps rows unpadded.
  bool align_rows = true;
  // What the embedding's elements are stored as: float32, or float16 / bfloat16 packed two a
  // 32-bit word (value_words), followed by the optimizer state in float32; lookups, gradients and
  // the optimizer's arithmetic are float32 (docs/value_types.md). The embedding copies it into
  // optimizer.value_type and the initializers' value_type.
  ValueType value_type = ValueType::kFloat32;
  // 16-bit value types: store each updated weight rounded stochastically (unbiased on average)
  // instead of to nearest even; copied into optimizer.stochastic_rounding.
  bool stochastic_rounding = false;
  // bfloat16 rows: keep the optimizer's per-element state (Adam's m and v, ...) in bfloat16 too,
  // rounded stochastically, instead of float32; copied into optimizer.state_in_value_type. A
  // bf16 Adam row of dim 128 then moves 196 words instead of 324 (docs/value_types.md). float16
  // is refused: its range flushes small second moments (Adam's v, RMSProp's) to 0.
  bool state_in_value_type = false;
  // false: the backward's per-row gradient sums run in any order (float atomics on the GPU:
  // no grouping or chunk sums through memory), so rows agree with the deterministic backward
  // within float32 rounding but not bit for bit, and may differ run to run. Default: the fixed
  // order (bit-reproducible, the same on CPU and GPU). The CPU backend is ordered either way.
  bool deterministic_backward = true;
  // What forward writes and backward reads: float32 (the default), or with 16-bit rows the rows'
  // own type (value_type), packed two a 32-bit word like a row (value_words; out / out_stride and
  // grad / grad_stride then count words). Pooled sums are accumulated in float32 and rounded to
  // nearest even once when written; gradients are converted to float32 as they are read, every
  // sum in float32 in the same order (docs/value_types.md).
  ValueType output_type = ValueType::kFloat32;
};

// Throws InvalidArgument naming the bad field, its value and its limit.
void validate_embedding_options(const EmbeddingOptions& options);

// 32-bit words per table row of an embedding with these options: the embedding
// (value_words(value_type, dim)) + optimizer state (optimizer_state_words), rounded up to a
// multiple of 4 when align_rows and dim % 4 == 0.
uint32_t embedding_row_dim(const EmbeddingOptions& options);
// How a trainable table's rows of these options split into embedding and optimizer state (what
// Embedding::row_layout gives; for tables held by a collection).
RowLayout embedding_row_layout(const EmbeddingOptions& options);

// One feature's batch: bag b holds keys[offsets[b] .. offsets[b+1]). Pointers in the
// backend's memory; weights optional.
template <TableKey K>
struct EmbeddingBatch {
  const K* keys = nullptr;
  size_t num_ids = 0;
  const int64_t* offsets = nullptr;  // num_bags + 1
  size_t num_bags = 0;
  const float* weights = nullptr;
  PoolingMode mode = PoolingMode::kSum;
};

// Cumulative counts since construction.
struct EmbeddingStats {
  uint64_t lookups = 0;              // ids looked up
  uint64_t unique_lookups = 0;       // distinct keys per batch, summed
  uint64_t rows_created = 0;         // keys that got a row (training)
  uint64_t admission_pending = 0;    // training reads of keys not yet admitted
  uint64_t eval_misses = 0;          // evaluation reads of keys without a row
  uint64_t expired = 0;              // rows erased by TTL
  uint64_t nonfinite_gradients = 0;  // gradient rows with NaN / Inf, skipped
  TableStats table{};
};

// Makes the table under a trainable embedding from the options the embedding derived (dim =
// row_dim, the initializer drawing only the embedding part); e.g. a caching table
// (storage/cached_table.hpp). The table it returns must have those options' dim.
template <TableKey K>
using TableFactory = std::function<std::unique_ptr<Table<K>>(Backend, const TableOptions&)>;

// A trainable table on one backend. Not safe for concurrent forward/backward calls on one object
// (a training step is a sequence); the table underneath is.
// Embeddings share no mutable state (each keeps its own scratch), so different objects may train
// at the same time on different threads and streams.
template <TableKey K>
class Embedding {
 public:
  Embedding(Backend backend, const EmbeddingOptions& options);
  // The same, on a table made by `make_table` (InvalidArgument if its dim is not row_dim()).
  Embedding(Backend backend, const EmbeddingOptions& options, const TableFactory<K>& make_table);
  ~Embedding();
  Embedding(const Embedding&) = delete;
  Embedding& operator=(const Embedding&) = delete;

  // Looks up and pools the batch into out (bag b at out + b * out_stride; NONE: id i at
  // out + i * out_stride; elements of options().output_type, strides in 32-bit words). Training
  // inserts admitted unseen keys with the initializer and remembers the batch for backward();
  // evaluation never inserts. Without counter admission the step works on the table's rows in place
  // (find_or_insert_pointers): the table must not be written by anyone else between a training
  // forward and its backward. A key without a row (not stored in evaluation; refused at max
  // capacity, or evicted by a later key of the same batch, in training) reads eval_initializer and
  // gets no update.
  void forward(const EmbeddingBatch<K>& batch, float* out, uint32_t out_stride, bool training,
               StreamHandle stream = nullptr);

  // Reduces `grad` (the gradient of the last training forward's out, same layout) to one
  // gradient per key and applies the optimizer to those rows in place, through the addresses
  // the forward found (no second lookup; counter admission: a copy written back by assign). By
  // address and without gradient_check = ERROR the two are one pass: a key's gradient is summed
  // and applied without being stored (same rows, bit for bit, as the two passes); no host
  // synchronization. gradient_check = ERROR synchronizes once.
  void backward(const float* grad, uint32_t grad_stride, StreamHandle stream = nullptr);

  // Ends a training step: erases rows past their TTL (returns how many), then advances the
  // STEP score.
  size_t end_step();

  Table<K>& table() { return *table_; }
  const Table<K>& table() const { return *table_; }
  const EmbeddingOptions& options() const { return options_; }
  Backend backend() const { return backend_; }
  // 32-bit words per table row: the embedding's words + optimizer state (+ padding, see
  // align_rows).
  uint32_t row_dim() const { return row_dim_; }
  // How each table row splits: dim embedding elements of value_type, then the optimizer's state
  // (and padding), with the optimizer's name and hyper-parameters (what a checkpoint records).
  RowLayout row_layout() const;
  // The counts so far; synchronizes the device (the step's counts live in backend memory).
  EmbeddingStats stats() const;

  // Called with the stage's name as each stage of forward ("dedup", "lookup": the row
  // addresses, "pool") and backward ("reduce+optimizer": the two fused; with gradient_check =
  // ERROR or counter admission "reduce", "optimizer", and with counter admission "write_back")
  // finishes issuing its work; for profiling (the observer may synchronize the stream). nullptr
  // turns it off.
  using StageObserver = std::function<void(const char* stage)>;
  void set_stage_observer(StageObserver observer) { observer_ = std::move(observer); }

 private:
  void stage_done(const char* stage) const {
    if (observer_) observer_(stage);
  }

  struct Step;
  // Counter admission's lookup: the unique keys' rows copied out of the table.
  void admit_rows(StreamHandle stream);

  Backend backend_;
  EmbeddingOptions options_;
  uint32_t row_dim_;
  std::unique_ptr<Table<K>> table_;
  std::unique_ptr<embedding::detail::AdmissionCounter<K>> admission_;
  std::unique_ptr<Step> step_;
  EmbeddingStats stats_{};  // the counts kept on the host (the others: Step::counters)
  StageObserver observer_;
};

}  // namespace dynemb

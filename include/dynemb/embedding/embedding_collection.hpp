// Several trainable tables of one row layout stepped together: one dedup over every table's
// keys, each table's lookup on its own range of the unique keys, one pooling launch and one
// fused backward launch over every table's rows (docs/embedding.md, "Collections").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dynemb/embedding/embedding.hpp"
#include "dynemb/ops/pooling.hpp"

namespace dynemb {

// Counts of a collection: per table as Embedding's (nonfinite_gradients 0 there), and the
// gradient rows with NaN / Inf skipped over all tables (the fused backward counts them once).
struct EmbeddingCollectionStats {
  std::vector<EmbeddingStats> tables;
  uint64_t nonfinite_gradients = 0;
  // Training batches a host-sync-free step refused on the device (offsets that do not start at
  // 0, decrease or do not end at num_ids; a key wider than the step's key bits): no table was
  // changed, the output read eval_initializer, the backward updated nothing.
  uint64_t refused_batches = 0;
};

// Tables trained as one: every table must have the same dim, optimizer, gradient_check,
// eval_initializer, align_rows and device, and no counter admission (admit_threshold <= 1); the
// rest of their options (capacity, scores, seeds, TTL) may differ. With two or more tables, keys
// must fit in 64 - ceil(log2(tables)) bits (each table's index is kept in the bits above them).
// A step's results are those of one Embedding per table (same rows, bit for bit, where the
// tables evict nothing). Not safe for concurrent calls on one object.
template <TableKey K>
class EmbeddingCollection {
 public:
  // Throws InvalidArgument naming the table, the field, its value and table 0's.
  EmbeddingCollection(Backend backend, std::vector<EmbeddingOptions> tables);
  // The same, each table made by `make_table` (InvalidArgument if its dim is not row_dim()).
  EmbeddingCollection(Backend backend, std::vector<EmbeddingOptions> tables,
                      const TableFactory<K>& make_table);
  ~EmbeddingCollection();
  EmbeddingCollection(const EmbeddingCollection&) = delete;
  EmbeddingCollection& operator=(const EmbeddingCollection&) = delete;

  // Looks up and pools batches[t] for each table t (one batch a table, all with the same mode,
  // weights on all or none) into one output: table t's bag b (NONE: id i) at out + (first + b) *
  // out_stride, where `first` counts the bags (NONE: ids) of the tables before t. Training inserts
  // unseen keys; evaluation never inserts; keys without a row read eval_initializer. Bad input
  // throws InvalidArgument before any table changes.
  void forward(std::span<const EmbeddingBatch<K>> batches, float* out, uint32_t out_stride,
               bool training, StreamHandle stream = nullptr);

  // Applies the gradient of the last training forward's output (same layout) to every table's
  // rows, as Embedding::backward does for each.
  void backward(const float* grad, uint32_t grad_stride, StreamHandle stream = nullptr);

  // Host-sync-free training steps (docs/embedding.md, "A step without the host"): on, a training
  // forward issues its work without reading anything on the host (unique counts, offsets checks
  // and key widths stay on the device; every buffer is sized by the batch's ids), so a step is a
  // fixed sequence of launches that a CUDA graph can capture once shapes repeat. Batches must then
  // keep their keys within `key_bits` bits (0: the widest key of the steps so far; until a step
  // was seen, forwards synchronize as when off); a batch with a wider key or bad offsets is
  // refused on the device and counted (stats().refused_batches) instead of throwing. Evaluation
  // and gradient_check = ERROR keep their host reads. In a step being captured into a CUDA graph
  // the tables' lookups run on up to `lookup_streams` side streams forked from the step's stream
  // and joined back (1: all on it); an eager step issues them all on its stream.
  // Throws InvalidArgument when key_bits is over 64 - the bits the tables' index takes, or
  // lookup_streams is not in [1, 64].
  void set_host_sync_free(bool on, uint32_t key_bits = 0, uint32_t lookup_streams = 8);
  bool host_sync_free() const { return sync_free_; }

  // Ends a training step for every table (TTL, then the STEP score); returns the rows expired.
  size_t end_step();

  size_t num_tables() const { return tables_.size(); }
  Table<K>& table(size_t t) { return *tables_.at(t); }
  const Table<K>& table(size_t t) const { return *tables_.at(t); }
  const EmbeddingOptions& options(size_t t) const { return options_.at(t); }
  Backend backend() const { return backend_; }
  uint32_t dim() const { return options_.front().dim; }
  // Floats per table row (Embedding::row_dim).
  uint32_t row_dim() const { return row_dim_; }
  // The counts so far; synchronizes the device.
  EmbeddingCollectionStats stats() const;

  // As Embedding::set_stage_observer: "dedup", "lookup", "pool", "reduce+optimizer" (with
  // gradient_check = ERROR: "reduce", "optimizer").
  void set_stage_observer(typename Embedding<K>::StageObserver observer) {
    observer_ = std::move(observer);
  }

 private:
  struct Step;
  void stage_done(const char* stage) const {
    if (observer_) observer_(stage);
  }
  // Combines the batches with table bits above `shift` and deduplicates them; returns the
  // unique count and fills `words` (the step's status read back with it). Bad offsets throw.
  size_t combine_and_dedup(std::span<const EmbeddingBatch<K>> batches, uint32_t shift,
                           uint64_t* words, StreamHandle stream);
  // Throws InvalidArgument naming the first table whose offsets combine_table_keys flagged.
  void throw_if_bad_table(const uint64_t* words) const;
  // The training forward without host reads (set_host_sync_free), after forward's checks.
  void forward_sync_free(std::span<const EmbeddingBatch<K>> batches, const LookupOutput& output,
                         StreamHandle stream);

  Backend backend_;
  std::vector<EmbeddingOptions> options_;
  uint32_t row_dim_ = 0;
  uint32_t table_bits_ = 0;  // bits that hold a table's index (0 for one table)
  uint32_t key_width_ = 0;   // bit width of every key seen so far
  bool seen_keys_ = false;
  bool sync_free_ = false;
  uint32_t sync_free_key_bits_ = 0;  // set_host_sync_free's key_bits (0: key_width_)
  uint32_t lookup_streams_ = 8;
  std::vector<std::unique_ptr<Table<K>>> tables_;
  std::unique_ptr<Step> step_;
  std::vector<EmbeddingStats> stats_;  // the counts kept on the host
  uint64_t nonfinite_refused_ = 0;     // gradient_check = ERROR: rows of refused backwards
  typename Embedding<K>::StageObserver observer_;
};

}  // namespace dynemb

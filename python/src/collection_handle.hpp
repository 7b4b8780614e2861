// The Python-facing grouped tables: dynemb::EmbeddingCollection<int64_t> (one dedup, one pooling
// launch and one fused backward for tables of one row layout), tensors through DLPack, the
// caller's stream, one training step in flight; and CollectionTable, one of its tables as the
// checkpoint functions and the inspection helpers see it.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "batch_args.hpp"
#include "dynemb/embedding/embedding_collection.hpp"
#include "tensor_arg.hpp"

namespace dynemb::python {

class CollectionHandle {
 public:
  // Builds the tables on `backend` (device: the first table's); EmbeddingCollection's rules
  // (same dim, optimizer, eval initializer, ...) are checked there.
  CollectionHandle(Backend backend, std::vector<EmbeddingOptions> tables);

  // batches: one (indices, offsets, per_sample_weights or None, mode) per table, all of one
  // mode, weights on all or none; out: [rows of every table, dim]. Returns the training
  // forward's number (0 for evaluation).
  uint64_t forward(py::list batches, bool training, py::handle out, uintptr_t stream);
  // The same forward with every table's batch cut from three tensors (parse_packed_batches):
  // indices, offsets (each table's bags + 1, starting at 0), per_sample_weights or None.
  uint64_t forward_packed(py::handle indices, py::handle offsets, py::handle weights,
                          const std::vector<int64_t>& id_ranges, const std::vector<int64_t>& bags,
                          PoolingMode mode, bool training, py::handle out, uintptr_t stream);
  // Applies the gradient of training forward `generation` and ends the step; StateError for
  // another forward's gradient (the tables are then unchanged).
  void backward(py::handle grad, uint64_t generation, uintptr_t stream);
  // EmbeddingCollection::set_host_sync_free: training steps that read nothing on the host
  // (batches with keys wider than key_bits, or bad offsets, refused on the device and counted).
  void set_host_sync_free(bool on, uint32_t key_bits, uint32_t lookup_streams);
  bool host_sync_free() const;

  EmbeddingCollection<int64_t>& collection() { return *collection_; }
  std::mutex& mutex() const { return mutex_; }
  Placement placement() const { return placement_; }
  size_t num_tables() const { return collection_->num_tables(); }
  uint32_t dim() const { return collection_->dim(); }
  // What forward writes and backward reads (EmbeddingOptions::output_type).
  ValueType output_type() const { return collection_->options(0).output_type; }

 private:
  std::unique_ptr<EmbeddingCollection<int64_t>> collection_;
  Placement placement_;
  mutable std::mutex mutex_;
  uint64_t generation_ = 0;
  uint64_t pending_ = 0;
  int64_t out_rows_ = 0;
  py::object batches_in_flight_;  // the pending forward's batches (backward reads them)

  // Runs the parsed forward; keeps `batches` (what holds its tensors) for the backward.
  uint64_t run_forward(BatchArgs& args, bool training, py::object batches, uintptr_t stream);
};

// Table `index` of a CollectionHandle: the calls of the single-table handle that inspection and
// checkpoints use (find, export_rows, stats, score, dims).
class CollectionTable {
 public:
  CollectionTable(std::shared_ptr<CollectionHandle> owner, size_t index);

  Table<int64_t>& table() { return owner_->collection().table(index_); }
  RowLayout row_layout() const;
  py::tuple find(py::handle indices, uintptr_t stream);
  py::tuple export_rows(uint64_t min_score);
  py::dict stats() const;
  uint32_t dim() const { return owner_->dim(); }
  uint32_t row_dim() const { return owner_->collection().row_dim(); }
  uint32_t optimizer_state_dim() const;
  std::mutex& mutex() const { return owner_->mutex(); }

 private:
  std::shared_ptr<CollectionHandle> owner_;
  size_t index_;
};

// Adds EmbeddingCollection and CollectionTable to `m`.
void register_collection(py::module_& m);

}  // namespace dynemb::python

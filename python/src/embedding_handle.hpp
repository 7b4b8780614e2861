// The Python-facing trainable table: dynemb::Embedding<int64_t> with tensors taken through
// DLPack, the caller's stream, and one training step in flight at a time. Safe to call from
// several Python threads (calls on one table take turns).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <mutex>

#include "dynemb/embedding/embedding.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "dynemb/storage/storage.hpp"
#include "tensor_arg.hpp"

namespace dynemb::python {

class EmbeddingHandle {
 public:
  // Builds the table on `backend` (options.table.device for CUDA); validates the options. With
  // `lower`, the table is a caching table: a fast tier of `cache_rows` slots over `lower`, with
  // the `caching` options (private_store, its filter's size).
  EmbeddingHandle(Backend backend, const EmbeddingOptions& options,
                  std::shared_ptr<storage::Storage> lower = nullptr, uint64_t cache_rows = 0,
                  const storage::CachingOptions& caching = {});

  // Looks up and pools (mode SUM / MEAN over offsets; NONE: one row per id) into `out` (a 2-D
  // float32 tensor of [bags or ids, dim], row stride >= dim) or, when `out` is None, into a
  // new tensor returned as a DLPack capsule. Ordered on `stream` (a cudaStream_t as an
  // integer; 0 = the default stream). Returns `out` or the capsule.
  py::object forward(py::handle indices, py::handle offsets, py::handle weights, PoolingMode mode,
                     bool training, py::handle out, uintptr_t stream);
  // The number of the last training forward (what backward must be given).
  uint64_t generation() const { return generation_; }
  // Applies the gradient of training forward `generation` (grad: the layout of its out) and
  // ends the step (TTL, STEP score). StateError when that forward is not the last training
  // forward or its gradient was applied already; the table is then unchanged.
  void backward(py::handle grad, uint64_t generation, uintptr_t stream);

  // Copies the rows of `indices` ([n, row_dim]: embedding | optimizer state | padding) and
  // whether each was stored into new tensors of the table's device; returns (rows, founds).
  py::tuple find(py::handle indices, uintptr_t stream);
  // Stores rows ([n, row_dim] or [n, dim]: the optimizer state then starts at 0) under indices.
  void insert_or_assign(py::handle indices, py::handle rows, uintptr_t stream);
  // Every stored row with score >= min_score, on the host: (keys, rows [n, row_dim], scores as
  // int64 (PyTorch 1.13 has no uint64), the next threshold).
  py::tuple export_rows(uint64_t min_score);

  // Counts (EmbeddingStats and TableStats) and the table's size / capacity / load factor.
  py::dict stats() const;
  // A caching table's counts per tier (CachingStats); None for a table without a lower tier.
  py::object caching_stats() const;
  // A caching table: writes every row down to the lower tier and flushes it (the rows stay in
  // the fast tier). InvalidArgument for a table without a lower tier.
  void flush_storage();
  // The trainable table (checkpoints name it).
  Embedding<int64_t>& embedding() { return *embedding_; }
  // Where the table lives: tensors given to it must be there.
  Placement placement() const { return placement_; }
  // Embedding floats per row.
  uint32_t dim() const { return embedding_->options().dim; }
  // Floats per table row: embedding, optimizer state, padding.
  uint32_t row_dim() const { return embedding_->row_dim(); }
  // Floats of optimizer state after the embedding (without the padding).
  uint32_t optimizer_state_dim() const;

 private:
  std::unique_ptr<Embedding<int64_t>> embedding_;
  Placement placement_;
  // Calls from several Python threads run one at a time (the GIL is released during the work).
  mutable std::mutex mutex_;
  uint64_t generation_ = 0;         // training forwards so far
  uint64_t pending_ = 0;            // the training forward awaiting its backward (0: none)
  std::vector<int64_t> out_shape_;  // the pending forward's output shape
};

// Adds the option structs, enums and EmbeddingHandle (as "Embedding") to `m`.
void register_embedding(py::module_& m);

}  // namespace dynemb::python

// The Python-facing sharded collection: dist::ShardedEmbeddingCollection<int64_t> over a
// Communicator (NCCL, the one-rank communicator, or a Python object's collectives), tensors
// through DLPack, the caller's stream, one training step in flight.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dynemb/dist/sharded_collection.hpp"
#include "tensor_arg.hpp"

namespace dynemb::python {

class ShardedHandle {
 public:
  // Collective: every rank of `comm` builds it with the same tables (capacities may differ),
  // router ("hash", "modulo") and exchange ("rows", "pooled_on_owner"); a mismatch raises
  // InvalidArgument on every rank.
  ShardedHandle(std::shared_ptr<dist::Communicator> comm, std::vector<EmbeddingOptions> tables,
                const std::string& router, const std::string& exchange);

  // Collective. batches: one (indices, offsets, per_sample_weights or None, mode) per table;
  // out: a 2-D float32 tensor of [rows of every table, dim] (row stride >= dim) that receives
  // table t's rows after those of the tables before it. Returns the training forward's number
  // (0 for evaluation).
  uint64_t forward(py::list batches, bool training, py::handle out, uintptr_t stream);
  // Collective: takes part in a forward with a batch the collection refuses, so that every
  // rank raises (this rank's arguments were bad, or the caller could not build them).
  void take_part_refusing(uintptr_t stream);
  // Collective. Applies the gradient of training forward `generation` (the layout of its out)
  // and ends the step. StateError (on this rank, before any collective) for another forward's
  // gradient.
  void backward(py::handle grad, uint64_t generation, uintptr_t stream);

  // This rank's shard of table `table`: every row with score >= min_score, on the host:
  // (keys, rows [n, row_dim], scores as int64, the next threshold).
  py::tuple export_rows(size_t table, uint64_t min_score);
  // This rank's shard: per table the counts of EmbeddingHandle::stats.
  py::list stats() const;
  // Collective: rows stored per table, summed over ranks.
  std::vector<uint64_t> global_sizes();
  // The rank that owns `key` of table `table`.
  uint32_t owner(uint32_t table, int64_t key) const;
  // Collective: every rank writes its shard of the tables (named `names`, one per table) into
  // the checkpoint at `path` at once (dist::dump_sharded); with min_score, a delta. Returns
  // rows, bytes and the manifest; `only` restricts to those names.
  py::dict dump(const std::string& path, const std::vector<std::string>& names,
                bool optimizer_state, std::optional<uint64_t> min_score,
                const std::vector<std::string>& only);
  // Collective: each rank loads the rows it owns from a checkpoint written at any world size
  // (dist::load_sharded); `only` restricts to those names.
  py::dict load(const std::string& path, const std::vector<std::string>& names,
                bool optimizer_state, const std::vector<std::string>& only);
  // Sets this rank's clock of table `table` (STEP step / CUSTOMIZED score).
  void set_score(size_t table, uint64_t score);
  // Per stage seconds on this rank (dedup, exchange, lookup, pool, backward, optimizer, steps).
  py::dict stage_times() const;

  uint32_t rank() const { return comm_->rank(); }
  uint32_t world_size() const { return comm_->world_size(); }
  uint32_t dim() const { return collection_->dim(); }
  uint32_t row_dim() const { return collection_->local().row_dim(); }
  size_t num_tables() const { return collection_->num_tables(); }
  Placement placement() const { return placement_; }
  dist::ShardedEmbeddingCollection<int64_t>& collection() { return *collection_; }

 private:
  std::shared_ptr<dist::Communicator> comm_;  // outlives the collection that refers to it
  std::unique_ptr<dist::ShardedEmbeddingCollection<int64_t>> collection_;
  Placement placement_;
  mutable std::mutex mutex_;
  uint64_t generation_ = 0;
  uint64_t pending_ = 0;
  int64_t out_rows_ = 0;  // the pending forward's output rows
  // The pending training forward's batches: its backward reads their offsets and weights again.
  py::object batches_in_flight_;
};

// Adds Communicator (and its factories) and ShardedCollection to `m`.
void register_sharded(py::module_& m);

}  // namespace dynemb::python

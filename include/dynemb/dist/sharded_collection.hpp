// Embedding tables sharded over the ranks of a Communicator: each key has one owner rank
// (KeyRouter), whose local EmbeddingCollection holds its row. A step: dedup locally, bucket the
// unique keys by owner, exchange counts then keys, find_or_insert on the owner, exchange rows
// back, pool locally; backward reduces the gradient to one row per unique key locally, routes
// those rows to the owners, where the fused optimizer applies them (docs/dist.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dynemb/dist/communicator.hpp"
#include "dynemb/dist/key_router.hpp"
#include "dynemb/embedding/embedding_collection.hpp"

namespace dynemb::dist {

// Cumulative seconds per stage of the sharded steps on this rank (with synchronize_stages on
// CUDA, each stage waits for its device work, so the figures are the stages' own).
struct ShardedStageTimes {
  double dedup = 0;      // local dedup and bucketing by owner
  double exchange = 0;   // every collective: counts, keys, rows, gradients, status
  double lookup = 0;     // the owner's find_or_insert (its local collection's forward)
  double pool = 0;       // placing the returned rows and pooling them
  double backward = 0;   // reducing the output gradient to one row per unique key
  double optimizer = 0;  // the owner's reduction over ranks and fused optimizer
  uint64_t steps = 0;    // forwards timed
};

// Keys and rows moved by this rank, cumulative.
struct ShardedTraffic {
  uint64_t ids = 0;             // ids in this rank's batches
  uint64_t unique_keys = 0;     // distinct (table, key) pairs sent to owners (self included)
  uint64_t keys_to_others = 0;  // of those, sent to another rank
  uint64_t keys_served = 0;     // keys this rank looked up as owner, for every rank
};

// How the ranks exchange a step's data (the same on every rank).
enum class ShardedExchange : uint8_t {
  // Owners return each requested unique key's row; the requester pools (every pooling mode).
  kRows,
  // SparseOperationKit's distributed sparse embedding: each id goes to its key's owner with its
  // bag, owners pool their part of every bag, and the requester sums the W partial rows of each
  // bag (a reduce-scatter); backward sends each bag's gradient to every owner. Less traffic
  // when bags are long, more when they are short. SUM and MEAN only.
  kPooledOnOwner,
};

// "rows", "pooled_on_owner".
std::string to_string(ShardedExchange exchange);

// Tables of one row layout (EmbeddingCollection's rules) sharded over every rank of `comm`.
// Every rank constructs it with the same table options (capacities may differ) and router, and
// calls forward / backward / end_step in the same sequence; a rank may pass empty batches.
// Not safe for concurrent calls on one object.
template <TableKey K>
class ShardedEmbeddingCollection {
 public:
  // Collective. Throws InvalidArgument on every rank, naming the ranks and what differs, when
  // the ranks were given different tables, dims, optimizers, key types or routers.
  ShardedEmbeddingCollection(Communicator& comm, std::vector<EmbeddingOptions> tables,
                             KeyRouter router = KeyRouter::hash(),
                             ShardedExchange exchange = ShardedExchange::kRows);
  ~ShardedEmbeddingCollection();
  ShardedEmbeddingCollection(const ShardedEmbeddingCollection&) = delete;
  ShardedEmbeddingCollection& operator=(const ShardedEmbeddingCollection&) = delete;

  // Collective. Looks up and pools this rank's batches[t] (one per table, pointers in the
  // communicator's memory) into `out` as EmbeddingCollection::forward lays it out (each batch
  // may have its own pooling mode). Training inserts unseen keys on their owners. A bad batch
  // on any rank throws on every rank before any table changes (InvalidArgument on the rank
  // that gave it); a failure on an owner throws Error on every rank.
  void forward(std::span<const EmbeddingBatch<K>> batches, float* out, uint32_t out_stride,
               bool training, StreamHandle stream = nullptr);

  // Collective. Applies the gradient of the last training forward's output (same layout): the
  // owners update each key once with the sum of every rank's gradient for it.
  void backward(const float* grad, uint32_t grad_stride, StreamHandle stream = nullptr);

  // Ends a training step on this rank's shard (TTL, then the STEP score); returns rows expired.
  size_t end_step();

  // Collective. Rows stored per table, summed over ranks.
  std::vector<uint64_t> global_sizes();

  // This rank's shard.
  EmbeddingCollection<K>& local() { return *local_; }
  const EmbeddingCollection<K>& local() const { return *local_; }
  Communicator& communicator() { return comm_; }
  const KeyRouter& router() const { return router_; }
  ShardedExchange exchange() const { return exchange_; }
  size_t num_tables() const { return options_.size(); }
  const EmbeddingOptions& options(size_t t) const { return options_.at(t); }
  uint32_t dim() const { return options_.front().dim; }
  // The owner of `key` of table `table`.
  uint32_t owner(uint32_t table, K key) const;

  // When true, each stage waits for its device work before its time is taken (CUDA).
  void set_synchronize_stages(bool on) { synchronize_stages_ = on; }
  const ShardedStageTimes& stage_times() const { return times_; }
  void reset_stage_times() { times_ = {}; }
  const ShardedTraffic& traffic() const { return traffic_; }

 private:
  struct Step;
  struct PooledStep;
  // The rows exchange's forward after the local dedup, in stages (docs/dist.md).
  bool route_on_device() const;  // CUDA and a hash or modulo router: keys stay on the GPU
  void route_on_the_device(std::vector<uint64_t>& counts, StreamHandle stream);
  void route_on_the_host(std::vector<uint64_t>& counts);
  void set_send_order(std::vector<uint64_t>& counts);
  void forward_exchange(std::vector<uint64_t>& counts, const std::string& problem, bool training,
                        StreamHandle stream, std::chrono::steady_clock::time_point t1);
  void regroup_on_the_device(const std::vector<size_t>& table_first, StreamHandle stream);
  void regroup_on_the_host(const std::vector<size_t>& table_first);
  void forward_rows_back(const std::string& owner_problem, bool training, StreamHandle stream,
                         std::chrono::steady_clock::time_point t3);
  void forward_pooled(std::span<const EmbeddingBatch<K>> batches, float* out, uint32_t out_stride,
                      bool training, StreamHandle stream);
  void backward_pooled(const float* grad, uint32_t grad_stride, StreamHandle stream);
  // Throws on every rank when `ok` is false on any: `message` from the ranks that failed.
  void agree_or_throw(bool ok, const std::string& message, const char* stage);

  Communicator& comm_;
  std::vector<EmbeddingOptions> options_;
  KeyRouter router_;
  ShardedExchange exchange_;
  std::unique_ptr<EmbeddingCollection<K>> local_;
  std::unique_ptr<Step> step_;
  std::unique_ptr<PooledStep> pooled_;
  bool synchronize_stages_ = false;
  ShardedStageTimes times_{};
  ShardedTraffic traffic_{};
};

// What every rank must agree on, as text: key type, router, and per table dim, optimizer and
// its settings, initializer, score policy, gradient check, row alignment (capacities excluded).
std::string describe_sharding(const std::vector<EmbeddingOptions>& tables, const KeyRouter& router,
                              const std::string& key_type,
                              ShardedExchange exchange = ShardedExchange::kRows);

}  // namespace dynemb::dist

// The sharded collection's step: local dedup and bucketing, the exchanges, the owner's lookup
// and optimizer, local pooling and gradient reduction.
#include "dynemb/dist/sharded_collection.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "dynemb/core/error.hpp"
#include "dynemb/ops/dedup.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "route_keys.hpp"
#include "sharded_pooled.hpp"
#include "stage_clock.hpp"

namespace dynemb::dist {
namespace {

template <TableKey K>
const char* key_type_name() {
  return std::is_same_v<K, int64_t> ? "int64" : "uint64";
}

// Grows `buffer` to at least `count` elements (never shrinks; contents not kept).
template <class T>
void ensure(BackendBuffer<T>& buffer, Backend backend, size_t count, int device) {
  if (buffer.size() < std::max<size_t>(count, 1)) {
    buffer = BackendBuffer<T>(backend, std::max<size_t>(count, 1) * 5 / 4 + 16, device);
  }
}

// A host array with a copy in backend memory (the same array on the CPU backend).
template <class T>
struct Mirrored {
  std::vector<T> host;
  BackendBuffer<T> device;
  T* ptr(Backend backend) { return backend == Backend::kCpu ? host.data() : device.data(); }
  void upload(Backend backend, int dev) {
    if (backend == Backend::kCpu) return;
    ensure(device, backend, host.size(), dev);
    if (!host.empty()) device.upload(host.data(), host.size());
  }
};

}  // namespace

std::string to_string(ShardedExchange exchange) {
  return exchange == ShardedExchange::kRows ? "rows" : "pooled_on_owner";
}

namespace {

// A number as text through snprintf, not an ostringstream: an ostringstream's number formatting
// crashed inside the Python module under PyTorch 2.11 (docs/python.md, "Building").
std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

}  // namespace

std::string describe_sharding(const std::vector<EmbeddingOptions>& tables, const KeyRouter& router,
                              const std::string& key_type, ShardedExchange exchange) {
  std::string d = "keys " + key_type + ", router " + router.name() + ", exchange " +
                  to_string(exchange) + ", " + std::to_string(tables.size()) + " tables";
  for (size_t t = 0; t < tables.size(); ++t) {
    const EmbeddingOptions& o = tables[t];
    const OptimizerOptions& p = o.optimizer;
    const InitializerOptions& i = o.table.initializer;
    d += "; table " + std::to_string(t) + ": dim " + std::to_string(o.dim) + ", optimizer " +
         to_string(p.kind) + " (lr " + number(p.learning_rate) + ", beta1 " + number(p.beta1) +
         ", beta2 " + number(p.beta2) + ", eps " + number(p.eps) + ", rho " + number(p.rho) +
         ", acc0 " + number(p.initial_accumulator) + ", l1 " + number(p.ftrl_l1) + ", l2 " +
         number(p.ftrl_l2) + ", beta " + number(p.ftrl_beta) + ", wd " + number(p.weight_decay) +
         ", clip " + number(p.clip_norm) + "/" + number(p.clip_value) + "), initializer " +
         to_string(i.kind) + " (" + number(i.low) + ", " + number(i.high) + ", " + number(i.mean) +
         ", " + number(i.stddev) + ", " + number(i.value) + ", seed " + std::to_string(i.seed) +
         "), eval initializer " + to_string(o.eval_initializer.kind) + " " +
         number(o.eval_initializer.value) + ", scores " + to_string(o.table.score_policy) +
         ", gradient check " + to_string(o.gradient_check) + ", align_rows " +
         std::to_string(o.align_rows);
  }
  return d;
}

// Per-step state: the local side (this rank's batches) and the owner side (other ranks' keys).
template <TableKey K>
struct ShardedEmbeddingCollection<K>::Step {
  // Local side, per table t: its unique keys at local rows [base[t], base[t] + unique[t]).
  std::vector<size_t> base, unique;
  BackendBuffer<K> unique_keys;     // every table's unique keys, table-major
  BackendBuffer<uint32_t> inverse;  // every table's ids' positions among its unique keys
  std::vector<size_t> id_base;      // table t's ids start at id_base[t] of inverse
  Mirrored<uint32_t> send_index;    // send position p <- local row send_index[p]
  Mirrored<K> send_keys;            // keys in send order (owner-major, then table)
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;  // in keys
  BackendBuffer<float> local_rows;      // unique rows, table-major
  BackendBuffer<float> send_rows;       // rows / gradients in send order
  std::vector<LookupFeature> features;  // one per table: pooling of this rank's batches
  std::vector<LookupOutput> outputs;
  // Owner side: received keys (source-major, then table) regrouped table-major.
  std::vector<uint64_t> matrix;    // recv: keys from rank s of table t at s * T + t
  Mirrored<K> owner_keys;          // table-major
  Mirrored<uint32_t> owner_index;  // table-major position j <- received position
  BackendBuffer<K> recv_keys;
  BackendBuffer<float> owner_rows;  // table-major
  BackendBuffer<float> recv_rows;   // received order
  BackendBuffer<int64_t> iota;      // offsets 0, 1, 2, ... (one id per bag)
  size_t sent = 0, received = 0;
  bool owner_ran = false;  // the owner's collection ran a training forward
  bool pending_backward = false;
};

template <TableKey K>
ShardedEmbeddingCollection<K>::ShardedEmbeddingCollection(Communicator& comm,
                                                          std::vector<EmbeddingOptions> tables,
                                                          KeyRouter router,
                                                          ShardedExchange exchange)
    : comm_(comm), options_(std::move(tables)), router_(std::move(router)), exchange_(exchange) {
  constexpr const char* w = "ShardedEmbeddingCollection";
  // Agree first (a rank that cannot even build its tables still takes part, so none hangs).
  std::string description, problem;
  try {
    require(!options_.empty(), w, "tables", "0 tables", "must hold at least one table");
    for (const EmbeddingOptions& o : options_) {
      require(o.table.device == options_.front().table.device, w, "table.device",
              std::to_string(o.table.device), "the same device for every table");
      if (comm_.backend() == Backend::kCuda) {
        require(o.table.device == comm_.device(), w, "table.device", std::to_string(o.table.device),
                "the communicator's device " + std::to_string(comm_.device()));
      }
    }
    description = describe_sharding(options_, router_, key_type_name<K>(), exchange_);
  } catch (const std::exception& e) {
    problem = e.what();
    description = "invalid options: " + problem;
  }
  require_same_on_all_ranks(comm_, "backend " + to_string(comm_.backend()) + ", " + description,
                            std::string(w) + ": the tables, key type or router");
  if (!problem.empty()) throw InvalidArgument(problem);
  std::string failure;
  try {
    local_ = std::make_unique<EmbeddingCollection<K>>(comm_.backend(), options_);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  agree_or_throw(failure.empty(), failure, "creating the local shard");
  step_ = std::make_unique<Step>();
  pooled_ = std::make_unique<PooledStep>();
}

template <TableKey K>
uint32_t ShardedEmbeddingCollection<K>::owner(uint32_t table, K key) const {
  return router_.owner(table, key_bits(key), comm_.world_size());
}

template <TableKey K>
void ShardedEmbeddingCollection<K>::agree_or_throw(bool ok, const std::string& message,
                                                   const char* stage) {
  if (all_ranks_ok(comm_, ok)) return;
  const std::vector<std::string> all = all_gather_strings(comm_, ok ? std::string() : message);
  std::string text = std::string("ShardedEmbeddingCollection: ") + stage + " failed on";
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty()) text += "\n  rank " + std::to_string(r) + ": " + all[r];
  }
  if (!ok) throw InvalidArgument(text);
  throw Error(text);
}

template <TableKey K>
void ShardedEmbeddingCollection<K>::forward(std::span<const EmbeddingBatch<K>> batches, float* out,
                                            uint32_t out_stride, bool training,
                                            StreamHandle stream) {
  if (exchange_ == ShardedExchange::kPooledOnOwner) {
    forward_pooled(batches, out, out_stride, training, stream);
    return;
  }
  constexpr const char* where = "ShardedEmbeddingCollection::forward";
  Step& s = *step_;
  const Backend backend = comm_.backend();
  const int device = options_.front().table.device;
  const uint32_t T = static_cast<uint32_t>(options_.size());
  const uint32_t W = comm_.world_size();
  const uint32_t D = dim();
  auto now = [&] { return stage_now(backend, synchronize_stages_); };
  s.pending_backward = false;

  // --- local: check, dedup per table, bucket the unique keys by owner ------------------------
  auto t0 = now();
  std::string problem;
  std::vector<uint64_t> counts(static_cast<size_t>(W) * (T + 1), 0);  // [dest][table] + status
  try {
    require(batches.size() == T, where, "batches", std::to_string(batches.size()),
            "one per table = " + std::to_string(T));
    require(out != nullptr || std::all_of(batches.begin(), batches.end(),
                                          [](const auto& b) {
                                            return (b.mode == PoolingMode::kNone ? b.num_ids
                                                                                 : b.num_bags) == 0;
                                          }),
            where, "out", "nullptr", "an output buffer");
    size_t ids = 0;
    s.id_base.assign(T + 1, 0);
    for (uint32_t t = 0; t < T; ++t) {
      const EmbeddingBatch<K>& b = batches[t];
      require(b.num_ids == 0 || b.keys != nullptr, where, "batches[t].keys", "nullptr",
              "keys for " + std::to_string(b.num_ids) + " ids (table " + std::to_string(t) + ")");
      require(b.offsets != nullptr, where, "batches[t].offsets", "nullptr",
              "num_bags + 1 offsets (table " + std::to_string(t) + ")");
      s.id_base[t] = ids;
      ids += b.num_ids;
    }
    s.id_base[T] = ids;
    ensure(s.unique_keys, backend, ids, device);
    ensure(s.inverse, backend, ids, device);
    s.base.assign(T + 1, 0);
    s.unique.assign(T, 0);
    size_t u_total = 0;
    for (uint32_t t = 0; t < T; ++t) {
      const EmbeddingBatch<K>& b = batches[t];
      s.base[t] = u_total;
      if (b.num_ids > 0) {
        s.unique[t] = dedup<K>(backend, b.num_ids, b.keys, s.unique_keys.data() + u_total,
                               s.inverse.data() + s.id_base[t], nullptr, stream);
      }
      u_total += s.unique[t];
    }
    s.base[T] = u_total;
    // Pooling of the rows that will come back: checked now, before anything is sent.
    ensure(s.local_rows, backend, u_total * D, device);
    s.features.assign(T, {});
    s.outputs.assign(T, {});
    size_t first = 0;
    for (uint32_t t = 0; t < T; ++t) {
      const EmbeddingBatch<K>& b = batches[t];
      LookupFeature& f = s.features[t];
      f.rows = s.local_rows.data() + s.base[t] * D;
      f.row_stride = D;
      f.dim = D;
      f.num_rows = s.unique[t];
      f.indices = s.inverse.data() + s.id_base[t];
      f.num_ids = b.num_ids;
      f.offsets = b.offsets;
      f.num_bags = b.num_bags;
      f.weights = b.weights;
      f.mode = b.mode;
      s.outputs[t] = {out + first * out_stride, out_stride};
      first += b.mode == PoolingMode::kNone ? b.num_ids : b.num_bags;
    }
    validate_lookup(backend, s.features, s.outputs, where);
    if (route_on_device()) {
      route_on_the_device(counts, stream);
    } else {
      route_on_the_host(counts);
    }
    s.sent = u_total;
    traffic_.ids += ids;
    traffic_.unique_keys += u_total;
    traffic_.keys_to_others += u_total - s.send_counts[comm_.rank()];
  } catch (const std::exception& e) {
    problem = e.what();
  }
  for (uint32_t r = 0; r < W; ++r) counts[static_cast<size_t>(r) * (T + 1) + T] = problem.empty();
  auto t1 = now();
  times_.dedup += seconds(t0, t1);
  forward_exchange(counts, problem, training, stream, t1);
}

template <TableKey K>
bool ShardedEmbeddingCollection<K>::route_on_device() const {
#if defined(DYNEMB_WITH_CUDA)
  return comm_.backend() == Backend::kCuda && router_.kind() != KeyRouter::Kind::kCustom;
#else
  return false;
#endif
}

template <TableKey K>
void ShardedEmbeddingCollection<K>::set_send_order(std::vector<uint64_t>& counts) {
  Step& s = *step_;
  const uint32_t T = static_cast<uint32_t>(options_.size());
  const uint32_t W = comm_.world_size();
  s.send_counts.assign(W, 0);
  s.send_displs.assign(W, 0);
  size_t p = 0;
  for (uint32_t r = 0; r < W; ++r) {
    s.send_displs[r] = p;
    for (uint32_t t = 0; t < T; ++t) p += counts[static_cast<size_t>(r) * (T + 1) + t];
    s.send_counts[r] = p - s.send_displs[r];
  }
}

template <TableKey K>
void ShardedEmbeddingCollection<K>::route_on_the_device(
    [[maybe_unused]] std::vector<uint64_t>& counts, [[maybe_unused]] StreamHandle stream) {
#if defined(DYNEMB_WITH_CUDA)
  Step& s = *step_;
  const Backend backend = comm_.backend();
  const int device = options_.front().table.device;
  const uint32_t T = static_cast<uint32_t>(options_.size());
  const uint32_t W = comm_.world_size();
  const size_t u_total = s.base[T];
  ensure(s.send_index.device, backend, u_total, device);
  ensure(s.send_keys.device, backend, u_total, device);
  std::vector<uint64_t> by_bucket;  // [owner * T + table]
  detail::route_unique_keys<K>(
      s.unique_keys.data(), s.base, W,
      router_.kind() == KeyRouter::Kind::kHash ? detail::DeviceRule::kHash
                                               : detail::DeviceRule::kModulo,
      s.send_index.device.data(), s.send_keys.device.data(), by_bucket, stream);
  for (uint32_t r = 0; r < W; ++r) {
    for (uint32_t t = 0; t < T; ++t) {
      counts[static_cast<size_t>(r) * (T + 1) + t] = by_bucket[static_cast<size_t>(r) * T + t];
    }
  }
  set_send_order(counts);
#endif
}

template <TableKey K>
void ShardedEmbeddingCollection<K>::route_on_the_host(std::vector<uint64_t>& counts) {
  Step& s = *step_;
  const Backend backend = comm_.backend();
  const int device = options_.front().table.device;
  const uint32_t T = static_cast<uint32_t>(options_.size());
  const uint32_t W = comm_.world_size();
  const size_t u_total = s.base[T];
  {
    // Owners, on the host.
    std::vector<K> host_unique(u_total);
    if (u_total > 0) {
      if (backend == Backend::kCpu) {
        std::copy(s.unique_keys.data(), s.unique_keys.data() + u_total, host_unique.begin());
      } else {
        backend_synchronize(backend);
        s.unique_keys.download(host_unique.data(), u_total);
      }
    }
    std::vector<uint32_t> owners(u_total);
    for (uint32_t t = 0; t < T; ++t) {
      for (size_t u = s.base[t]; u < s.base[t + 1]; ++u) {
        owners[u] = owner(t, host_unique[u]);
        ++counts[static_cast<size_t>(owners[u]) * (T + 1) + t];
      }
    }
    // Send order: owner-major, then table, then the table's unique order.
    set_send_order(counts);
    std::vector<size_t> cursor(static_cast<size_t>(W) * T);
    for (uint32_t r = 0; r < W; ++r) {
      size_t p = s.send_displs[r];
      for (uint32_t t = 0; t < T; ++t) {
        cursor[static_cast<size_t>(r) * T + t] = p;
        p += counts[static_cast<size_t>(r) * (T + 1) + t];
      }
    }
    s.send_index.host.resize(u_total);
    s.send_keys.host.resize(u_total);
    for (uint32_t t = 0; t < T; ++t) {
      for (size_t u = s.base[t]; u < s.base[t + 1]; ++u) {
        const size_t q = cursor[static_cast<size_t>(owners[u]) * T + t]++;
        s.send_index.host[q] = static_cast<uint32_t>(u);
        s.send_keys.host[q] = host_unique[u];
      }
    }
    s.send_index.upload(backend, device);
    s.send_keys.upload(backend, device);
  }
}

template <TableKey K>
void ShardedEmbeddingCollection<K>::forward_exchange(std::vector<uint64_t>& counts,
                                                     const std::string& problem, bool training,
                                                     StreamHandle stream, Clock::time_point t1) {
  constexpr const char* where = "ShardedEmbeddingCollection::forward";
  Step& s = *step_;
  const Backend backend = comm_.backend();
  const int device = options_.front().table.device;
  const uint32_t T = static_cast<uint32_t>(options_.size());
  const uint32_t W = comm_.world_size();
  const uint32_t D = dim();
  auto now = [&] { return stage_now(backend, synchronize_stages_); };

  // --- exchange counts (with every rank's status), then keys --------------------------------
  s.matrix = all_to_all_counts(comm_, counts, T + 1);
  std::string failed;
  for (uint32_t r = 0; r < W; ++r) {
    if (s.matrix[static_cast<size_t>(r) * (T + 1) + T] == 0) {
      failed += (failed.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  if (!failed.empty()) {
    if (!problem.empty()) throw InvalidArgument(problem);
    throw Error(std::string(where) + ": rank(s) " + failed +
                " refused their batches (see their errors); no table was changed");
  }
  s.recv_counts.assign(W, 0);
  s.recv_displs.assign(W, 0);
  size_t received = 0;
  for (uint32_t r = 0; r < W; ++r) {
    s.recv_displs[r] = received;
    for (uint32_t t = 0; t < T; ++t)
      s.recv_counts[r] += s.matrix[static_cast<size_t>(r) * (T + 1) + t];
    received += s.recv_counts[r];
  }
  s.received = received;
  ensure(s.recv_keys, backend, received, device);
  comm_.all_to_all_v(s.send_keys.ptr(backend), s.send_counts.data(), s.send_displs.data(),
                     s.recv_keys.data(), s.recv_counts.data(), s.recv_displs.data(),
                     data_type_of<K>(), stream);
  auto t2 = now();
  times_.exchange += seconds(t1, t2);

  // --- owner: regroup table-major, look up (training: find or insert) -----------------------
  std::string owner_problem;
  try {
    std::vector<size_t> table_first(T + 1, 0);
    for (uint32_t t = 0; t < T; ++t) {
      size_t n = 0;
      for (uint32_t r = 0; r < W; ++r) n += s.matrix[static_cast<size_t>(r) * (T + 1) + t];
      table_first[t + 1] = table_first[t] + n;
    }
    if (route_on_device()) {
      regroup_on_the_device(table_first, stream);
    } else {
      regroup_on_the_host(table_first);
    }
    ensure(s.owner_rows, backend, received * D, device);
    s.owner_ran = false;
    if (received > 0) {
      if (s.iota.size() < received + 1) {
        std::vector<int64_t> iota(received * 5 / 4 + 16);
        std::iota(iota.begin(), iota.end(), int64_t{0});
        s.iota = BackendBuffer<int64_t>(backend, iota.size(), device);
        s.iota.upload(iota.data(), iota.size());
      }
      std::vector<EmbeddingBatch<K>> owner_batches(T);
      for (uint32_t t = 0; t < T; ++t) {
        EmbeddingBatch<K>& b = owner_batches[t];
        b.keys = s.owner_keys.ptr(backend) + table_first[t];
        b.num_ids = table_first[t + 1] - table_first[t];
        b.offsets = s.iota.data();
        b.num_bags = b.num_ids;
        b.mode = PoolingMode::kSum;
      }
      local_->forward(owner_batches, s.owner_rows.data(), D, training, stream);
      s.owner_ran = training;
    }
    traffic_.keys_served += received;
  } catch (const std::exception& e) {
    owner_problem = e.what();
  }
  const auto t3 = now();
  times_.lookup += seconds(t2, t3);
  forward_rows_back(owner_problem, training, stream, t3);
}

template <TableKey K>
void ShardedEmbeddingCollection<K>::regroup_on_the_device(
    [[maybe_unused]] const std::vector<size_t>& table_first, [[maybe_unused]] StreamHandle stream) {
#if defined(DYNEMB_WITH_CUDA)
  Step& s = *step_;
  const Backend backend = comm_.backend();
  const int device = options_.front().table.device;
  const uint32_t T = static_cast<uint32_t>(options_.size());
  const uint32_t W = comm_.world_size();
  const size_t received = s.received;
  std::vector<uint64_t> src_start(static_cast<size_t>(W) * T + 1, 0), dst_start(size_t{W} * T);
  std::vector<uint64_t> at(table_first.begin(), table_first.end() - 1);
  uint64_t q = 0;
  for (uint32_t r = 0; r < W; ++r) {
    for (uint32_t t = 0; t < T; ++t) {
      const size_t seg = static_cast<size_t>(r) * T + t;
      const uint64_t n = s.matrix[static_cast<size_t>(r) * (T + 1) + t];
      src_start[seg] = q;
      dst_start[seg] = at[t];
      at[t] += n;
      q += n;
    }
  }
  src_start.back() = q;
  ensure(s.owner_keys.device, backend, received, device);
  ensure(s.owner_index.device, backend, received, device);
  detail::regroup_received_keys<K>(s.recv_keys.data(), received, src_start, dst_start,
                                   s.owner_keys.device.data(), s.owner_index.device.data(), stream);
#endif
}

template <TableKey K>
void ShardedEmbeddingCollection<K>::regroup_on_the_host(const std::vector<size_t>& table_first) {
  Step& s = *step_;
  const Backend backend = comm_.backend();
  const int device = options_.front().table.device;
  const uint32_t T = static_cast<uint32_t>(options_.size());
  const uint32_t W = comm_.world_size();
  const size_t received = s.received;
  {
    s.owner_keys.host.resize(received);
    s.owner_index.host.resize(received);
    std::vector<K> recv_host(received);
    if (received > 0) {
      if (backend == Backend::kCpu) {
        std::copy(s.recv_keys.data(), s.recv_keys.data() + received, recv_host.begin());
      } else {
        backend_synchronize(backend);
        s.recv_keys.download(recv_host.data(), received);
      }
    }
    std::vector<size_t> at(table_first.begin(), table_first.end() - 1);
    size_t q = 0;
    for (uint32_t r = 0; r < W; ++r) {
      for (uint32_t t = 0; t < T; ++t) {
        const uint64_t n = s.matrix[static_cast<size_t>(r) * (T + 1) + t];
        for (uint64_t i = 0; i < n; ++i, ++q) {
          s.owner_keys.host[at[t]] = recv_host[q];
          s.owner_index.host[at[t]++] = static_cast<uint32_t>(q);
        }
      }
    }
    s.owner_keys.upload(backend, device);
    s.owner_index.upload(backend, device);
  }
}

template <TableKey K>
void ShardedEmbeddingCollection<K>::forward_rows_back(const std::string& owner_problem,
                                                      bool training, StreamHandle stream,
                                                      Clock::time_point t3) {
  Step& s = *step_;
  const Backend backend = comm_.backend();
  const int device = options_.front().table.device;
  const uint32_t W = comm_.world_size();
  const uint32_t D = dim();
  const size_t received = s.received;
  auto now = [&] { return stage_now(backend, synchronize_stages_); };
  agree_or_throw(owner_problem.empty(), owner_problem, "the owners' lookup");

  // --- rows back: into received order, exchanged, placed at the local rows, pooled ----------
  ensure(s.recv_rows, backend, received * D, device);
  if (received > 0) {
    scatter_rows(backend, received, s.owner_index.ptr(backend), s.owner_rows.data(), D,
                 s.recv_rows.data(), D, D, stream);
  }
  ensure(s.send_rows, backend, s.sent * D, device);
  std::vector<size_t> rc(W), rd(W), sc(W), sd(W);
  for (uint32_t r = 0; r < W; ++r) {
    rc[r] = s.recv_counts[r] * D;
    rd[r] = s.recv_displs[r] * D;
    sc[r] = s.send_counts[r] * D;
    sd[r] = s.send_displs[r] * D;
  }
  auto t4 = now();
  times_.lookup += seconds(t3, t4);
  comm_.all_to_all_v(s.recv_rows.data(), rc.data(), rd.data(), s.send_rows.data(), sc.data(),
                     sd.data(), DataType::kFloat32, stream);
  auto t5 = now();
  times_.exchange += seconds(t4, t5);
  if (s.sent > 0) {
    scatter_rows(backend, s.sent, s.send_index.ptr(backend), s.send_rows.data(), D,
                 s.local_rows.data(), D, D, stream);
  }
  pooled_lookup(backend, s.features, s.outputs, stream);
  auto t6 = now();
  times_.pool += seconds(t5, t6);
  ++times_.steps;
  s.pending_backward = training;
}

template <TableKey K>
void ShardedEmbeddingCollection<K>::backward(const float* grad, uint32_t grad_stride,
                                             StreamHandle stream) {
  if (exchange_ == ShardedExchange::kPooledOnOwner) {
    backward_pooled(grad, grad_stride, stream);
    return;
  }
  constexpr const char* where = "ShardedEmbeddingCollection::backward";
  Step& s = *step_;
  const Backend backend = comm_.backend();
  const uint32_t W = comm_.world_size();
  const uint32_t D = dim();
  auto now = [&] { return stage_now(backend, synchronize_stages_); };
  // Every rank checks the same thing of its own state; a rank without a pending forward must
  // not enter the exchanges alone.
  std::string problem;
  if (!s.pending_backward) {
    problem = std::string(where) + ": state = no pending training forward, backward must " +
              "follow a forward with training = true, once";
  }
  auto t0 = now();
  // --- local: one gradient row per unique key, in send order --------------------------------
  if (problem.empty()) {
    try {
      std::vector<LookupOutput> grads(s.features.size()), row_grads(s.features.size());
      size_t first = 0;
      for (size_t t = 0; t < s.features.size(); ++t) {
        const LookupFeature& f = s.features[t];
        grads[t] = {const_cast<float*>(grad) + first * grad_stride, grad_stride};
        row_grads[t] = {s.local_rows.data() + s.base[t] * D, D};
        first += f.mode == PoolingMode::kNone ? f.num_ids : f.num_bags;
      }
      require(grad != nullptr || first == 0, where, "grad", "nullptr", "the output's gradient");
      reduce_gradients(backend, s.features, grads, row_grads, stream);
      if (s.sent > 0) {
        gather_rows(backend, s.sent, s.send_index.ptr(backend), s.local_rows.data(), D,
                    s.send_rows.data(), D, D, stream);
      }
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  auto t1 = now();
  times_.backward += seconds(t0, t1);
  agree_or_throw(problem.empty(), problem, "backward's gradient reduction");
  s.pending_backward = false;

  // --- gradients to their owners -------------------------------------------------------------
  std::vector<size_t> rc(W), rd(W), sc(W), sd(W);
  for (uint32_t r = 0; r < W; ++r) {
    rc[r] = s.recv_counts[r] * D;
    rd[r] = s.recv_displs[r] * D;
    sc[r] = s.send_counts[r] * D;
    sd[r] = s.send_displs[r] * D;
  }
  comm_.all_to_all_v(s.send_rows.data(), sc.data(), sd.data(), s.recv_rows.data(), rc.data(),
                     rd.data(), DataType::kFloat32, stream);
  auto t2 = now();
  times_.exchange += seconds(t1, t2);

  // --- owner: table-major, summed per key over ranks, optimizer applied -----------------------
  std::string owner_problem;
  try {
    if (s.owner_ran) {
      gather_rows(backend, s.received, s.owner_index.ptr(backend), s.recv_rows.data(), D,
                  s.owner_rows.data(), D, D, stream);
      local_->backward(s.owner_rows.data(), D, stream);
    }
  } catch (const std::exception& e) {
    owner_problem = e.what();
  }
  s.owner_ran = false;
  auto t3 = now();
  times_.optimizer += seconds(t2, t3);
  agree_or_throw(owner_problem.empty(), owner_problem, "the owners' optimizer");
}

template <TableKey K>
size_t ShardedEmbeddingCollection<K>::end_step() {
  return local_->end_step();
}

template <TableKey K>
std::vector<uint64_t> ShardedEmbeddingCollection<K>::global_sizes() {
  std::vector<uint64_t> sizes(num_tables());
  for (size_t t = 0; t < sizes.size(); ++t) sizes[t] = local_->table(t).size();
  return all_reduce_values<uint64_t>(comm_, sizes);
}

template <TableKey K>
ShardedEmbeddingCollection<K>::~ShardedEmbeddingCollection() = default;

template class ShardedEmbeddingCollection<int64_t>;
template class ShardedEmbeddingCollection<uint64_t>;

}  // namespace dynemb::dist

// The pooled-on-owner exchange (SparseOperationKit's distributed sparse embedding): ids go to
// their keys' owners with their bags, owners pool their part of every bag, requesters sum the
// partial rows; backward sends each bag's gradient to every owner.
#include <algorithm>
#include <chrono>

#include "dynemb/core/error.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "sharded_pooled.hpp"
#include "stage_clock.hpp"

namespace dynemb::dist {
namespace {

// `count` elements of backend memory as a host vector (a copy; synchronizes the device).
template <class T>
std::vector<T> to_host(Backend backend, const T* ptr, size_t count) {
  std::vector<T> host(count);
  if (count == 0) return host;
  if (backend == Backend::kCpu) {
    std::copy(ptr, ptr + count, host.begin());
  } else {
    backend_synchronize(backend);
    copy_from_backend(backend, host.data(), ptr, count * sizeof(T));
  }
  return host;
}

// A host vector copied into `buffer` (grown as needed); returns the backend pointer.
template <class T>
T* to_backend(Backend backend, const std::vector<T>& host, BackendBuffer<T>& buffer, int device) {
  if (buffer.size() < std::max<size_t>(host.size(), 1)) {
    buffer = BackendBuffer<T>(backend, std::max<size_t>(host.size(), 1) * 5 / 4 + 16, device);
  }
  if (!host.empty()) buffer.upload(host.data(), host.size());
  return buffer.data();
}

template <class T>
void ensure(BackendBuffer<T>& buffer, Backend backend, size_t count, int device) {
  if (buffer.size() < std::max<size_t>(count, 1)) {
    buffer = BackendBuffer<T>(backend, std::max<size_t>(count, 1) * 5 / 4 + 16, device);
  }
}

}  // namespace

template <TableKey K>
void ShardedEmbeddingCollection<K>::forward_pooled(std::span<const EmbeddingBatch<K>> batches,
                                                   float* out, uint32_t out_stride, bool training,
                                                   StreamHandle stream) {
  constexpr const char* where = "ShardedEmbeddingCollection::forward (pooled on owner)";
  PooledStep& s = *pooled_;
  const Backend backend = comm_.backend();
  const int device = options_.front().table.device;
  const uint32_t T = static_cast<uint32_t>(options_.size());
  const uint32_t W = comm_.world_size();
  const uint32_t D = dim();
  const size_t stride = 2 * static_cast<size_t>(T) + 1;  // per rank: T id counts, T bag counts
  auto now = [&] { return stage_now(backend, synchronize_stages_); };
  s.pending_backward = false;
  s.owner_ran = false;

  // --- local: each id to its key's owner, with its bag and its weight (MEAN: / bag length) ---
  auto t0 = now();
  std::string problem;
  std::vector<uint64_t> counts(W * stride, 0);
  std::vector<std::vector<K>> keys_to(W);
  std::vector<std::vector<float>> weights_to(W);
  std::vector<std::vector<uint32_t>> bags_to(W);
  try {
    require(batches.size() == T, where, "batches", std::to_string(batches.size()),
            "one per table = " + std::to_string(T));
    s.bag_base.assign(T + 1, 0);
    for (uint32_t t = 0; t < T; ++t) {
      const EmbeddingBatch<K>& b = batches[t];
      const std::string table = " (table " + std::to_string(t) + ")";
      require(b.mode != PoolingMode::kNone, where, "batches[t].mode", "none" + table,
              "sum or mean with the pooled-on-owner exchange");
      require(b.num_ids == 0 || b.keys != nullptr, where, "batches[t].keys", "nullptr" + table,
              "keys for " + std::to_string(b.num_ids) + " ids");
      require(b.offsets != nullptr, where, "batches[t].offsets", "nullptr" + table,
              "num_bags + 1 offsets");
      const std::vector<K> keys = to_host(backend, b.keys, b.num_ids);
      const std::vector<int64_t> offsets = to_host(backend, b.offsets, b.num_bags + 1);
      const std::vector<float> weights =
          b.weights != nullptr ? to_host(backend, b.weights, b.num_ids) : std::vector<float>();
      require(offsets[0] == 0 && offsets[b.num_bags] == static_cast<int64_t>(b.num_ids), where,
              "batches[t].offsets",
              std::to_string(offsets[0]) + " .. " + std::to_string(offsets[b.num_bags]) + table,
              "0 .. num_ids = " + std::to_string(b.num_ids));
      for (size_t i = 0; i < b.num_bags; ++i) {
        require(offsets[i] <= offsets[i + 1], where, "batches[t].offsets",
                "decreasing at bag " + std::to_string(i) + table, "non-decreasing");
        const int64_t len = offsets[i + 1] - offsets[i];
        const float scale = b.mode == PoolingMode::kMean && len > 0 ? 1.0f / len : 1.0f;
        for (int64_t j = offsets[i]; j < offsets[i + 1]; ++j) {
          const uint32_t o = owner(t, keys[j]);
          keys_to[o].push_back(keys[j]);
          weights_to[o].push_back((weights.empty() ? 1.0f : weights[j]) * scale);
          bags_to[o].push_back(static_cast<uint32_t>(i));
          ++counts[o * stride + t];
        }
      }
      for (uint32_t o = 0; o < W; ++o) counts[o * stride + T + t] = b.num_bags;
      s.bag_base[t + 1] = s.bag_base[t] + b.num_bags;
    }
    s.bags = s.bag_base[T];
    require(out != nullptr || s.bags == 0, where, "out", "nullptr", "an output buffer");
    // The requester's sum of the W partial rows of each bag, checked before anything is sent.
    ensure(s.partials, backend, W * s.bags * D, device);
    std::vector<uint32_t> indices(W * s.bags);
    for (size_t p = 0; p < s.bags; ++p) {
      for (uint32_t o = 0; o < W; ++o) indices[p * W + o] = static_cast<uint32_t>(o * s.bags + p);
    }
    size_t most_bags = 0;
    for (uint32_t t = 0; t < T; ++t) most_bags = std::max(most_bags, batches[t].num_bags);
    std::vector<int64_t> sum_offsets(most_bags + 1);
    for (size_t i = 0; i <= most_bags; ++i) sum_offsets[i] = static_cast<int64_t>(i * W);
    const uint32_t* idx = to_backend(backend, indices, s.sum_indices, device);
    const int64_t* offs = to_backend(backend, sum_offsets, s.sum_offsets, device);
    s.features.assign(T, {});
    s.outputs.assign(T, {});
    for (uint32_t t = 0; t < T; ++t) {
      LookupFeature& f = s.features[t];
      f.rows = s.partials.data();
      f.row_stride = D;
      f.dim = D;
      f.num_rows = W * s.bags;
      f.indices = idx + s.bag_base[t] * W;
      f.num_ids = batches[t].num_bags * W;
      f.offsets = offs;
      f.num_bags = batches[t].num_bags;
      f.mode = PoolingMode::kSum;
      s.outputs[t] = {out + s.bag_base[t] * out_stride, out_stride};
    }
    validate_lookup(backend, s.features, s.outputs, where);
  } catch (const std::exception& e) {
    problem = e.what();
  }
  for (uint32_t o = 0; o < W; ++o) counts[o * stride + 2 * T] = problem.empty();
  auto t1 = now();
  times_.dedup += seconds(t0, t1);

  // --- exchange counts (and status), then ids: keys, weights, bags ---------------------------
  s.matrix = all_to_all_counts(comm_, counts, stride);
  std::string failed;
  for (uint32_t r = 0; r < W; ++r) {
    if (s.matrix[r * stride + 2 * T] == 0)
      failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!failed.empty()) {
    if (!problem.empty()) throw InvalidArgument(problem);
    throw Error(std::string(where) + ": rank(s) " + failed +
                " refused their batches (see their errors); no table was changed");
  }
  std::vector<K> send_keys;
  std::vector<float> send_weights;
  std::vector<uint32_t> send_bags;
  s.send_counts.assign(W, 0);
  s.send_displs.assign(W, 0);
  for (uint32_t o = 0; o < W; ++o) {
    s.send_displs[o] = send_keys.size();
    s.send_counts[o] = keys_to[o].size();
    send_keys.insert(send_keys.end(), keys_to[o].begin(), keys_to[o].end());
    send_weights.insert(send_weights.end(), weights_to[o].begin(), weights_to[o].end());
    send_bags.insert(send_bags.end(), bags_to[o].begin(), bags_to[o].end());
  }
  s.recv_counts.assign(W, 0);
  s.recv_displs.assign(W, 0);
  s.source_bags.assign(W, 0);
  size_t received = 0;
  for (uint32_t r = 0; r < W; ++r) {
    s.recv_displs[r] = received;
    for (uint32_t t = 0; t < T; ++t) {
      s.recv_counts[r] += s.matrix[r * stride + t];
      s.source_bags[r] += s.matrix[r * stride + T + t];
    }
    received += s.recv_counts[r];
  }
  BackendBuffer<K> send_keys_b, recv_keys_b;
  BackendBuffer<float> send_weights_b, recv_weights_b;
  BackendBuffer<uint32_t> send_bags_b, recv_bags_b;
  const K* sk = to_backend(backend, send_keys, send_keys_b, device);
  const float* sw = to_backend(backend, send_weights, send_weights_b, device);
  const uint32_t* sb = to_backend(backend, send_bags, send_bags_b, device);
  ensure(recv_keys_b, backend, received, device);
  ensure(recv_weights_b, backend, received, device);
  ensure(recv_bags_b, backend, received, device);
  comm_.all_to_all_v(sk, s.send_counts.data(), s.send_displs.data(), recv_keys_b.data(),
                     s.recv_counts.data(), s.recv_displs.data(), data_type_of<K>(), stream);
  comm_.all_to_all_v(sw, s.send_counts.data(), s.send_displs.data(), recv_weights_b.data(),
                     s.recv_counts.data(), s.recv_displs.data(), DataType::kFloat32, stream);
  comm_.all_to_all_v(sb, s.send_counts.data(), s.send_displs.data(), recv_bags_b.data(),
                     s.recv_counts.data(), s.recv_displs.data(), DataType::kUint32, stream);
  auto t2 = now();
  times_.exchange += seconds(t1, t2);

  // --- owner: every source's bags regrouped table-major, pooled over the ids it owns ---------
  std::string owner_problem;
  try {
    const std::vector<K> rkeys = to_host(backend, recv_keys_b.data(), received);
    const std::vector<float> rweights = to_host(backend, recv_weights_b.data(), received);
    const std::vector<uint32_t> rbags = to_host(backend, recv_bags_b.data(), received);
    // Segment (source r, table t): ids from id_first[r][t], bags B(r, t).
    std::vector<size_t> table_bags(T, 0), table_ids(T, 0);
    std::vector<std::vector<size_t>> id_first(W, std::vector<size_t>(T)),
        bag_first(W, std::vector<size_t>(T));
    for (uint32_t r = 0; r < W; ++r) {
      size_t at = s.recv_displs[r];
      for (uint32_t t = 0; t < T; ++t) {
        id_first[r][t] = at;
        at += s.matrix[r * stride + t];
        bag_first[r][t] = table_bags[t];  // within table t, source r's bags start here
        table_bags[t] += s.matrix[r * stride + T + t];
        table_ids[t] += s.matrix[r * stride + t];
      }
    }
    std::vector<size_t> first_bag(T + 1, 0), first_id(T + 1, 0);
    for (uint32_t t = 0; t < T; ++t) {
      first_bag[t + 1] = first_bag[t] + table_bags[t];
      first_id[t + 1] = first_id[t] + table_ids[t];
    }
    s.owner_bags = first_bag[T];
    std::vector<K> okeys(received);
    std::vector<float> oweights(received);
    std::vector<int64_t> ooffsets(s.owner_bags + T, 0);  // table t's offsets at first_bag[t] + t
    std::vector<uint32_t> partial_index(s.owner_bags);
    for (uint32_t t = 0; t < T; ++t) {
      int64_t* offsets = ooffsets.data() + first_bag[t] + t;
      size_t id = 0;
      for (uint32_t r = 0; r < W; ++r) {
        const size_t n = s.matrix[r * stride + t], nb = s.matrix[r * stride + T + t];
        std::vector<int64_t> per_bag(nb, 0);
        for (size_t i = 0; i < n; ++i) {
          const size_t q = id_first[r][t] + i;
          if (rbags[q] >= nb) throw Error("rank " + std::to_string(r) + " sent a bad bag index");
          ++per_bag[rbags[q]];
          okeys[first_id[t] + id + i] = rkeys[q];
          oweights[first_id[t] + id + i] = rweights[q];
        }
        for (size_t b = 0; b < nb; ++b) {
          const size_t bag = bag_first[r][t] + b;
          offsets[bag + 1] = offsets[bag] + per_bag[b];
        }
        id += n;
      }
    }
    // Send order of the partials: source-major, then table, then bag.
    size_t q = 0;
    for (uint32_t r = 0; r < W; ++r) {
      for (uint32_t t = 0; t < T; ++t) {
        for (size_t b = 0; b < s.matrix[r * stride + T + t]; ++b) {
          partial_index[q++] = static_cast<uint32_t>(first_bag[t] + bag_first[r][t] + b);
        }
      }
    }
    const K* kp = to_backend(backend, okeys, s.owner_keys, device);
    const float* wp = to_backend(backend, oweights, s.owner_weights, device);
    const int64_t* op = to_backend(backend, ooffsets, s.owner_offsets, device);
    to_backend(backend, partial_index, s.partial_index, device);
    ensure(s.owner_out, backend, s.owner_bags * D, device);
    if (s.owner_bags > 0) {
      std::vector<EmbeddingBatch<K>> owner_batches(T);
      for (uint32_t t = 0; t < T; ++t) {
        owner_batches[t] = {kp + first_id[t], table_ids[t],     op + first_bag[t] + t,
                            table_bags[t],    wp + first_id[t], PoolingMode::kSum};
      }
      local_->forward(owner_batches, s.owner_out.data(), D, training, stream);
      s.owner_ran = training;
    }
    traffic_.keys_served += received;
  } catch (const std::exception& e) {
    owner_problem = e.what();
  }
  auto t3 = now();
  times_.lookup += seconds(t2, t3);
  agree_or_throw(owner_problem.empty(), owner_problem, "the owners' pooled lookup");

  // --- partial rows back to their requesters, summed per bag ---------------------------------
  ensure(s.send_partials, backend, s.owner_bags * D, device);
  if (s.owner_bags > 0) {
    gather_rows(backend, s.owner_bags, s.partial_index.data(), s.owner_out.data(), D,
                s.send_partials.data(), D, D, stream);
  }
  std::vector<size_t> sc(W), sd(W), rc(W, s.bags * D), rd(W);
  size_t at = 0;
  for (uint32_t r = 0; r < W; ++r) {
    sc[r] = s.source_bags[r] * D;
    sd[r] = at;
    at += sc[r];
    rd[r] = r * s.bags * D;
  }
  comm_.all_to_all_v(s.send_partials.data(), sc.data(), sd.data(), s.partials.data(), rc.data(),
                     rd.data(), DataType::kFloat32, stream);
  auto t4 = now();
  times_.exchange += seconds(t3, t4);
  pooled_lookup(backend, s.features, s.outputs, stream);
  auto t5 = now();
  times_.pool += seconds(t4, t5);
  ++times_.steps;
  traffic_.ids += received;
  s.pending_backward = training;
}

template <TableKey K>
void ShardedEmbeddingCollection<K>::backward_pooled(const float* grad, uint32_t grad_stride,
                                                    StreamHandle stream) {
  constexpr const char* where = "ShardedEmbeddingCollection::backward (pooled on owner)";
  PooledStep& s = *pooled_;
  const Backend backend = comm_.backend();
  const int device = options_.front().table.device;
  const uint32_t W = comm_.world_size();
  const uint32_t D = dim();
  auto now = [&] { return stage_now(backend, synchronize_stages_); };
  std::string problem;
  if (!s.pending_backward) {
    problem = std::string(where) + ": state = no pending training forward, backward must " +
              "follow a forward with training = true, once";
  }
  auto t0 = now();
  // Each bag's gradient, packed, goes to every owner (each pooled part of it).
  if (problem.empty()) {
    try {
      require(grad != nullptr || s.bags == 0, where, "grad", "nullptr", "the output's gradient");
      if (s.iota.size() < s.bags + 1) {
        std::vector<uint32_t> iota(s.bags * 5 / 4 + 16);
        for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<uint32_t>(i);
        s.iota = BackendBuffer<uint32_t>(backend, iota.size(), device);
        s.iota.upload(iota.data(), iota.size());
      }
      ensure(s.packed_grad, backend, s.bags * D, device);
      if (s.bags > 0) {
        gather_rows(backend, s.bags, s.iota.data(), grad, grad_stride, s.packed_grad.data(), D, D,
                    stream);
      }
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  auto t1 = now();
  times_.backward += seconds(t0, t1);
  agree_or_throw(problem.empty(), problem, "backward's gradient packing");
  s.pending_backward = false;
  std::vector<size_t> sc(W, s.bags * D), sd(W, 0), rc(W), rd(W);
  size_t at = 0;
  for (uint32_t r = 0; r < W; ++r) {
    rc[r] = s.source_bags[r] * D;
    rd[r] = at;
    at += rc[r];
  }
  ensure(s.grads_in, backend, s.owner_bags * D, device);
  comm_.all_to_all_v(s.packed_grad.data(), sc.data(), sd.data(), s.grads_in.data(), rc.data(),
                     rd.data(), DataType::kFloat32, stream);
  auto t2 = now();
  times_.exchange += seconds(t1, t2);
  std::string owner_problem;
  try {
    if (s.owner_ran) {
      ensure(s.owner_grads, backend, s.owner_bags * D, device);
      scatter_rows(backend, s.owner_bags, s.partial_index.data(), s.grads_in.data(), D,
                   s.owner_grads.data(), D, D, stream);
      local_->backward(s.owner_grads.data(), D, stream);
    }
  } catch (const std::exception& e) {
    owner_problem = e.what();
  }
  s.owner_ran = false;
  auto t3 = now();
  times_.optimizer += seconds(t2, t3);
  agree_or_throw(owner_problem.empty(), owner_problem, "the owners' optimizer");
}

template void ShardedEmbeddingCollection<int64_t>::forward_pooled(
    std::span<const EmbeddingBatch<int64_t>>, float*, uint32_t, bool, StreamHandle);
template void ShardedEmbeddingCollection<uint64_t>::forward_pooled(
    std::span<const EmbeddingBatch<uint64_t>>, float*, uint32_t, bool, StreamHandle);
template void ShardedEmbeddingCollection<int64_t>::backward_pooled(const float*, uint32_t,
                                                                   StreamHandle);
template void ShardedEmbeddingCollection<uint64_t>::backward_pooled(const float*, uint32_t,
                                                                    StreamHandle);

}  // namespace dynemb::dist

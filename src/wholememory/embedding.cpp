// The WholeMemory embedding: initialization of each part, lookups, and the owner-side
// optimizer step over routed gradients.
#include "dynemb/wholememory/embedding.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "cuda_support.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "exchange.hpp"
#include "row_cache.hpp"
#include "row_copy.hpp"

namespace dynemb::wholememory {
namespace {

constexpr const char* kWhere = "wholememory::WholeEmbedding";

TensorOptions tensor_options(const WholeEmbeddingOptions& o) {
  validate_whole_embedding_options(o);
  TensorOptions t;
  t.shape = {o.rows, o.dim + optimizer_state_dim(o.optimizer.kind, o.dim)};
  t.dtype = dist::DataType::kFloat32;
  t.type = o.type;
  t.location = o.location;
  t.device = o.device;
  return t;
}

Backend memory_of(const WholeMemory& m) {
  return m.location() == MemoryLocation::kHost ? Backend::kCpu : Backend::kCuda;
}

// The local part as rows addressed by local row number.
RowSpace local_rows_space(const WholeMemory& m, char* const* part, uint64_t row_bytes) {
  RowSpace s;
  s.parts = part;
  s.part_count = 1;
  s.rows_per_part = std::max<uint64_t>(1, m.partition().rows_of(m.rank()));
  s.entry_bytes = row_bytes;
  s.copy_bytes = row_bytes;
  return s;
}

void copy_rows(Backend backend, const RowSpace& s, const int64_t* index, size_t n, char* buffer,
               uint64_t stride, bool gather, int device) {
  if (n == 0) return;
  if (backend == Backend::kCpu) {
    copy_rows_cpu(s, index, n, buffer, stride, gather);
  } else {
    copy_rows_cuda(s, index, n, buffer, stride, gather, device, nullptr);
  }
}

}  // namespace

void validate_whole_embedding_options(const WholeEmbeddingOptions& o) {
  require(o.rows > 0, kWhere, "rows", std::to_string(o.rows), "must be > 0");
  require(o.dim > 0, kWhere, "dim", std::to_string(o.dim), "must be > 0");
  require(o.optimizer.kind != OptimizerKind::kFtrl, kWhere, "optimizer", "ftrl",
          "must be sgd, adam, adagrad, rowwise_adagrad or rmsprop");
  validate_optimizer(o.optimizer, kWhere);
  validate_initializer(o.initializer, kWhere);
  require(o.cache_ratio >= 0.0 && o.cache_ratio <= 1.0, kWhere, "cache_ratio",
          std::to_string(o.cache_ratio), "must be in [0, 1]");
}

WholeEmbedding::WholeEmbedding(dist::Communicator& comm, const WholeEmbeddingOptions& options)
    : options_(options),
      row_floats_(options.dim + optimizer_state_dim(options.optimizer.kind, options.dim)),
      tensor_(comm, tensor_options(options)) {
  // Each rank draws its own rows: row r is the initializer's row of key r.
  const WholeMemory& m = tensor_.memory();
  const uint64_t local = m.partition().rows_of(m.rank());
  if (local > 0) {
    const DeviceScope on(m.device());
    const Backend memory = memory_of(m);
    std::vector<int64_t> ids(local);
    std::iota(ids.begin(), ids.end(), static_cast<int64_t>(m.local_first_row()));
    BackendBuffer<int64_t> keys(memory, local, m.device());
    keys.upload(ids.data(), local);
    InitializerOptions init = options_.initializer;
    init.width = options_.dim;
    fill_initial_rows<int64_t>(memory, local, keys.data(), nullptr, true, init,
                               static_cast<float*>(m.local_data()), row_floats_, row_floats_);
    backend_synchronize(memory);
  }
  // Every rank takes part in the same collectives (the cache's invalidation among them).
  dist::require_same_on_all_ranks(comm,
                                  "dim " + std::to_string(options_.dim) + " optimizer " +
                                      to_string(options_.optimizer.kind) + " cache " +
                                      std::to_string(options_.cache_ratio) + " " +
                                      to_string(options_.cache_executor),
                                  "wholememory embedding options");
  if (options_.cache_ratio > 0.0) {
    if (options_.cache_executor == Backend::kCuda && !m.cuda_accessible()) {
      throw NotAvailable(std::string(kWhere) +
                         ": cache_executor = cuda, but this memory is not addressable by CUDA (" +
                         m.describe() + ")");
    }
    const uint64_t slots =
        std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(options_.cache_ratio *
                                                              static_cast<double>(options_.rows))));
    const DeviceScope on(m.device());
    cache_ = std::make_unique<RowCache>(options_.cache_executor, slots,
                                        options_.dim * sizeof(float), std::max(0, m.device()));
    cache_stats_.slots = slots;
  }
  comm.barrier();
}

WholeEmbedding::~WholeEmbedding() = default;

void WholeEmbedding::invalidate_cache() {
  if (cache_) cache_->clear();
}

void WholeEmbedding::lookup(const int64_t* indices, size_t n, float* out, Executor executor,
                            StreamHandle stream) const {
  const Columns columns{0, options_.dim};
  if (!cache_ || executor != cache_->memory()) {
    gather(tensor_, indices, n, out, executor, stream, columns);
    return;
  }
  const int device = std::max(0, tensor_.memory().device());
  const DeviceScope on(tensor_.memory().device());
  const uint64_t row_bytes = options_.dim * sizeof(float);
  const std::vector<int64_t> rows = host_copy(indices, n, executor, device, stream);
  std::vector<int64_t> hit_positions, hit_slots, miss_positions;
  cache_->classify(rows, hit_positions, hit_slots, miss_positions);
  // Misses first: gather validates every index (collectively for distributed memory) before
  // anything is written to out or the cache.
  std::vector<int64_t> missed(miss_positions.size());
  for (size_t i = 0; i < missed.size(); ++i) missed[i] = rows[miss_positions[i]];
  BackendBuffer<int64_t> d_missed(executor, missed.size(), device);
  move_bytes(executor, d_missed.data(), Backend::kCpu, missed.data(),
             missed.size() * sizeof(int64_t), device, nullptr);
  BackendBuffer<char> fetched(executor, missed.size() * row_bytes, device);
  gather(tensor_, d_missed.data(), missed.size(), fetched.data(), executor, stream, columns);
  if (executor == Backend::kCuda) sync_stream(stream, device);
  char* dst = reinterpret_cast<char*>(out);
  cache_->read(hit_slots, hit_positions, dst);
  copy_dense_rows(executor, device, fetched.data(), nullptr, dst, miss_positions.data(),
                  missed.size(), row_bytes);
  cache_->insert(missed, fetched.data());
  if (executor == Backend::kCuda) backend_synchronize(executor);
  cache_stats_.hits += hit_positions.size();
  cache_stats_.misses += missed.size();
}

uint64_t WholeEmbedding::apply_gradients(const int64_t* indices, size_t n, const float* grads,
                                         Executor executor, StreamHandle stream) {
  const WholeMemory& m = tensor_.memory();
  dist::Communicator& comm = m.communicator();
  const int device = m.device();
  const uint32_t dim = options_.dim;
  const uint64_t grad_bytes = dim * sizeof(float);
  // Route every (index, gradient) to the row's owner.
  const std::vector<int64_t> host_indices = host_copy(indices, n, executor, device, stream);
  const Route route = route_indices(comm, m.partition(), host_indices.data(), n, device,
                                    "wholememory::WholeEmbedding::apply_gradients");
  BackendBuffer<int64_t> order(executor, n, device);
  move_bytes(executor, order.data(), Backend::kCpu, route.order.data(), n * sizeof(int64_t), device,
             nullptr);
  BackendBuffer<char> sending(executor, n * grad_bytes, device);
  {
    char* const in_part[1] = {reinterpret_cast<char*>(const_cast<float*>(grads))};
    RowSpace dense;
    dense.parts = in_part;
    dense.part_count = 1;
    dense.rows_per_part = std::max<size_t>(1, n);
    dense.entry_bytes = grad_bytes;
    dense.copy_bytes = grad_bytes;
    if (executor == Backend::kCuda) sync_stream(stream, device);
    copy_rows(executor, dense, order.data(), n, sending.data(), grad_bytes, true, device);
  }
  // The owner's side: the gradients arrive in rank order, each rank's in its batch order.
  const Backend memory = memory_of(m);
  BackendBuffer<char> arrived =
      exchange_rows(comm, executor, sending.data(), route.send_counts, route.recv_counts,
                    grad_bytes, Backend::kCpu, device, nullptr);
  const float* g = reinterpret_cast<const float*>(arrived.data());
  const std::vector<int64_t>& rows = route.received_rows;
  // Distinct rows in ascending order; each one's gradient the sum of its arrivals in order.
  std::vector<size_t> by_row(rows.size());
  std::iota(by_row.begin(), by_row.end(), 0);
  std::stable_sort(by_row.begin(), by_row.end(),
                   [&](size_t a, size_t b) { return rows[a] < rows[b]; });
  std::vector<int64_t> unique_rows;
  std::vector<float> summed;
  for (size_t k = 0; k < by_row.size(); ++k) {
    const size_t i = by_row[k];
    if (unique_rows.empty() || unique_rows.back() != rows[i]) {
      unique_rows.push_back(rows[i]);
      summed.insert(summed.end(), g + i * dim, g + (i + 1) * dim);
    } else {
      float* sum = summed.data() + (unique_rows.size() - 1) * dim;
      for (uint32_t j = 0; j < dim; ++j) sum[j] += g[i * dim + j];
    }
  }
  const size_t u = unique_rows.size();
  if (u > 0) {
    const DeviceScope on(m.device());
    // Gather the rows [w | state], apply the optimizer, scatter them back.
    const uint64_t row_bytes = row_floats_ * sizeof(float);
    char* const part[1] = {static_cast<char*>(m.local_data())};
    const RowSpace space = local_rows_space(m, part, row_bytes);
    BackendBuffer<int64_t> d_rows(memory, u, device);
    d_rows.upload(unique_rows.data(), u);
    BackendBuffer<float> d_grads(memory, u * dim, device);
    d_grads.upload(summed.data(), u * dim);
    BackendBuffer<float> work(memory, u * row_floats_, device);
    copy_rows(memory, space, d_rows.data(), u, reinterpret_cast<char*>(work.data()), row_bytes,
              true, device);
    apply_optimizer_rows(memory, options_.optimizer, u, work.data(), row_floats_, d_grads.data(),
                         dim, dim, nullptr);
    copy_rows(memory, space, d_rows.data(), u, reinterpret_cast<char*>(work.data()), row_bytes,
              false, device);
    backend_synchronize(memory);
  }
  // Every rank drops its cached copies of the rows any rank changed (the all-gather also waits
  // for every owner); otherwise every owner is done before anyone reads the rows again.
  if (cache_) {
    const std::string mine(reinterpret_cast<const char*>(host_indices.data()), n * sizeof(int64_t));
    for (const std::string& theirs : dist::all_gather_strings(comm, mine)) {
      std::vector<int64_t> changed(theirs.size() / sizeof(int64_t));
      std::memcpy(changed.data(), theirs.data(), changed.size() * sizeof(int64_t));
      cache_stats_.invalidated += cache_->invalidate(changed.data(), changed.size());
    }
  } else {
    comm.barrier();
  }
  return u;
}

}  // namespace dynemb::wholememory

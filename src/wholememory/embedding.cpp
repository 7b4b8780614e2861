// The WholeMemory embedding: initialization of each part, lookups, and the owner-side
// optimizer step over routed gradients.
#include "dynemb/wholememory/embedding.hpp"

#include <algorithm>
#include <numeric>

#include "cuda_support.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "exchange.hpp"
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
  comm.barrier();
}

void WholeEmbedding::lookup(const int64_t* indices, size_t n, float* out, Executor executor,
                            StreamHandle stream) const {
  gather(tensor_, indices, n, out, executor, stream, Columns{0, options_.dim});
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
  // Every owner is done before anyone reads the rows again.
  comm.barrier();
  return u;
}

}  // namespace dynemb::wholememory

// EmbeddingHandle and the bindings of the embedding options.
#include "embedding_handle.hpp"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "dynemb/table/table.hpp"
#include "stats_dict.hpp"
#include "storage_binding.hpp"

namespace dynemb::python {

namespace {

StreamHandle as_stream(uintptr_t stream) {
  return reinterpret_cast<StreamHandle>(stream);
}

void require_rows(const TensorArg& t, int64_t rows, const std::string& where, const char* what) {
  if (t.size(0) != rows) {
    throw InvalidArgument(where + ": " + t.name() + ": shape[0] = " + std::to_string(t.size(0)) +
                          ", must be " + std::to_string(rows) + " (" + what + ")");
  }
}

}  // namespace

EmbeddingHandle::EmbeddingHandle(Backend backend, const EmbeddingOptions& options,
                                 std::shared_ptr<storage::Storage> lower, uint64_t cache_rows,
                                 const storage::CachingOptions& caching)
    : placement_{backend, backend == Backend::kCuda ? options.table.device : 0} {
  if (backend == Backend::kCuda && !cuda_backend_available()) {
    throw NotAvailable(
        "Embedding: backend = cuda, but this module has no CUDA backend or sees no CUDA device");
  }
  if (lower) {
    if (cache_rows == 0) {
      throw InvalidArgument("Embedding: cache_rows = 0 with an external storage, must be > 0");
    }
    embedding_ = std::make_unique<Embedding<int64_t>>(
        backend, options, caching_factory(std::move(lower), cache_rows, caching));
    return;
  }
  embedding_ = std::make_unique<Embedding<int64_t>>(backend, options);
}

py::object EmbeddingHandle::caching_stats() const {
  auto* cached = dynamic_cast<storage::CachedTable<int64_t>*>(&embedding_->table());
  if (cached == nullptr) return py::none();
  storage::CachingStats s;
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    s = cached->caching_stats();
  }
  py::dict d = caching_stats_dict(s);
  d["fast_size"] = cached->fast_table().size();
  d["fast_capacity"] = cached->fast_table().capacity();
  d["lower_tier"] = cached->lower().describe();
  return d;
}

void EmbeddingHandle::flush_storage() {
  auto* cached = dynamic_cast<storage::CachedTable<int64_t>*>(&embedding_->table());
  if (cached == nullptr) {
    throw InvalidArgument("Embedding.flush_storage: the table has no external storage");
  }
  py::gil_scoped_release release;
  std::lock_guard lock(mutex_);
  cached->flush();
}

uint32_t EmbeddingHandle::optimizer_state_dim() const {
  const auto& o = embedding_->options();
  return dynemb::optimizer_state_words(o.optimizer.kind, o.dim, state_value_type(o.optimizer));
}

py::object EmbeddingHandle::forward(py::handle indices, py::handle offsets, py::handle weights,
                                    PoolingMode mode, bool training, py::handle out,
                                    uintptr_t stream) {
  const std::string where = "Embedding.forward";
  TensorArg ids(indices, where, "indices");
  ids.require(Element::kInt64, 1, placement_);
  const auto n = ids.size(0);
  std::optional<TensorArg> offs = optional_tensor(offsets, where, "offsets");
  int64_t bags = 0;
  if (!offs) {
    throw InvalidArgument(where +
                          ": offsets = None, must be given (bags + 1 entries; a sequence "
                          "may be one bag [0, number of indices])");
  }
  if (offs) {
    offs->require(Element::kInt64, 1, placement_);
    if (offs->size(0) < 1) {
      throw InvalidArgument(where + ": offsets: shape[0] = 0, must be >= 1 (bags + 1)");
    }
    bags = offs->size(0) - 1;
  }
  std::optional<TensorArg> w = optional_tensor(weights, where, "per_sample_weights");
  if (w) {
    w->require(Element::kFloat32, 1, placement_);
    require_rows(*w, n, where, "one weight per index");
  }
  const int64_t rows = mode == PoolingMode::kNone ? n : bags;
  const int64_t dim = this->dim();
  py::object result;
  float* out_ptr = nullptr;
  // The output's elements (float32, or the rows' 16-bit type) and its row stride in 32-bit words.
  const ValueType out_type = embedding_->options().output_type;
  int64_t stride = value_words(out_type, static_cast<uint32_t>(dim));
  if (out.is_none()) {
    if (out_type != ValueType::kFloat32 && dim % 2 != 0) {
      throw InvalidArgument(where + ": out = None with output_type " + to_string(out_type) +
                            " and an odd dim " + std::to_string(dim) +
                            ": pass an out whose row stride is even (16-bit outputs are written "
                            "two elements a 32-bit word)");
    }
    void* data = nullptr;
    result = new_capsule(element_of(out_type), {rows, dim}, placement_, &data);
    out_ptr = static_cast<float*>(data);
  } else {
    TensorArg o(out, where, "out");
    o.require(element_of(out_type), 2, placement_, /*strided_rows=*/true);
    require_rows(o, rows, where, mode == PoolingMode::kNone ? "one row per index" : "one per bag");
    if (o.size(1) != dim) {
      throw InvalidArgument(where + ": out: shape[1] = " + std::to_string(o.size(1)) +
                            ", must be the table's dim " + std::to_string(dim));
    }
    out_ptr = o.as<float>();
    stride = word_stride(o, out_type, where, "out");
    result = py::reinterpret_borrow<py::object>(out);
  }
  EmbeddingBatch<int64_t> batch;
  batch.keys = ids.as<int64_t>();
  batch.num_ids = static_cast<size_t>(n);
  batch.offsets = offs ? offs->as<int64_t>() : nullptr;
  batch.num_bags = static_cast<size_t>(bags);
  batch.weights = w ? w->as<float>() : nullptr;
  batch.mode = mode;
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    pending_ = 0;  // every forward, evaluation too, drops the pending step first
    embedding_->forward(batch, out_ptr, static_cast<uint32_t>(stride), training, as_stream(stream));
    if (training) {
      pending_ = ++generation_;
      out_shape_ = {rows, dim};
    }
  }
  return result;
}

void EmbeddingHandle::backward(py::handle grad, uint64_t generation, uintptr_t stream) {
  const std::string where = "Embedding.backward";
  TensorArg g(grad, where, "grad");
  py::gil_scoped_release release;
  std::lock_guard lock(mutex_);
  if (pending_ == 0 || generation != pending_) {
    throw StateError(where + ": the gradient belongs to training forward " +
                     std::to_string(generation) + ", but " +
                     (pending_ == 0
                          ? std::string("no training forward awaits its backward")
                          : "the table's last training forward is " + std::to_string(pending_)) +
                     " (a table keeps one step in flight: forward, backward, forward, ...); "
                     "the table is unchanged");
  }
  const ValueType grad_type = embedding_->options().output_type;
  g.require(element_of(grad_type), 2, placement_, /*strided_rows=*/true);
  if (g.size(0) != out_shape_[0] || g.size(1) != out_shape_[1]) {
    throw InvalidArgument(where + ": grad: shape = [" + std::to_string(g.size(0)) + ", " +
                          std::to_string(g.size(1)) + "], must be the forward's output shape [" +
                          std::to_string(out_shape_[0]) + ", " + std::to_string(out_shape_[1]) +
                          "]");
  }
  const uint32_t stride = word_stride(g, grad_type, where, "grad");
  embedding_->backward(g.as<float>(), stride, as_stream(stream));
  pending_ = 0;
  embedding_->end_step();
}

py::tuple EmbeddingHandle::find(py::handle indices, uintptr_t stream) {
  TensorArg ids(indices, "Embedding.find", "indices");
  ids.require(Element::kInt64, 1, placement_);
  const int64_t n = ids.size(0);
  void* rows = nullptr;
  void* founds = nullptr;
  py::object rows_capsule =
      new_capsule(Element::kFloat32, {n, static_cast<int64_t>(row_dim())}, placement_, &rows);
  py::object founds_capsule = new_capsule(Element::kUInt8, {n}, placement_, &founds);
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    // Rows of missing keys are left as allocated: zero them first.
    backend_zero(placement_.backend, rows, static_cast<size_t>(n) * row_dim() * sizeof(float),
                 as_stream(stream));
    embedding_->table().find(static_cast<size_t>(n), ids.as<int64_t>(), static_cast<float*>(rows),
                             static_cast<bool*>(founds), nullptr, as_stream(stream));
  }
  return py::make_tuple(rows_capsule, founds_capsule);
}

void EmbeddingHandle::insert_or_assign(py::handle indices, py::handle rows, uintptr_t stream) {
  const std::string where = "Embedding.insert_or_assign";
  TensorArg ids(indices, where, "indices");
  ids.require(Element::kInt64, 1, placement_);
  TensorArg r(rows, where, "rows");
  r.require(Element::kFloat32, 2, placement_);
  require_rows(r, ids.size(0), where, "one row per index");
  const auto n = static_cast<size_t>(ids.size(0));
  if (r.size(1) == static_cast<int64_t>(row_dim())) {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    embedding_->table().insert_or_assign(n, ids.as<int64_t>(), r.as<float>(), nullptr,
                                         as_stream(stream));
    return;
  }
  if (r.size(1) != static_cast<int64_t>(dim())) {
    throw InvalidArgument(where + ": rows: shape[1] = " + std::to_string(r.size(1)) +
                          ", must be the dim " + std::to_string(dim()) + " or the row dim " +
                          std::to_string(row_dim()));
  }
  // Embedding-only rows: widen to full rows whose optimizer state is 0.
  std::vector<float> host(n * dim());
  copy_from_backend(placement_.backend, host.data(), r.data(), host.size() * sizeof(float));
  std::vector<float> full(n * row_dim(), 0.0f);
  for (size_t i = 0; i < n; ++i) {
    std::copy_n(host.data() + i * dim(), dim(), full.data() + i * row_dim());
  }
  BackendBuffer<float> staged(placement_.backend, full.size(), placement_.device);
  staged.upload(full.data(), full.size());
  py::gil_scoped_release release;
  std::lock_guard lock(mutex_);
  embedding_->table().insert_or_assign(n, ids.as<int64_t>(), staged.data(), nullptr,
                                       as_stream(stream));
  backend_synchronize(placement_.backend);  // `staged` is freed on return
}

py::tuple EmbeddingHandle::export_rows(uint64_t min_score) {
  checkpoint::DeltaRows<int64_t> delta;
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    delta = checkpoint::incremental_dump(embedding_->table(), min_score);
  }
  const auto n = static_cast<int64_t>(delta.keys.size());
  const int64_t width = delta.dim;
  return py::make_tuple(capsule_of(std::move(delta.keys), Element::kInt64, {n}),
                        capsule_of(std::move(delta.values), Element::kFloat32, {n, width}),
                        capsule_of(std::move(delta.scores), Element::kInt64, {n}),
                        delta.next_threshold);
}

py::dict EmbeddingHandle::stats() const {
  EmbeddingStats s;
  size_t size = 0;
  double load = 0.0;
  {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    s = embedding_->stats();
    size = embedding_->table().size();
    load = embedding_->table().load_factor();
  }
  return table_stats_dict(s, s.nonfinite_gradients, size, load, embedding_->table());
}

void register_embedding(py::module_& m) {
  py::enum_<Backend>(m, "Backend").value("CPU", Backend::kCpu).value("CUDA", Backend::kCuda);
  py::enum_<InitializerKind>(m, "InitializerKind")
      .value("UNIFORM", InitializerKind::kUniform)
      .value("NORMAL", InitializerKind::kNormal)
      .value("TRUNCATED_NORMAL", InitializerKind::kTruncatedNormal)
      .value("CONSTANT", InitializerKind::kConstant)
      .value("DEBUG", InitializerKind::kDebug);
  py::enum_<ScorePolicy>(m, "ScorePolicy")
      .value("TIMESTAMP", ScorePolicy::kTimestamp)
      .value("STEP", ScorePolicy::kStep)
      .value("LFU", ScorePolicy::kLfu)
      .value("CUSTOMIZED", ScorePolicy::kCustomized);
  py::enum_<SafeCheck>(m, "SafeCheck")
      .value("ERROR", SafeCheck::kError)
      .value("WARNING", SafeCheck::kWarning)
      .value("IGNORE", SafeCheck::kIgnore);
  py::enum_<OptimizerKind>(m, "OptimizerKind")
      .value("SGD", OptimizerKind::kSgd)
      .value("ADAM", OptimizerKind::kAdam)
      .value("ADAGRAD", OptimizerKind::kAdaGrad)
      .value("ROWWISE_ADAGRAD", OptimizerKind::kRowWiseAdaGrad)
      .value("RMSPROP", OptimizerKind::kRmsProp)
      .value("FTRL", OptimizerKind::kFtrl);
  py::enum_<ValueType>(m, "ValueType")
      .value("FLOAT32", ValueType::kFloat32)
      .value("FLOAT16", ValueType::kFloat16)
      .value("BFLOAT16", ValueType::kBFloat16);
  py::enum_<PoolingMode>(m, "PoolingMode")
      .value("SUM", PoolingMode::kSum)
      .value("MEAN", PoolingMode::kMean)
      .value("NONE", PoolingMode::kNone);

  py::class_<InitializerOptions>(m, "InitializerOptions")
      .def(py::init<>())
      .def_readwrite("kind", &InitializerOptions::kind)
      .def_readwrite("low", &InitializerOptions::low)
      .def_readwrite("high", &InitializerOptions::high)
      .def_readwrite("mean", &InitializerOptions::mean)
      .def_readwrite("stddev", &InitializerOptions::stddev)
      .def_readwrite("trunc_lower", &InitializerOptions::trunc_lower)
      .def_readwrite("trunc_upper", &InitializerOptions::trunc_upper)
      .def_readwrite("value", &InitializerOptions::value)
      .def_readwrite("seed", &InitializerOptions::seed);
  py::class_<TableOptions>(m, "TableOptions")
      .def(py::init<>())
      .def_readwrite("init_capacity", &TableOptions::init_capacity)
      .def_readwrite("max_capacity", &TableOptions::max_capacity)
      .def_readwrite("bucket_capacity", &TableOptions::bucket_capacity)
      .def_readwrite("max_load_factor", &TableOptions::max_load_factor)
      .def_readwrite("score_policy", &TableOptions::score_policy)
      .def_readwrite("safe_check", &TableOptions::safe_check)
      .def_readwrite("initializer", &TableOptions::initializer)
      .def_readwrite("num_threads", &TableOptions::num_threads)
      .def_readwrite("prefault_host_memory", &TableOptions::prefault_host_memory)
      .def_readwrite("device", &TableOptions::device)
      .def_readwrite("max_hbm_for_values", &TableOptions::max_hbm_for_values)
      .def_readwrite("thread_safe", &TableOptions::thread_safe)
      .def_readwrite("grouped_write_min_batch", &TableOptions::grouped_write_min_batch)
      .def_readwrite("host_keys_in_flight", &TableOptions::host_keys_in_flight)
      .def_readwrite("coalesce_copies_min_batch", &TableOptions::coalesce_copies_min_batch)
      .def_readwrite("join_contended_copies", &TableOptions::join_contended_copies);
  py::class_<OptimizerOptions>(m, "OptimizerOptions")
      .def(py::init<>())
      .def_readwrite("kind", &OptimizerOptions::kind)
      .def_readwrite("learning_rate", &OptimizerOptions::learning_rate)
      .def_readwrite("beta1", &OptimizerOptions::beta1)
      .def_readwrite("beta2", &OptimizerOptions::beta2)
      .def_readwrite("eps", &OptimizerOptions::eps)
      .def_readwrite("rho", &OptimizerOptions::rho)
      .def_readwrite("initial_accumulator", &OptimizerOptions::initial_accumulator)
      .def_readwrite("ftrl_l1", &OptimizerOptions::ftrl_l1)
      .def_readwrite("ftrl_l2", &OptimizerOptions::ftrl_l2)
      .def_readwrite("ftrl_beta", &OptimizerOptions::ftrl_beta)
      .def_readwrite("weight_decay", &OptimizerOptions::weight_decay)
      .def_readwrite("clip_norm", &OptimizerOptions::clip_norm)
      .def_readwrite("clip_value", &OptimizerOptions::clip_value);
  py::class_<EmbeddingOptions>(m, "EmbeddingOptions")
      .def(py::init<>())
      .def_readwrite("dim", &EmbeddingOptions::dim)
      .def_readwrite("table", &EmbeddingOptions::table)
      .def_readwrite("optimizer", &EmbeddingOptions::optimizer)
      .def_readwrite("eval_initializer", &EmbeddingOptions::eval_initializer)
      .def_readwrite("admit_threshold", &EmbeddingOptions::admit_threshold)
      .def_readwrite("admission_capacity", &EmbeddingOptions::admission_capacity)
      .def_readwrite("ttl_steps", &EmbeddingOptions::ttl_steps)
      .def_readwrite("ttl_seconds", &EmbeddingOptions::ttl_seconds)
      .def_readwrite("gradient_check", &EmbeddingOptions::gradient_check)
      .def_readwrite("align_rows", &EmbeddingOptions::align_rows)
      .def_readwrite("value_type", &EmbeddingOptions::value_type)
      .def_readwrite("stochastic_rounding", &EmbeddingOptions::stochastic_rounding)
      .def_readwrite("state_in_value_type", &EmbeddingOptions::state_in_value_type)
      .def_readwrite("deterministic_backward", &EmbeddingOptions::deterministic_backward)
      .def_readwrite("output_type", &EmbeddingOptions::output_type);

  py::class_<EmbeddingHandle>(m, "Embedding")
      .def(py::init<Backend, const EmbeddingOptions&, std::shared_ptr<storage::Storage>, uint64_t,
                    const storage::CachingOptions&>(),
           py::arg("backend"), py::arg("options"), py::arg("external_storage") = nullptr,
           py::arg("cache_rows") = 0, py::arg("caching") = storage::CachingOptions{})
      .def("forward", &EmbeddingHandle::forward, py::arg("indices"), py::arg("offsets"),
           py::arg("per_sample_weights"), py::arg("mode"), py::arg("training"), py::arg("out"),
           py::arg("stream") = 0)
      .def_property_readonly("generation", &EmbeddingHandle::generation)
      .def("backward", &EmbeddingHandle::backward, py::arg("grad"), py::arg("generation"),
           py::arg("stream") = 0)
      .def("find", &EmbeddingHandle::find, py::arg("indices"), py::arg("stream") = 0)
      .def("insert_or_assign", &EmbeddingHandle::insert_or_assign, py::arg("indices"),
           py::arg("rows"), py::arg("stream") = 0)
      .def("export_rows", &EmbeddingHandle::export_rows, py::arg("min_score") = 0)
      .def("stats", &EmbeddingHandle::stats)
      .def("caching_stats", &EmbeddingHandle::caching_stats)
      .def("flush_storage", &EmbeddingHandle::flush_storage)
      .def_property_readonly("dim", &EmbeddingHandle::dim)
      .def_property_readonly("row_dim", &EmbeddingHandle::row_dim)
      .def_property_readonly("optimizer_state_dim", &EmbeddingHandle::optimizer_state_dim)
      .def_property_readonly("backend",
                             [](const EmbeddingHandle& h) { return h.placement().backend; })
      .def_property_readonly("device",
                             [](const EmbeddingHandle& h) { return h.placement().device; })
      .def_property(
          "score", [](EmbeddingHandle& h) { return h.embedding().table().score(); },
          [](EmbeddingHandle& h, uint64_t s) { h.embedding().table().set_score(s); })
      .def_property_readonly("score_policy", [](EmbeddingHandle& h) {
        return h.embedding().options().table.score_policy;
      });
}

}  // namespace dynemb::python

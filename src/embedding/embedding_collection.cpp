#include "dynemb/embedding/embedding_collection.hpp"

#include <bit>
#include <cstring>
#include <string>

#include "dynemb/core/error.hpp"
#include "dynemb/core/log.hpp"
#include "dynemb/ops/ops_backend.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "dynemb/ops/table_keys.hpp"
#include "step_parts.hpp"

namespace dynemb {
namespace {

using detail::ensure_buffer;

constexpr const char* kForward = "EmbeddingCollection::forward";

// Words read back with the dedup: combine_table_keys' status, then the step's nonfinite count.
enum Word : size_t { kNonfinite = detail::kTableKeyStatusWords, kWords };
// Counts each table keeps in backend memory, kPerTable words a table.
enum TableCounter : size_t { kRowsCreated, kEvalMisses, kPerTable };

std::string table_field(size_t t, const char* field) {
  return "tables[" + std::to_string(t) + "]." + field;
}

// Throws unless every table can share table 0's rows layout and step.
void validate_collection(const std::vector<EmbeddingOptions>& tables) {
  constexpr const char* w = "EmbeddingCollection";
  require(!tables.empty(), w, "tables", "0 tables", "must hold at least one table");
  require(tables.size() <= (size_t{1} << 31), w, "tables",
          std::to_string(tables.size()) + " tables", "must be at most 2^31");
  const EmbeddingOptions& first = tables.front();
  for (size_t t = 0; t < tables.size(); ++t) {
    const EmbeddingOptions& o = tables[t];
    validate_embedding_options(o);
    require(o.admit_threshold <= 1, w, table_field(t, "admit_threshold").c_str(),
            std::to_string(o.admit_threshold),
            "must be <= 1: a collection has no counter admission (use one Embedding per table)");
    require(o.dim == first.dim, w, table_field(t, "dim").c_str(), std::to_string(o.dim),
            "must equal tables[0].dim = " + std::to_string(first.dim));
    require(o.optimizer == first.optimizer, w, table_field(t, "optimizer").c_str(),
            to_string(o.optimizer.kind), "must equal tables[0].optimizer (kind and every setting)");
    require(o.gradient_check == first.gradient_check, w, table_field(t, "gradient_check").c_str(),
            to_string(o.gradient_check),
            "must equal tables[0].gradient_check = " + to_string(first.gradient_check));
    require(o.eval_initializer == first.eval_initializer, w,
            table_field(t, "eval_initializer").c_str(), to_string(o.eval_initializer.kind),
            "must equal tables[0].eval_initializer (kind and every setting)");
    require(o.align_rows == first.align_rows, w, table_field(t, "align_rows").c_str(),
            o.align_rows ? "true" : "false", "must equal tables[0].align_rows");
    require(o.table.device == first.table.device, w, table_field(t, "table.device").c_str(),
            std::to_string(o.table.device),
            "must equal tables[0].table.device = " + std::to_string(first.table.device));
  }
}

}  // namespace

// What one training forward leaves for its backward.
template <TableKey K>
struct EmbeddingCollection<K>::Step {
  BackendBuffer<uint64_t> combined_keys, unique_combined;
  BackendBuffer<int64_t> offsets;  // every table's, one after another
  BackendBuffer<float> weights;
  BackendBuffer<K> unique_keys;  // without their table bits
  BackendBuffer<uint32_t> inverse, ids_by_row, row_begin, bag_by_row;
  bool has_bag_by_row = false;
  BackendBuffer<float*> row_ptrs;
  BackendBuffer<float> row_grads;
  detail::FallbackRows fallback;
  detail::NonfiniteReport nonfinite_report;
  BackendBuffer<bool> found, missing, flags;
  BackendBuffer<uint64_t> bounds;          // num_tables + 1
  BackendBuffer<uint64_t> words;           // Word
  BackendBuffer<uint64_t> table_counters;  // kPerTable a table
  std::vector<uint64_t> host_bounds;
  std::vector<size_t> ids_of;  // each table's ids, this step
  std::unique_ptr<detail::StepWorkspace> workspace;
  const OpsBackend* ops = nullptr;  // the backend's ops, chosen once
  size_t num_unique = 0, num_ids = 0, num_bags = 0;
  PoolingMode mode = PoolingMode::kSum;
  bool weighted = false;
  bool pending_backward = false;

  detail::IdGroups groups() const {
    return {ids_by_row.data(), row_begin.data(), has_bag_by_row ? bag_by_row.data() : nullptr};
  }

  LookupFeature feature(uint32_t dim, uint32_t row_dim) const {
    return detail::step_feature(nullptr, row_ptrs.data(), dim, row_dim, num_unique, inverse.data(),
                                num_ids, offsets.data(), num_bags,
                                weighted ? weights.data() : nullptr, mode);
  }
};

template <TableKey K>
EmbeddingCollection<K>::EmbeddingCollection(Backend backend, std::vector<EmbeddingOptions> tables)
    : backend_(backend), options_(std::move(tables)), step_(std::make_unique<Step>()) {
  validate_collection(options_);
  const size_t n = options_.size();
  row_dim_ = embedding_row_dim(options_.front());
  table_bits_ = n == 1 ? 0 : static_cast<uint32_t>(std::bit_width(n - 1));
  for (const EmbeddingOptions& o : options_) {
    tables_.push_back(make_table<K>(backend, detail::embedding_table_options(o)));
  }
  stats_.resize(n);
  const int device = options_.front().table.device;
  Step& s = *step_;
  s.words = BackendBuffer<uint64_t>(backend, kWords, device);
  s.table_counters = BackendBuffer<uint64_t>(backend, n * kPerTable, device);
  s.bounds = BackendBuffer<uint64_t>(backend, n + 1, device);
  s.host_bounds.resize(n + 1);
  s.ops = &ops_backend(backend);
  s.workspace = std::make_unique<detail::StepWorkspace>(backend, device);
  backend_zero(backend, s.words.data(), kWords * sizeof(uint64_t));
  backend_zero(backend, s.table_counters.data(), n * kPerTable * sizeof(uint64_t));
  backend_synchronize(backend);
}

template <TableKey K>
EmbeddingCollection<K>::~EmbeddingCollection() = default;

template <TableKey K>
size_t EmbeddingCollection<K>::combine_and_dedup(std::span<const EmbeddingBatch<K>> batches,
                                                 uint32_t shift, uint64_t* words,
                                                 StreamHandle stream) {
  Step& s = *step_;
  backend_zero(backend_, s.words.data(), detail::kTableKeyStatusWords * sizeof(uint64_t), stream);
  uint64_t base = 0, bag_base = 0;
  for (size_t t = 0; t < batches.size(); ++t) {
    const EmbeddingBatch<K>& b = batches[t];
    detail::combine_table_keys<K>(*s.ops, static_cast<uint32_t>(t), shift, b.num_ids, b.keys,
                                  b.offsets, b.num_bags, base, bag_base, s.combined_keys.data(),
                                  s.offsets.data(), s.words.data(), stream);
    if (s.weighted && b.num_ids > 0) {
      copy_within_backend(backend_, s.weights.data() + base, b.weights, b.num_ids * sizeof(float),
                          stream);
    }
    base += b.num_ids;
    bag_base += b.num_bags;
  }
  if (s.num_bags == 0) backend_zero(backend_, s.offsets.data(), sizeof(int64_t), stream);
  size_t u = 0;
  try {
    u = detail::dedup_grouped<uint64_t>(
        *s.ops, s.num_ids, s.combined_keys.data(), s.unique_combined.data(), s.inverse.data(),
        s.ids_by_row.data(), s.row_begin.data(), s.has_bag_by_row ? s.bag_by_row.data() : nullptr,
        s.offsets.data(), s.num_bags, kForward, {s.words.data(), kWords, words}, *s.workspace,
        stream);
  } catch (const InvalidArgument&) {
    // The combined offsets failed their check: name the table whose own offsets are bad.
    detail::read_words(*s.ops, s.words.data(), kWords, words, stream);
    throw_if_bad_table(words);
    throw;
  }
  throw_if_bad_table(words);
  return u;
}

template <TableKey K>
void EmbeddingCollection<K>::throw_if_bad_table(const uint64_t* words) const {
  const uint64_t flag = words[detail::kBadTableFlag];
  if (flag == 0) return;
  const uint64_t t = ~uint64_t{0} - flag;
  throw InvalidArgument(std::string(kForward) + ": batches[" + std::to_string(t) +
                        "].offsets must start at 0 and end at num_ids = " +
                        std::to_string(step_->ids_of[t]) + "; no table was changed");
}

template <TableKey K>
void EmbeddingCollection<K>::forward(std::span<const EmbeddingBatch<K>> batches, float* out,
                                     uint32_t out_stride, bool training, StreamHandle stream) {
  Step& s = *step_;
  const size_t num_tables = tables_.size();
  require(batches.size() == num_tables, kForward, "batches",
          std::to_string(batches.size()) + " batches",
          "must hold one batch per table (" + std::to_string(num_tables) + ")");
  s.pending_backward = false;
  s.ids_of.assign(num_tables, 0);
  size_t n = 0, bags = 0;
  bool weighted = false;
  for (size_t t = 0; t < num_tables; ++t) {
    const EmbeddingBatch<K>& b = batches[t];
    const std::string name = "batches[" + std::to_string(t) + "]";
    require(b.num_ids == 0 || b.keys != nullptr, kForward, (name + ".keys").c_str(), "nullptr",
            "must be non-null when num_ids = " + std::to_string(b.num_ids));
    require(b.num_bags > 0 || b.num_ids == 0, kForward, (name + ".num_ids").c_str(),
            std::to_string(b.num_ids), "must be 0 when num_bags = 0");
    require(b.num_bags == 0 || b.offsets != nullptr, kForward, (name + ".offsets").c_str(),
            "nullptr", "must be non-null when num_bags = " + std::to_string(b.num_bags));
    require(b.mode == batches[0].mode, kForward, (name + ".mode").c_str(), to_string(b.mode),
            "must equal batches[0].mode = " + to_string(batches[0].mode));
    s.ids_of[t] = b.num_ids;
    n += b.num_ids;
    bags += b.num_bags;
    weighted |= b.weights != nullptr && b.num_ids > 0;
  }
  for (size_t t = 0; t < num_tables; ++t) {
    const EmbeddingBatch<K>& b = batches[t];
    require(b.num_ids == 0 || (b.weights != nullptr) == weighted, kForward,
            ("batches[" + std::to_string(t) + "].weights").c_str(),
            b.weights != nullptr ? "set" : "nullptr",
            "every batch with ids must have weights, or none");
  }
  require(n <= 0xFFFFFFFFull, kForward, "num_ids", std::to_string(n) + " over all batches",
          "must be < 2^32");

  const int device = options_.front().table.device;
  ensure_buffer(s.combined_keys, backend_, n, device);
  ensure_buffer(s.unique_combined, backend_, n, device);
  ensure_buffer(s.unique_keys, backend_, n, device);
  ensure_buffer(s.inverse, backend_, n, device);
  ensure_buffer(s.ids_by_row, backend_, n, device);
  ensure_buffer(s.row_begin, backend_, n + 1, device);
  ensure_buffer(s.offsets, backend_, bags + 1, device);
  const PoolingMode mode = batches[0].mode;  // every batch's (checked above)
  s.has_bag_by_row = training && mode != PoolingMode::kNone && s.ops->reads_bag_by_row();
  if (s.has_bag_by_row) ensure_buffer(s.bag_by_row, backend_, n, device);
  s.weighted = weighted;
  if (weighted) ensure_buffer(s.weights, backend_, n, device);
  s.num_ids = n;
  s.num_bags = bags;
  s.mode = mode;
  s.num_unique = 0;

  // One dedup over every table's keys, each table's index in the bits above `shift`: the bit
  // width of the keys seen so far (all 64 bits' worth before the first step). A batch with a
  // wider key is combined and deduplicated again (a second synchronization, only then).
  const uint32_t id_bits = 64 - table_bits_;
  uint32_t shift = table_bits_ == 0 ? 64 : (seen_keys_ ? key_width_ : id_bits);
  uint64_t words[kWords];
  size_t u = combine_and_dedup(batches, shift, words, stream);
  const uint32_t width = static_cast<uint32_t>(std::bit_width(words[detail::kKeyBitsSeen]));
  if (table_bits_ > 0) {
    require(width <= id_bits, kForward, "batches[*].keys",
            "a key of " + std::to_string(width) + " bits",
            "must fit in " + std::to_string(id_bits) + " bits with " + std::to_string(num_tables) +
                " tables (the table's index takes the bits above); no table was changed");
    key_width_ = seen_keys_ ? std::max(key_width_, width) : width;
    seen_keys_ = true;
    if (width > shift) {
      shift = key_width_;
      u = combine_and_dedup(batches, shift, words, stream);
    }
  }
  s.nonfinite_report.update(words[kNonfinite], options_.front().gradient_check,
                            "EmbeddingCollection::backward");
  stage_done("dedup");
  s.num_unique = u;
  ensure_buffer(s.row_ptrs, backend_, u, device);
  detail::split_table_keys<K>(*s.ops, u, s.unique_combined.data(),
                              static_cast<uint32_t>(num_tables), shift, s.unique_keys.data(),
                              s.bounds.data(), stream);
  detail::read_words(*s.ops, s.bounds.data(), num_tables + 1, s.host_bounds.data(), stream);

  const LookupOutput output{out, out_stride};
  const LookupFeature feature = s.feature(options_.front().dim, row_dim_);
  detail::validate_lookup_shape(kForward, {&feature, 1}, {&output, 1}, "out");
  lookup_rows(training, stream);
  stage_done("lookup");
  detail::pooled_lookup_unchecked(*s.ops, feature, output, stream);
  stage_done("pool");
  for (size_t t = 0; t < num_tables; ++t) {
    stats_[t].lookups += s.ids_of[t];
    stats_[t].unique_lookups += s.host_bounds[t + 1] - s.host_bounds[t];
  }
  s.pending_backward = training;
}

// Each table finds (training: finds or inserts) its range of the unique keys; keys without a
// row read the evaluation initializer and get no update.
template <TableKey K>
void EmbeddingCollection<K>::lookup_rows(bool training, StreamHandle stream) {
  Step& s = *step_;
  const EmbeddingOptions& o = options_.front();
  const int device = o.table.device;
  const size_t u = s.num_unique;
  ensure_buffer(s.found, backend_, u, device);
  ensure_buffer(s.missing, backend_, u, device);
  const uint32_t stride =
      s.fallback.prepare(backend_, o.eval_initializer, o.dim, u, device, stream);
  for (size_t t = 0; t < tables_.size(); ++t) {
    const size_t begin = s.host_bounds[t];
    const size_t count = s.host_bounds[t + 1] - begin;
    if (count == 0) continue;
    const K* keys = s.unique_keys.data() + begin;
    float** rows = s.row_ptrs.data() + begin;
    bool* found = s.found.data() + begin;
    if (training) {
      tables_[t]->find_or_insert_pointers(count, keys, rows, found, nullptr, stream);
    } else {
      tables_[t]->find_pointers(count, keys, rows, found, nullptr, stream);
    }
    uint64_t* counters = s.table_counters.data() + t * kPerTable;
    float* fallback = s.fallback.rows.data() + begin * stride;
    detail::resolve_missing_rows(*s.ops, count, rows, s.missing.data() + begin, fallback, stride,
                                 training ? found : nullptr,
                                 training ? counters + kRowsCreated : nullptr,
                                 training ? nullptr : counters + kEvalMisses, stream);
  }
  if (stride != 0) {
    s.ops->fill_initial_rows(u, s.unique_keys.data(), s.missing.data(), true, o.eval_initializer,
                             s.fallback.rows.data(), o.dim, o.dim, stream);
  }
}

template <TableKey K>
void EmbeddingCollection<K>::backward(const float* grad, uint32_t grad_stride,
                                      StreamHandle stream) {
  Step& s = *step_;
  constexpr const char* where = "EmbeddingCollection::backward";
  require(s.pending_backward, where, "state", "no pending training forward",
          "backward must follow a forward with training = true, once");
  const EmbeddingOptions& o = options_.front();
  const size_t u = s.num_unique;
  const LookupFeature feature = s.feature(o.dim, row_dim_);
  const LookupOutput grads{const_cast<float*>(grad), grad_stride};
  detail::validate_lookup_shape(where, {&feature, 1}, {&grads, 1}, "grad");
  s.pending_backward = false;
  if (o.gradient_check != SafeCheck::kError) {
    detail::reduce_and_optimize_row_ptrs(*s.ops, o.optimizer, feature, s.groups(), grads,
                                         s.row_ptrs.data(), s.missing.data(),
                                         s.words.data() + kNonfinite, *s.workspace, stream);
    if (s.ops->memory_is_host()) {
      s.nonfinite_report.update(s.words.data()[kNonfinite], o.gradient_check, where);
    }
    stage_done("reduce+optimizer");
    return;
  }
  // gradient_check = ERROR: every gradient is checked before any row changes (one
  // synchronization).
  const int device = o.table.device;
  ensure_buffer(s.row_grads, backend_, u * o.dim, device);
  ensure_buffer(s.flags, backend_, u, device);
  detail::reduce_gradients_grouped(*s.ops, feature, s.groups(), grads, {s.row_grads.data(), o.dim},
                                   stream);
  stage_done("reduce");
  const size_t bad =
      s.ops->flag_nonfinite_rows(u, s.row_grads.data(), o.dim, o.dim, s.flags.data(), stream);
  if (bad > 0) {
    nonfinite_refused_ += bad;
    throw InvalidArgument(std::string(where) + ": grad holds NaN or Inf for " +
                          std::to_string(bad) + " of " + std::to_string(u) +
                          " keys; gradient_check = error, no row was changed");
  }
  s.ops->apply_optimizer_row_ptrs(o.optimizer, u, s.row_ptrs.data(), s.row_grads.data(), o.dim,
                                  o.dim, s.missing.data(), nullptr, stream);
  stage_done("optimizer");
}

template <TableKey K>
size_t EmbeddingCollection<K>::end_step() {
  size_t expired = 0;
  for (size_t t = 0; t < tables_.size(); ++t) {
    const size_t e = detail::expire_rows(*tables_[t], options_[t]);
    stats_[t].expired += e;
    expired += e;
    tables_[t]->advance_step();
  }
  return expired;
}

template <TableKey K>
EmbeddingCollectionStats EmbeddingCollection<K>::stats() const {
  const Step& s = *step_;
  const size_t n = tables_.size();
  std::vector<uint64_t> counters(n * kPerTable);
  uint64_t words[kWords];
  backend_synchronize(backend_);
  detail::read_words(*s.ops, s.table_counters.data(), n * kPerTable, counters.data(), nullptr);
  detail::read_words(*s.ops, s.words.data(), kWords, words, nullptr);
  EmbeddingCollectionStats out;
  out.tables = stats_;
  out.nonfinite_gradients = words[kNonfinite] + nonfinite_refused_;
  for (size_t t = 0; t < n; ++t) {
    out.tables[t].rows_created += counters[t * kPerTable + kRowsCreated];
    out.tables[t].eval_misses += counters[t * kPerTable + kEvalMisses];
    out.tables[t].table = tables_[t]->stats();
  }
  return out;
}

template class EmbeddingCollection<int64_t>;
template class EmbeddingCollection<uint64_t>;

}  // namespace dynemb

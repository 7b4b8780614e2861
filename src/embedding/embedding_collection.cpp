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
#include "training_step.hpp"

namespace dynemb {
namespace {

using embedding::detail::ensure_buffer;

constexpr const char* kForward = "EmbeddingCollection::forward";

// Words read back with the dedup: combine_table_keys' status, then the step's nonfinite count, a
// host-sync-free step's unique count and the batches such steps refused.
enum Word : size_t {
  kNonfinite = ops::detail::kTableKeyStatusWords,
  kUniqueCount,
  kRefused,
  kWords
};
// Counts each table keeps in backend memory, kPerTable words a table.
enum TableCounter : size_t { kRowsCreated, kEvalMisses, kLookups, kUniqueLookups, kPerTable };

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
    require(o.value_type == first.value_type &&
                o.stochastic_rounding == first.stochastic_rounding &&
                o.state_in_value_type == first.state_in_value_type,
            w, table_field(t, "value_type").c_str(), to_string(o.value_type),
            "must equal tables[0].value_type = " + to_string(first.value_type) +
                " (and its stochastic_rounding and state_in_value_type)");
    require(o.output_type == first.output_type, w, table_field(t, "output_type").c_str(),
            to_string(o.output_type),
            "must equal tables[0].output_type = " + to_string(first.output_type));
    require(o.deterministic_backward == first.deterministic_backward, w,
            table_field(t, "deterministic_backward").c_str(),
            o.deterministic_backward ? "true" : "false",
            "must equal tables[0].deterministic_backward");
    require(o.align_rows == first.align_rows, w, table_field(t, "align_rows").c_str(),
            o.align_rows ? "true" : "false", "must equal tables[0].align_rows");
    require(o.table.device == first.table.device, w, table_field(t, "table.device").c_str(),
            std::to_string(o.table.device),
            "must equal tables[0].table.device = " + std::to_string(first.table.device));
  }
}

}  // namespace

// The shared pipeline (training_step.hpp) with the combined batch and each table's counters.
template <TableKey K>
struct EmbeddingCollection<K>::Step {
  Step(Backend backend, int device) : pipeline(backend, device) {}

  embedding::detail::TrainingStep<K> pipeline;  // unique_keys: without their table bits
  BackendBuffer<uint64_t> combined_keys, unique_combined;
  BackendBuffer<uint64_t> bounds;          // num_tables + 1
  BackendBuffer<uint64_t> words;           // Word
  BackendBuffer<uint64_t> table_counters;  // kPerTable a table
  std::vector<embedding::detail::StepTable<K>> tables;
  std::vector<uint64_t> host_bounds;
  std::vector<size_t> ids_of;  // each table's ids, this step
  // The host-sync-free step: each table's first id (uploaded when the tables' ids change), its
  // unique count, the unique keys and the tables' answers in the padded layout (table_keys.hpp).
  BackendBuffer<uint64_t> id_base, counts, padded_keys;
  BackendBuffer<float*> padded_rows;
  std::vector<uint64_t> host_id_base;
  std::unique_ptr<ops::detail::StreamFan> fan;  // the tables' lookup streams (made on first use)
};

template <TableKey K>
EmbeddingCollection<K>::EmbeddingCollection(Backend backend, std::vector<EmbeddingOptions> tables)
    : EmbeddingCollection(backend, std::move(tables), TableFactory<K>{}) {}

template <TableKey K>
EmbeddingCollection<K>::EmbeddingCollection(Backend backend, std::vector<EmbeddingOptions> tables,
                                            const TableFactory<K>& make)
    : backend_(backend), options_(std::move(tables)) {
  validate_collection(options_);
  for (EmbeddingOptions& o : options_) o = embedding::detail::with_value_type(o);
  const size_t n = options_.size();
  row_dim_ = embedding_row_dim(options_.front());
  table_bits_ = n == 1 ? 0 : static_cast<uint32_t>(std::bit_width(n - 1));
  for (const EmbeddingOptions& o : options_) {
    const TableOptions t = embedding::detail::embedding_table_options(o);
    tables_.push_back(make ? make(backend, t) : make_table<K>(backend, t));
    require(tables_.back() != nullptr && tables_.back()->dim() == t.dim, "EmbeddingCollection",
            "make_table(...)->dim()",
            tables_.back() ? std::to_string(tables_.back()->dim()) : "no table",
            "must be the row_dim " + std::to_string(t.dim));
  }
  stats_.resize(n);
  const int device = options_.front().table.device;
  step_ = std::make_unique<Step>(backend, device);
  Step& s = *step_;
  s.pipeline.value_type = options_.front().value_type;
  s.words = BackendBuffer<uint64_t>(backend, kWords, device);
  s.table_counters = BackendBuffer<uint64_t>(backend, n * kPerTable, device);
  s.bounds = BackendBuffer<uint64_t>(backend, n + 1, device);
  s.id_base = BackendBuffer<uint64_t>(backend, n + 1, device);
  s.counts = BackendBuffer<uint64_t>(backend, n, device);
  s.host_bounds.resize(n + 1);
  for (size_t t = 0; t < n; ++t) {
    uint64_t* counters = s.table_counters.data() + t * kPerTable;
    s.tables.push_back({tables_[t].get(), counters + kRowsCreated, counters + kEvalMisses});
  }
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
  embedding::detail::TrainingStep<K>& p = s.pipeline;
  backend_zero(backend_, s.words.data(), ops::detail::kTableKeyStatusWords * sizeof(uint64_t),
               stream);
  uint64_t base = 0, bag_base = 0;
  for (size_t t = 0; t < batches.size(); ++t) {
    const EmbeddingBatch<K>& b = batches[t];
    ops::detail::combine_table_keys<K>(
        p.ops, static_cast<uint32_t>(t), shift, b.num_ids, b.keys, b.offsets, b.num_bags, base,
        bag_base, s.combined_keys.data(), p.offsets.data(), s.words.data(), stream);
    if (p.weighted && b.num_ids > 0) {
      copy_within_backend(backend_, p.weights.data() + base, b.weights, b.num_ids * sizeof(float),
                          stream);
    }
    base += b.num_ids;
    bag_base += b.num_bags;
  }
  if (p.num_bags == 0) backend_zero(backend_, p.offsets.data(), sizeof(int64_t), stream);
  size_t u = 0;
  try {
    u = ops::detail::dedup_grouped<uint64_t>(
        p.ops, p.num_ids, s.combined_keys.data(), s.unique_combined.data(), p.inverse.data(),
        p.grouped_ids(), p.row_begin.data(), p.has_bag_by_row ? p.bag_by_row.data() : nullptr,
        p.offsets.data(), p.num_bags, kForward, {s.words.data(), kWords, words}, *p.workspace,
        stream);
  } catch (const InvalidArgument&) {
    // The combined offsets failed their check: name the table whose own offsets are bad.
    ops::detail::read_words(p.ops, s.words.data(), kWords, words, stream);
    throw_if_bad_table(words);
    throw;
  }
  throw_if_bad_table(words);
  return u;
}

template <TableKey K>
void EmbeddingCollection<K>::throw_if_bad_table(const uint64_t* words) const {
  const uint64_t flag = words[ops::detail::kBadTableFlag];
  if (flag == 0) return;
  const uint64_t t = ~uint64_t{0} - flag;
  throw InvalidArgument(std::string(kForward) + ": batches[" + std::to_string(t) +
                        "].offsets must start at 0, never decrease and end at num_ids = " +
                        std::to_string(step_->ids_of[t]) + "; no table was changed");
}

template <TableKey K>
void EmbeddingCollection<K>::forward(std::span<const EmbeddingBatch<K>> batches, float* out,
                                     uint32_t out_stride, bool training, StreamHandle stream) {
  Step& s = *step_;
  embedding::detail::TrainingStep<K>& p = s.pipeline;
  const size_t num_tables = tables_.size();
  require(batches.size() == num_tables, kForward, "batches",
          std::to_string(batches.size()) + " batches",
          "must hold one batch per table (" + std::to_string(num_tables) + ")");
  p.pending_backward = false;
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
  p.begin(n, bags, batches[0].mode, weighted, training);  // every batch's mode (checked above)
  if (sync_free_ && training && options_.front().gradient_check != SafeCheck::kError &&
      (seen_keys_ || sync_free_key_bits_ != 0)) {
    forward_sync_free(batches, {out, out_stride, options_.front().output_type}, stream);
    return;
  }

  // One dedup over every table's keys, each table's index in the bits above `shift`: the bit
  // width of the keys seen so far (all 64 bits' worth before the first step). A batch with a
  // wider key is combined and deduplicated again (a second synchronization, only then).
  const uint32_t id_bits = 64 - table_bits_;
  uint32_t shift = table_bits_ == 0 ? 64 : (seen_keys_ ? key_width_ : id_bits);
  uint64_t words[kWords];
  size_t u = combine_and_dedup(batches, shift, words, stream);
  const uint32_t width = static_cast<uint32_t>(std::bit_width(words[ops::detail::kKeyBitsSeen]));
  if (table_bits_ > 0) {
    require(width <= id_bits, kForward, "batches[*].keys",
            "a key of " + std::to_string(width) + " bits",
            "must fit in " + std::to_string(id_bits) + " bits with " + std::to_string(num_tables) +
                " tables (the table's index takes the bits above); no table was changed");
  }
  if (n > 0) {
    key_width_ = seen_keys_ ? std::max(key_width_, width) : width;
    seen_keys_ = true;
  }
  if (table_bits_ > 0) {
    if (width > shift) {
      shift = key_width_;
      u = combine_and_dedup(batches, shift, words, stream);
    }
  }
  p.report_nonfinite(words[kNonfinite], options_.front().gradient_check,
                     "EmbeddingCollection::backward");
  stage_done("dedup");
  ops::detail::split_table_keys<K>(p.ops, u, s.unique_combined.data(),
                                   static_cast<uint32_t>(num_tables), shift, p.unique_keys.data(),
                                   s.bounds.data(), stream);
  ops::detail::read_words(p.ops, s.bounds.data(), num_tables + 1, s.host_bounds.data(), stream);

  const LookupOutput output{out, out_stride, options_.front().output_type};
  const LookupFeature feature =
      p.prepare_rows(u, true, options_.front().dim, row_dim_, output, kForward, "out");
  p.lookup_by_address(s.tables, s.host_bounds.data(), options_.front(), training, stream);
  stage_done("lookup");
  p.pool(feature, output, training, stream);
  stage_done("pool");
  for (size_t t = 0; t < num_tables; ++t) {
    stats_[t].lookups += s.ids_of[t];
    stats_[t].unique_lookups += s.host_bounds[t + 1] - s.host_bounds[t];
  }
}

template <TableKey K>
void EmbeddingCollection<K>::set_host_sync_free(bool on, uint32_t key_bits,
                                                uint32_t lookup_streams) {
  constexpr const char* w = "EmbeddingCollection::set_host_sync_free";
  const uint32_t id_bits = 64 - table_bits_;
  require(key_bits <= id_bits, w, "key_bits", std::to_string(key_bits),
          "must be <= " + std::to_string(id_bits) + " with " + std::to_string(tables_.size()) +
              " tables (the table's index takes the bits above)");
  require(lookup_streams >= 1 && lookup_streams <= 64, w, "lookup_streams",
          std::to_string(lookup_streams), "must be in [1, 64]");
  sync_free_ = on;
  sync_free_key_bits_ = key_bits;
  if (lookup_streams != lookup_streams_) step_->fan.reset();
  lookup_streams_ = lookup_streams;
}

template <TableKey K>
void EmbeddingCollection<K>::forward_sync_free(std::span<const EmbeddingBatch<K>> batches,
                                               const LookupOutput& output, StreamHandle stream) {
  Step& s = *step_;
  embedding::detail::TrainingStep<K>& p = s.pipeline;
  const EmbeddingOptions& o = options_.front();
  const size_t num_tables = tables_.size();
  const size_t n = p.num_ids;
  const int device = o.table.device;
  // Keys of at most `width` bits, the table's index above them: the sort covers both.
  const uint32_t width = std::max<uint32_t>(
      1, sync_free_key_bits_ != 0 ? sync_free_key_bits_ : std::max<uint32_t>(key_width_, 1));
  const uint32_t shift = table_bits_ == 0 ? 64 : width;
  const int end_bit = static_cast<int>(std::min<uint32_t>(64, width + table_bits_));

  // Each table's first id: fixed while the batches keep their sizes (a new layout is uploaded
  // once the device is idle, before any of this step's work).
  std::vector<uint64_t> id_base(num_tables + 1, 0);
  for (size_t t = 0; t < num_tables; ++t) id_base[t + 1] = id_base[t] + s.ids_of[t];
  if (id_base != s.host_id_base) {
    backend_synchronize(backend_);
    copy_to_backend(backend_, s.id_base.data(), id_base.data(), id_base.size() * sizeof(uint64_t));
    s.host_id_base = id_base;
  }
  ensure_buffer(s.padded_keys, backend_, n, device);
  ensure_buffer(s.padded_rows, backend_, n, device);
  ensure_buffer(p.found, backend_, n, device);
  ensure_buffer(p.missing, backend_, n, device);

  backend_zero(backend_, s.words.data(), ops::detail::kTableKeyStatusWords * sizeof(uint64_t),
               stream);
  // Keys and table bits that fit in 32 bits: every table combined in one pass straight into the
  // dedup's narrow keys and bags (where the backend has that pass), else table by table, then the
  // dedup's status pass.
  bool narrow = false;
  if (end_bit <= 32 && num_tables <= ops::detail::kMaxNarrowTables) {
    std::vector<ops::detail::TableBatch> parts(num_tables);
    for (size_t t = 0; t < num_tables; ++t) {
      const EmbeddingBatch<K>& b = batches[t];
      parts[t] = {reinterpret_cast<const uint64_t*>(b.keys), b.offsets, b.num_ids, b.num_bags};
    }
    narrow =
        ops::detail::combine_tables_narrow(p.ops, parts, shift, p.has_bag_by_row, p.offsets.data(),
                                           s.words.data(), *p.workspace, stream);
  }
  uint64_t bag_base = 0;
  for (size_t t = 0; t < num_tables; ++t) {
    const EmbeddingBatch<K>& b = batches[t];
    if (!narrow) {
      ops::detail::combine_table_keys<K>(
          p.ops, static_cast<uint32_t>(t), shift, b.num_ids, b.keys, b.offsets, b.num_bags,
          id_base[t], bag_base, s.combined_keys.data(), p.offsets.data(), s.words.data(), stream);
    }
    if (p.weighted && b.num_ids > 0) {
      copy_within_backend(backend_, p.weights.data() + id_base[t], b.weights,
                          b.num_ids * sizeof(float), stream);
    }
    bag_base += b.num_bags;
  }
  if (p.num_bags == 0) backend_zero(backend_, p.offsets.data(), sizeof(int64_t), stream);
  uint64_t* unique_count = s.words.data() + kUniqueCount;
  ops::detail::dedup_grouped_async(
      p.ops, n, narrow ? nullptr : s.combined_keys.data(), s.unique_combined.data(),
      p.inverse.data(), p.grouped_ids(), p.row_begin.data(),
      p.has_bag_by_row ? p.bag_by_row.data() : nullptr, p.offsets.data(), p.num_bags, end_bit,
      unique_count, *p.workspace, stream);
  stage_done("dedup");

  ops::detail::TableSpread spread;
  spread.n = n;
  spread.num_tables = static_cast<uint32_t>(num_tables);
  spread.shift = shift;
  spread.key_limit = width;
  spread.unique_count = unique_count;
  spread.status = s.words.data();
  spread.unique_combined = s.unique_combined.data();
  spread.combined_keys = s.combined_keys.data();
  spread.id_base = s.id_base.data();
  spread.bounds = s.bounds.data();
  spread.counts = s.counts.data();
  // The keys' bits: K is a 64-bit integer, stored as its bit pattern.
  spread.keys = reinterpret_cast<uint64_t*>(p.unique_keys.data());
  spread.padded_keys = s.padded_keys.data();
  spread.counters = s.table_counters.data();
  spread.counter_stride = kPerTable;
  spread.lookups_index = kLookups;
  spread.unique_index = kUniqueLookups;
  spread.refused = s.words.data() + kRefused;
  ops::detail::spread_table_keys(p.ops, spread, stream);

  // Every row of the bound n: the unique rows first, then empty padding.
  p.prepare_rows(n, true, o.dim, row_dim_, output, kForward, "out");
  p.live_rows = unique_count;
  const K* padded_keys = reinterpret_cast<const K*>(s.padded_keys.data());
  // Captured into a graph, the tables look up their keys side by side: each on a side stream
  // forked from `stream` and joined back (parallel branches). Issued eagerly, the host is what
  // bounds the tables' calls, and the fork and join would only add to its work.
  const size_t side = p.ops.capturing(stream) ? std::min<size_t>(lookup_streams_, num_tables) : 1;
  if (side > 1 && s.fan == nullptr) s.fan = p.ops.make_stream_fan(side, device);
  ops::detail::StreamFan* fan = side > 1 && s.fan->size() > 0 ? s.fan.get() : nullptr;
  if (fan != nullptr) fan->fork(stream);
  for (size_t t = 0; t < num_tables; ++t) {
    if (s.ids_of[t] == 0) continue;
    const StreamHandle table_stream = fan != nullptr ? fan->stream(t % fan->size()) : stream;
    tables_[t]->find_or_insert_pointers_counted(
        s.ids_of[t], s.counts.data() + t, padded_keys + id_base[t],
        s.padded_rows.data() + id_base[t], p.found.data() + id_base[t], table_stream);
  }
  if (fan != nullptr) fan->join(stream);
  const uint32_t words = value_words(o.value_type, o.dim);
  const uint32_t stride =
      p.fallback.prepare(backend_, o.eval_initializer, words, n, device, stream);
  ops::detail::TableRows rows;
  rows.padded_rows = s.padded_rows.data();
  rows.padded_founds = p.found.data();
  rows.fallback = p.fallback.rows.data();
  rows.fallback_stride = stride;
  rows.rows = p.row_ptrs.data();
  rows.missing = p.missing.data();
  rows.row_begin = p.row_begin.data();
  rows.counters = s.table_counters.data();
  rows.counter_stride = kPerTable;
  rows.created_index = kRowsCreated;
  rows.missing_index = kEvalMisses;
  rows.training = true;
  // The deterministic fused backward reads rows [0, u) only (live_rows); the unordered one and
  // the one of rows wider than kFusedMaxDim update every row of the bound, so their padding needs
  // the fallback address and the missing flag.
  rows.padding_rows = !o.deterministic_backward || o.dim > ops::detail::kFusedMaxDim;
  ops::detail::gather_table_rows(p.ops, spread, rows, stream);
  if (stride != 0) {
    p.ops.fill_initial_rows(n, p.unique_keys.data(), p.missing.data(), true, o.eval_initializer,
                            p.fallback.rows.data(), words, words, stream);
  }
  stage_done("lookup");
  p.pool(p.feature(o.dim, row_dim_), output, true, stream);
  stage_done("pool");
  // The counts are the device's (a replayed graph adds them too).
}

template <TableKey K>
void EmbeddingCollection<K>::backward(const float* grad, uint32_t grad_stride,
                                      StreamHandle stream) {
  Step& s = *step_;
  const EmbeddingOptions& o = options_.front();
  const embedding::detail::BackwardSettings settings{
      "EmbeddingCollection::backward", o.optimizer,        o.gradient_check,
      s.words.data() + kNonfinite,     nonfinite_refused_, observer_,
      o.deterministic_backward,        o.output_type};
  s.pipeline.backward(grad, grad_stride, o.dim, row_dim_, settings, stream);
}

template <TableKey K>
size_t EmbeddingCollection<K>::end_step() {
  size_t expired = 0;
  for (size_t t = 0; t < tables_.size(); ++t) {
    const size_t e = embedding::detail::expire_rows(*tables_[t], options_[t]);
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
  ops::detail::read_words(s.pipeline.ops, s.table_counters.data(), n * kPerTable, counters.data(),
                          nullptr);
  ops::detail::read_words(s.pipeline.ops, s.words.data(), kWords, words, nullptr);
  EmbeddingCollectionStats out;
  out.tables = stats_;
  out.nonfinite_gradients = words[kNonfinite] + nonfinite_refused_;
  out.refused_batches = words[kRefused];
  for (size_t t = 0; t < n; ++t) {
    out.tables[t].rows_created += counters[t * kPerTable + kRowsCreated];
    out.tables[t].eval_misses += counters[t * kPerTable + kEvalMisses];
    out.tables[t].lookups += counters[t * kPerTable + kLookups];
    out.tables[t].unique_lookups += counters[t * kPerTable + kUniqueLookups];
    out.tables[t].table = tables_[t]->stats();
  }
  return out;
}

template class EmbeddingCollection<int64_t>;
template class EmbeddingCollection<uint64_t>;

}  // namespace dynemb

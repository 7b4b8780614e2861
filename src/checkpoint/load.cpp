// Load: check the manifest against the targets and the files against the manifest, then
// stream every needed shard into the tables (re-routing keys when the rank count changed).
#include <algorithm>
#include <cstring>

#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/core/log.hpp"
#include "shard_reader.hpp"
#include "table_view.hpp"
#include "two_stage.hpp"

namespace dynemb::checkpoint {
namespace {

// What loading one target involves, decided before any table is touched.
struct Plan {
  const NamedTable* target = nullptr;
  const TableEntry* entry = nullptr;
  bool load_state = false;      // rows get the checkpoint's optimizer state
  bool keep_state = false;      // rows keep their current state (new rows: 0)
  bool restore_scores = false;  // same score policy
  bool was_empty = false;
};

// The shards this rank reads, and whether their keys must be filtered by routing.
struct ShardChoice {
  std::vector<const ShardEntry*> shards;
  bool filter = false;
};

ShardChoice choose_shards(const Manifest& m, const TableEntry& t, const LoadOptions& o) {
  ShardChoice c;
  if (m.world_size == o.world_size && !o.owner) {
    c.shards.push_back(&t.shards[o.rank]);
  } else {
    for (const ShardEntry& s : t.shards) c.shards.push_back(&s);
    c.filter = true;
  }
  return c;
}

template <TableKey K>
Plan plan_table(const NamedTable& target, const Manifest& m, const LoadOptions& o,
                const detail::TableView<K>& v, LoadReport& report) {
  Plan p;
  p.target = &target;
  const auto it = std::find_if(m.tables.begin(), m.tables.end(),
                               [&](const TableEntry& t) { return t.name == target.name; });
  if (it == m.tables.end()) {
    std::string names;
    for (const TableEntry& t : m.tables) names += (names.empty() ? "" : ", ") + t.name;
    throw CheckpointError("table \"" + target.name + "\" is not in the checkpoint (it holds: " +
                          (names.empty() ? "no tables" : names) + ")");
  }
  p.entry = &*it;
  const TableEntry& t = *it;
  if (t.key_dtype != detail::key_dtype<K>()) {
    throw CheckpointError("table \"" + t.name + "\": the checkpoint's keys are " +
                          to_string(t.key_dtype) + ", the target's are " +
                          to_string(detail::key_dtype<K>()));
  }
  if (t.dim != v.dim) {
    throw CheckpointError("table \"" + t.name + "\": the checkpoint's dim is " +
                          std::to_string(t.dim) + ", the target's is " + std::to_string(v.dim));
  }
  const ValueType file_type = value_type_of(t.value_dtype);
  if (file_type != v.value_type && !o.convert_value_type) {
    throw CheckpointError("table \"" + t.name + "\": the checkpoint's rows are " +
                          to_string(file_type) + ", the target's are " + to_string(v.value_type) +
                          "; set LoadOptions::convert_value_type to convert them (rounded to "
                          "nearest even)");
  }
  const std::string policy = to_string(v.table->options().score_policy);
  p.restore_scores = policy == t.score_policy;
  if (!p.restore_scores) {
    warn("checkpoint load: table \"" + t.name + "\" was dumped with score policy " +
         t.score_policy + ", the target uses " + policy +
         "; its scores are not restored (rows get the target's own scores)");
  }
  if (v.state_dim > 0) {
    // Across value types the state's padding (align_rows) may differ; the optimizer's own state
    // (its kind and dim's) is the same.
    const bool same_optimizer =
        t.optimizer == v.optimizer && (t.optimizer_state_dim == v.state_dim ||
                                       (file_type != v.value_type && !t.optimizer.empty()));
    p.load_state = o.optimizer_state && t.has_optimizer_state && same_optimizer;
    p.keep_state = !p.load_state;
    if (!p.load_state) report.state_skipped.push_back(t.name);
    if (o.optimizer_state && t.has_optimizer_state && !same_optimizer) {
      warn("checkpoint load: table \"" + t.name + "\" was dumped with optimizer " +
           (t.optimizer.empty() ? std::string("none") : t.optimizer) + " (" +
           std::to_string(t.optimizer_state_dim) + " state floats), the target uses " +
           v.optimizer + " (" + std::to_string(v.state_dim) +
           "); its optimizer state is skipped (new rows start at 0, existing rows keep theirs)");
    }
  }
  p.was_empty = v.table->size() == 0;
  return p;
}

// Writes `dim` embedding elements of `from` (type from_type) to `to` (type to_type): copied, or
// converted through float32 (rounded to nearest even; an odd dim's unused half 0).
void copy_embedding(const float* from, ValueType from_type, float* to, ValueType to_type,
                    uint32_t dim) {
  if (from_type == to_type) {
    std::memcpy(to, from, value_words(to_type, dim) * sizeof(float));
    return;
  }
  if (to_type != ValueType::kFloat32 && dim % 2 == 1) to[dim / 2] = 0.0f;
  for (uint32_t j = 0; j < dim; ++j) store_value(to_type, to, j, load_value(from_type, from, j));
}

// Streams one shard into the target.
template <TableKey K>
void load_shard(const detail::TableView<K>& v, const Plan& p, const Manifest& m,
                const ShardEntry& shard, bool filter, CheckpointSource& source,
                const LoadOptions& o, uint64_t now_ns, LoadReport& report) {
  Table<K>& table = *v.table;
  const TableEntry& t = *p.entry;
  const uint32_t row_dim = table.dim();
  const uint64_t chunk = std::max<uint64_t>(1, o.chunk_rows);
  ShardReader reader(source, t, shard, m.world_size, p.load_state);
  // Two chunk buffers: one is read (and filtered) while the other is inserted.
  struct Chunk {
    std::vector<uint64_t> key_bits, scores;
    detail::HostMirror<K> keys;
    detail::HostMirror<float> rows;
    detail::HostMirror<uint64_t> row_scores;
    std::vector<float> values;  // rows that keep their state are read aside (find() fills rows)
    size_t kept = 0;
    Chunk(Backend b, int dev, uint64_t chunk, uint32_t row_dim, size_t values_floats)
        : key_bits(chunk),
          scores(chunk),
          keys(b, chunk, dev),
          rows(b, chunk * row_dim, dev),
          row_scores(b, chunk, dev),
          values(values_floats) {}
  };
  // Rows are read aside (values) when they keep their state or change value type: in the file's
  // layout (its embedding words, then the state when loaded), then put into the table's.
  const ValueType file_type = value_type_of(t.value_dtype);
  const uint32_t file_words = value_words(file_type, t.dim);
  const uint32_t state_words = p.load_state ? t.optimizer_state_dim : 0;
  const bool staged = p.keep_state || file_type != v.value_type;
  const size_t read_stride = staged ? file_words + state_words : row_dim;
  const size_t values_floats = staged ? chunk * read_stride : 0;
  const int dev = table.options().device;  // the table's kernels read and write these buffers
  Chunk chunks[2] = {{table.backend(), dev, chunk, row_dim, values_floats},
                     {table.backend(), dev, chunk, row_dim, values_floats}};
  detail::HostMirror<bool> founds(table.backend(), p.keep_state ? chunk : 0, dev);
  BackendBuffer<K> evicted(table.backend(), chunk, dev);
  const bool timestamp = t.score_policy == "timestamp";
  detail::run_two_stage(
      [&](unsigned slot) {  // read the next chunk that has rows for this rank
        Chunk& c = chunks[slot];
        float* const read_to = staged ? c.values.data() : c.rows.host();
        for (c.kept = 0; c.kept == 0 && reader.remaining() > 0;) {
          const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, reader.remaining()));
          reader.read(n, c.key_bits.data(), read_to, read_stride, c.scores.data());
          report.rows_read += n;
          c.kept = n;
          if (filter) {  // keep this rank's rows, compacted in place
            c.kept = 0;
            for (size_t i = 0; i < n; ++i) {
              const uint32_t owner = o.owner ? o.owner(t.name, c.key_bits[i])
                                             : rank_of_key_bits(c.key_bits[i], o.world_size);
              if (owner != o.rank) continue;
              if (c.kept != i) {
                c.key_bits[c.kept] = c.key_bits[i];
                c.scores[c.kept] = c.scores[i];
                std::memmove(read_to + c.kept * read_stride, read_to + i * read_stride,
                             read_stride * sizeof(float));
              }
              ++c.kept;
            }
          }
        }
        if (c.kept == 0) return false;
        K* k = c.keys.host();
        uint64_t* s = c.row_scores.host();
        for (size_t i = 0; i < c.kept; ++i) {
          k[i] = static_cast<K>(c.key_bits[i]);
          if (timestamp) {
            // Restored as an age: the same distance before now as before the dump.
            const uint64_t age = m.dump_time_ns > c.scores[i] ? m.dump_time_ns - c.scores[i] : 0;
            s[i] = now_ns > age ? now_ns - age : 0;
          } else {
            s[i] = c.scores[i];
          }
        }
        return true;
      },
      [&](unsigned slot) {  // insert it
        Chunk& c = chunks[slot];
        const size_t kept = c.kept;
        c.keys.upload(kept);
        c.row_scores.upload(kept);
        float* r = c.rows.host();
        if (p.keep_state) {
          // Existing rows keep their optimizer state, new rows start at 0.
          std::fill(r, r + kept * row_dim, 0.0f);
          c.rows.upload(kept * row_dim);
          table.find(kept, c.keys.table_ptr(), c.rows.table_ptr(), founds.table_ptr(), nullptr);
          c.rows.download(kept * row_dim);
        }
        if (staged) {
          for (size_t i = 0; i < kept; ++i) {
            const float* src = &c.values[i * read_stride];
            float* dst = r + i * row_dim;
            copy_embedding(src, file_type, dst, v.value_type, t.dim);
            if (state_words > 0) {
              const uint32_t common = std::min(state_words, v.state_dim);
              std::memcpy(dst + v.embedding_words, src + file_words, common * sizeof(float));
              std::fill(dst + v.embedding_words + common, dst + v.embedding_words + v.state_dim,
                        0.0f);
            }
          }
        }
        c.rows.upload(kept * row_dim);
        report.rows_dropped +=
            table.insert_and_evict(kept, c.keys.table_ptr(), c.rows.table_ptr(),
                                   c.row_scores.table_ptr(), evicted.data(), nullptr, nullptr);
        if (p.restore_scores) {
          table.assign_scores(kept, c.keys.table_ptr(), c.row_scores.table_ptr());
        }
        report.rows_loaded += kept;
      });
  reader.finish();
  report.bytes_read += shard.keys.bytes + shard.values.bytes + shard.scores.bytes +
                       (p.load_state && shard.optimizer_state ? shard.optimizer_state->bytes : 0);
}

// Checks every file this load reads: presence, size and header always; payload CRCs too when
// `checksums`.
void precheck_files(CheckpointSource& source, const Manifest& m, const std::vector<Plan>& plans,
                    const LoadOptions& o, bool checksums) {
  std::vector<std::string> names;
  for (const Plan& p : plans) names.push_back(p.entry->name);
  if (!names.empty()) check_file_sizes(source, m, names);  // every rank's files: present, sized
  std::vector<std::function<void()>> checks;
  for (const Plan& p : plans) {
    for (const ShardEntry* shard : choose_shards(m, *p.entry, o).shards) {
      std::vector<FileContent> contents{FileContent::kKeys, FileContent::kValues,
                                        FileContent::kScores};
      if (p.load_state) contents.push_back(FileContent::kOptimizerState);
      for (FileContent c : contents) {
        checks.push_back([&source, &m, entry = p.entry, shard, c, checksums] {
          CheckedFile file(source, *entry, *shard, c, m.world_size);
          if (checksums) file.verify_rest();
        });
      }
    }
  }
  verify_in_parallel(std::move(checks));
}

void clear_target(const NamedTable& t) {
  detail::visit_view(t, [](const auto& v) { v.table->clear(); });
}

}  // namespace

LoadReport load(const std::filesystem::path& path, const std::vector<NamedTable>& tables,
                const LoadOptions& o) {
  require(o.world_size >= 1, "checkpoint load", "world_size", std::to_string(o.world_size), ">= 1");
  require(o.rank < o.world_size, "checkpoint load", "rank", std::to_string(o.rank),
          "< world_size = " + std::to_string(o.world_size));
  require(o.chunk_rows >= 1, "checkpoint load", "chunk_rows", std::to_string(o.chunk_rows), ">= 1");
  require(o.verify == VerifyMode::kBeforeLoading || o.verify == VerifyMode::kWhileLoading,
          "checkpoint load", "verify", std::to_string(static_cast<int>(o.verify)),
          "kBeforeLoading or kWhileLoading");
  for (const std::string& want : o.only) {
    const bool given = std::any_of(tables.begin(), tables.end(),
                                   [&](const NamedTable& t) { return t.name == want; });
    require(given, "checkpoint load", "only", "\"" + want + "\"", "a name among the tables given");
  }
  const std::string where = path.string() + ": ";
  LoadReport report;
  try {
    auto source = open_directory(path, o.direct_io);
    const Manifest m = manifest_from_json(source->read_manifest(), (path / kManifestName).string());
    std::vector<Plan> plans;
    for (const NamedTable& t : tables) {
      if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), t.name) == o.only.end()) {
        continue;
      }
      plans.push_back(
          detail::visit_view(t, [&](const auto& v) { return plan_table(t, m, o, v, report); }));
    }
    const bool all_empty =
        std::all_of(plans.begin(), plans.end(), [](const Plan& p) { return p.was_empty; });
    const bool verify_first = o.verify == VerifyMode::kBeforeLoading || !all_empty;
    report.verified_first = verify_first;
    precheck_files(*source, m, plans, o, verify_first);

    const uint64_t now_ns = host_now_ns();
    try {
      for (const Plan& p : plans) {
        detail::visit_view(*p.target, [&](const auto& v) {
          if (o.replace && !m.delta) v.table->clear();
          const ShardChoice c = choose_shards(m, *p.entry, o);
          for (const ShardEntry* shard : c.shards) {
            load_shard(v, p, m, *shard, c.filter, *source, o, now_ns, report);
          }
          if (o.restore_clock && p.restore_scores &&
              (p.entry->score_policy == "step" || p.entry->score_policy == "customized")) {
            v.table->set_score(p.entry->score);
          }
        });
      }
    } catch (const CheckpointError&) {
      // Without verify_first every target was empty: empty them again. (With it, only a file
      // changed between the check and the load gets here.)
      if (!verify_first) {
        for (const Plan& p : plans) clear_target(*p.target);
      }
      throw;
    }
  } catch (const CheckpointError& e) {
    throw CheckpointError(where + e.what());
  }
  return report;
}

template <TableKey K>
DeltaRows<K> incremental_dump(Table<K>& table, uint64_t threshold, uint64_t chunk_slots) {
  DeltaRows<K> out;
  out.dim = table.dim();
  out.next_threshold = detail::incremental_clock(table, host_now_ns()).value_or(threshold);
  const uint64_t chunk = std::max<uint64_t>(1, chunk_slots);
  const int dev = table.options().device;  // the table's kernels write these buffers
  detail::HostMirror<K> keys(table.backend(), chunk, dev);
  detail::HostMirror<float> rows(table.backend(), chunk * out.dim, dev);
  detail::HostMirror<uint64_t> scores(table.backend(), chunk, dev);
  const uint64_t capacity = table.capacity();
  for (uint64_t offset = 0; offset < capacity; offset += chunk) {
    const size_t n = table.export_batch(offset, chunk, keys.table_ptr(), rows.table_ptr(),
                                        scores.table_ptr(), threshold);
    if (n == 0) continue;
    keys.download(n);
    rows.download(n * out.dim);
    scores.download(n);
    out.keys.insert(out.keys.end(), keys.host(), keys.host() + n);
    out.values.insert(out.values.end(), rows.host(), rows.host() + n * out.dim);
    out.scores.insert(out.scores.end(), scores.host(), scores.host() + n);
  }
  return out;
}

template DeltaRows<int64_t> incremental_dump(Table<int64_t>&, uint64_t, uint64_t);
template DeltaRows<uint64_t> incremental_dump(Table<uint64_t>&, uint64_t, uint64_t);

}  // namespace dynemb::checkpoint

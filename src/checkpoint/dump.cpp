// Dump: every rank's shard of every table streamed in chunks into a staging directory, then
// the manifest, fsync and an atomic rename.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "byte_stream.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/log.hpp"
#include "fs_util.hpp"
#include "table_view.hpp"
#include "two_stage.hpp"

namespace dynemb::checkpoint {

uint64_t host_now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

namespace {

std::filesystem::path normalized(const std::filesystem::path& p) {
  std::filesystem::path n = p.lexically_normal();
  if (n.filename().empty()) n = n.parent_path();
  return n;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

std::string rank_file(const std::string& table, uint32_t rank, const char* what) {
  char name[64];
  std::snprintf(name, sizeof name, "rank-%05u.%s", rank, what);
  return table + "/" + name;
}

// One open data file of the shard being written.
struct ShardFile {
  std::string relative;
  FileHeader header;
  FileSink sink;
  ShardFile(const std::filesystem::path& dir, std::string rel, FileHeader h, bool direct_io)
      : relative(std::move(rel)), header(h), sink(dir / relative, direct_io, kHeaderBytes) {
    uint8_t placeholder[kHeaderBytes] = {};
    sink.append(placeholder, kHeaderBytes);
  }
  // Writes the final header (with the row count), fsyncs; returns the manifest's entry.
  FileEntry finish(uint64_t rows) {
    header.rows = rows;
    uint8_t bytes[kHeaderBytes];
    encode_header(header, bytes);
    sink.finish(bytes, kHeaderBytes);
    return FileEntry{relative, sink.size(), sink.crc()};
  }
};

// Streams one table's shard on `rank` into the staging directory.
template <TableKey K>
ShardEntry write_shard(const detail::TableView<K>& v, const std::string& name, uint32_t rank,
                       uint32_t world_size, bool with_state, const DumpOptions& o,
                       const std::filesystem::path& dir) {
  Table<K>& table = *v.table;
  const uint32_t row_dim = table.dim();
  create_directories_durably(dir / name);
  FileHeader h;
  h.rank = rank;
  h.world_size = world_size;
  h.content = FileContent::kKeys;
  h.dtype = detail::key_dtype<K>();
  ShardFile keys(dir, rank_file(name, rank, "keys"), h, o.direct_io);
  h.content = FileContent::kValues;
  h.dtype = dtype_of(v.value_type);
  h.width = v.dim;
  ShardFile values(dir, rank_file(name, rank, "values"), h, o.direct_io);
  h.content = FileContent::kScores;
  h.dtype = Dtype::kUint64;
  h.width = 1;
  ShardFile scores(dir, rank_file(name, rank, "scores"), h, o.direct_io);
  std::unique_ptr<ShardFile> state;
  if (with_state) {
    h.content = FileContent::kOptimizerState;
    h.dtype = Dtype::kFloat32;
    h.width = v.state_dim;
    state =
        std::make_unique<ShardFile>(dir, rank_file(name, rank, "optimizer_state"), h, o.direct_io);
  }

  const uint64_t chunk = std::max<uint64_t>(1, o.chunk_slots);
  // Two chunk buffers: one is exported into while the other is written out.
  struct Chunk {
    detail::HostMirror<K> keys;
    detail::HostMirror<float> rows;
    detail::HostMirror<uint64_t> scores;
    size_t n = 0;
  };
  const Backend b = table.backend();
  const int dev = table.options().device;  // the table's kernels write these buffers
  Chunk chunks[2] = {{{b, chunk, dev}, {b, chunk * row_dim, dev}, {b, chunk, dev}},
                     {{b, chunk, dev}, {b, chunk * row_dim, dev}, {b, chunk, dev}}};
  ShardEntry shard;
  shard.rank = rank;
  shard.min_score = ~0ull;
  const uint64_t capacity = table.capacity();
  uint64_t offset = 0;
  detail::run_two_stage(
      [&](unsigned slot) {  // export the next non-empty chunk of slots
        Chunk& c = chunks[slot];
        for (c.n = 0; c.n == 0 && offset < capacity; offset += chunk) {
          c.n = table.export_batch(offset, chunk, c.keys.table_ptr(), c.rows.table_ptr(),
                                   c.scores.table_ptr(), o.min_score);
        }
        if (c.n == 0) return false;
        c.keys.download(c.n);
        c.rows.download(c.n * row_dim);
        c.scores.download(c.n);
        return true;
      },
      [&](unsigned slot) {  // split it into the files
        Chunk& c = chunks[slot];
        const size_t n = c.n;
        keys.sink.append(c.keys.host(), n * sizeof(K));
        scores.sink.append(c.scores.host(), n * sizeof(uint64_t));
        const float* rows = c.rows.host();
        // The embedding's dim elements (16-bit types: 2 bytes each, the padding half left out),
        // then the state after its words.
        const size_t value_bytes = size_t{v.dim} * dtype_bytes(dtype_of(v.value_type));
        if (row_dim == v.dim && v.value_type == ValueType::kFloat32) {
          values.sink.append(rows, n * row_dim * sizeof(float));
        } else {
          for (size_t i = 0; i < n; ++i) {
            values.sink.append(rows + i * row_dim, value_bytes);
            if (state) {
              state->sink.append(rows + i * row_dim + v.embedding_words,
                                 v.state_dim * sizeof(float));
            }
          }
        }
        for (size_t i = 0; i < n; ++i) {
          shard.min_score = std::min(shard.min_score, c.scores.host()[i]);
          shard.max_score = std::max(shard.max_score, c.scores.host()[i]);
        }
        shard.rows += n;
      });
  if (shard.rows == 0) shard.min_score = 0;
  shard.keys = keys.finish(shard.rows);
  shard.values = values.finish(shard.rows);
  shard.scores = scores.finish(shard.rows);
  if (state) shard.optimizer_state = state->finish(shard.rows);
  return shard;
}

// The manifest's description of a table (everything but its shards).
template <TableKey K>
TableEntry describe(const detail::TableView<K>& v, const std::string& name, bool with_state,
                    uint64_t dump_time_ns) {
  TableEntry t;
  t.name = name;
  t.key_dtype = detail::key_dtype<K>();
  t.dim = v.dim;
  t.value_dtype = dtype_of(v.value_type);
  t.optimizer = v.optimizer;
  t.optimizer_state_dim = v.state_dim;
  t.optimizer_args = v.optimizer_args;
  t.has_optimizer_state = with_state;
  t.score_policy = to_string(v.table->options().score_policy);
  t.score = v.table->score();
  t.next_min_score = detail::incremental_clock(*v.table, dump_time_ns);
  return t;
}

bool same_shape(const TableEntry& a, const TableEntry& b) {
  return a.key_dtype == b.key_dtype && a.value_dtype == b.value_dtype && a.dim == b.dim &&
         a.optimizer == b.optimizer && a.optimizer_state_dim == b.optimizer_state_dim &&
         a.score_policy == b.score_policy && a.has_optimizer_state == b.has_optimizer_state;
}

}  // namespace

struct CheckpointWriter::State {
  std::filesystem::path path, staging;
  DumpOptions options;
  Manifest manifest;
  std::vector<bool> written;
  bool committed = false;
  bool owner = true;  // creates, commits (and on failure removes) the staging directory
};

CheckpointWriter::CheckpointWriter(std::filesystem::path path, uint32_t world_size,
                                   DumpOptions options)
    : state_(std::make_unique<State>()) {
  require(world_size >= 1, "CheckpointWriter", "world_size", std::to_string(world_size), ">= 1");
  require(!path.empty(), "CheckpointWriter", "path", "\"\"", "a directory path");
  require(options.chunk_slots >= 1, "CheckpointWriter", "chunk_slots",
          std::to_string(options.chunk_slots), ">= 1");
  State& s = *state_;
  s.path = normalized(path);
  s.options = std::move(options);
  std::error_code ec;
  if (std::filesystem::exists(s.path, ec)) {
    require(s.options.overwrite, "CheckpointWriter", "path", s.path.string(),
            "a path that does not exist yet (it exists; set DumpOptions::overwrite to replace "
            "it)");
    const bool is_checkpoint = std::filesystem::exists(s.path / kManifestName, ec);
    const bool is_empty_dir =
        std::filesystem::is_directory(s.path, ec) && std::filesystem::is_empty(s.path, ec);
    require(is_checkpoint || is_empty_dir, "CheckpointWriter", "path", s.path.string(),
            "a checkpoint or an empty directory (refusing to replace anything else)");
  }
  if (!s.options.metadata.empty()) {
    try {
      s.manifest.metadata = checked_metadata(s.options.metadata, "DumpOptions::metadata");
    } catch (const CheckpointError& e) {
      throw InvalidArgument(std::string("CheckpointWriter: ") + e.what());
    }
  }
  const std::filesystem::path parent =
      s.path.has_parent_path() ? s.path.parent_path() : std::filesystem::path(".");
  create_directories_durably(parent);
  remove_stale_staging(parent, s.path.filename().string());
  s.staging = detail::staging_path_for(s.path);
  try {
    create_directories_durably(s.staging);
  } catch (...) {
    std::filesystem::remove_all(s.staging, ec);  // no destructor runs for a failed constructor
    throw;
  }
  s.manifest.delta = s.options.min_score.has_value();
  s.manifest.min_score = s.options.min_score;
  s.manifest.dump_time_ns = host_now_ns();
  s.manifest.world_size = world_size;
  s.written.assign(world_size, false);
}

CheckpointWriter::CheckpointWriter(std::filesystem::path path, uint32_t world_size,
                                   DumpOptions options, std::filesystem::path owners_staging)
    : state_(std::make_unique<State>()) {
  require(world_size >= 1, "CheckpointWriter", "world_size", std::to_string(world_size), ">= 1");
  require(std::filesystem::is_directory(owners_staging), "CheckpointWriter", "owners_staging",
          owners_staging.string(), "the staging directory the owner writer created");
  State& s = *state_;
  s.path = normalized(path);
  s.staging = std::move(owners_staging);
  s.options = std::move(options);
  s.owner = false;
  s.manifest.delta = s.options.min_score.has_value();
  s.manifest.min_score = s.options.min_score;
  s.manifest.dump_time_ns = host_now_ns();
  s.manifest.world_size = world_size;
  s.written.assign(world_size, false);
}

const std::filesystem::path& CheckpointWriter::staging_directory() const {
  return state_->staging;
}

RankShards CheckpointWriter::written_shards(uint32_t rank) const {
  const State& s = *state_;
  require(rank < s.written.size() && s.written[rank], "CheckpointWriter::written_shards", "rank",
          std::to_string(rank), "a rank this writer wrote");
  RankShards out;
  out.rank = rank;
  for (const TableEntry& t : s.manifest.tables) {
    out.tables.push_back(t.name);
    out.shards.push_back(t.shards[rank]);
    out.scores.push_back(t.score);
  }
  return out;
}

void CheckpointWriter::add_written_shards(const RankShards& part) {
  State& s = *state_;
  constexpr const char* w = "CheckpointWriter::add_written_shards";
  require(!s.committed, w, "state", "committed", "not committed");
  require(part.rank < s.manifest.world_size, w, "rank", std::to_string(part.rank),
          "< world_size = " + std::to_string(s.manifest.world_size));
  require(!s.written[part.rank], w, "rank", std::to_string(part.rank), "written once");
  require(std::any_of(s.written.begin(), s.written.end(), [](bool b) { return b; }), w, "state",
          "no rank written here", "this writer's own rank written first");
  require(part.tables.size() == s.manifest.tables.size() &&
              part.shards.size() == part.tables.size() && part.scores.size() == part.tables.size(),
          w, "tables", std::to_string(part.tables.size()) + " on rank " + std::to_string(part.rank),
          "the " + std::to_string(s.manifest.tables.size()) + " tables written here");
  for (size_t i = 0; i < part.tables.size(); ++i) {
    TableEntry* entry = nullptr;
    for (TableEntry& t : s.manifest.tables) {
      if (t.name == part.tables[i]) entry = &t;
    }
    require(entry != nullptr, w, "table", "\"" + part.tables[i] + "\"",
            "one of the tables written here");
    require(part.shards[i].rank == part.rank, w, "shard rank", std::to_string(part.shards[i].rank),
            "= " + std::to_string(part.rank));
    require(part.shards[i].optimizer_state.has_value() == entry->has_optimizer_state, w,
            "optimizer state", "\"" + part.tables[i] + "\" on rank " + std::to_string(part.rank),
            "as on the rank written here");
    entry->shards[part.rank] = part.shards[i];
    entry->score = std::max(entry->score, part.scores[i]);
  }
  s.written[part.rank] = true;
}

CheckpointWriter::~CheckpointWriter() {
  if (state_ && state_->owner && !state_->committed) {
    std::error_code ec;
    std::filesystem::remove_all(state_->staging, ec);
  }
}

void CheckpointWriter::write_rank(uint32_t rank, const std::vector<NamedTable>& tables) {
  State& s = *state_;
  require(!s.committed, "CheckpointWriter::write_rank", "state", "committed", "not committed");
  require(rank < s.manifest.world_size, "CheckpointWriter::write_rank", "rank",
          std::to_string(rank), "< world_size = " + std::to_string(s.manifest.world_size));
  require(!s.written[rank], "CheckpointWriter::write_rank", "rank", std::to_string(rank),
          "written once");
  for (const std::string& want : s.options.only) {
    const bool given = std::any_of(tables.begin(), tables.end(),
                                   [&](const NamedTable& t) { return t.name == want; });
    require(given, "dump", "only", "\"" + want + "\"", "a name among the tables given");
  }
  std::set<std::string> names;
  std::vector<const NamedTable*> selected;
  for (const NamedTable& t : tables) {
    require(valid_name(t.name), "dump", "table name", "\"" + t.name + "\"",
            "1-128 characters of [A-Za-z0-9_.-], not starting with '.'");
    require(names.insert(t.name).second, "dump", "table name", "\"" + t.name + "\"", "given once");
    if (s.options.only.empty() ||
        std::find(s.options.only.begin(), s.options.only.end(), t.name) != s.options.only.end()) {
      selected.push_back(&t);
    }
  }
  const bool first_rank =
      std::none_of(s.written.begin(), s.written.end(), [](bool b) { return b; });
  if (!first_rank) {
    require(
        selected.size() == s.manifest.tables.size(), "CheckpointWriter::write_rank",
        "number of tables", std::to_string(selected.size()) + " on rank " + std::to_string(rank),
        "the " + std::to_string(s.manifest.tables.size()) + " tables of the first rank written");
  }
  for (const NamedTable* named : selected) {
    detail::visit_view(*named, [&]<TableKey K>(const detail::TableView<K>& v) {
      const bool with_state = s.options.optimizer_state && v.state_dim > 0;
      TableEntry shape = describe(v, named->name, with_state, s.manifest.dump_time_ns);
      TableEntry* entry = nullptr;
      for (TableEntry& t : s.manifest.tables) {
        if (t.name == named->name) entry = &t;
      }
      if (entry == nullptr) {
        require(first_rank, "CheckpointWriter::write_rank", "table", "\"" + named->name + "\"",
                "one of the first rank's tables");
        shape.shards.resize(s.manifest.world_size);
        s.manifest.tables.push_back(std::move(shape));
        entry = &s.manifest.tables.back();
      } else {
        require(same_shape(*entry, shape), "CheckpointWriter::write_rank", "table shape",
                "\"" + named->name + "\" on rank " + std::to_string(rank) + ": dim " +
                    std::to_string(shape.dim) + ", " + shape.score_policy,
                "the same key type, dim, optimizer and score policy on every rank");
        entry->score = std::max(entry->score, shape.score);
      }
      entry->shards[rank] = write_shard(v, named->name, rank, s.manifest.world_size, with_state,
                                        s.options, s.staging);
    });
  }
  s.written[rank] = true;
}

DumpReport CheckpointWriter::commit() {
  State& s = *state_;
  require(!s.committed, "CheckpointWriter::commit", "state", "committed", "not committed");
  require(s.owner, "CheckpointWriter::commit", "writer", "not the staging directory's owner",
          "the owner commits");
  for (uint32_t r = 0; r < s.manifest.world_size; ++r) {
    require(s.written[r], "CheckpointWriter::commit", "rank", std::to_string(r) + " not written",
            "every rank written before commit");
  }
  DumpReport report;
  for (TableEntry& t : s.manifest.tables) {
    t.rows = 0;
    for (const ShardEntry& sh : t.shards) {
      t.rows += sh.rows;
      report.bytes += sh.keys.bytes + sh.values.bytes + sh.scores.bytes +
                      (sh.optimizer_state ? sh.optimizer_state->bytes : 0);
    }
    report.rows += t.rows;
    fsync_directory(s.staging / t.name);
  }
  write_file_durably(s.staging / kManifestName, manifest_to_json(s.manifest));
  fsync_directory(s.staging);
  detail::publish_directory(s.staging, s.path);
  s.committed = true;
  report.manifest = s.manifest;
  return report;
}

DumpReport dump(const std::filesystem::path& path, const std::vector<NamedTable>& tables,
                const DumpOptions& options) {
  CheckpointWriter writer(path, 1, options);
  writer.write_rank(0, tables);
  return writer.commit();
}

DumpReport dump_sharded(const std::filesystem::path& path,
                        const std::vector<std::vector<NamedTable>>& ranks,
                        const DumpOptions& options) {
  require(!ranks.empty(), "dump_sharded", "ranks", "0 ranks", ">= 1");
  CheckpointWriter writer(path, static_cast<uint32_t>(ranks.size()), options);
  for (uint32_t r = 0; r < ranks.size(); ++r) writer.write_rank(r, ranks[r]);
  return writer.commit();
}

uint64_t get_score(const NamedTable& table) {
  return detail::visit_view(table, [](const auto& v) { return v.table->score(); });
}

void set_score(const NamedTable& table, uint64_t score) {
  detail::visit_view(table, [&](const auto& v) { v.table->set_score(score); });
}

}  // namespace dynemb::checkpoint

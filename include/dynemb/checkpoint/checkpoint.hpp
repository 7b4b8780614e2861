// Checkpoints of tables (plain or holding [embedding | optimizer state] rows): dump (full or
// incremental), load (into any backend and any number of ranks), incremental dump in memory. The
// format is docs/checkpoint_format.md; format.hpp reads it without any table.
#pragma once

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "dynemb/checkpoint/format.hpp"
#include "dynemb/table/row_layout.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::checkpoint {

// The table a checkpoint reads or writes, by key type.
using TableHandle = std::variant<Table<int64_t>*, Table<uint64_t>*>;

// A table, the name it has in a checkpoint ([A-Za-z0-9_.-], 1-128 characters) and how its rows
// split into embedding and optimizer state (a plain table: all embedding).
struct NamedTable {
  std::string name;
  TableHandle table;
  RowLayout layout;
};

// Something that owns a table and says how its rows are laid out (a trainable Embedding, for
// one: include/dynemb/embedding/embedding.hpp), so the checkpoint needs neither its type nor
// its part.
template <class T>
concept LaidOutTable = requires(T& owner) {
  { &owner.table() } -> std::convertible_to<TableHandle>;
  { owner.row_layout() } -> std::convertible_to<RowLayout>;
};

// Names a plain table for dump / load.
template <TableKey K>
NamedTable named(std::string name, Table<K>& table) {
  return {std::move(name), &table, plain_row_layout(table.dim())};
}
// Names a table whose rows hold `layout.dim` embedding floats and then optimizer state.
template <TableKey K>
NamedTable named(std::string name, Table<K>& table, RowLayout layout) {
  return {std::move(name), &table, std::move(layout)};
}
// Names the table of a trainable embedding (or anything else that owns a laid-out table).
template <LaidOutTable T>
NamedTable named(std::string name, T& owner) {
  return {std::move(name), &owner.table(), owner.row_layout()};
}

struct DumpOptions {
  std::vector<std::string> only;      // dump these names only; empty = every table given
  bool optimizer_state = true;        // write embeddings' optimizer state files
  std::optional<uint64_t> min_score;  // set: a delta of the rows with score >= min_score
  uint64_t chunk_slots = 1u << 16;    // slots exported per export_batch call
  bool direct_io = true;              // O_DIRECT where the file system allows it
  bool overwrite = false;             // replace a checkpoint already at the path (else refuse)
  std::string metadata;               // a JSON object stored as the manifest's "metadata"
                                      // (the caller's own state, <= 1 MiB); empty: {}
};

// What a dump wrote.
struct DumpReport {
  Manifest manifest;
  uint64_t rows = 0;
  uint64_t bytes = 0;  // every data file, headers included
};

// One process's part of a dump that several processes write at once: what it wrote for `rank`,
// handed to the process that commits (CheckpointWriter::add_written_shards).
struct RankShards {
  uint32_t rank = 0;
  std::vector<std::string> tables;  // table names, in the order written
  std::vector<ShardEntry> shards;   // shards[i]: table i's shard of `rank`
  std::vector<uint64_t> scores;     // each table's clock (Table::score) on that rank
};

// Writes one checkpoint from one or more ranks' shards into a staging directory next to `path`;
// commit() makes it appear at `path` at once (fsync + rename or atomic exchange), so a crash at
// any point leaves `path` holding the previous checkpoint or the new one, each complete.
// Refuses (InvalidArgument) a `path` that exists unless options.overwrite and it is a
// checkpoint or an empty directory. Destroying an uncommitted writer removes the staging
// directory; staging directories of killed writers next to `path` are removed at construction.
class CheckpointWriter {
 public:
  CheckpointWriter(std::filesystem::path path, uint32_t world_size, DumpOptions options = {});
  // Joins a dump that several processes write at once: the writer of one process (made with
  // the constructor above: the owner) creates the staging directory; each other process makes
  // this writer on the owner's staging_directory() (a shared filesystem), writes its ranks and
  // hands written_shards() to the owner, which add_written_shards() and commits. Only the owner
  // commits, and only the owner removes the staging directory when destroyed uncommitted.
  CheckpointWriter(std::filesystem::path path, uint32_t world_size, DumpOptions options,
                   std::filesystem::path owners_staging);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Writes rank `rank`'s shard of every table (the same names on every rank), streamed in
  // chunks. The tables should not change while they are written.
  void write_rank(uint32_t rank, const std::vector<NamedTable>& tables);
  // Writes the manifest once every rank was written, fsyncs and renames into place.
  DumpReport commit();

  // What write_rank(rank, ...) wrote, for the owner of a shared staging directory.
  RankShards written_shards(uint32_t rank) const;
  // Adds a rank another process wrote into the shared staging directory: the same tables as
  // this writer's first rank, each rank once; InvalidArgument naming the table or rank otherwise.
  void add_written_shards(const RankShards& shards);
  // Where the files are written before commit().
  const std::filesystem::path& staging_directory() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Dumps single-rank tables to `path` (see CheckpointWriter).
DumpReport dump(const std::filesystem::path& path, const std::vector<NamedTable>& tables,
                const DumpOptions& options = {});
// Dumps a sharded set: ranks[r] holds rank r's shards (world_size = ranks.size()).
DumpReport dump_sharded(const std::filesystem::path& path,
                        const std::vector<std::vector<NamedTable>>& ranks,
                        const DumpOptions& options = {});

// When the payload checksums are checked.
enum class VerifyMode : uint8_t {
  kBeforeLoading,  // read every file once to check it, then again to load (tables untouched
                   // on any error)
  kWhileLoading,   // one pass; only for target tables that are empty: on an error they are
                   // cleared again (otherwise kBeforeLoading is used)
};

struct LoadOptions {
  std::vector<std::string> only;  // load these names only; empty = every table given
  uint32_t rank = 0;              // this process's rank of world_size: keeps the keys with
  uint32_t world_size = 1;        //   rank_of_key_bits(key, world_size) == rank (or owner's)
  // Set: the rank that owns a key of a table (by name) in place of rank_of_key_bits, for
  // tables sharded by another rule; every shard is then read and filtered (the dump's rule is
  // not known), even at the dump's world size.
  std::function<uint32_t(const std::string& table, uint64_t key_bits)> owner;
  bool optimizer_state = true;  // load optimizer state when the optimizers match
  // Rows dumped with another value type (float32 / float16 / bfloat16) are converted to the
  // target's (rounded to nearest even); false: such a table is a CheckpointError before loading.
  bool convert_value_type = false;
  bool restore_clock = true;  // set the STEP step / CUSTOMIZED score from the checkpoint
  bool replace = true;        // a full checkpoint clears each target first
  VerifyMode verify = VerifyMode::kBeforeLoading;
  bool direct_io = true;
  uint64_t chunk_rows = 1u << 16;
};

// What a load did, per table and in total.
struct LoadReport {
  uint64_t rows_read = 0;     // rows in the files read
  uint64_t rows_loaded = 0;   // rows routed to this rank and inserted
  uint64_t rows_dropped = 0;  // rows the target refused or evicted while loading (too small)
  uint64_t bytes_read = 0;
  bool verified_first = true;              // checksums were checked before any table changed
  std::vector<std::string> state_skipped;  // tables whose optimizer state was not loaded
};

// Verifies the checkpoint at `path` (manifest, presence, sizes, headers, dims, dtypes, and
// checksums per options.verify) and then loads it into `tables`. Any problem found before
// loading is a CheckpointError and leaves every table unchanged.
LoadReport load(const std::filesystem::path& path, const std::vector<NamedTable>& tables,
                const LoadOptions& options = {});

// Rows of a table whose score >= a threshold, copied out (rows are the table's full rows:
// [embedding | optimizer state] for a trainable table).
template <TableKey K>
struct DeltaRows {
  uint32_t dim = 0;
  std::vector<K> keys;
  std::vector<float> values;  // keys.size() x dim
  std::vector<uint64_t> scores;
  // The threshold for the next incremental dump: the table's clock when this one began (STEP
  // step, CUSTOMIZED score, TIMESTAMP now); LFU keeps `threshold`.
  uint64_t next_threshold = 0;
};

// Copies out every row with score >= threshold, in chunks (the table should not change).
template <TableKey K>
DeltaRows<K> incremental_dump(Table<K>& table, uint64_t threshold, uint64_t chunk_slots = 1u << 16);

// The table's clock (Table::score) and setting it (Table::set_score; warns when a CUSTOMIZED
// score goes backwards).
uint64_t get_score(const NamedTable& table);
void set_score(const NamedTable& table, uint64_t score);

// Nanoseconds since the Unix epoch on the host clock (what dump_time_ns records).
uint64_t host_now_ns();

}  // namespace dynemb::checkpoint

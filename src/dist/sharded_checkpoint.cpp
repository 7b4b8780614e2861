// Parallel dump and re-routing load of a sharded collection.
#include "dynemb/dist/sharded_checkpoint.hpp"

#include <cstring>
#include <map>
#include <optional>

#include "dynemb/core/error.hpp"

namespace dynemb::dist {
namespace {

class ByteWriter {
 public:
  void u64(uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  void file(const checkpoint::FileEntry& f) {
    str(f.path);
    u64(f.bytes);
    u64(f.crc32c);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& in) : in_(in) {}
  uint64_t u64() {
    need(sizeof(uint64_t));
    uint64_t v;
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    need(n);
    std::string s = in_.substr(at_, n);
    at_ += n;
    return s;
  }
  checkpoint::FileEntry file() {
    checkpoint::FileEntry f;
    f.path = str();
    f.bytes = u64();
    f.crc32c = static_cast<uint32_t>(u64());
    return f;
  }
  void finish() const {
    if (at_ != in_.size()) throw Error("decode_rank_shards: trailing bytes");
  }

 private:
  void need(uint64_t n) const {
    if (in_.size() - at_ < n) {
      throw Error("decode_rank_shards: truncated at byte " + std::to_string(at_) + " of " +
                  std::to_string(in_.size()));
    }
  }
  const std::string& in_;
  size_t at_ = 0;
};

// Table t's layout as Embedding::row_layout says, with the state part stretched to the
// collection's common row width (its tables share one row_dim).
RowLayout layout_of(const EmbeddingOptions& o, uint32_t row_dim) {
  RowLayout layout = embedding_row_layout(o);
  layout.state_dim = row_dim - layout.embedding_words();
  return layout;
}

template <TableKey K>
std::vector<checkpoint::NamedTable> named_tables(ShardedEmbeddingCollection<K>& c,
                                                 const std::vector<std::string>& names,
                                                 const char* where) {
  require(names.size() == c.num_tables(), where, "names", std::to_string(names.size()),
          "one per table = " + std::to_string(c.num_tables()));
  std::vector<checkpoint::NamedTable> tables;
  for (size_t t = 0; t < names.size(); ++t) {
    tables.push_back(checkpoint::named(names[t], c.local().table(t),
                                       layout_of(c.options(t), c.local().row_dim())));
  }
  return tables;
}

// Throws on every rank, naming the ranks that failed, when any did.
void agree(Communicator& comm, const std::string& problem, const char* what) {
  if (all_ranks_ok(comm, problem.empty())) return;
  const std::vector<std::string> all = all_gather_strings(comm, problem);
  std::string text = std::string(what) + " failed on";
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty()) text += "\n  rank " + std::to_string(r) + ": " + all[r];
  }
  throw Error(text);
}

}  // namespace

std::string encode_rank_shards(const checkpoint::RankShards& s) {
  ByteWriter w;
  w.u64(s.rank);
  w.u64(s.tables.size());
  for (size_t i = 0; i < s.tables.size(); ++i) {
    const checkpoint::ShardEntry& e = s.shards.at(i);
    w.str(s.tables[i]);
    w.u64(s.scores.at(i));
    w.u64(e.rank);
    w.u64(e.rows);
    w.u64(e.min_score);
    w.u64(e.max_score);
    w.file(e.keys);
    w.file(e.values);
    w.file(e.scores);
    w.u64(e.optimizer_state.has_value());
    if (e.optimizer_state) w.file(*e.optimizer_state);
  }
  return w.take();
}

checkpoint::RankShards decode_rank_shards(const std::string& bytes) {
  ByteReader r(bytes);
  checkpoint::RankShards s;
  s.rank = static_cast<uint32_t>(r.u64());
  const uint64_t n = r.u64();
  if (n > bytes.size()) throw Error("decode_rank_shards: " + std::to_string(n) + " tables");
  for (uint64_t i = 0; i < n; ++i) {
    s.tables.push_back(r.str());
    s.scores.push_back(r.u64());
    checkpoint::ShardEntry e;
    e.rank = static_cast<uint32_t>(r.u64());
    e.rows = r.u64();
    e.min_score = r.u64();
    e.max_score = r.u64();
    e.keys = r.file();
    e.values = r.file();
    e.scores = r.file();
    if (r.u64() != 0) e.optimizer_state = r.file();
    s.shards.push_back(std::move(e));
  }
  r.finish();
  return s;
}

template <TableKey K>
checkpoint::DumpReport dump_sharded(ShardedEmbeddingCollection<K>& collection,
                                    const std::filesystem::path& path,
                                    const std::vector<std::string>& names,
                                    const checkpoint::DumpOptions& options) {
  constexpr const char* where = "dist::dump_sharded";
  Communicator& comm = collection.communicator();
  const uint32_t rank = comm.rank(), world = comm.world_size();
  std::string problem;
  std::vector<checkpoint::NamedTable> tables;
  std::unique_ptr<checkpoint::CheckpointWriter> writer;
  // Rank 0 makes the staging directory (checking `path`) and shares its name.
  std::string staging;
  try {
    tables = named_tables(collection, names, where);
    if (rank == 0) {
      writer = std::make_unique<checkpoint::CheckpointWriter>(path, world, options);
      staging = writer->staging_directory().string();
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }
  agree(comm, problem, where);
  staging = broadcast_string(comm, staging, 0);
  // Every rank writes its shard into it, in parallel.
  try {
    if (rank != 0) {
      writer = std::make_unique<checkpoint::CheckpointWriter>(path, world, options, staging);
    }
    writer->write_rank(rank, tables);
  } catch (const std::exception& e) {
    problem = e.what();
  }
  agree(comm, problem, where);
  // Rank 0 collects the shard descriptions (not the rows), writes the manifest and publishes.
  const std::vector<std::string> parts = all_gather_strings(
      comm, rank == 0 ? std::string() : encode_rank_shards(writer->written_shards(rank)));
  checkpoint::DumpReport report;
  try {
    if (rank == 0) {
      for (uint32_t r = 1; r < world; ++r) writer->add_written_shards(decode_rank_shards(parts[r]));
      report = writer->commit();
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }
  agree(comm, problem, where);
  if (rank != 0) {
    report.manifest = checkpoint::read_manifest(path);
    for (const auto& t : report.manifest.tables) {
      report.rows += t.rows;
      for (const auto& s : t.shards) {
        report.bytes += s.keys.bytes + s.values.bytes + s.scores.bytes +
                        (s.optimizer_state ? s.optimizer_state->bytes : 0);
      }
    }
  }
  return report;
}

template <TableKey K>
checkpoint::LoadReport load_sharded(ShardedEmbeddingCollection<K>& collection,
                                    const std::filesystem::path& path,
                                    const std::vector<std::string>& names,
                                    checkpoint::LoadOptions options) {
  constexpr const char* where = "dist::load_sharded";
  Communicator& comm = collection.communicator();
  options.rank = comm.rank();
  options.world_size = comm.world_size();
  std::map<std::string, uint32_t> index;
  for (size_t t = 0; t < names.size(); ++t) index[names[t]] = static_cast<uint32_t>(t);
  const uint32_t world = comm.world_size();
  // The hash router is the loader's own rule (each rank then reads only its shard when the
  // world size is the dump's); any other rule filters every shard.
  if (collection.router().name() != KeyRouter::hash().name()) {
    options.owner = [&collection, index, world](const std::string& table, uint64_t key_bits) {
      return collection.router().owner(index.at(table), key_bits, world);
    };
  }
  std::string problem;
  checkpoint::LoadReport report;
  try {
    report = checkpoint::load(path, named_tables(collection, names, where), options);
  } catch (const std::exception& e) {
    problem = e.what();
  }
  agree(comm, problem, where);
  return report;
}

template checkpoint::DumpReport dump_sharded(ShardedEmbeddingCollection<int64_t>&,
                                             const std::filesystem::path&,
                                             const std::vector<std::string>&,
                                             const checkpoint::DumpOptions&);
template checkpoint::DumpReport dump_sharded(ShardedEmbeddingCollection<uint64_t>&,
                                             const std::filesystem::path&,
                                             const std::vector<std::string>&,
                                             const checkpoint::DumpOptions&);
template checkpoint::LoadReport load_sharded(ShardedEmbeddingCollection<int64_t>&,
                                             const std::filesystem::path&,
                                             const std::vector<std::string>&,
                                             checkpoint::LoadOptions);
template checkpoint::LoadReport load_sharded(ShardedEmbeddingCollection<uint64_t>&,
                                             const std::filesystem::path&,
                                             const std::vector<std::string>&,
                                             checkpoint::LoadOptions);

}  // namespace dynemb::dist

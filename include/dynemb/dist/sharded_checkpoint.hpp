// Checkpoints of a sharded collection written and read by every rank at once: each rank dumps
// its own shard into one checkpoint directory (a shared filesystem), rank 0 writes the manifest
// listing every rank's shard and publishes the directory atomically; no rows travel to rank 0.
// Loading into any world size re-routes keys by the collection's router.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/dist/sharded_collection.hpp"

namespace dynemb::dist {

// Collective. Dumps every table of `collection` (named `names`, one per table) from every rank
// into the checkpoint at `path` (full, or a delta with options.min_score). Each table is stored
// as an embedding with its optimizer state (the tables' RowLayout), so it also loads into an
// Embedding or a single-process collection of the same options. Returns the
// committed manifest's report on every rank. A failure on any rank throws on every rank and
// leaves the previous checkpoint at `path` as it was.
template <TableKey K>
checkpoint::DumpReport dump_sharded(ShardedEmbeddingCollection<K>& collection,
                                    const std::filesystem::path& path,
                                    const std::vector<std::string>& names,
                                    const checkpoint::DumpOptions& options = {});

// Collective. Each rank loads the rows it owns under the collection's router from the
// checkpoint at `path`, written by any number of ranks (options.rank, world_size and owner are
// set here). Throws on every rank when any rank fails (the ranks that had loaded keep what they
// loaded: load the previous checkpoint again).
template <TableKey K>
checkpoint::LoadReport load_sharded(ShardedEmbeddingCollection<K>& collection,
                                    const std::filesystem::path& path,
                                    const std::vector<std::string>& names,
                                    checkpoint::LoadOptions options = {});

// A RankShards as bytes and back (what ranks send to rank 0); parse throws Error when malformed.
std::string encode_rank_shards(const checkpoint::RankShards& shards);
checkpoint::RankShards decode_rank_shards(const std::string& bytes);

}  // namespace dynemb::dist

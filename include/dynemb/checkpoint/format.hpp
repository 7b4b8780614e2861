// The on-disk checkpoint format (docs/checkpoint_format.md): a directory with manifest.json and,
// per table and rank, keys / values / scores / optimizer-state files, each with a 64-byte typed
// header. This header holds the format's types and the table-independent reader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dynemb/core/error.hpp"
#include "dynemb/core/value_type.hpp"

namespace dynemb::checkpoint {

// A checkpoint that is missing, malformed, corrupt or does not match the tables it is loaded
// into. The message names the file, the field, what was found and what was expected.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

class ByteSource;  // a data file read in order (src/checkpoint/byte_stream.hpp)

inline constexpr uint32_t kFormatVersion = 2;  // 2: the manifest carries its own checksum
inline constexpr char kManifestName[] = "manifest.json";
inline constexpr char kFormatName[] = "dynemb-checkpoint";
inline constexpr char kFileMagic[8] = {'D', 'Y', 'N', 'E', 'M', 'B', 'C', 'K'};
inline constexpr uint32_t kHeaderBytes = 64;

// What a data file holds.
enum class FileContent : uint8_t { kKeys = 1, kValues = 2, kScores = 3, kOptimizerState = 4 };
// The element type of a data file.
enum class Dtype : uint8_t { kInt64 = 1, kUint64 = 2, kFloat32 = 3, kFloat16 = 4, kBFloat16 = 5 };

// "keys", "values", "scores", "optimizer_state".
std::string to_string(FileContent content);
// "int64", "uint64", "float32", "float16", "bfloat16" (numpy: "<i8", "<u8", "<f4", "<f2"; bfloat16
// has no numpy name: the high half of a float32).
std::string to_string(Dtype dtype);
// Parses the names above (CheckpointError naming `where` otherwise).
Dtype parse_dtype(std::string_view name, const std::string& where);
// Bytes of one element.
uint32_t dtype_bytes(Dtype dtype);
// The values files' dtype of rows of `type`, and back (non-value dtypes: float32).
Dtype dtype_of(ValueType type);
ValueType value_type_of(Dtype dtype);

// The 64-byte little-endian header in front of every data file.
struct FileHeader {
  uint32_t format_version = kFormatVersion;
  FileContent content = FileContent::kKeys;
  Dtype dtype = Dtype::kInt64;
  uint32_t width = 1;  // elements per row (1 for keys and scores)
  uint64_t rows = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
};

// Serializes the header into kHeaderBytes bytes (with its own CRC32C).
void encode_header(const FileHeader& header, uint8_t out[kHeaderBytes]);
// Parses and checks magic, version, sizes and the header CRC; CheckpointError naming `file`.
FileHeader decode_header(const uint8_t in[kHeaderBytes], const std::string& file);

// One data file as the manifest lists it.
struct FileEntry {
  std::string path;     // relative to the checkpoint directory
  uint64_t bytes = 0;   // header + payload
  uint32_t crc32c = 0;  // CRC32C of the payload (bytes after the header)
};

// One rank's part of a table.
struct ShardEntry {
  uint32_t rank = 0;
  uint64_t rows = 0;
  uint64_t min_score = 0;  // over the shard's rows (0 when empty)
  uint64_t max_score = 0;
  FileEntry keys, values, scores;
  std::optional<FileEntry> optimizer_state;
};

// One table.
struct TableEntry {
  std::string name;
  Dtype key_dtype = Dtype::kInt64;
  Dtype value_dtype = Dtype::kFloat32;
  uint32_t dim = 0;                  // embedding floats per row (values file width)
  std::string optimizer;             // "" for a plain table, else "adam", "sgd", ...
  uint32_t optimizer_state_dim = 0;  // floats of optimizer state per row in the table
  std::vector<std::pair<std::string, double>> optimizer_args;  // hyper-parameters, by name
  bool has_optimizer_state = false;                            // optimizer_state files present
  std::string score_policy;  // "timestamp", "step", "lfu", "customized"
  uint64_t score = 0;        // the table's clock (step / call-level score) at dump time
  std::optional<uint64_t> next_min_score;  // threshold for the next incremental dump
  uint64_t rows = 0;                       // sum over shards
  std::vector<ShardEntry> shards;          // one per rank, in rank order
};

// The whole manifest.
struct Manifest {
  uint32_t format_version = kFormatVersion;
  bool delta = false;                 // an incremental checkpoint (loads on top of a full one)
  std::optional<uint64_t> min_score;  // delta: rows with score >= this
  uint64_t dump_time_ns = 0;          // host clock (ns since the Unix epoch) when the dump began
  uint32_t world_size = 1;
  std::vector<TableEntry> tables;
  std::string metadata = "{}";  // the caller's JSON object (DumpOptions::metadata), compact
};

// The manifest as JSON text, ending with its own checksum ("manifest_crc32c": the CRC32C of
// every byte before that key).
std::string manifest_to_json(const Manifest& manifest);
// Checks the manifest text's own checksum: "" when it matches, else what is wrong.
std::string manifest_checksum_problem(std::string_view text);
// Parses and checks the manifest: its own checksum (unless `check_own_checksum` is false, only
// for showing a damaged manifest), every field present with the right type, versions, file
// names inside the directory, shard ranks 0..world_size-1, row sums, file sizes equal header +
// rows * width; CheckpointError naming `where` and the field otherwise.
Manifest manifest_from_json(std::string_view text, const std::string& where,
                            bool check_own_checksum = true);
// Checks that `text` is a JSON object of at most 1 MiB nested at most 32 deep (what a
// manifest's metadata may be); returns it compact. CheckpointError naming `where` otherwise.
std::string checked_metadata(std::string_view text, const std::string& where);

// The expected header and size of a table's file of `content` in `shard`.
FileHeader expected_header(const TableEntry& table, const ShardEntry& shard, FileContent content,
                           uint32_t world_size);

// Reads a checkpoint: the manifest and the data files, through a directory or in memory.
class CheckpointSource {
 public:
  virtual ~CheckpointSource() = default;
  // The manifest's text.
  virtual std::string read_manifest() = 0;
  // A data file, opened for sequential reading (CheckpointError if missing).
  virtual std::unique_ptr<ByteSource> open(const std::string& relative_path) = 0;
  // A data file's size without reading it (CheckpointError if missing).
  virtual uint64_t size_of(const std::string& relative_path) = 0;
};

// A checkpoint directory on disk; `direct_io` reads data files with O_DIRECT where allowed.
std::unique_ptr<CheckpointSource> open_directory(const std::filesystem::path& dir,
                                                 bool direct_io = true);

// Reads the manifest of a checkpoint directory (CheckpointError if missing or malformed).
Manifest read_manifest(const std::filesystem::path& dir);

// Checks that every data file of the listed tables (all shards) is present with the manifest's
// size, without reading it. `tables` (names) restricts the check; empty = every table.
void check_file_sizes(CheckpointSource& source, const Manifest& manifest,
                      const std::vector<std::string>& tables = {});

// Checks every file of the listed shards: present, size, header fields and payload CRC32C.
// `tables` (names) restricts the check; empty = every table. Throws CheckpointError on the
// first problem.
void verify_files(CheckpointSource& source, const Manifest& manifest,
                  const std::vector<std::string>& tables = {});

// What `dynemb inspect` shows: the manifest and whether every file verifies.
struct InspectResult {
  Manifest manifest;
  uint64_t total_bytes = 0;
  bool verified = false;
  std::string problem;  // why it did not verify (empty when verified or not checked)
};

// Reads the manifest and (when `verify`) checks every file; never throws for a bad file
// (reported in `problem`), throws CheckpointError only when the manifest is unreadable.
InspectResult inspect(const std::filesystem::path& dir, bool verify = true);

}  // namespace dynemb::checkpoint

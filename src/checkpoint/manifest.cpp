// manifest.json: writing it, and parsing it with a check of every field.
#include <nlohmann/json.hpp>

#include <cstring>
#include <limits>
#include <set>

#include "crc32c.hpp"
#include "dynemb/checkpoint/format.hpp"

namespace dynemb::checkpoint {
namespace {

using Json = nlohmann::json;

constexpr uint32_t kMaxWorldSize = 1u << 16;
constexpr uint32_t kMaxDim = 1u << 20;
constexpr uint32_t kMaxStateDim = (1u << 21) + 1;
constexpr size_t kMaxNesting = 32;
constexpr size_t kMaxMetadataBytes = 1u << 20;
constexpr char kChecksumKey[] = "\"manifest_crc32c\"";

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

Json file_json(const FileEntry& f) {
  return Json{{"path", f.path}, {"bytes", f.bytes}, {"crc32c", f.crc32c}};
}

// Rejects JSON nested deeper than kMaxNesting before the parser sees it.
void check_nesting(std::string_view text, const std::string& where) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) {
        throw CheckpointError(where + ": JSON nested deeper than " + std::to_string(kMaxNesting));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

// Field access with errors that name the field.
class Fields {
 public:
  Fields(const Json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) throw CheckpointError(where_ + ": expected a JSON object");
  }
  const std::string& where() const { return where_; }

  const Json& at(const char* name) const {
    const auto it = j_.find(name);
    if (it == j_.end()) throw CheckpointError(where_ + ": field \"" + name + "\" is missing");
    return *it;
  }
  bool has(const char* name) const { return j_.contains(name) && !j_.at(name).is_null(); }

  uint64_t u64(const char* name, uint64_t limit = std::numeric_limits<uint64_t>::max()) const {
    const Json& v = at(name);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
      throw CheckpointError(where_ + ": field \"" + name + "\" = " + v.dump(-1) +
                            ", expected an unsigned integer");
    }
    const uint64_t x = v.get<uint64_t>();
    if (x > limit) {
      throw CheckpointError(where_ + ": field \"" + name + "\" = " + std::to_string(x) +
                            ", limit " + std::to_string(limit));
    }
    return x;
  }
  uint32_t u32(const char* name, uint32_t limit = std::numeric_limits<uint32_t>::max()) const {
    return static_cast<uint32_t>(u64(name, limit));
  }
  std::string str(const char* name) const {
    const Json& v = at(name);
    if (!v.is_string()) {
      throw CheckpointError(where_ + ": field \"" + name + "\" = " + v.dump(-1) +
                            ", expected a string");
    }
    return v.get<std::string>();
  }
  bool boolean(const char* name) const {
    const Json& v = at(name);
    if (!v.is_boolean()) {
      throw CheckpointError(where_ + ": field \"" + name + "\" = " + v.dump(-1) +
                            ", expected true or false");
    }
    return v.get<bool>();
  }

 private:
  const Json& j_;
  std::string where_;
};

// A path inside the checkpoint directory: relative, no "..", plain characters.
void check_relative_path(const std::string& path, const std::string& where) {
  bool ok = !path.empty() && path.size() <= 512 && path.front() != '/' && path.front() != '.';
  for (char c : path) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '_' || c == '-' || c == '.' || c == '/';
    ok = ok && plain;
  }
  ok = ok && path.find("..") == std::string::npos && path.find("//") == std::string::npos;
  if (!ok) {
    throw CheckpointError(where + ": path = \"" + path +
                          "\", expected a relative path of [A-Za-z0-9_.-/] without \"..\"");
  }
}

FileEntry parse_file(const Json& j, const std::string& where) {
  const Fields f(j, where);
  FileEntry e;
  e.path = f.str("path");
  check_relative_path(e.path, where);
  e.bytes = f.u64("bytes");
  e.crc32c = f.u32("crc32c");
  return e;
}

// header + rows * width * element bytes, or CheckpointError when it cannot be a file size.
uint64_t expected_bytes(uint64_t rows, uint32_t width, Dtype dtype, const std::string& where) {
  const unsigned __int128 bytes =
      static_cast<unsigned __int128>(rows) * width * dtype_bytes(dtype) + kHeaderBytes;
  if (bytes > (static_cast<unsigned __int128>(1) << 62)) {
    throw CheckpointError(where + ": rows = " + std::to_string(rows) + " x width " +
                          std::to_string(width) + " is too large for a file");
  }
  return static_cast<uint64_t>(bytes);
}

void check_file_size(const FileEntry& f, uint64_t rows, uint32_t width, Dtype dtype,
                     const std::string& where) {
  const uint64_t want = expected_bytes(rows, width, dtype, where);
  if (f.bytes != want) {
    throw CheckpointError(where + ": bytes = " + std::to_string(f.bytes) + ", expected " +
                          std::to_string(want) + " (64-byte header + " + std::to_string(rows) +
                          " rows x " + std::to_string(width) + " " + to_string(dtype) + ")");
  }
}

bool valid_table_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  for (char c : name) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '_' || c == '-' || c == '.';
    if (!plain) return false;
  }
  return true;
}

TableEntry parse_table(const Json& j, uint32_t world_size, const std::string& where_base) {
  const Fields f(j, where_base);
  TableEntry t;
  t.name = f.str("name");
  if (!valid_table_name(t.name)) {
    throw CheckpointError(where_base + ": name = \"" + t.name +
                          "\", expected 1-128 characters of [A-Za-z0-9_.-], not starting with '.'");
  }
  const std::string where = where_base + " (table \"" + t.name + "\")";
  const Fields g(j, where);
  t.key_dtype = parse_dtype(g.str("key_dtype"), where + ": key_dtype");
  if (t.key_dtype == Dtype::kFloat32) {
    throw CheckpointError(where + ": key_dtype = float32, expected int64 or uint64");
  }
  t.value_dtype = parse_dtype(g.str("value_dtype"), where + ": value_dtype");
  if (t.value_dtype != Dtype::kFloat32 && t.value_dtype != Dtype::kFloat16 &&
      t.value_dtype != Dtype::kBFloat16) {
    throw CheckpointError(where + ": value_dtype = " + to_string(t.value_dtype) +
                          ", expected float32, float16 or bfloat16");
  }
  t.dim = g.u32("dim", kMaxDim);
  if (t.dim == 0) throw CheckpointError(where + ": dim = 0, expected >= 1");
  t.optimizer = g.str("optimizer");
  t.optimizer_state_dim = g.u32("optimizer_state_dim", kMaxStateDim);
  if (g.has("optimizer_args")) {
    const Json& args = g.at("optimizer_args");
    if (!args.is_object()) throw CheckpointError(where + ": optimizer_args must be an object");
    for (const auto& [k, v] : args.items()) {
      if (!v.is_number()) {
        throw CheckpointError(where + ": optimizer_args." + k + " = " + v.dump(-1) +
                              ", expected a number");
      }
      t.optimizer_args.emplace_back(k, v.get<double>());
    }
  }
  t.has_optimizer_state = g.boolean("has_optimizer_state");
  if (t.has_optimizer_state && t.optimizer_state_dim == 0) {
    throw CheckpointError(where + ": has_optimizer_state = true with optimizer_state_dim = 0");
  }
  t.score_policy = g.str("score_policy");
  if (t.score_policy != "timestamp" && t.score_policy != "step" && t.score_policy != "lfu" &&
      t.score_policy != "customized") {
    throw CheckpointError(where + ": score_policy = \"" + t.score_policy +
                          "\", expected timestamp, step, lfu or customized");
  }
  t.score = g.u64("score");
  if (g.has("next_min_score")) t.next_min_score = g.u64("next_min_score");
  t.rows = g.u64("rows");
  const Json& shards = g.at("shards");
  if (!shards.is_array() || shards.size() != world_size) {
    throw CheckpointError(where + ": shards has " +
                          (shards.is_array() ? std::to_string(shards.size()) : "no array") +
                          " entries, expected world_size = " + std::to_string(world_size));
  }
  uint64_t sum = 0;
  for (size_t r = 0; r < shards.size(); ++r) {
    const std::string sw = where + " shard " + std::to_string(r);
    const Fields s(shards[r], sw);
    ShardEntry e;
    e.rank = s.u32("rank");
    if (e.rank != r) {
      throw CheckpointError(sw + ": rank = " + std::to_string(e.rank) + ", expected " +
                            std::to_string(r) + " (shards in rank order)");
    }
    e.rows = s.u64("rows");
    e.min_score = s.u64("min_score");
    e.max_score = s.u64("max_score");
    const Fields files(s.at("files"), sw + " files");
    e.keys = parse_file(files.at("keys"), sw + " keys file");
    e.values = parse_file(files.at("values"), sw + " values file");
    e.scores = parse_file(files.at("scores"), sw + " scores file");
    check_file_size(e.keys, e.rows, 1, t.key_dtype, sw + " keys file");
    check_file_size(e.values, e.rows, t.dim, t.value_dtype, sw + " values file");
    check_file_size(e.scores, e.rows, 1, Dtype::kUint64, sw + " scores file");
    if (t.has_optimizer_state) {
      e.optimizer_state = parse_file(files.at("optimizer_state"), sw + " optimizer_state file");
      check_file_size(*e.optimizer_state, e.rows, t.optimizer_state_dim, Dtype::kFloat32,
                      sw + " optimizer_state file");
    }
    if (sum + e.rows < sum) throw CheckpointError(sw + ": rows overflow");
    sum += e.rows;
    t.shards.push_back(std::move(e));
  }
  if (sum != t.rows) {
    throw CheckpointError(where + ": rows = " + std::to_string(t.rows) + ", but the shards hold " +
                          std::to_string(sum));
  }
  return t;
}

}  // namespace

std::string manifest_to_json(const Manifest& m) {
  Json tables = Json::array();
  for (const TableEntry& t : m.tables) {
    Json shards = Json::array();
    for (const ShardEntry& s : t.shards) {
      Json files{{"keys", file_json(s.keys)},
                 {"values", file_json(s.values)},
                 {"scores", file_json(s.scores)}};
      if (s.optimizer_state) files["optimizer_state"] = file_json(*s.optimizer_state);
      shards.push_back(Json{{"rank", s.rank},
                            {"rows", s.rows},
                            {"min_score", s.min_score},
                            {"max_score", s.max_score},
                            {"files", files}});
    }
    Json args = Json::object();
    for (const auto& [k, v] : t.optimizer_args) args[k] = v;
    Json table{{"name", t.name},
               {"key_dtype", to_string(t.key_dtype)},
               {"value_dtype", to_string(t.value_dtype)},
               {"dim", t.dim},
               {"optimizer", t.optimizer},
               {"optimizer_state_dim", t.optimizer_state_dim},
               {"optimizer_args", args},
               {"has_optimizer_state", t.has_optimizer_state},
               {"score_policy", t.score_policy},
               {"score", t.score},
               {"rows", t.rows},
               {"shards", shards}};
    if (t.next_min_score) table["next_min_score"] = *t.next_min_score;
    tables.push_back(std::move(table));
  }
  Json j{{"format", kFormatName},
         {"format_version", m.format_version},
         {"kind", m.delta ? "delta" : "full"},
         {"dump_time_ns", m.dump_time_ns},
         {"world_size", m.world_size},
         {"tables", tables},
         {"metadata", Json::parse(checked_metadata(m.metadata, "manifest metadata"))}};
  if (m.min_score) j["min_score"] = *m.min_score;
  // The checksum goes last, by hand (the JSON writer orders keys by name): it covers every byte
  // before its key, so any reader can check it without re-serializing.
  std::string text = j.dump(2);
  text.resize(text.rfind('}'));
  while (!text.empty() && is_space(text.back())) text.pop_back();
  text += ",\n  ";
  const uint32_t crc = crc32c(text.data(), text.size());
  text += kChecksumKey;
  text += ": " + std::to_string(crc) + "\n}\n";
  return text;
}

std::string manifest_checksum_problem(std::string_view text) {
  const size_t at = text.rfind(kChecksumKey);
  if (at == std::string_view::npos) return "field \"manifest_crc32c\" is missing";
  // After the key: ':' and the decimal checksum, then only the closing brace.
  size_t i = at + std::strlen(kChecksumKey);
  while (i < text.size() && is_space(text[i])) ++i;
  if (i == text.size() || text[i] != ':') return "\"manifest_crc32c\" is not followed by ':'";
  ++i;
  while (i < text.size() && is_space(text[i])) ++i;
  uint64_t stored = 0;
  const size_t digits_at = i;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i - digits_at < 11) {
    stored = stored * 10 + static_cast<uint64_t>(text[i] - '0');
    ++i;
  }
  if (i == digits_at || stored > UINT32_MAX) {
    return "\"manifest_crc32c\" is not an unsigned 32-bit integer";
  }
  while (i < text.size() && is_space(text[i])) ++i;
  if (i == text.size() || text[i] != '}') {
    return "\"manifest_crc32c\" must be the last field (found more after it)";
  }
  ++i;
  while (i < text.size() && is_space(text[i])) ++i;
  if (i != text.size()) return "text after the closing brace";
  const uint32_t actual = crc32c(text.data(), at);
  if (actual != stored) {
    return "manifest_crc32c = " + std::to_string(stored) + ", but the manifest's bytes give " +
           std::to_string(actual) + " (the manifest was changed after it was written)";
  }
  return "";
}

std::string checked_metadata(std::string_view text, const std::string& where) {
  if (text.size() > kMaxMetadataBytes) {
    throw CheckpointError(where + ": " + std::to_string(text.size()) + " bytes, limit " +
                          std::to_string(kMaxMetadataBytes));
  }
  check_nesting(text, where);
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    throw CheckpointError(where + ": expected a JSON object, got '" +
                          std::string(text.substr(0, 80)) + "'");
  }
  return j.dump();
}

Manifest manifest_from_json(std::string_view text, const std::string& where,
                            bool check_own_checksum) {
  check_nesting(text, where);
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw CheckpointError(where + ": not valid JSON");
  const Fields f(j, where);
  if (f.str("format") != kFormatName) {
    throw CheckpointError(where + ": format = \"" + f.str("format") + "\", expected \"" +
                          kFormatName + "\"");
  }
  Manifest m;
  m.format_version = f.u32("format_version");
  if (m.format_version != kFormatVersion) {
    throw CheckpointError(where + ": format_version = " + std::to_string(m.format_version) +
                          ", this build reads version " + std::to_string(kFormatVersion));
  }
  if (check_own_checksum) {
    const std::string problem = manifest_checksum_problem(text);
    if (!problem.empty()) throw CheckpointError(where + ": " + problem);
  }
  const std::string kind = f.str("kind");
  if (kind != "full" && kind != "delta") {
    throw CheckpointError(where + ": kind = \"" + kind + "\", expected \"full\" or \"delta\"");
  }
  m.delta = kind == "delta";
  if (f.has("min_score")) m.min_score = f.u64("min_score");
  if (m.delta && !m.min_score) throw CheckpointError(where + ": a delta needs min_score");
  m.dump_time_ns = f.u64("dump_time_ns");
  m.world_size = f.u32("world_size", kMaxWorldSize);
  if (m.world_size == 0) throw CheckpointError(where + ": world_size = 0, expected >= 1");
  if (f.has("metadata")) {
    if (!f.at("metadata").is_object()) {
      throw CheckpointError(where + ": metadata = " + f.at("metadata").dump(-1).substr(0, 80) +
                            ", expected a JSON object");
    }
    m.metadata = f.at("metadata").dump();
  }
  const Json& tables = f.at("tables");
  if (!tables.is_array()) throw CheckpointError(where + ": tables must be an array");
  std::set<std::string> names, paths;
  for (size_t i = 0; i < tables.size(); ++i) {
    TableEntry t = parse_table(tables[i], m.world_size, where + " table " + std::to_string(i));
    if (!names.insert(t.name).second) {
      throw CheckpointError(where + ": table \"" + t.name + "\" is listed twice");
    }
    for (const ShardEntry& s : t.shards) {
      for (const FileEntry* file : {&s.keys, &s.values, &s.scores}) {
        if (!paths.insert(file->path).second) {
          throw CheckpointError(where + ": file \"" + file->path + "\" is listed twice");
        }
      }
      if (s.optimizer_state && !paths.insert(s.optimizer_state->path).second) {
        throw CheckpointError(where + ": file \"" + s.optimizer_state->path + "\" is listed twice");
      }
    }
    m.tables.push_back(std::move(t));
  }
  return m;
}

FileHeader expected_header(const TableEntry& t, const ShardEntry& s, FileContent content,
                           uint32_t world_size) {
  FileHeader h;
  h.content = content;
  h.rows = s.rows;
  h.rank = s.rank;
  h.world_size = world_size;
  switch (content) {
    case FileContent::kKeys:
      h.dtype = t.key_dtype;
      h.width = 1;
      break;
    case FileContent::kValues:
      h.dtype = t.value_dtype;
      h.width = t.dim;
      break;
    case FileContent::kScores:
      h.dtype = Dtype::kUint64;
      h.width = 1;
      break;
    case FileContent::kOptimizerState:
      h.dtype = Dtype::kFloat32;
      h.width = t.optimizer_state_dim;
      break;
  }
  return h;
}

}  // namespace dynemb::checkpoint

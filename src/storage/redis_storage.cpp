#include "dynemb/storage/redis_storage.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "dynemb/core/hash.hpp"

namespace dynemb::storage {
namespace {

constexpr uint32_t kFormatVersion = 1;

// One server's commands of a call, already in the wire format (RESP), so rows are copied once.
struct Pipeline {
  std::string resp;
  size_t count = 0;  // commands in resp
  bool empty() const { return count == 0; }
  size_t size() const { return count; }

  // Starts a command of `args` arguments (the command's name included).
  void begin(size_t args) {
    resp += '*';
    resp += std::to_string(args);
    resp += "\r\n";
    ++count;
  }
  // Appends one argument made of two pieces (e.g. score + row, or prefix + key bytes).
  void arg(const void* a, size_t na, const void* b = nullptr, size_t nb = 0) {
    resp += '$';
    resp += std::to_string(na + nb);
    resp += "\r\n";
    resp.append(static_cast<const char*>(a), na);
    if (nb > 0) resp.append(static_cast<const char*>(b), nb);
    resp += "\r\n";
  }
  void arg(std::string_view a) { arg(a.data(), a.size()); }
  // A whole command of string arguments.
  void command(std::initializer_list<std::string_view> args) {
    begin(args.size());
    for (const std::string_view a : args) arg(a);
  }
};

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// The connection failed (dropped, refused, timed out): the server's part may be sent again.
struct ConnectionLost {
  std::string why;
};

std::string marker_value(uint32_t row_dim) {
  return "dynemb-storage format=" + std::to_string(kFormatVersion) +
         " row_dim=" + std::to_string(row_dim);
}

}  // namespace

struct RedisStorage::Connection {
  std::string host;
  int port = 0;
  uint32_t timeout_ms = 0;
  redisContext* ctx = nullptr;

  std::string name() const { return host + ":" + std::to_string(port); }

  void close() {
    if (ctx != nullptr) redisFree(ctx);
    ctx = nullptr;
  }
  ~Connection() { close(); }

  void connect() {
    close();
    timeval tv{static_cast<time_t>(timeout_ms / 1000),
               static_cast<suseconds_t>((timeout_ms % 1000) * 1000)};
    ctx = redisConnectWithTimeout(host.c_str(), port, tv);
    if (ctx == nullptr) throw ConnectionLost{"cannot allocate a connection"};
    if (ctx->err != 0) {
      const std::string why = ctx->errstr;
      close();
      throw ConnectionLost{"connect: " + why};
    }
    redisSetTimeout(ctx, tv);
    // Keep the reply buffer between replies: a batch's replies are far larger than hiredis's
    // default threshold (16 KiB), above which it frees and regrows the buffer every time.
    ctx->reader->maxbuf = 0;
  }

  void append(const Pipeline& commands) {
    if (ctx == nullptr) connect();
    if (redisAppendFormattedCommand(ctx, commands.resp.data(), commands.resp.size()) != REDIS_OK) {
      const std::string why = ctx->errstr;
      close();
      throw ConnectionLost{"append: " + why};
    }
  }

  std::vector<Reply> read(size_t count) {
    std::vector<Reply> replies;
    replies.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      void* r = nullptr;
      if (ctx == nullptr || redisGetReply(ctx, &r) != REDIS_OK) {
        const std::string why = ctx != nullptr ? ctx->errstr : "not connected";
        close();
        throw ConnectionLost{"reply: " + why};
      }
      replies.emplace_back(static_cast<redisReply*>(r));
    }
    return replies;
  }
};

namespace {

// Sends every server its commands as one pipeline (all servers first, then the replies); a
// server whose connection fails is reconnected and its part sent once more. Throws StorageError
// naming the server if that fails too, or if a reply is an error.
std::vector<std::vector<Reply>> exchange(
    std::vector<std::unique_ptr<RedisStorage::Connection>>& servers,
    const std::vector<Pipeline>& commands, const std::string& what) {
  const size_t s_count = servers.size();
  std::vector<std::vector<Reply>> replies(s_count);
  std::vector<bool> retry(s_count, false);
  for (size_t s = 0; s < s_count; ++s) {
    if (commands[s].empty()) continue;
    try {
      servers[s]->append(commands[s]);
    } catch (const ConnectionLost&) {
      retry[s] = true;
    }
  }
  for (size_t s = 0; s < s_count; ++s) {
    if (commands[s].empty() || retry[s]) continue;
    try {
      replies[s] = servers[s]->read(commands[s].size());
    } catch (const ConnectionLost&) {
      retry[s] = true;
    }
  }
  for (size_t s = 0; s < s_count; ++s) {
    if (!retry[s]) continue;
    try {
      servers[s]->connect();
      servers[s]->append(commands[s]);
      replies[s] = servers[s]->read(commands[s].size());
    } catch (const ConnectionLost& lost) {
      throw StorageError("RedisStorage: server " + servers[s]->name() + " unavailable during " +
                         what + " (" + lost.why +
                         "); the batch did not complete: retry it once the server is back");
    }
  }
  for (size_t s = 0; s < s_count; ++s) {
    for (const Reply& r : replies[s]) {
      if (r && r->type == REDIS_REPLY_ERROR) {
        throw StorageError("RedisStorage: server " + servers[s]->name() + " refused " + what +
                           ": " + std::string(r->str, r->len));
      }
    }
  }
  return replies;
}

}  // namespace

RedisStorage::RedisStorage(const RedisStorageOptions& options)
    : options_(options), row_dim_(options.row_dim) {
  require(options.row_dim > 0, "RedisStorage", "row_dim", std::to_string(options.row_dim),
          "must be > 0");
  require(!options.servers.empty(), "RedisStorage", "servers", "[]", "must name >= 1 host:port");
  require(options.keys_per_command > 0, "RedisStorage", "keys_per_command", "0", "must be > 0");
  for (const std::string& server : options.servers) {
    const size_t colon = server.rfind(':');
    int port = 0;
    if (colon != std::string::npos) {
      try {
        port = std::stoi(server.substr(colon + 1));
      } catch (const std::exception&) {
        port = 0;
      }
    }
    require(colon != std::string::npos && colon > 0 && port > 0 && port < 65536, "RedisStorage",
            "servers", "\"" + server + "\"", "must be host:port with a port in [1, 65535]");
    auto c = std::make_unique<Connection>();
    c->host = server.substr(0, colon);
    c->port = port;
    c->timeout_ms = options.timeout_ms;
    servers_.push_back(std::move(c));
  }
  // Mark every server as ours (SET NX), then check the marker each holds.
  const std::string meta = options_.prefix + ":meta";
  std::vector<Pipeline> cmds(servers_.size());
  const std::string marker = marker_value(row_dim_);
  for (auto& c : cmds) {
    c.command({"SET", meta, marker, "NX"});
    c.command({"GET", meta});
  }
  const auto replies = exchange(servers_, cmds, "opening (marker " + meta + ")");
  for (size_t s = 0; s < servers_.size(); ++s) {
    const redisReply* r = replies[s][1].get();
    const std::string got = r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : "";
    if (got != marker_value(row_dim_)) {
      throw StorageError("RedisStorage: server " + servers_[s]->name() + " key " + meta +
                         " holds \"" + got + "\", expected \"" + marker_value(row_dim_) +
                         "\" (another row width, format, or not ours: use another prefix)");
    }
  }
}

RedisStorage::~RedisStorage() = default;

std::string RedisStorage::describe() const {
  std::string out = "redis:";
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (s > 0) out += ',';
    out += servers_[s]->name();
  }
  return out;
}

size_t RedisStorage::server_of(uint64_t key) const {
  return static_cast<size_t>(mul_hi64(hash_key_bits(key ^ 0x5bd1e9955bd1e995ull), servers_.size()));
}

std::string RedisStorage::key_bytes(uint64_t key) {
  std::string k(8, '\0');
  for (int b = 0; b < 8; ++b) k[b] = static_cast<char>(key >> (56 - 8 * b));
  return k;
}

void RedisStorage::fail(const std::string& what) {
  {
    std::lock_guard lock(mutex_);
    stats_.failures += 1;
  }
  throw StorageError(what);
}

void RedisStorage::find(size_t n, const uint64_t* keys, float* values, uint64_t* scores,
                        bool* founds) {
  if (n == 0) return;
  require(keys && values && scores && founds, "RedisStorage::find", "keys/values/scores/founds",
          "nullptr", "must be non-null when n = " + std::to_string(n));
  std::lock_guard call(call_mutex_);
  StorageCallTimer timer(stats_, mutex_);
  const size_t s_count = servers_.size();
  std::vector<std::vector<size_t>> index(s_count);  // batch positions per server, in order
  for (size_t i = 0; i < n; ++i) index[server_of(keys[i])].push_back(i);
  std::vector<Pipeline> cmds(s_count);
  const size_t per = options_.keys_per_command;
  const std::string prefix = options_.prefix + ":r:";
  for (size_t s = 0; s < s_count; ++s) {
    cmds[s].resp.reserve(index[s].size() * (prefix.size() + 16) + 64);
    for (size_t b = 0; b < index[s].size(); b += per) {
      const size_t end = std::min(index[s].size(), b + per);
      cmds[s].begin(1 + end - b);
      cmds[s].arg("MGET");
      for (size_t j = b; j < end; ++j) {
        const std::string k = key_bytes(keys[index[s][j]]);
        cmds[s].arg(prefix.data(), prefix.size(), k.data(), 8);
      }
    }
  }
  std::vector<std::vector<Reply>> replies;
  try {
    replies = exchange(servers_, cmds, "MGET of " + std::to_string(n) + " keys");
  } catch (const StorageError& e) {
    fail(e.what());
  }
  const size_t row_bytes = row_dim_ * sizeof(float);
  size_t found = 0;
  for (size_t s = 0; s < s_count; ++s) {
    size_t j = 0;
    for (const Reply& r : replies[s]) {
      for (size_t e = 0; e < r->elements; ++e, ++j) {
        const size_t i = index[s][j];
        const redisReply* v = r->element[e];
        if (v->type != REDIS_REPLY_STRING) {
          founds[i] = false;
          continue;
        }
        if (v->len != 8 + row_bytes)
          fail("RedisStorage: server " + servers_[s]->name() + " key " + std::to_string(keys[i]) +
               ": value of " + std::to_string(v->len) + " bytes, expected " +
               std::to_string(8 + row_bytes));
        std::memcpy(&scores[i], v->str, 8);
        std::memcpy(values + i * row_dim_, v->str + 8, row_bytes);
        founds[i] = true;
        ++found;
      }
    }
  }
  std::lock_guard lock(mutex_);
  stats_.reads += 1;
  stats_.rows_read += n;
  stats_.rows_found += found;
  stats_.bytes_read += found * (8 + row_bytes);
}

void RedisStorage::write(size_t n_put, const uint64_t* put_keys, const float* put_values,
                         const uint64_t* put_scores, size_t n_erase, const uint64_t* erase_keys) {
  if (n_put == 0 && n_erase == 0) return;
  require(n_put == 0 || (put_keys && put_values && put_scores), "RedisStorage::write",
          "put_keys / put_values / put_scores", "nullptr",
          "must be non-null when n_put = " + std::to_string(n_put));
  require(n_erase == 0 || erase_keys, "RedisStorage::write", "erase_keys", "nullptr",
          "must be non-null when n_erase = " + std::to_string(n_erase));
  std::lock_guard call(call_mutex_);
  StorageCallTimer timer(stats_, mutex_);
  const size_t s_count = servers_.size();
  const size_t per = options_.keys_per_command;
  const size_t row_bytes = row_dim_ * sizeof(float);
  std::vector<Pipeline> cmds(s_count);
  const std::string prefix = options_.prefix + ":r:";
  // Erases first, then puts, on each server's one connection: a key in both ends up stored.
  std::vector<std::vector<size_t>> erase_at(s_count), put_at(s_count);
  for (size_t i = 0; i < n_erase; ++i) erase_at[server_of(erase_keys[i])].push_back(i);
  for (size_t i = 0; i < n_put; ++i) put_at[server_of(put_keys[i])].push_back(i);
  for (size_t s = 0; s < s_count; ++s) {
    Pipeline& p = cmds[s];
    p.resp.reserve(erase_at[s].size() * (prefix.size() + 16) +
                   put_at[s].size() * (prefix.size() + 40 + row_bytes) + 64);
    for (size_t b = 0; b < erase_at[s].size(); b += per) {
      const size_t end = std::min(erase_at[s].size(), b + per);
      p.begin(1 + end - b);
      p.arg("DEL");
      for (size_t j = b; j < end; ++j) {
        const std::string k = key_bytes(erase_keys[erase_at[s][j]]);
        p.arg(prefix.data(), prefix.size(), k.data(), 8);
      }
    }
    for (size_t b = 0; b < put_at[s].size(); b += per) {
      const size_t end = std::min(put_at[s].size(), b + per);
      p.begin(1 + 2 * (end - b));
      p.arg("MSET");
      for (size_t j = b; j < end; ++j) {
        const size_t i = put_at[s][j];
        const std::string k = key_bytes(put_keys[i]);
        p.arg(prefix.data(), prefix.size(), k.data(), 8);
        p.arg(&put_scores[i], 8, put_values + i * row_dim_, row_bytes);
      }
    }
  }
  try {
    exchange(
        servers_, cmds,
        "write of " + std::to_string(n_put) + " rows and " + std::to_string(n_erase) + " erases");
  } catch (const StorageError& e) {
    fail(e.what());
  }
  std::lock_guard lock(mutex_);
  stats_.writes += 1;
  stats_.rows_written += n_put;
  stats_.rows_erased += n_erase;
  stats_.bytes_written += n_put * (8 + row_bytes);
}

size_t RedisStorage::scan(ScanCursor& cursor, size_t max_rows, uint64_t* keys, float* values,
                          uint64_t* scores) {
  // position = "<server>:<redis cursor>|<keys SCAN returned not yet handed out, comma list>"
  size_t server = 0;
  std::string redis_cursor = "0";
  std::vector<uint64_t> pending;
  if (!cursor.position.empty()) {
    const size_t colon = cursor.position.find(':');
    const size_t bar = cursor.position.find('|');
    server = std::stoull(cursor.position.substr(0, colon));
    redis_cursor = cursor.position.substr(colon + 1, bar - colon - 1);
    for (size_t p = bar + 1; p < cursor.position.size();) {
      size_t end = cursor.position.find(',', p);
      if (end == std::string::npos) end = cursor.position.size();
      pending.push_back(std::stoull(cursor.position.substr(p, end - p)));
      p = end + 1;
    }
  }
  if (max_rows == 0) return 0;
  if (pending.empty() && server < servers_.size()) {
    std::lock_guard call(call_mutex_);
    std::vector<Pipeline> cmds(servers_.size());
    const std::string match = options_.prefix + ":r:*", count = std::to_string(max_rows);
    cmds[server].command({"SCAN", redis_cursor, "MATCH", match, "COUNT", count});
    std::vector<std::vector<Reply>> replies;
    try {
      replies = exchange(servers_, cmds, "SCAN");
    } catch (const StorageError& e) {
      fail(e.what());
    }
    const redisReply* r = replies[server][0].get();
    redis_cursor = std::string(r->element[0]->str, r->element[0]->len);
    const size_t key_prefix = options_.prefix.size() + 3;
    for (size_t e = 0; e < r->element[1]->elements; ++e) {
      const redisReply* k = r->element[1]->element[e];
      if (k->len != key_prefix + 8) continue;
      uint64_t key = 0;
      for (size_t b = 0; b < 8; ++b)
        key = (key << 8) | static_cast<unsigned char>(k->str[key_prefix + b]);
      pending.push_back(key);
    }
    if (redis_cursor == "0") ++server;
  }
  const size_t m = std::min(max_rows, pending.size());
  size_t got = 0;
  if (m > 0) {
    std::unique_ptr<bool[]> f(new bool[m]);
    find(m, pending.data(), values, scores, f.get());
    for (size_t i = 0; i < m; ++i) {
      if (!f[i]) continue;  // erased since the SCAN
      keys[got] = pending[i];
      scores[got] = scores[i];
      if (got != i)
        std::memmove(values + got * row_dim_, values + i * row_dim_, row_dim_ * sizeof(float));
      ++got;
    }
  }
  std::string position = std::to_string(server) + ":" + redis_cursor + "|";
  for (size_t i = m; i < pending.size(); ++i) {
    if (i > m) position += ',';
    position += std::to_string(pending[i]);
  }
  cursor.position = std::move(position);
  cursor.finished = server >= servers_.size() && m == pending.size();
  return got;
}

size_t RedisStorage::size() {
  size_t count = 0;
  ScanCursor cursor;
  std::vector<uint64_t> keys(4096), scores(4096);
  std::vector<float> values(4096 * row_dim_);
  // SCAN may return a key twice while the keyspace rehashes: count distinct keys.
  std::vector<uint64_t> all;
  while (!cursor.done()) {
    const size_t got = scan(cursor, 1024, keys.data(), values.data(), scores.data());
    all.insert(all.end(), keys.begin(), keys.begin() + got);
  }
  std::sort(all.begin(), all.end());
  count = static_cast<size_t>(std::unique(all.begin(), all.end()) - all.begin());
  return count;
}

void RedisStorage::clear() {
  ScanCursor cursor;
  std::vector<uint64_t> keys(4096), scores(4096);
  std::vector<float> values(4096 * row_dim_);
  std::vector<uint64_t> all;
  while (!cursor.done()) {
    const size_t got = scan(cursor, 1024, keys.data(), values.data(), scores.data());
    all.insert(all.end(), keys.begin(), keys.begin() + got);
  }
  erase(all.size(), all.data());
}

StorageStats RedisStorage::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace dynemb::storage

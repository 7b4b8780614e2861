// The format's building blocks: CRC32C against a bit-at-a-time reference, the data-file header
// codec and the manifest's JSON round trip and checks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint/crc32c.hpp"
#include "core/test_random.hpp"
#include "dynemb/checkpoint/format.hpp"

namespace dynemb::testing {
namespace {

namespace ckpt = dynemb::checkpoint;

// CRC32C one bit at a time, straight from the definition (reflected polynomial 0x82F63B78).
uint32_t reference_crc32c(const std::vector<uint8_t>& bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (uint8_t b : bytes) {
    c ^= b;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

TEST(CheckpointCrc32c, MatchesTheDefinitionInAnySplit) {
  TestRng rng;
  // The standard check value of CRC-32C (RFC 3720): "123456789".
  const std::string check = "123456789";
  EXPECT_EQ(ckpt::crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(ckpt::crc32c(check.data(), check.size()),
            reference_crc32c(std::vector<uint8_t>(check.begin(), check.end())));
  for (int round = 0; round < 200; ++round) {
    std::vector<uint8_t> bytes(rng.uniform(0, 3000));
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng.next());
    const size_t offset = bytes.empty() ? 0 : rng.uniform(0, bytes.size());
    // Unaligned starts and any split give the same checksum.
    uint32_t c = ckpt::crc32c_extend(0, bytes.data(), offset);
    c = ckpt::crc32c_extend(c, bytes.data() + offset, bytes.size() - offset);
    EXPECT_EQ(c, reference_crc32c(bytes)) << "size " << bytes.size() << " split " << offset;
  }
}

TEST(CheckpointHeader, RoundTripsAndRejectsDamage) {
  TestRng rng;
  ckpt::FileHeader h;
  h.content = ckpt::FileContent::kOptimizerState;
  h.dtype = ckpt::Dtype::kFloat32;
  h.width = static_cast<uint32_t>(rng.uniform(1, 1u << 20));
  h.rows = rng.next() >> 8;
  h.rank = static_cast<uint32_t>(rng.uniform(0, 100));
  h.world_size = h.rank + 1;
  uint8_t bytes[ckpt::kHeaderBytes];
  ckpt::encode_header(h, bytes);
  const ckpt::FileHeader back = ckpt::decode_header(bytes, "f");
  EXPECT_EQ(back.content, h.content);
  EXPECT_EQ(back.dtype, h.dtype);
  EXPECT_EQ(back.width, h.width);
  EXPECT_EQ(back.rows, h.rows);
  EXPECT_EQ(back.rank, h.rank);
  EXPECT_EQ(back.world_size, h.world_size);
  for (size_t at = 0; at < 64; ++at) {
    uint8_t damaged[ckpt::kHeaderBytes];
    std::copy(bytes, bytes + ckpt::kHeaderBytes, damaged);
    damaged[at] ^= static_cast<uint8_t>(1u << rng.uniform(0, 7));
    // Every byte is covered by the magic or the header CRC (reserved bytes included).
    EXPECT_THROW(ckpt::decode_header(damaged, "f"), ckpt::CheckpointError) << "byte " << at;
  }
}

ckpt::Manifest sample_manifest(TestRng& rng) {
  ckpt::Manifest m;
  m.world_size = static_cast<uint32_t>(rng.uniform(1, 4));
  m.dump_time_ns = rng.next() >> 1;
  m.delta = rng.chance(0.5);
  if (m.delta) m.min_score = rng.uniform(0, 1000);
  for (int t = 0; t < 2; ++t) {
    ckpt::TableEntry e;
    e.name = "table_" + std::to_string(t);
    e.key_dtype = t == 0 ? ckpt::Dtype::kInt64 : ckpt::Dtype::kUint64;
    e.dim = static_cast<uint32_t>(rng.uniform(1, 300));
    e.optimizer = t == 0 ? "adam" : "";
    e.optimizer_state_dim = t == 0 ? 2 * e.dim + 1 : 0;
    e.has_optimizer_state = t == 0;
    if (t == 0) e.optimizer_args = {{"learning_rate", 0.25}, {"beta1", 0.5}};
    e.score_policy = "step";
    e.score = rng.uniform(0, 1u << 30);
    e.next_min_score = e.score;
    for (uint32_t r = 0; r < m.world_size; ++r) {
      ckpt::ShardEntry s;
      s.rank = r;
      s.rows = rng.uniform(0, 1000);
      s.min_score = 1;
      s.max_score = 2;
      auto file = [&](const char* what, uint32_t width, uint32_t elem) {
        return ckpt::FileEntry{e.name + "/rank-" + std::to_string(r) + "." + what,
                               64 + s.rows * width * elem, static_cast<uint32_t>(rng.next())};
      };
      s.keys = file("keys", 1, 8);
      s.values = file("values", e.dim, 4);
      s.scores = file("scores", 1, 8);
      if (e.has_optimizer_state)
        s.optimizer_state = file("optimizer_state", e.optimizer_state_dim, 4);
      e.rows += s.rows;
      e.shards.push_back(s);
    }
    m.tables.push_back(e);
  }
  return m;
}

TEST(CheckpointManifest, JsonRoundTrip) {
  TestRng rng;
  const ckpt::Manifest m = sample_manifest(rng);
  const ckpt::Manifest back = ckpt::manifest_from_json(ckpt::manifest_to_json(m), "m");
  EXPECT_EQ(ckpt::manifest_to_json(back), ckpt::manifest_to_json(m));
  ASSERT_EQ(back.tables.size(), 2u);
  EXPECT_EQ(back.tables[0].shards.size(), m.world_size);
  EXPECT_EQ(back.tables[0].optimizer_args.size(), 2u);
}

TEST(CheckpointManifest, RejectsInconsistentFields) {
  TestRng rng;
  auto expect_rejected = [](const ckpt::Manifest& m, const std::string& fragment) {
    try {
      ckpt::manifest_from_json(ckpt::manifest_to_json(m), "m");
      ADD_FAILURE() << "accepted; expected: " << fragment;
    } catch (const ckpt::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  ckpt::Manifest m = sample_manifest(rng);
  m.tables[0].rows += 1;
  expect_rejected(m, "but the shards hold");
  m = sample_manifest(rng);
  m.tables[1].shards[0].values.bytes += 4;
  expect_rejected(m, "values file: bytes");
  m = sample_manifest(rng);
  m.tables[0].shards[0].keys.path = "../../etc/passwd";
  expect_rejected(m, "without \"..\"");
  m = sample_manifest(rng);
  m.tables[1].name = m.tables[0].name;
  expect_rejected(m, "listed twice");
  m = sample_manifest(rng);
  m.format_version = 1;
  expect_rejected(m, "format_version = 1");
  m = sample_manifest(rng);
  m.tables[0].score_policy = "lru";
  expect_rejected(m, "score_policy");
  EXPECT_THROW(ckpt::manifest_from_json(std::string(100, '['), "m"), ckpt::CheckpointError);
  EXPECT_THROW(ckpt::manifest_from_json("{}", "m"), ckpt::CheckpointError);
}

// The manifest carries its own checksum: any change to its text after writing is refused by
// the parser (and reported by manifest_checksum_problem), whatever byte is changed.
TEST(CheckpointManifest, OwnChecksumCatchesEveryEdit) {
  TestRng rng;
  ckpt::Manifest m = sample_manifest(rng);
  m.metadata = R"({"run":"abc","steps":12})";
  const std::string text = ckpt::manifest_to_json(m);
  EXPECT_EQ(ckpt::manifest_checksum_problem(text), "");
  EXPECT_EQ(ckpt::manifest_from_json(text, "m").metadata, m.metadata);
  // A changed digit or letter anywhere before the checksum.
  for (int trial = 0; trial < 200; ++trial) {
    std::string edited = text;
    const size_t at = rng.uniform(0, text.rfind("\"manifest_crc32c\"") - 1);
    const char c = edited[at];
    if (c >= '0' && c <= '8') {
      edited[at] = static_cast<char>(c + 1);
    } else if (c >= 'a' && c <= 'y') {
      edited[at] = static_cast<char>(c + 1);
    } else {
      continue;
    }
    EXPECT_NE(ckpt::manifest_checksum_problem(edited), "") << "edit at " << at;
    EXPECT_THROW(ckpt::manifest_from_json(edited, "m"), ckpt::CheckpointError) << "edit at " << at;
  }
  // The checksum field itself: removed, changed, or followed by more fields.
  const size_t key = text.rfind("\"manifest_crc32c\"");
  EXPECT_NE(ckpt::manifest_checksum_problem(text.substr(0, key) + "\"x\": 1\n}\n"), "");
  std::string wrong = text;
  wrong[text.rfind('}') - 2] = wrong[text.rfind('}') - 2] == '1' ? '2' : '1';
  EXPECT_NE(ckpt::manifest_checksum_problem(wrong), "");
  std::string more = text.substr(0, text.rfind('}')) + ", \"extra\": 1}\n";
  EXPECT_NE(ckpt::manifest_checksum_problem(more).find("last field"), std::string::npos);
  // Whitespace after the closing brace is not content.
  EXPECT_EQ(ckpt::manifest_checksum_problem(text + "\n"), "");
  // Metadata must be a JSON object.
  EXPECT_THROW(ckpt::checked_metadata("[1]", "md"), ckpt::CheckpointError);
  EXPECT_THROW(ckpt::checked_metadata("{", "md"), ckpt::CheckpointError);
  EXPECT_EQ(ckpt::checked_metadata(R"({ "a" : 1 })", "md"), R"({"a":1})");
}

}  // namespace
}  // namespace dynemb::testing

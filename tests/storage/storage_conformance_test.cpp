// Every Storage (host memory, RocksDB, Redis on two loopback servers, the user's std::map store)
// against a std::map model: batched find / write / erase, scans, size, clear, dump / load.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "core/test_random.hpp"
#include "storage/storage_kinds.hpp"

namespace dynemb::testing {
namespace {

using storage::ScanCursor;
using storage::Storage;

struct ModelRow {
  std::vector<float> row;
  uint64_t score;
};
using Model = std::map<uint64_t, ModelRow>;

template <class Kind>
class StorageConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = kind_.skip_reason(); !why.empty()) GTEST_SKIP() << why;
  }
  Kind kind_;
};

using Kinds = ::testing::Types<HostKind, RocksDbKind, RedisKind, MapKind>;
TYPED_TEST_SUITE(StorageConformance, Kinds, KindName);

// A key from a small range (so batches hit, miss and repeat) or anywhere in 64 bits.
uint64_t draw_key(TestRng& rng) {
  if (rng.chance(0.8)) return rng.uniform(0, 3000);
  return rng.uniform(0, 0xFFFFFFFFFFFFFFEFull);
}

// Every row a full scan returns, checked against the model (each key once, rows equal).
void expect_scan_matches(Storage& s, const Model& model, size_t max_rows) {
  const uint32_t dim = s.row_dim();
  std::vector<uint64_t> keys(max_rows), scores(max_rows);
  std::vector<float> values(max_rows * dim);
  std::set<uint64_t> seen;
  ScanCursor cursor;
  while (!cursor.done()) {
    const size_t got = s.scan(cursor, max_rows, keys.data(), values.data(), scores.data());
    ASSERT_LE(got, max_rows);
    for (size_t i = 0; i < got; ++i) {
      const auto it = model.find(keys[i]);
      ASSERT_NE(it, model.end()) << "scan returned key " << keys[i] << " the model lacks";
      seen.insert(keys[i]);
      EXPECT_EQ(scores[i], it->second.score);
      for (uint32_t c = 0; c < dim; ++c) ASSERT_EQ(values[i * dim + c], it->second.row[c]);
    }
  }
  EXPECT_EQ(seen.size(), model.size());
}

TYPED_TEST(StorageConformance, RandomBatchesMatchMapModel) {
  TestRng rng;
  const uint32_t dim = static_cast<uint32_t>(rng.uniform(1, 33));
  auto s = this->kind_.make(dim);
  EXPECT_EQ(s->row_dim(), dim);
  Model model;
  for (int round = 0; round < 40; ++round) {
    // A write: puts (with repeats: the last one wins) and erases (some of absent keys).
    const size_t n_put = rng.uniform(0, 400), n_erase = rng.uniform(0, 100);
    std::vector<uint64_t> pk(n_put), ps(n_put), ek(n_erase);
    std::vector<float> pv(n_put * dim);
    for (size_t i = 0; i < n_put; ++i) {
      pk[i] = draw_key(rng);
      ps[i] = rng.next();
      for (uint32_t c = 0; c < dim; ++c)
        pv[i * dim + c] = static_cast<float>(rng.next() % 1000) / 7.0f;
    }
    for (auto& k : ek) k = draw_key(rng);
    s->write(n_put, pk.data(), pv.data(), ps.data(), n_erase, ek.data());
    for (const uint64_t k : ek) model.erase(k);
    for (size_t i = 0; i < n_put; ++i)
      model[pk[i]] =
          ModelRow{std::vector<float>(pv.begin() + i * dim, pv.begin() + (i + 1) * dim), ps[i]};
    // A find of a mix of stored and absent keys: absent rows stay as they were.
    const size_t n = rng.uniform(1, 500);
    std::vector<uint64_t> fk(n), fs(n, 7);
    std::vector<float> fv(n * dim, -1.0f);
    std::unique_ptr<bool[]> found(new bool[n]);
    for (auto& k : fk) k = draw_key(rng);
    s->find(n, fk.data(), fv.data(), fs.data(), found.get());
    for (size_t i = 0; i < n; ++i) {
      const auto it = model.find(fk[i]);
      ASSERT_EQ(found[i], it != model.end()) << "key " << fk[i];
      if (!found[i]) {
        EXPECT_EQ(fs[i], 7u);
        EXPECT_EQ(fv[i * dim], -1.0f);
        continue;
      }
      EXPECT_EQ(fs[i], it->second.score);
      for (uint32_t c = 0; c < dim; ++c) ASSERT_EQ(fv[i * dim + c], it->second.row[c]);
    }
  }
  EXPECT_EQ(s->size(), model.size());
  expect_scan_matches(*s, model, 1 + rng.uniform(0, 700));
  const storage::StorageStats st = s->stats();
  EXPECT_GT(st.rows_written, 0u);
  EXPECT_EQ(st.failures, 0u);
  s->flush();
  s->clear();
  EXPECT_EQ(s->size(), 0u);
  expect_scan_matches(*s, {}, 64);
}

TYPED_TEST(StorageConformance, KeyInPutAndEraseEndsUpStored) {
  auto s = this->kind_.make(2);
  const uint64_t k = 42, score = 9;
  const float row[2] = {1.5f, -2.0f};
  s->write(1, &k, row, &score, 1, &k);
  float out[2] = {0, 0};
  uint64_t sc = 0;
  bool found = false;
  s->find(1, &k, out, &sc, &found);
  EXPECT_TRUE(found);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(sc, 9u);
  s->erase(1, &k);
  s->find(1, &k, out, &sc, &found);
  EXPECT_FALSE(found);
  s->write(0, nullptr, nullptr, nullptr, 0, nullptr);  // empty batch: no-op
  s->find(0, nullptr, nullptr, nullptr, nullptr);
}

TYPED_TEST(StorageConformance, DumpAndLoadRoundTrip) {
  TestRng rng;
  const uint32_t dim = static_cast<uint32_t>(rng.uniform(1, 16));
  auto s = this->kind_.make(dim);
  Model model;
  const size_t n = 5000;
  std::vector<uint64_t> keys(n), scores(n);
  std::vector<float> values(n * dim);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = rng.next() >> 1;
    scores[i] = rng.next();
    for (uint32_t c = 0; c < dim; ++c) values[i * dim + c] = static_cast<float>(rng.next() % 997);
    model[keys[i]] = ModelRow{
        std::vector<float>(values.begin() + i * dim, values.begin() + (i + 1) * dim), scores[i]};
  }
  s->insert_or_assign(n, keys.data(), values.data(), scores.data());
  StorageTempDir dir;
  const auto file = dir.path() / "rows.bin";
  EXPECT_EQ(storage::dump_storage(*s, file), model.size());
  s->clear();
  EXPECT_EQ(storage::load_storage(*s, file), model.size());
  expect_scan_matches(*s, model, 1000);

  // Another row width: refused, the store unchanged.
  auto other = this->kind_.make(dim + 1);
  EXPECT_THROW(storage::load_storage(*other, file), InvalidArgument);
  EXPECT_EQ(other->size(), 0u);
  // A flipped byte: refused before anything is stored.
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c = 0;
    f.read(&c, 1);
    f.seekp(100);
    c = static_cast<char>(c ^ 0x40);
    f.write(&c, 1);
  }
  s->clear();
  try {
    storage::load_storage(*s, file);
    ADD_FAILURE() << "a corrupt dump loaded";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s->size(), 0u);
  // A truncated file.
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 5);
  EXPECT_THROW(storage::load_storage(*s, file), InvalidArgument);
}

TEST(HostStorage, FullStoreEvictsLowestScoresAndCountsThem) {
  HostKind kind;
  auto s = kind.make(1, 128);  // one bucket
  std::vector<uint64_t> keys(200), scores(200);
  std::vector<float> values(200);
  for (size_t i = 0; i < 200; ++i) {
    keys[i] = i;
    scores[i] = 1000 + i;
    values[i] = static_cast<float>(i);
  }
  s->insert_or_assign(200, keys.data(), values.data(), scores.data());
  EXPECT_EQ(s->size(), 128u);
  EXPECT_EQ(s->stats().evicted, 72u);
  std::unique_ptr<bool[]> found(new bool[200]);
  s->find(200, keys.data(), values.data(), scores.data(), found.get());
  for (size_t i = 0; i < 200; ++i) EXPECT_EQ(found[i], i >= 72) << i;  // the highest scores stay
}

TEST(HostStorage, BadOptionsNameTheField) {
  storage::HostStorageOptions o;
  try {
    storage::HostStorage s(o);
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("row_dim"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dynemb::testing

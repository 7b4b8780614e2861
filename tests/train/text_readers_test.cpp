// The Criteo / libsvm / libffm line parsers: keys carry the field in the high bits and a hash
// of the value, values and labels as written, malformed lines named by file:line.
#include <gtest/gtest.h>

#include "dynemb/core/error.hpp"
#include "train/feature_key.hpp"
#include "train/text_readers.hpp"

namespace dynemb::train {
namespace {

TEST(TrainReaders, LibsvmLine) {
  SampleBatch b;
  parse_libsvm_line("-1 3:0.5 17:2", b, "f:1");
  parse_libsvm_line("+1 3:1", b, "f:2");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b.labels, (std::vector<float>{0, 1}));
  EXPECT_EQ(b.offsets, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(b.keys[0], feature_key(0, hash_key_bits(3)));
  EXPECT_EQ(b.keys[1], feature_key(0, hash_key_bits(17)));
  EXPECT_EQ(b.keys[2], b.keys[0]);
  EXPECT_EQ(b.values, (std::vector<float>{0.5f, 2.0f, 1.0f}));
  EXPECT_THROW(parse_libsvm_line("1 3-0.5", b, "f:3"), InvalidArgument);
  EXPECT_THROW(parse_libsvm_line("x 3:1", b, "f:4"), InvalidArgument);
}

TEST(TrainReaders, LibffmLine) {
  SampleBatch b;
  parse_libffm_line("1 0:5:1 7:5:0.25", b, "f:1");
  ASSERT_EQ(b.num_ids(), 2u);
  EXPECT_EQ(field_of_key(b.keys[0]), 0u);
  EXPECT_EQ(field_of_key(b.keys[1]), 7u);
  EXPECT_NE(b.keys[0], b.keys[1]);  // same index, different fields
  EXPECT_EQ(b.values[1], 0.25f);
  try {
    parse_libffm_line("1 300:5:1", b, "data.ffm:9");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("data.ffm:9"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("field = 300"), std::string::npos);
  }
}

TEST(TrainReaders, CriteoLine) {
  std::string line = "1";
  for (int i = 0; i < 13; ++i) line += i == 4 ? "\t" : "\t" + std::to_string(i * 7);
  for (int i = 0; i < 26; ++i) line += i == 3 ? "\t" : "\t68fd1e64";
  SampleBatch b;
  parse_criteo_line(line, b, "c:1");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b.labels[0], 1.0f);
  EXPECT_EQ(b.num_ids(), 12u + 25u);  // one empty integer and one empty categorical column
  for (size_t i = 0; i < 12; ++i) EXPECT_LT(field_of_key(b.keys[i]), 13u);
  for (size_t i = 12; i < b.num_ids(); ++i) {
    EXPECT_GE(field_of_key(b.keys[i]), 13u);
    EXPECT_EQ(b.keys[i] & kValueMask, hash_bytes("68fd1e64") & kValueMask);
  }
  EXPECT_THROW(parse_criteo_line("1\t2\t3", b, "c:2"), InvalidArgument);
}

// Labels other than the format's click / no-click values and feature values that overflow
// float32 are refused like any malformed line, naming the line and the value.
TEST(TrainReaders, LabelsAndValuesOutOfRange) {
  SampleBatch b;
  auto refused = [&](void (*parse)(std::string_view, SampleBatch&, const std::string&),
                     const std::string& line, const std::string& fragment) {
    const size_t before = b.size();
    try {
      parse(line, b, "f:7");
      ADD_FAILURE() << "accepted '" << line << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("f:7"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_EQ(b.size(), before);
  };
  refused(parse_libffm_line, "2 0:5:1", "label = '2', must be 0 or 1");
  refused(parse_libffm_line, "-1 0:5:1", "label = '-1', must be 0 or 1");
  refused(parse_libffm_line, "1 3:1:1e300", "feature value = '1e300'");
  refused(parse_libffm_line, "1 3:1:-3.5e38", "finite in float32");
  refused(parse_libffm_line, "1 3:1:nan", "feature value = 'nan'");
  refused(parse_libsvm_line, "2 3:1", "label = '2'");
  refused(parse_libsvm_line, "0.5 3:1", "label = '0.5'");
  refused(parse_libsvm_line, "1 3:1e39 2:1", "feature value = '1e39'");
  refused(parse_libsvm_line, "1 3:inf", "feature value = 'inf'");
  std::string criteo = "2";
  for (int i = 0; i < 39; ++i) criteo += "\t";
  refused(parse_criteo_line, criteo, "label = '2'");
  // The largest float32 value itself is fine.
  parse_libffm_line("0 3:1:3.4028234e38", b, "f:8");
  parse_libsvm_line("-1 3:-3.4028234e38", b, "f:9");
  EXPECT_EQ(b.labels, (std::vector<float>{0, 0}));
}

}  // namespace
}  // namespace dynemb::train

// validate_table_options: each bad field is an InvalidArgument naming the field and its value.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "dynemb/core/error.hpp"
#include "dynemb/core/options.hpp"

namespace dynemb {
namespace {

TableOptions valid_options() {
  TableOptions o;
  o.dim = 16;
  o.init_capacity = 1024;
  o.max_capacity = 4096;
  return o;
}

struct BadField {
  const char* argument;
  const char* value;  // as the message must show it (a prefix of the printed number)
  std::function<void(TableOptions&)> breaks;
};

TEST(OptionsTest, ValidOptionsPass) {
  EXPECT_NO_THROW(validate_table_options(valid_options()));
  TableOptions o = valid_options();
  o.max_load_factor = 1.0;
  o.bucket_capacity = 16;
  o.init_capacity = o.max_capacity = 16;
  EXPECT_NO_THROW(validate_table_options(o));
}

TEST(OptionsTest, EachBadFieldIsNamedWithItsValue) {
  const BadField bad[] = {
      {"dim", "0", [](TableOptions& o) { o.dim = 0; }},
      {"dim", "1048577", [](TableOptions& o) { o.dim = (1u << 20) + 1; }},
      {"bucket_capacity", "100", [](TableOptions& o) { o.bucket_capacity = 100; }},
      {"bucket_capacity", "8", [](TableOptions& o) { o.bucket_capacity = 8; }},
      {"bucket_capacity", "2048", [](TableOptions& o) { o.bucket_capacity = 2048; }},
      {"init_capacity", "0", [](TableOptions& o) { o.init_capacity = 0; }},
      {"init_capacity", "1000", [](TableOptions& o) { o.init_capacity = 1000; }},
      {"max_capacity", "4000", [](TableOptions& o) { o.max_capacity = 4000; }},
      {"max_capacity", "512", [](TableOptions& o) { o.max_capacity = 512; }},
      {"max_capacity", "1099511627904",
       [](TableOptions& o) { o.max_capacity = (1ull << 40) + 128; }},
      {"max_load_factor", "0", [](TableOptions& o) { o.max_load_factor = 0.0; }},
      {"max_load_factor", "1.5", [](TableOptions& o) { o.max_load_factor = 1.5; }},
      {"max_load_factor", "-0.1", [](TableOptions& o) { o.max_load_factor = -0.1; }},
      {"initializer.low", "2", [](TableOptions& o) { o.initializer.low = 2.0f; }},
      {"initializer.stddev", "-1",
       [](TableOptions& o) {
         o.initializer.kind = InitializerKind::kNormal;
         o.initializer.stddev = -1.0f;
       }},
  };
  for (const BadField& b : bad) {
    SCOPED_TRACE(std::string(b.argument) + " = " + b.value);
    TableOptions o = valid_options();
    b.breaks(o);
    try {
      validate_table_options(o);
      ADD_FAILURE() << "no InvalidArgument";
    } catch (const InvalidArgument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(b.argument), std::string::npos) << m;
      EXPECT_NE(m.find(b.value), std::string::npos) << m;
    }
  }
}

TEST(OptionsTest, NamesRoundTripAndBadNamesAreInvalid) {
  for (ScorePolicy p :
       {ScorePolicy::kTimestamp, ScorePolicy::kStep, ScorePolicy::kLfu, ScorePolicy::kCustomized}) {
    EXPECT_EQ(parse_score_policy(to_string(p)), p);
  }
  for (SafeCheck m : {SafeCheck::kError, SafeCheck::kWarning, SafeCheck::kIgnore}) {
    EXPECT_EQ(parse_safe_check(to_string(m)), m);
  }
  for (Backend b : {Backend::kCpu, Backend::kCuda}) EXPECT_EQ(parse_backend(to_string(b)), b);
  EXPECT_THROW(parse_score_policy("lru"), InvalidArgument);
  EXPECT_THROW(parse_safe_check("loud"), InvalidArgument);
  EXPECT_THROW(parse_backend("tpu"), InvalidArgument);
}

TEST(OptionsTest, RequireNamesWhereArgumentValueAndLimit) {
  try {
    require(false, "where", "arg", "42", "must be small");
    ADD_FAILURE() << "no InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    for (const char* part : {"where", "arg", "42", "must be small"}) {
      EXPECT_NE(m.find(part), std::string::npos) << m;
    }
  }
  EXPECT_NO_THROW(require(true, "where", "arg", "1", "limit"));
}

}  // namespace
}  // namespace dynemb

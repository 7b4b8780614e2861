// `dynemb train --value-type`: a bfloat16 run learns the synthetic stream as well as float32
// does, and a bad value type is refused naming the flag, the value and the allowed names.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>

#include "dynemb/core/error.hpp"
#include "train/trainer.hpp"

namespace dynemb::train {
namespace {

namespace fs = std::filesystem;

TrainOptions quick_options(const fs::path& out, uint64_t data_seed) {
  TrainOptions o;
  o.init_capacity = 1 << 14;
  o.capacity = 1 << 20;
  o.progress = "none";
  o.output_dir = out.string();
  o.eval_every = 0;
  o.samples = 60'000;
  o.batch_size = 1000;
  o.eval_samples = 5000;
  o.synthetic.horizon = 60'000;
  o.synthetic.seed = data_seed;
  return o;
}

// The same stream in float32 and in bfloat16 / float16 rows (nearest and stochastic rounding):
// every run learns (AUC well above chance) and the 16-bit runs' held-out AUC is within 0.01 of
// float32's.
TEST(TrainValueType, SixteenBitRowsLearnAsFloat32Does) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("data seed " + std::to_string(seed));
  const fs::path out = fs::temp_directory_path() / ("dynemb_train_vt_" + std::to_string(seed));
  std::ostringstream log;
  TrainOptions o = quick_options(out, seed);
  const TrainReport f32 = run_training(o, {.log = &log});
  EXPECT_GT(f32.eval_auc, 0.6) << log.str();
  for (const char* type : {"bf16", "float16"}) {
    for (bool stochastic : {false, true}) {
      SCOPED_TRACE(std::string(type) + (stochastic ? " stochastic" : ""));
      TrainOptions t = quick_options(out, seed);
      t.value_type = type;
      t.stochastic_rounding = stochastic;
      const TrainReport r = run_training(t, {.log = &log});
      EXPECT_EQ(r.progress.samples, f32.progress.samples);
      EXPECT_NEAR(r.eval_auc, f32.eval_auc, 0.01) << log.str();
      EXPECT_TRUE(std::isfinite(r.eval_log_loss));
    }
  }
  // bfloat16 rows with the optimizer state in bfloat16 too (--state-in-value-type).
  TrainOptions t = quick_options(out, seed);
  t.value_type = "bf16";
  t.state_in_value_type = true;
  const TrainReport r = run_training(t, {.log = &log});
  EXPECT_EQ(r.progress.samples, f32.progress.samples);
  EXPECT_NEAR(r.eval_auc, f32.eval_auc, 0.01) << log.str();
  fs::remove_all(out);
}

TEST(TrainValueType, BadValueTypeNamesTheFlagTheValueAndTheChoices) {
  TrainOptions o;
  o.value_type = "half";
  try {
    validate_train_options(o);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--value-type"), std::string::npos) << m;
    EXPECT_NE(m.find("'half'"), std::string::npos) << m;
    EXPECT_NE(m.find("float32"), std::string::npos) << m;
    EXPECT_NE(m.find("bfloat16"), std::string::npos) << m;
  }
  o.value_type = "float32";
  o.stochastic_rounding = true;
  try {
    validate_train_options(o);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--stochastic-rounding"), std::string::npos) << m;
    EXPECT_NE(m.find("--value-type"), std::string::npos) << m;
  }
  o.stochastic_rounding = false;
  for (const char* type : {"float32", "float16"}) {
    o.value_type = type;
    o.state_in_value_type = true;
    try {
      validate_train_options(o);
      FAIL() << "no exception";
    } catch (const InvalidArgument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--state-in-value-type"), std::string::npos) << m;
      EXPECT_NE(m.find(type), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace dynemb::train

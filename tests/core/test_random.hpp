// Fresh random seeds for tests: printed on every use and replayable through DYNEMB_TEST_SEED.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>

namespace dynemb::testing {

// A fresh seed (or DYNEMB_TEST_SEED when set); prints "DYNEMB_TEST_SEED=<seed>" with the test name.
inline uint64_t test_seed() {
  uint64_t seed = 0;
  if (const char* env = std::getenv("DYNEMB_TEST_SEED"); env != nullptr && *env != '\0') {
    seed = std::strtoull(env, nullptr, 0);
  } else {
    std::random_device device;
    seed = (static_cast<uint64_t>(device()) << 32) ^ device();
  }
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::cout << "[   SEED   ] "
            << (info != nullptr ? std::string(info->test_suite_name()) + "." + info->name() : "")
            << " DYNEMB_TEST_SEED=" << seed << std::endl;
  return seed;
}

// A 64-bit engine seeded by test_seed(); every failure inside its lifetime shows the seed.
class TestRng {
 public:
  TestRng() : seed_(test_seed()), engine_(seed_), trace_(__FILE__, __LINE__, seed_message()) {}

  uint64_t seed() const { return seed_; }
  std::mt19937_64& engine() { return engine_; }
  // A uniform 64-bit word.
  uint64_t next() { return engine_(); }
  // A uniform integer in [lo, hi].
  uint64_t uniform(uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(engine_);
  }
  // True with probability p.
  bool chance(double p) { return std::bernoulli_distribution(p)(engine_); }

 private:
  std::string seed_message() const { return "DYNEMB_TEST_SEED=" + std::to_string(seed_); }

  uint64_t seed_;
  std::mt19937_64 engine_;
  ::testing::ScopedTrace trace_;
};

}  // namespace dynemb::testing

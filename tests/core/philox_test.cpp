// Philox4x32-10 against the published known-answer vectors of Random123 (kat_vectors).
#include <gtest/gtest.h>

#include "dynemb/core/philox.hpp"

namespace dynemb {
namespace {

struct PhiloxVector {
  Philox4 counter;
  uint32_t k0, k1;
  Philox4 expected;
};

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  const PhiloxVector vectors[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const PhiloxVector& v : vectors) {
    const Philox4 out = philox4x32_10(v.counter, v.k0, v.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.w[i], v.expected.w[i]) << "word " << i;
  }
}

TEST(PhiloxTest, UniformFloatsAreExactMultiplesInRange) {
  EXPECT_EQ(uniform01(0), 0.0f);
  EXPECT_EQ(uniform01(0xffffffffu), 1.0f - 0x1.0p-24f);
  EXPECT_EQ(uniform01(0x00000100u), 0x1.0p-24f);
  EXPECT_EQ(uniform01_open_low(0), 0x1.0p-24f);
  EXPECT_EQ(uniform01_open_low(0xffffffffu), 1.0f);
}

}  // namespace
}  // namespace dynemb

// write_initial_row gives exactly fill_initial_row's values for every initializer kind and value
// type; a 16-bit row holds the float32 row's elements, each rounded to nearest even.
#include "table/cpu/row_initializer.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace dynemb::table::cpu {
namespace {

constexpr InitializerKind kKinds[] = {InitializerKind::kUniform, InitializerKind::kNormal,
                                      InitializerKind::kTruncatedNormal, InitializerKind::kConstant,
                                      InitializerKind::kDebug};

// Random settings of `kind` for `type`; a third of them draw only `width` < 140 elements (for a
// 16-bit row of up to 70 words, odd widths included: the last drawn word is half zero).
InitializerOptions random_initializer(std::mt19937_64& rng, InitializerKind kind, ValueType type) {
  InitializerOptions init;
  init.kind = kind;
  init.value_type = type;
  init.seed = rng();
  init.low = -static_cast<float>(rng() % 100) / 50.0f;
  init.high = init.low + 0.01f + static_cast<float>(rng() % 100) / 50.0f;
  init.mean = static_cast<float>(rng() % 100) / 10.0f - 5.0f;
  init.stddev = static_cast<float>(rng() % 100) / 20.0f;
  init.value = static_cast<float>(rng() % 1000) / 7.0f - 70.0f;
  init.width = rng() % 3 == 0 ? static_cast<uint32_t>(rng() % 140) : 0;
  return init;
}

std::mt19937_64 seeded(const char* test) {
  const uint64_t seed = std::random_device{}();
  std::printf("%s seed=%llu\n", test, static_cast<unsigned long long>(seed));
  return std::mt19937_64(seed);
}

TEST(CpuRowInitializer, BitIdenticalToFillInitialRow) {
  std::mt19937_64 rng = seeded("CpuRowInitializer.BitIdenticalToFillInitialRow");
  for (ValueType type : {ValueType::kFloat32, ValueType::kFloat16, ValueType::kBFloat16}) {
    for (InitializerKind kind : kKinds) {
      for (int round = 0; round < 200; ++round) {
        const InitializerOptions init = random_initializer(rng, kind, type);
        const uint32_t dim = 1 + static_cast<uint32_t>(rng() % 70);
        const uint64_t key = rng();
        std::vector<float> expected(dim), got(dim, -1.0f);
        fill_initial_row(init, key, expected.data(), dim);
        write_initial_row(init, key, got.data(), dim);
        ASSERT_EQ(std::memcmp(expected.data(), got.data(), dim * sizeof(float)), 0)
            << to_string(type) << " kind " << to_string(kind) << " dim " << dim << " width "
            << init.width;
      }
    }
  }
}

// A 16-bit row of `words` words holds 2 * words elements: element j is the float32 row's element
// j rounded to nearest even (its bit pattern), and 0 past the drawn width.
TEST(CpuRowInitializer, SixteenBitRowsAreTheFloat32RowRounded) {
  std::mt19937_64 rng = seeded("CpuRowInitializer.SixteenBitRowsAreTheFloat32RowRounded");
  for (ValueType type : {ValueType::kFloat16, ValueType::kBFloat16}) {
    for (InitializerKind kind : kKinds) {
      for (int round = 0; round < 100; ++round) {
        const InitializerOptions init = random_initializer(rng, kind, type);
        const uint32_t words = 1 + static_cast<uint32_t>(rng() % 70);
        const uint64_t key = rng();
        InitializerOptions f32 = init;
        f32.value_type = ValueType::kFloat32;
        std::vector<float> reference(2 * words);  // element by element, in float32
        fill_initial_row(f32, key, reference.data(), 2 * words);
        std::vector<float> row(words, -1.0f);
        write_initial_row(init, key, row.data(), words);
        std::vector<uint16_t> got(2 * words);
        std::memcpy(got.data(), row.data(), words * sizeof(float));  // element 2w: low half
        for (uint32_t j = 0; j < 2 * words; ++j) {
          const bool drawn = init.width == 0 || j < init.width;
          const float want = drawn ? reference[j] : 0.0f;
          const uint16_t bits =
              type == ValueType::kFloat16 ? float_to_half(want) : float_to_bf16(want);
          ASSERT_EQ(got[j], bits) << to_string(type) << " kind " << to_string(kind) << " words "
                                  << words << " width " << init.width << " element " << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dynemb::table::cpu

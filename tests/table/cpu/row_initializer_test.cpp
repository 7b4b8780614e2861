// write_initial_row gives exactly fill_initial_row's values for every initializer kind.
#include "table/cpu/row_initializer.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace dynemb::table::cpu {
namespace {

TEST(CpuRowInitializer, BitIdenticalToFillInitialRow) {
  const uint64_t seed = std::random_device{}();
  std::printf("CpuRowInitializer seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (InitializerKind kind :
       {InitializerKind::kUniform, InitializerKind::kNormal, InitializerKind::kTruncatedNormal,
        InitializerKind::kConstant, InitializerKind::kDebug}) {
    for (int round = 0; round < 200; ++round) {
      InitializerOptions init;
      init.kind = kind;
      init.seed = rng();
      init.low = -static_cast<float>(rng() % 100) / 50.0f;
      init.high = init.low + 0.01f + static_cast<float>(rng() % 100) / 50.0f;
      init.mean = static_cast<float>(rng() % 100) / 10.0f - 5.0f;
      init.stddev = static_cast<float>(rng() % 100) / 20.0f;
      init.value = static_cast<float>(rng() % 1000) / 7.0f;
      init.width = rng() % 3 == 0 ? static_cast<uint32_t>(rng() % 70) : 0;
      const uint32_t dim = 1 + static_cast<uint32_t>(rng() % 70);
      const uint64_t key = rng();
      std::vector<float> expected(dim), got(dim, -1.0f);
      fill_initial_row(init, key, expected.data(), dim);
      write_initial_row(init, key, got.data(), dim);
      ASSERT_EQ(std::memcmp(expected.data(), got.data(), dim * sizeof(float)), 0)
          << "kind " << to_string(kind) << " dim " << dim << " width " << init.width;
    }
  }
}

}  // namespace
}  // namespace dynemb::table::cpu

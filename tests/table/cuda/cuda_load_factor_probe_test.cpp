// LoadFactorProbe's bound (src/table/cuda/load_factor_probe.hpp): the newest count plus every key
// written since, over the capacity, at most 1; against a float64 computation on random figures,
// including sums that would overflow 64 bits. A host function: it runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/test_random.hpp"
#include "table/cuda/load_factor_probe.hpp"

namespace dynemb::testing {
namespace {

using cuda_table::LoadFactorProbe;

// The bound in long double: (count + written) / capacity, at most 1.
double reference_bound(uint64_t count, uint64_t written, uint64_t capacity) {
  if (capacity == 0) return 1.0;
  const long double sum = static_cast<long double>(count) + static_cast<long double>(written);
  return static_cast<double>(std::min<long double>(1.0L, sum / capacity));
}

TEST(CudaLoadFactorProbe, BoundIsCountPlusWrittenOverCapacityAtMostOne) {
  TestRng rng;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t capacity = uint64_t{128} << rng.uniform(0, 29);
    const uint64_t count = rng.uniform(0, capacity);
    const uint64_t written = rng.uniform(0, 2 * capacity);
    EXPECT_DOUBLE_EQ(LoadFactorProbe::upper_bound(count, written, capacity),
                     reference_bound(count, written, capacity))
        << "count " << count << " written " << written << " capacity " << capacity;
  }
}

TEST(CudaLoadFactorProbe, BoundNeverWrapsNorExceedsOne) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(LoadFactorProbe::upper_bound(kMax - 1, kMax, uint64_t{1} << 40), 1.0);
  EXPECT_EQ(LoadFactorProbe::upper_bound(10, kMax, 1000), 1.0);
  EXPECT_EQ(LoadFactorProbe::upper_bound(0, 0, 0), 1.0);
  EXPECT_EQ(LoadFactorProbe::upper_bound(0, 0, 1000), 0.0);
  EXPECT_EQ(LoadFactorProbe::upper_bound(1000, 0, 1000), 1.0);
}

}  // namespace
}  // namespace dynemb::testing

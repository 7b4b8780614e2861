// WARNING-mode reports on the CUDA table come without a host synchronization: each call's
// state is copied back on its stream and its warning is logged at a later call, or at stats()
// (src/table/cuda/deferred_reports.hpp). Every call is reported exactly once, in call order,
// also when more calls are pending than the report slots hold.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/test_random.hpp"
#include "core/warning_capture.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::testing {
namespace {

TEST(CudaWarningReports, EveryCallIsReportedOnceInOrder) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  TableOptions o;
  o.dim = 4;
  o.init_capacity = o.max_capacity = 1 << 14;  // no eviction, no refusal: one warning a call
  o.bucket_capacity = 128;
  o.safe_check = SafeCheck::kWarning;
  auto table = make_table<uint64_t>(Backend::kCuda, o);
  dynemb::testing::TestRng test_rng;  // prints the seed; replay with DYNEMB_TEST_SEED
  std::mt19937_64& rng = test_rng.engine();
  const size_t n = 64;
  BackendBuffer<uint64_t> keys(Backend::kCuda, n);
  BackendBuffer<float> values(Backend::kCuda, n * o.dim);
  BackendBuffer<bool> founds(Backend::kCuda, n);
  backend_zero(Backend::kCuda, values.data(), n * o.dim * sizeof(float));
  WarningCapture warnings;

  // 40 calls (more than the 16 report slots), call c with c % 5 + 1 reserved keys; finds and
  // inserts alternate.
  std::vector<std::string> expected;
  uint64_t total_reserved = 0;
  for (int c = 0; c < 40; ++c) {
    std::vector<uint64_t> host(n);
    for (auto& k : host) k = rng() % 100000;
    const size_t reserved = c % 5 + 1;
    for (size_t r = 0; r < reserved; ++r) host[rng() % n] = kFirstReservedKey + r;
    size_t counted = 0;
    for (uint64_t k : host) counted += k >= kFirstReservedKey;
    total_reserved += counted;
    keys.upload(host.data(), n);
    const bool insert = c % 2 == 0;
    if (insert) {
      table->insert_or_assign(n, keys.data(), values.data());
    } else {
      table->find(n, keys.data(), values.data(), founds.data(), nullptr);
    }
    expected.push_back(std::string(insert ? "insert_or_assign" : "find") + ": skipped " +
                       std::to_string(counted) + " reserved key");
    if (c == 0) {
      // Once the first call's state is back, the next call logs it.
      backend_synchronize(Backend::kCuda);
      ASSERT_TRUE(warnings.messages().empty()) << "logged inside the call";
    }
    if (c == 1) ASSERT_GE(warnings.messages().size(), 1u);
  }
  EXPECT_LE(warnings.messages().size(), expected.size());
  table->stats();
  ASSERT_EQ(warnings.messages().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(warnings.messages()[i].rfind(expected[i], 0), 0u)
        << "report " << i << ": " << warnings.messages()[i];
  }
  EXPECT_EQ(table->stats().reserved_keys, total_reserved);
}

}  // namespace
}  // namespace dynemb::testing

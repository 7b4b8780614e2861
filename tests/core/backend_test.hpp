// Tests run once per backend: the CUDA instance skips, saying so, on a machine without a device.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "dynemb/core/options.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::testing {

// A test parameterized by Backend; its CUDA instance skips where no CUDA device is present.
class BackendTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kCuda && !cuda_backend_available()) {
      GTEST_SKIP() << "no CUDA device";
    }
  }
};

// Both backends, for INSTANTIATE_TEST_SUITE_P.
inline auto all_backends() {
  return ::testing::Values(Backend::kCpu, Backend::kCuda);
}

// Names an instance by its backend: "cpu" or "cuda".
inline std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  return to_string(info.param);
}

}  // namespace dynemb::testing

// A seeded random driver for the fuzz targets, for builds without libFuzzer (g++, CI): draws
// structured inputs (lines of tokens among edge-case numbers, raw float bits) and random
// bytes, feeds each to LLVMFuzzerTestOneInput, and prints the seed and the run count.
// Usage: train_input_fuzz_driver [runs] [seed]   (seed 0 or absent: a fresh one)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

const char* const kNumbers[] = {"0",
                                "1",
                                "-1",
                                "+1",
                                "2",
                                "0.5",
                                "1e300",
                                "-1e300",
                                "1e39",
                                "-1e39",
                                "3.4028235e38",
                                "3.4028236e38",
                                "3.4028234e38",
                                "1e-320",
                                "-0",
                                "nan",
                                "NaN",
                                "inf",
                                "-inf",
                                "infinity",
                                "18446744073709551615",
                                "18446744073709551616",
                                "99999999999999999999",
                                "9223372036854775807",
                                "-9223372036854775808",
                                "253",
                                "254",
                                "255",
                                "1e",
                                "0x10",
                                "",
                                "1.7976931348623157e308"};

std::string pick(std::mt19937_64& rng) {
  return kNumbers[rng() % (sizeof kNumbers / sizeof kNumbers[0])];
}

// A line in one of the three formats, built from edge-case numbers.
std::string structured_line(uint8_t mode, std::mt19937_64& rng) {
  std::string line = pick(rng);
  const size_t features = rng() % 6;
  if (mode == 2) {  // Criteo: 39 tab-separated columns (sometimes a wrong count)
    const size_t columns = rng() % 8 == 0 ? rng() % 45 : 39;
    for (size_t c = 0; c < columns; ++c)
      line += "\t" + (rng() % 3 == 0 ? std::string() : pick(rng));
    return line;
  }
  for (size_t f = 0; f < features; ++f) {
    line += " ";
    if (mode == 1) line += pick(rng) + ":";
    line += pick(rng) + ":" + pick(rng);
  }
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t runs = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100000;
  uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  if (seed == 0) seed = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  std::printf("fuzz driver: seed %llu, %llu runs\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(runs));
  std::fflush(stdout);
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> input;
  for (uint64_t r = 0; r < runs; ++r) {
    const uint8_t mode = static_cast<uint8_t>(rng() % 4);
    input.assign(1, mode);
    if (mode < 3 && rng() % 4 != 0) {
      const std::string line = structured_line(mode, rng);
      input.insert(input.end(), line.begin(), line.end());
    } else if (mode == 3 && rng() % 2 == 0) {
      // Scores drawn among special values and plain probabilities.
      const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::denorm_min(),
                                -0.0f,
                                0.0f,
                                1.0f,
                                0.5f};
      const size_t n = rng() % 300;
      for (size_t i = 0; i < n; ++i) {
        float s = rng() % 3 == 0 ? specials[rng() % 8] : static_cast<float>(rng() % 1000) / 1000.0f;
        uint8_t bytes[5];
        std::memcpy(bytes, &s, 4);
        bytes[4] = static_cast<uint8_t>(rng());
        input.insert(input.end(), bytes, bytes + 5);
      }
    } else {
      const size_t n = rng() % 512;
      for (size_t i = 0; i < n; ++i) input.push_back(static_cast<uint8_t>(rng()));
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::printf("fuzz driver: %llu runs done, no failure\n", static_cast<unsigned long long>(runs));
  return 0;
}

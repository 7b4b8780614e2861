// Uses an installed dynemb: a CPU table takes random keys, and finding them (and keys never
// inserted) must agree with a std::map holding the same rows. Exits 1 on any mismatch.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "dynemb/table/table.hpp"

int main() {
  constexpr uint32_t kDim = 8;
  constexpr size_t kKeys = 5000;
  const uint64_t seed = std::random_device{}();
  std::printf("table_consumer: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);

  dynemb::TableOptions options;
  options.dim = kDim;
  options.init_capacity = 1024;
  options.max_capacity = 1 << 16;
  options.score_policy = dynemb::ScorePolicy::kLfu;
  auto table = dynemb::make_table<int64_t>(dynemb::Backend::kCpu, options);

  // Distinct random keys (reserved keys sit at the top of the uint64 space: stay below).
  std::map<int64_t, std::vector<float>> model;
  std::uniform_int_distribution<int64_t> any_key(-(int64_t{1} << 62), int64_t{1} << 62);
  std::uniform_real_distribution<float> any_value(-1.0f, 1.0f);
  while (model.size() < kKeys) {
    std::vector<float> row(kDim);
    for (float& x : row) x = any_value(rng);
    model.emplace(any_key(rng), std::move(row));
  }
  std::vector<int64_t> keys;
  std::vector<float> values;
  for (const auto& [key, row] : model) {
    keys.push_back(key);
    values.insert(values.end(), row.begin(), row.end());
  }
  table->insert_or_assign(keys.size(), keys.data(), values.data());

  // Every inserted key, plus as many keys the model does not hold.
  std::vector<int64_t> queries = keys;
  while (queries.size() < 2 * kKeys) {
    const int64_t key = any_key(rng);
    if (!model.contains(key)) queries.push_back(key);
  }
  std::shuffle(queries.begin(), queries.end(), rng);
  std::vector<float> found_values(queries.size() * kDim, 0.0f);
  std::unique_ptr<bool[]> founds(new bool[queries.size()]);
  table->find(queries.size(), queries.data(), found_values.data(), founds.get(), nullptr);

  size_t mismatches = 0;
  for (size_t i = 0; i < queries.size(); ++i) {
    const auto it = model.find(queries[i]);
    const bool expected = it != model.end();
    bool same = founds[i] == expected;
    for (uint32_t d = 0; same && expected && d < kDim; ++d) {
      same = found_values[i * kDim + d] == it->second[d];
    }
    if (!same && ++mismatches <= 5) {
      std::printf("mismatch: key %lld found %d, expected %d\n", static_cast<long long>(queries[i]),
                  founds[i] ? 1 : 0, expected ? 1 : 0);
    }
  }
  if (table->size() != model.size()) {
    std::printf("mismatch: table size %zu, expected %zu\n", static_cast<size_t>(table->size()),
                model.size());
    ++mismatches;
  }
  std::printf("table_consumer: %zu keys inserted, %zu queries, %zu mismatches\n", model.size(),
              queries.size(), mismatches);
  return mismatches == 0 ? 0 : 1;
}

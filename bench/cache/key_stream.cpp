#include "bench/cache/key_stream.hpp"

#include <algorithm>
#include <functional>
#include <random>
#include <thread>
#include <unordered_map>

#include "bench/cache/power_law.hpp"

namespace dynemb::bench {
namespace {

// Runs make(b) for b in [0, count) on all hardware threads.
std::vector<KeyBatch> in_parallel(uint32_t count, const std::function<KeyBatch(uint32_t)>& make) {
  std::vector<KeyBatch> out(count);
  const uint32_t threads = std::max(1u, std::min(count, std::thread::hardware_concurrency()));
  std::vector<std::thread> workers;
  for (uint32_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (uint32_t b = t; b < count; b += threads) out[b] = make(b);
    });
  }
  for (auto& w : workers) w.join();
  return out;
}

std::mt19937_64 engine_for(const KeyStreamSpec& spec, uint64_t stream_id, uint32_t batch) {
  std::seed_seq seq{spec.seed, stream_id, static_cast<uint64_t>(batch)};
  return std::mt19937_64(seq);
}

// Draws until `stop` says so, keeping distinct keys in first-draw order with their counts.
template <class Stop>
KeyBatch draw_distinct(const PowerLawSampler& sampler, std::mt19937_64& rng, Stop stop) {
  KeyBatch batch;
  std::unordered_map<int64_t, uint32_t> index;
  while (!stop(batch)) {
    const auto key = static_cast<int64_t>(sampler(rng));
    ++batch.total_draws;
    auto [it, fresh] = index.try_emplace(key, static_cast<uint32_t>(batch.keys.size()));
    if (fresh) {
      batch.keys.push_back(key);
      batch.draws.push_back(1);
    } else {
      ++batch.draws[it->second];
    }
  }
  return batch;
}

}  // namespace

std::vector<KeyBatch> raw_batches(const KeyStreamSpec& spec, uint64_t stream_id, uint32_t count,
                                  uint64_t draws) {
  const PowerLawSampler sampler(spec.ids, spec.alpha);
  return in_parallel(count, [&](uint32_t b) {
    std::mt19937_64 rng = engine_for(spec, stream_id, b);
    KeyBatch batch;
    batch.keys.resize(draws);
    for (auto& k : batch.keys) k = static_cast<int64_t>(sampler(rng));
    batch.total_draws = draws;
    return batch;
  });
}

std::vector<KeyBatch> deduplicated_batches(const KeyStreamSpec& spec, uint64_t stream_id,
                                           uint32_t count, uint64_t draws) {
  const PowerLawSampler sampler(spec.ids, spec.alpha);
  return in_parallel(count, [&](uint32_t b) {
    std::mt19937_64 rng = engine_for(spec, stream_id, b);
    return draw_distinct(sampler, rng, [&](const KeyBatch& k) { return k.total_draws >= draws; });
  });
}

std::vector<KeyBatch> distinct_batches(const KeyStreamSpec& spec, uint64_t stream_id,
                                       uint32_t count, uint64_t keys) {
  const PowerLawSampler sampler(spec.ids, spec.alpha);
  return in_parallel(count, [&](uint32_t b) {
    std::mt19937_64 rng = engine_for(spec, stream_id, b);
    return draw_distinct(sampler, rng, [&](const KeyBatch& k) { return k.keys.size() >= keys; });
  });
}

}  // namespace dynemb::bench

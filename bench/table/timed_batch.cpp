#include "bench/table/timed_batch.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "bench/table/config.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::bench {

TimedBatch draw_timed_batch(std::vector<uint64_t>& stored, size_t batch, KeySource& fresh,
                            std::mt19937_64& rng) {
  const auto present = static_cast<size_t>(std::llround(kPresentFraction * double(batch)));
  require(present <= stored.size(), "draw_timed_batch", "present keys", std::to_string(present),
          "must be <= stored keys (" + std::to_string(stored.size()) + ")");
  // Partial Fisher-Yates: the first `present` entries become a uniform sample.
  for (size_t i = 0; i < present; ++i) {
    std::uniform_int_distribution<size_t> pick(i, stored.size() - 1);
    std::swap(stored[i], stored[pick(rng)]);
  }
  TimedBatch out;
  out.present_keys.assign(stored.begin(), stored.begin() + static_cast<ptrdiff_t>(present));
  out.new_keys.resize(batch - present);
  fresh.next(out.new_keys.size(), out.new_keys.data());
  out.keys = out.present_keys;
  out.keys.insert(out.keys.end(), out.new_keys.begin(), out.new_keys.end());
  std::shuffle(out.keys.begin(), out.keys.end(), rng);
  return out;
}

}  // namespace dynemb::bench

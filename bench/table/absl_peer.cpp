// absl::flat_hash_map behind one mutex as a PeerMap: each batch runs under the lock.
#include <absl/container/flat_hash_map.h>

#include <array>
#include <cstring>
#include <mutex>

#include "bench/table/peer_dims.hpp"

namespace dynemb::bench {
namespace {

template <uint32_t D>
class AbslPeer final : public PeerMap {
 public:
  using Row = std::array<float, D>;

  explicit AbslPeer(size_t reserve) { map_.reserve(reserve); }

  std::string name() const override { return "absl_flat_hash_map"; }

  void insert_or_assign(size_t n, const uint64_t* keys, const float* values) override {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < n; ++i) map_.insert_or_assign(keys[i], row(values, i));
  }
  void find(size_t n, const uint64_t* keys, float* values, bool* founds) override {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < n; ++i) {
      const auto it = map_.find(keys[i]);
      founds[i] = it != map_.end();
      if (founds[i]) put(values, i, it->second);
    }
  }
  void find_or_insert(size_t n, const uint64_t* keys, float* values, bool* founds) override {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < n; ++i) {
      const auto [it, inserted] = map_.try_emplace(keys[i], Row{});
      founds[i] = !inserted;
      put(values, i, it->second);
    }
  }
  void assign(size_t n, const uint64_t* keys, const float* values) override {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < n; ++i) {
      const auto it = map_.find(keys[i]);
      if (it != map_.end()) it->second = row(values, i);
    }
  }
  void contains(size_t n, const uint64_t* keys, bool* founds) override {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < n; ++i) founds[i] = map_.contains(keys[i]);
  }
  void erase(size_t n, const uint64_t* keys) override {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < n; ++i) map_.erase(keys[i]);
  }
  size_t export_all(size_t chunk, uint64_t* keys, float* values) override {
    std::lock_guard lock(mutex_);
    size_t count = 0;
    for (const auto& [key, r] : map_) {
      const size_t j = count++ % chunk;
      keys[j] = key;
      put(values, j, r);
    }
    return count;
  }
  size_t size() const override {
    std::lock_guard lock(mutex_);
    return map_.size();
  }

 private:
  static Row row(const float* values, size_t i) {
    Row r;
    std::memcpy(r.data(), values + i * D, sizeof(Row));
    return r;
  }
  static void put(float* values, size_t i, const Row& r) {
    std::memcpy(values + i * D, r.data(), sizeof(Row));
  }

  mutable std::mutex mutex_;
  absl::flat_hash_map<uint64_t, Row> map_;
};

}  // namespace

std::unique_ptr<PeerMap> make_absl_peer(uint32_t dim, size_t reserve) {
  auto make = [&]<uint32_t D>() -> std::unique_ptr<PeerMap> {
    return std::make_unique<AbslPeer<D>>(reserve);
  };
  return detail::make_for_dim(dim, make, detail::PeerDims{});
}

}  // namespace dynemb::bench

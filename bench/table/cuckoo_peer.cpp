// libcuckoo::cuckoohash_map as a PeerMap: concurrent, each batch split over the threads.
#include <array>
#include <cstring>
#include <libcuckoo/cuckoohash_map.hh>

#include "bench/table/peer_dims.hpp"

namespace dynemb::bench {
namespace {

template <uint32_t D>
class CuckooPeer final : public PeerMap {
 public:
  using Row = std::array<float, D>;

  CuckooPeer(size_t reserve, uint32_t threads) : threads_(threads) { map_.reserve(reserve); }

  std::string name() const override { return "libcuckoo"; }

  void insert_or_assign(size_t n, const uint64_t* keys, const float* values) override {
    run(n, [&](size_t i) { map_.insert_or_assign(keys[i], row(values, i)); });
  }
  void find(size_t n, const uint64_t* keys, float* values, bool* founds) override {
    run(n, [&](size_t i) {
      founds[i] = map_.find_fn(keys[i], [&](const Row& r) { put(values, i, r); });
    });
  }
  void find_or_insert(size_t n, const uint64_t* keys, float* values, bool* founds) override {
    run(n, [&](size_t i) {
      const bool inserted = map_.uprase_fn(
          keys[i],
          [&](Row& r) {
            put(values, i, r);
            return false;
          },
          Row{});
      if (inserted) put(values, i, Row{});
      founds[i] = !inserted;
    });
  }
  void assign(size_t n, const uint64_t* keys, const float* values) override {
    run(n, [&](size_t i) { map_.update_fn(keys[i], [&](Row& r) { r = row(values, i); }); });
  }
  void contains(size_t n, const uint64_t* keys, bool* founds) override {
    run(n, [&](size_t i) { founds[i] = map_.contains(keys[i]); });
  }
  void erase(size_t n, const uint64_t* keys) override {
    run(n, [&](size_t i) { map_.erase(keys[i]); });
  }
  size_t export_all(size_t chunk, uint64_t* keys, float* values) override {
    auto locked = map_.lock_table();
    size_t count = 0;
    for (const auto& [key, r] : locked) {
      const size_t j = count++ % chunk;
      keys[j] = key;
      put(values, j, r);
    }
    return count;
  }
  size_t size() const override { return map_.size(); }

 private:
  static Row row(const float* values, size_t i) {
    Row r;
    std::memcpy(r.data(), values + i * D, sizeof(Row));
    return r;
  }
  static void put(float* values, size_t i, const Row& r) {
    std::memcpy(values + i * D, r.data(), sizeof(Row));
  }
  template <class Body>
  void run(size_t n, const Body& body) {
    detail::parallel_ranges(n, threads_, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) body(i);
    });
  }

  libcuckoo::cuckoohash_map<uint64_t, Row> map_;
  uint32_t threads_;
};

}  // namespace

std::unique_ptr<PeerMap> make_cuckoo_peer(uint32_t dim, size_t reserve, uint32_t threads) {
  auto make = [&]<uint32_t D>() -> std::unique_ptr<PeerMap> {
    return std::make_unique<CuckooPeer<D>>(reserve, threads);
  };
  return detail::make_for_dim(dim, make, detail::PeerDims{});
}

}  // namespace dynemb::bench

// TierDevice on the CPU backend: the fast table's memory is host memory, so copies are memcpy and
// every pass a loop; there are no streams to order.
#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_set>

#include "dynemb/core/error.hpp"
#include "dynemb/core/key.hpp"
#include "flat_index.hpp"
#include "key_filter.hpp"
#include "tier_device.hpp"

namespace dynemb::storage::detail {
namespace {

class CpuTierDevice final : public TierDevice {
 public:
  void* scratch(Scratch slot, size_t bytes, StreamHandle) override {
    auto& b = buffers_[static_cast<size_t>(slot)];
    if (b.size() < bytes) {
      b.resize(std::max(bytes, b.size() * 2));
      ++growths_;
    }
    return b.data();
  }
  float* host_rows(HostRows which, size_t floats) override {
    auto& b = rows_[static_cast<size_t>(which)];
    if (b.size() < floats) {
      b.resize(std::max(floats, b.size() * 2));
      ++growths_;
    }
    return b.data();
  }
  void reserve(size_t keys, StreamHandle stream) override {
    if (keys == 0) return;
    scratch(Scratch::kMissPositions, keys * 4, stream);  // list_misses' copies of the misses
    scratch(Scratch::kMissKeys, keys * 8, stream);
  }
  uint64_t growths() const override { return growths_; }
  void upload(void* dst, const void* host, size_t bytes, StreamHandle) override {
    if (bytes > 0 && dst != host) std::memmove(dst, host, bytes);
  }
  void download(void* host, const void* src, size_t bytes, StreamHandle) override {
    if (bytes > 0 && host != src) std::memmove(host, src, bytes);
  }
  void gather_host_rows(size_t m, const uint32_t* index, const float* host, uint32_t dim,
                        float* dst, StreamHandle) override {
    for (size_t p = 0; p < m; ++p)
      if (dst + p * dim != host + size_t{index[p]} * dim)
        std::memmove(dst + p * dim, host + size_t{index[p]} * dim, dim * sizeof(float));
  }
  void copy(void* dst, const void* src, size_t bytes, StreamHandle) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void fill(size_t n, uint64_t value, uint64_t* dst, StreamHandle) override {
    for (size_t i = 0; i < n; ++i) dst[i] = value;
  }
  void list_misses(size_t n, const uint64_t* keys, const bool* found, MissList& out,
                   StreamHandle) override {
    auto* dpos = static_cast<uint32_t*>(scratch(Scratch::kMissPositions, n * 4, nullptr));
    auto* dkeys = static_cast<uint64_t*>(scratch(Scratch::kMissKeys, n * 8, nullptr));
    out = MissList{};
    FlatIndex seen(0);
    size_t count = 0;
    for (size_t i = 0; i < n; ++i) {
      if (found[i]) continue;
      const auto at = static_cast<uint32_t>(i);
      dpos[count] = at;
      dkeys[count] = keys[i];
      ++count;
      out.positions.push_back(at);
      const uint32_t k = seen.emplace(keys[i], static_cast<uint32_t>(out.unique.size()));
      if (k == out.unique.size()) {
        out.unique.push_back(keys[i]);
        out.first.push_back(at);
        out.last.push_back(at);
      }
      out.index.push_back(k);
      out.last[k] = at;
    }
    out.maybe_below.assign(out.unique.size(), 1);
    if (filter_.empty()) return;
    for (size_t k = 0; k < out.unique.size(); ++k)
      out.maybe_below[k] = filter_may_hold(filter_.data(), filter_log2_, out.unique[k]) ? 1 : 0;
  }
  void filter_reset(uint32_t log2_bits, StreamHandle) override {
    filter_log2_ = log2_bits;
    filter_.assign(std::max<size_t>((size_t{1} << log2_bits) / 64, 1), 0);
  }
  void filter_add(size_t n, const uint64_t* keys, StreamHandle stream) override {
    filter_add_host(n, keys, stream);
  }
  void filter_add_host(size_t n, const uint64_t* keys, StreamHandle) override {
    if (filter_.empty()) return;
    for (size_t i = 0; i < n; ++i) {
      uint64_t a = 0, b = 0;
      filter_bits(keys[i], filter_log2_, a, b);
      filter_[a >> 6] |= uint64_t{1} << (a & 63);
      filter_[b >> 6] |= uint64_t{1} << (b & 63);
    }
  }
  void download_parts(std::initializer_list<Part> parts, StreamHandle) override {
    for (const Part& p : parts)
      if (p.bytes > 0 && p.host != p.src) std::memmove(p.host, p.src, p.bytes);
  }
  void scatter_to(size_t m, const uint32_t* positions, const void* host_src, size_t elem_bytes,
                  void* dst, StreamHandle stream) override {
    scatter(m, positions, host_src, elem_bytes, dst, stream);
  }
  void initial_rows_from(size_t first, size_t m, const uint64_t* keys,
                         const InitializerOptions& init, uint32_t dim, float* rows,
                         StreamHandle) override {
    for (size_t j = first; j < m; ++j) fill_initial_row(init, keys[j], rows + j * dim, dim);
  }
  void copy_rows_to(size_t m, const uint32_t* positions, float* const* rows, uint32_t dim,
                    float* values, StreamHandle) override {
    for (size_t j = 0; j < m; ++j)
      if (rows[j] != nullptr)
        std::memcpy(values + size_t{positions[j]} * dim, rows[j], dim * sizeof(float));
  }
  void gather(size_t m, const uint32_t* positions, const void* src, size_t elem_bytes,
              void* host_out, StreamHandle) override {
    const auto* s = static_cast<const char*>(src);
    auto* d = static_cast<char*>(host_out);
    for (size_t j = 0; j < m; ++j)
      std::memcpy(d + j * elem_bytes, s + size_t{positions[j]} * elem_bytes, elem_bytes);
  }
  void scatter(size_t m, const uint32_t* positions, const void* host_src, size_t elem_bytes,
               void* dst, StreamHandle) override {
    const auto* s = static_cast<const char*>(host_src);
    auto* d = static_cast<char*>(dst);
    for (size_t j = 0; j < m; ++j)
      std::memcpy(d + size_t{positions[j]} * elem_bytes, s + j * elem_bytes, elem_bytes);
  }
  void last_positions(size_t n, const uint64_t* keys, size_t m, const uint64_t* want, uint32_t* at,
                      StreamHandle) override {
    FlatIndex index(m);
    for (size_t j = 0; j < m; ++j) {
      index.emplace(want[j], static_cast<uint32_t>(j));
      at[j] = ~0u;
    }
    for (size_t i = 0; i < n; ++i) {
      const uint32_t j = index.find(keys[i]);
      if (j != FlatIndex::kAbsent) at[j] = static_cast<uint32_t>(i);
    }
  }
  void clear_flags_of(size_t n, const uint64_t* keys, const uint64_t* sorted, size_t m, bool* flags,
                      StreamHandle) override {
    for (size_t i = 0; i < n; ++i)
      if (std::binary_search(sorted, sorted + m, keys[i])) flags[i] = false;
  }
  void initial_rows(size_t m, const uint32_t* index, const uint64_t* keys,
                    const InitializerOptions& init, uint32_t dim, float* rows,
                    StreamHandle) override {
    for (size_t j = 0; j < m; ++j)
      fill_initial_row(init, keys[j], rows + size_t{index[j]} * dim, dim);
  }
  void copy_rows_out(size_t n, float* const* rows, uint32_t dim, float* values,
                     StreamHandle) override {
    for (size_t i = 0; i < n; ++i)
      if (rows[i] != nullptr) std::memcpy(values + i * dim, rows[i], dim * sizeof(float));
  }
  void copy_rows_or_initial(size_t n, float* const* rows, const uint64_t* keys,
                            const InitializerOptions& init, uint32_t dim, float* values,
                            bool* founds, const uint64_t*, size_t, StreamHandle) override {
    std::unordered_set<uint64_t> seen;  // the keys at null rows so far
    for (size_t i = 0; i < n; ++i) {
      bool found = rows[i] != nullptr;
      if (found) {
        std::memcpy(values + i * dim, rows[i], dim * sizeof(float));
      } else if (keys[i] < kFirstReservedKey) {
        fill_initial_row(init, keys[i], values + i * dim, dim);
        found = !seen.insert(keys[i]).second;
      }
      if (founds != nullptr) founds[i] = found;
    }
  }
  void count_missing(size_t n, const bool* found, StreamHandle) override {
    for (size_t i = 0; i < n; ++i) count_ += found[i] ? 0 : 1;
  }
  uint64_t missing_total() override { return count_; }
  void clear_flags_of_staged(size_t n, const uint64_t* keys, const uint64_t* unique, size_t u,
                             const uint64_t*, size_t, bool* flags, StreamHandle stream) override {
    clear_flags_of(n, keys, unique, u, flags, stream);  // unique is sorted here
  }
  void stage_new_keys(size_t n, const uint64_t* keys, const bool* found, size_t cap,
                      uint64_t* unique, uint64_t* status, uint64_t*, size_t,
                      StreamHandle) override {
    size_t u = 0;
    uint64_t why = 0;
    uint64_t missed = 0;
    for (size_t i = 0; i < n; ++i) {
      if (found[i]) continue;
      ++missed;
      if (keys[i] >= kFirstReservedKey) {
        why |= kReservedMissed;
        continue;
      }
      unique[u++] = keys[i];
    }
    std::sort(unique, unique + u);  // sorted: the lookups after are binary searches
    u = static_cast<size_t>(std::unique(unique, unique + u) - unique);
    for (size_t k = 0; k < u && !filter_.empty(); ++k)
      if (filter_may_hold(filter_.data(), filter_log2_, unique[k])) why |= kMaybeBelow;
    if (u > cap) why |= kOverCap;
    status[kStageDistinct] = u;
    status[kStageInsert] = why == 0 ? u : 0;
    status[kStageWhy] = why;
    status[kStageEvicted] = 0;
    status[kStageMissed] = missed;
  }
  void mark_repeats(size_t n, const uint64_t* keys, bool* found, const uint64_t* sorted, size_t u,
                    uint32_t*, const uint64_t*, size_t, StreamHandle) override {
    std::vector<uint8_t> seen(u, 0);
    for (size_t i = 0; i < n; ++i) {
      if (found[i]) continue;
      const uint64_t* at = std::lower_bound(sorted, sorted + u, keys[i]);
      if (at == sorted + u || *at != keys[i]) continue;
      uint8_t& s = seen[static_cast<size_t>(at - sorted)];
      found[i] = s != 0;
      s = 1;
    }
  }

  void fill_missing(size_t n, const bool* found, uint64_t value, uint64_t* dst,
                    StreamHandle) override {
    for (size_t i = 0; i < n; ++i)
      if (!found[i]) dst[i] = value;
  }
  void post_words(const uint64_t* src, size_t words, StreamHandle) override {
    std::copy(src, src + std::min(words, posted_.size()), posted_.begin());
  }
  void take_words(uint64_t* host, size_t words) override {
    std::copy(posted_.begin(), posted_.begin() + std::min(words, posted_.size()), host);
  }
  StreamHandle side_stream() override { return nullptr; }
  void record(Mark, StreamHandle) override {}
  void wait(StreamHandle, Mark) override {}
  void order_after(StreamHandle, StreamHandle) override {}
  void synchronize(StreamHandle) override {}

 private:
  std::array<std::vector<char>, static_cast<size_t>(Scratch::kCount)> buffers_;
  std::array<std::vector<float>, static_cast<size_t>(HostRows::kCount)> rows_;
  uint64_t growths_ = 0;
  uint64_t count_ = 0;
  std::array<uint64_t, kStageWords> posted_{};
  std::vector<uint64_t> filter_;  // empty: no filter
  uint32_t filter_log2_ = 0;
};

}  // namespace

std::unique_ptr<TierDevice> make_cpu_tier_device() {
  return std::make_unique<CpuTierDevice>();
}

#ifndef DYNEMB_WITH_CUDA
std::unique_ptr<TierDevice> make_cuda_tier_device(int) {
  throw NotAvailable("CachedTable: this build has no CUDA backend");
}
#endif

}  // namespace dynemb::storage::detail

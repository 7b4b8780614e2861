// The direct-mapped row cache.
#include "row_cache.hpp"

#include <algorithm>

#include "exchange.hpp"
#include "row_copy.hpp"

namespace dynemb::wholememory {
namespace {

RowSpace dense_rows(char* const* base, uint64_t rows, uint64_t row_bytes) {
  RowSpace s;
  s.parts = base;
  s.part_count = 1;
  s.rows_per_part = std::max<uint64_t>(1, rows);
  s.entry_bytes = row_bytes;
  s.copy_bytes = row_bytes;
  return s;
}

// Runs one row copy on `memory`'s executor with a host index uploaded there.
void copy_indexed(Backend memory, int device, const RowSpace& space,
                  const std::vector<int64_t>& index, char* buffer, uint64_t stride, bool gather) {
  if (index.empty()) return;
  if (memory == Backend::kCpu) {
    copy_rows_cpu(space, index.data(), index.size(), buffer, stride, gather);
    return;
  }
  BackendBuffer<int64_t> d_index(memory, index.size(), device);
  d_index.upload(index.data(), index.size());
  copy_rows_cuda(space, d_index.data(), index.size(), buffer, stride, gather, device, nullptr);
}

}  // namespace

void copy_dense_rows(Backend memory, int device, const char* src, const int64_t* src_index,
                     char* dst, const int64_t* dst_index, size_t n, uint64_t row_bytes) {
  if (n == 0) return;
  // Gather into a staging buffer by src_index, then scatter by dst_index.
  std::vector<int64_t> sidx(n), didx(n);
  for (size_t i = 0; i < n; ++i) {
    sidx[i] = src_index ? src_index[i] : static_cast<int64_t>(i);
    didx[i] = dst_index ? dst_index[i] : static_cast<int64_t>(i);
  }
  BackendBuffer<char> staging(memory, n * row_bytes, device);
  const uint64_t src_rows = static_cast<uint64_t>(*std::max_element(sidx.begin(), sidx.end())) + 1;
  const uint64_t dst_rows = static_cast<uint64_t>(*std::max_element(didx.begin(), didx.end())) + 1;
  char* const src_base[1] = {const_cast<char*>(src)};
  char* const dst_base[1] = {dst};
  copy_indexed(memory, device, dense_rows(src_base, src_rows, row_bytes), sidx, staging.data(),
               row_bytes, true);
  copy_indexed(memory, device, dense_rows(dst_base, dst_rows, row_bytes), didx, staging.data(),
               row_bytes, false);
}

RowCache::RowCache(Backend memory, uint64_t slots, uint64_t row_bytes, int device)
    : memory_(memory),
      row_bytes_(row_bytes),
      device_(device),
      tags_(slots, -1),
      storage_(memory, slots * row_bytes, device) {}

void RowCache::classify(const std::vector<int64_t>& rows, std::vector<int64_t>& hit_positions,
                        std::vector<int64_t>& hit_slots,
                        std::vector<int64_t>& miss_positions) const {
  const uint64_t slots = tags_.size();
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t row = rows[i];
    const int64_t slot = row >= 0 ? static_cast<int64_t>(static_cast<uint64_t>(row) % slots) : -1;
    if (slot >= 0 && tags_[slot] == row) {
      hit_positions.push_back(static_cast<int64_t>(i));
      hit_slots.push_back(slot);
    } else {
      miss_positions.push_back(static_cast<int64_t>(i));
    }
  }
}

void RowCache::read(const std::vector<int64_t>& slots, const std::vector<int64_t>& positions,
                    char* out) const {
  copy_dense_rows(memory_, device_, storage_.data(), slots.data(), out, positions.data(),
                  slots.size(), row_bytes_);
}

void RowCache::insert(const std::vector<int64_t>& rows, const char* data) {
  const uint64_t slots = tags_.size();
  // The last row for each slot wins.
  std::vector<int64_t> writer(slots, -1);
  for (size_t i = 0; i < rows.size(); ++i)
    writer[static_cast<uint64_t>(rows[i]) % slots] = static_cast<int64_t>(i);
  std::vector<int64_t> from, to;
  for (uint64_t s = 0; s < slots; ++s) {
    if (writer[s] < 0) continue;
    from.push_back(writer[s]);
    to.push_back(static_cast<int64_t>(s));
    tags_[s] = rows[writer[s]];
  }
  copy_dense_rows(memory_, device_, data, from.data(), storage_.data(), to.data(), from.size(),
                  row_bytes_);
}

uint64_t RowCache::invalidate(const int64_t* rows, size_t n) {
  const uint64_t slots = tags_.size();
  uint64_t forgot = 0;
  for (size_t i = 0; i < n; ++i) {
    if (rows[i] < 0) continue;
    int64_t& tag = tags_[static_cast<uint64_t>(rows[i]) % slots];
    if (tag == rows[i]) {
      tag = -1;
      ++forgot;
    }
  }
  return forgot;
}

void RowCache::clear() {
  std::fill(tags_.begin(), tags_.end(), -1);
}

}  // namespace dynemb::wholememory

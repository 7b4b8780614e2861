// A zero-filled array of trivially copyable elements in anonymous mapped memory, backed by
// transparent huge pages where the kernel allows (fewer TLB misses on random access).
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

namespace dynemb::table::cpu {

// Maps `bytes` of zeroed, 64-byte-aligned memory (huge pages advised), counted in
// mapped_table_bytes(); throws std::bad_alloc.
void* map_zeroed(size_t bytes);
// Unmaps what map_zeroed returned (nullptr is a no-op).
void unmap(void* ptr, size_t bytes) noexcept;
// Faults in (writable, zeroed) the pages of a map_zeroed mapping whose first byte lies in
// [begin, end) bytes from `base`: ranges that partition a mapping fault each page once, so they
// may run on several threads at once.
void fault_in(void* base, size_t begin, size_t end) noexcept;

template <class T>
class LargeArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  LargeArray() = default;
  // Holds `count` zeroed elements.
  explicit LargeArray(size_t count)
      : count_(count), data_(static_cast<T*>(map_zeroed(count * sizeof(T)))) {}
  LargeArray(const LargeArray&) = delete;
  LargeArray& operator=(const LargeArray&) = delete;
  LargeArray(LargeArray&& o) noexcept { swap(o); }
  LargeArray& operator=(LargeArray&& o) noexcept {
    swap(o);
    return *this;
  }
  ~LargeArray() { unmap(data_, count_ * sizeof(T)); }

  T* data() const { return data_; }
  size_t size() const { return count_; }
  T& operator[](size_t i) const { return data_[i]; }
  // Faults in the pages that elements [first, last) start (see fault_in).
  void fault_in_elements(size_t first, size_t last) const {
    cpu::fault_in(data_, first * sizeof(T), last * sizeof(T));
  }

 private:
  void swap(LargeArray& o) noexcept {
    std::swap(count_, o.count_);
    std::swap(data_, o.data_);
  }
  size_t count_ = 0;
  T* data_ = nullptr;
};

}  // namespace dynemb::table::cpu

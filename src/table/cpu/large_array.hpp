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

 private:
  void swap(LargeArray& o) noexcept {
    std::swap(count_, o.count_);
    std::swap(data_, o.data_);
  }
  size_t count_ = 0;
  T* data_ = nullptr;
};

}  // namespace dynemb::table::cpu

#include "cpu/large_array.hpp"

#include <sys/mman.h>

#include <new>

#include "cpu/host_memory.hpp"

namespace dynemb::table::cpu {

void* map_zeroed(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  constexpr size_t kHugePage = size_t{2} << 20;
  if (bytes >= kHugePage) madvise(p, bytes, MADV_HUGEPAGE);  // a hint; failure is harmless
  count_mapped(bytes);
  return p;
}

void unmap(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  munmap(ptr, bytes);
  count_unmapped(bytes);
}

}  // namespace dynemb::table::cpu

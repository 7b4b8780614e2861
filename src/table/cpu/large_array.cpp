#include "cpu/large_array.hpp"

#include <sys/mman.h>
#include <unistd.h>

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

void fault_in(void* base, size_t begin, size_t end) noexcept {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t first = (begin + page - 1) / page * page;
  const size_t last = (end + page - 1) / page * page;
  if (base == nullptr || first >= last) return;
  auto* p = static_cast<unsigned char*>(base);
  // The kernel fills the page tables in one call (Linux 5.14+); else one write per page.
  if (madvise(p + first, last - first, MADV_POPULATE_WRITE) == 0) return;
  for (size_t at = first; at < last; at += page)
    *reinterpret_cast<volatile unsigned char*>(p + at) = 0;
}

}  // namespace dynemb::table::cpu

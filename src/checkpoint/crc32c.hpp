// CRC32C (Castagnoli, the iSCSI / ext4 / RocksDB checksum): hardware crc32 instructions where
// the CPU has SSE4.2, a table otherwise. Same result either way.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dynemb::checkpoint {

// Extends `crc` (0 for a fresh checksum) over `n` bytes at `data`; returns the new checksum.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

// The CRC32C of `n` bytes at `data`.
inline uint32_t crc32c(const void* data, size_t n) {
  return crc32c_extend(0, data, n);
}

}  // namespace dynemb::checkpoint

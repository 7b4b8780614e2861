// Copies of a key in one write call: each distinct key gets one owner position, the op runs on
// the owners only and the copies take the owner's result (docs/cuda_table.md, "Copies of a key
// in one call").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/device_layout.hpp"
#include "dynemb/core/cuda/device_array.hpp"

namespace dynemb::table::cuda {

// TableOptions::coalesce_copies_min_batch when unset, on a hybrid table.
inline constexpr uint64_t kCoalesceCopiesMinBatch = uint64_t{1} << 14;

// The owners of a batch's keys. owner_of[i] is the batch position whose op stands for keys[i]
// (i itself for an owner, and for every reserved key); owners lists the owner positions in the
// order they were given, their number in *count (on the device).
struct KeyOwners {
  core::cuda::DeviceArray<uint32_t> owner_of;
  core::cuda::DeviceArray<uint32_t> owners;
  core::cuda::DeviceArray<unsigned long long> count;
};

// Finds the owners of keys[order[k]] (keys[k] when order is null), k < n < 2^31: the last copy
// of each key in batch order when last_wins, else the first. n_device (optional, a count on the
// device): only k < min(*n_device, n); the keys past it are never read, own nothing and are not
// listed. Enqueued on `stream`, no sync.
KeyOwners find_key_owners(const uint64_t* keys, const uint32_t* order, uint64_t n, bool last_wins,
                          cudaStream_t stream, const unsigned long long* n_device = nullptr);

// After the op ran on the owners: every copy i (owner_of[i] != i) takes its owner's output (row
// of `dim` words in values_out, address in row_ptrs, founds[i] = true; outputs left null are
// skipped). Does nothing when state->reserved_position is set (ERROR mode: the call changed
// nothing). When the call refused a key (state->refused != 0), the copies are listed in
// `redo` (count in *redo_count) and left for the op itself, one by one, instead. n_device
// (optional, as find_key_owners' own): only positions i < min(*n_device, n).
void give_copies_owner_results(const KeyOwners& owners, uint64_t n, uint32_t dim, float* values_out,
                               float** row_ptrs, bool* founds, const CallState* state,
                               uint32_t* redo, unsigned long long* redo_count, cudaStream_t stream,
                               const unsigned long long* n_device = nullptr);

}  // namespace dynemb::table::cuda

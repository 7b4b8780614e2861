// Owners of a batch's keys: an open-addressing set of the batch's keys in scratch memory (twice
// as many slots as keys), each slot holding its key's lowest or highest batch position; CUB's
// DeviceSelect lists the owners in the given order.
#include "cuda/duplicate_keys.hpp"

#include <thrust/iterator/counting_iterator.h>
#include <cub/device/device_select.cuh>

#include <bit>

#include "cuda/probe.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/core/key.hpp"

namespace dynemb::table::cuda {
namespace {

using core::cuda::DeviceArray;

// Slot of `key` in the set (inserting it when `insert`): linear probing from its hash. The set
// has at least twice as many slots as keys, so a free slot is always found. A slot's key never
// changes once set, so a plain read that sees a key is exact; only an empty slot takes the CAS
// (copies of a hot key mostly read).
__device__ uint64_t slot_of(unsigned long long* slot_keys, uint64_t mask, uint64_t key,
                            bool insert) {
  uint64_t s = hash_key_bits(key) & mask;
  while (true) {
    unsigned long long seen = __ldcg(slot_keys + s);
    if (insert && seen == kEmptyKey) {
      seen = atomicCAS(slot_keys + s, static_cast<unsigned long long>(kEmptyKey),
                       static_cast<unsigned long long>(key));
      if (seen == kEmptyKey) return s;
    }
    if (seen == key) return s;
    s = (s + 1) & mask;
  }
}

__device__ uint32_t position_at(const uint32_t* order, uint64_t k) {
  return order != nullptr ? order[k] : static_cast<uint32_t>(k);
}

// The entries a launch covers: n, or the device's count when one is given (at most n).
__device__ uint64_t counted_length(uint64_t n, const unsigned long long* n_device) {
  return n_device != nullptr && *n_device < n ? *n_device : n;
}

__global__ void claim_kernel(const uint64_t* keys, const uint32_t* order, uint64_t n,
                             const unsigned long long* n_device, unsigned long long* slot_keys,
                             uint32_t* slot_owner, uint64_t mask, bool last_wins) {
  const uint64_t k = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= counted_length(n, n_device)) return;
  const uint32_t i = position_at(order, k);
  const uint64_t key = keys[i];
  if (key >= kFirstReservedKey) return;  // reserved keys go through the op one by one
  const uint64_t s = slot_of(slot_keys, mask, key, true);
  // The held position only moves one way: skip the atomic when it is already past i.
  const uint32_t held = __ldcg(slot_owner + s);
  if (last_wins) {
    if (held < i + 1) atomicMax(slot_owner + s, i + 1);  // 0 = none yet
  } else {
    if (held > i) atomicMin(slot_owner + s, i);
  }
}

__global__ void owner_kernel(const uint64_t* keys, const uint32_t* order, uint64_t n,
                             const unsigned long long* n_device, unsigned long long* slot_keys,
                             const uint32_t* slot_owner, uint64_t mask, bool last_wins,
                             uint32_t* owner_of, uint8_t* is_owner) {
  const uint64_t k = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const uint32_t i = position_at(order, k);
  if (k >= counted_length(n, n_device)) {  // past the count: not read, not listed
    owner_of[i] = i;
    is_owner[k] = 0;
    return;
  }
  const uint64_t key = keys[i];
  uint32_t owner = i;
  if (key < kFirstReservedKey) {
    const uint32_t held = slot_owner[slot_of(slot_keys, mask, key, false)];
    owner = last_wins ? held - 1 : held;
  }
  owner_of[i] = owner;
  is_owner[k] = owner == i;
}

// kLanes threads a position: lane 0 writes the flag, address or redo entry, every lane a share
// of the row's words.
constexpr uint32_t kLanes = 8;

__global__ void copies_kernel(const uint32_t* owner_of, uint64_t n,
                              const unsigned long long* n_device, uint32_t dim, float* values_out,
                              float** row_ptrs, bool* founds, const CallState* state,
                              uint32_t* redo, unsigned long long* redo_count) {
  if (state->reserved_position != kNoPosition) return;  // ERROR mode: nothing was changed
  const bool refused = state->refused != 0;
  n = counted_length(n, n_device);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x / kLanes;
  const uint32_t lane = threadIdx.x % kLanes;
  for (uint64_t i = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes; i < n;
       i += stride) {
    const uint32_t owner = owner_of[i];
    if (owner == i) continue;
    if (refused) {  // the owner's key may not be stored: this copy goes through the op itself
      if (lane == 0) redo[atomicAdd(redo_count, 1ull)] = static_cast<uint32_t>(i);
      continue;
    }
    if (lane == 0) {
      if (founds != nullptr) founds[i] = true;
      if (row_ptrs != nullptr) row_ptrs[i] = row_ptrs[owner];
    }
    if (values_out != nullptr) {
      const float* from = values_out + static_cast<uint64_t>(owner) * dim;
      float* to = values_out + i * dim;
      for (uint32_t w = lane; w < dim; w += kLanes) to[w] = from[w];
    }
  }
}

}  // namespace

KeyOwners find_key_owners(const uint64_t* keys, const uint32_t* order, uint64_t n, bool last_wins,
                          cudaStream_t stream, const unsigned long long* n_device) {
  const uint64_t slots = std::bit_ceil(2 * n);
  DeviceArray<unsigned long long> slot_keys(slots, stream);
  DeviceArray<uint32_t> slot_owner(slots, stream);
  DeviceArray<uint8_t> is_owner(n, stream);
  KeyOwners out{DeviceArray<uint32_t>(n, stream), DeviceArray<uint32_t>(n, stream),
                DeviceArray<unsigned long long>(1, stream)};
  core::cuda::check(cudaMemsetAsync(slot_keys.data(), 0xFF, slots * sizeof(uint64_t), stream),
                    "cudaMemsetAsync (owner set keys)");
  core::cuda::check(
      cudaMemsetAsync(slot_owner.data(), last_wins ? 0 : 0xFF, slots * sizeof(uint32_t), stream),
      "cudaMemsetAsync (owner set positions)");
  const unsigned blocks = blocks_for_threads(n, 1ull << 31);
  claim_kernel<<<blocks, 256, 0, stream>>>(keys, order, n, n_device, slot_keys.data(),
                                           slot_owner.data(), slots - 1, last_wins);
  core::cuda::check(cudaGetLastError(), "claim_kernel launch");
  owner_kernel<<<blocks, 256, 0, stream>>>(keys, order, n, n_device, slot_keys.data(),
                                           slot_owner.data(), slots - 1, last_wins,
                                           out.owner_of.data(), is_owner.data());
  core::cuda::check(cudaGetLastError(), "owner_kernel launch");
  const int items = static_cast<int>(n);
  size_t temp_bytes = 0;
  if (order != nullptr) {
    core::cuda::check(
        cub::DeviceSelect::Flagged(nullptr, temp_bytes, order, is_owner.data(), out.owners.data(),
                                   out.count.data(), items, stream),
        "cub::DeviceSelect::Flagged (size)");
    DeviceArray<uint8_t> temp(temp_bytes, stream);
    core::cuda::check(
        cub::DeviceSelect::Flagged(temp.data(), temp_bytes, order, is_owner.data(),
                                   out.owners.data(), out.count.data(), items, stream),
        "cub::DeviceSelect::Flagged");
  } else {
    const thrust::counting_iterator<uint32_t> positions(0);
    core::cuda::check(
        cub::DeviceSelect::Flagged(nullptr, temp_bytes, positions, is_owner.data(),
                                   out.owners.data(), out.count.data(), items, stream),
        "cub::DeviceSelect::Flagged (size)");
    DeviceArray<uint8_t> temp(temp_bytes, stream);
    core::cuda::check(
        cub::DeviceSelect::Flagged(temp.data(), temp_bytes, positions, is_owner.data(),
                                   out.owners.data(), out.count.data(), items, stream),
        "cub::DeviceSelect::Flagged");
  }
  return out;
}

void give_copies_owner_results(const KeyOwners& owners, uint64_t n, uint32_t dim, float* values_out,
                               float** row_ptrs, bool* founds, const CallState* state,
                               uint32_t* redo, unsigned long long* redo_count, cudaStream_t stream,
                               const unsigned long long* n_device) {
  copies_kernel<<<blocks_for_threads(n * kLanes, 8192), 256, 0, stream>>>(
      owners.owner_of.data(), n, n_device, dim, values_out, row_ptrs, founds, state, redo,
      redo_count);
  core::cuda::check(cudaGetLastError(), "copies_kernel launch");
}

}  // namespace dynemb::table::cuda

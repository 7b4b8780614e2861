// Host-side launchers of the CUDA table's kernels. Every launcher only enqueues work on
// `stream`; none synchronizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/device_layout.hpp"

namespace dynemb::table::cuda {

// Sets a fresh call state (no reserved position, nothing deferred or emitted, `budget` inserts
// left). With joins.tags set (a write's state), the state's join_epoch is kept and advanced
// (the tags cleared when the epochs wrap).
void launch_init_state(CallState* state, long long budget, cudaStream_t stream,
                       const CopyJoins& joins = {});

// Prepares a state for a retry after growth: clears the deferred count, sets the budget and
// advances the join epoch as launch_init_state does.
void launch_reset_retry(CallState* state, long long budget, cudaStream_t stream,
                        const CopyJoins& joins = {});

// Records the first reserved key's batch position in state->reserved_position.
void launch_reserved_check(const uint64_t* keys, uint64_t n, CallState* state, cudaStream_t stream);

// Runs one locked write operation over the batch (or the subset) described by `args`, on a
// device of `multiprocessors` SMs (it sizes the grid of a subset whose length the device holds).
void launch_write(WriteOp op, const TableView& table, const WriteArgs& args,
                  uint32_t multiprocessors, cudaStream_t stream);

// assign_scores_at (no lock, IGNORE's handling of reserved keys: skipped and counted): scores[i]
// into the slot at rows[i] where it holds keys[i], else where a lookup finds keys[i].
void launch_assign_scores_at(const TableView& table, const uint64_t* keys, float* const* rows,
                             const uint64_t* scores, uint64_t n, cudaStream_t stream);

// find_or_insert's lock-free first pass (TouchArgs). Only valid while no other kernel changes
// the table: it runs under the call's writer lock, before the locked pass.
void launch_find_and_touch(const TableView& table, const TouchArgs& args, cudaStream_t stream);

// find (values set) or contains (values null): lock-free lookups; with args.host_rows, then
// the copy of the listed host rows.
void launch_find(const TableView& table, const ReadArgs& args, cudaStream_t stream);

// After a pointer write at a fixed capacity (while *only_if_nonzero, the call's evictions, is
// not 0): every address rows[i] whose slot no longer holds keys[i] is looked up again (nullptr:
// not stored); reserved keys are left as they are. n_device (optional): only the first
// min(*n_device, n) entries.
void launch_verify_row_ptrs(const TableView& table, const uint64_t* keys, uint64_t n, float** rows,
                            const unsigned long long* only_if_nonzero, cudaStream_t stream,
                            const unsigned long long* n_device = nullptr);

// Adds the number of stored keys to state->count and subtracts it from state->budget.
void launch_count_size(const TableView& table, CallState* state, cudaStream_t stream);

// Moves every key of `from` into `to`, which has twice the buckets and is empty.
void launch_rehash(const TableView& from, const TableView& to, cudaStream_t stream);

// Removes every key whose score matches; adds how many to state->count.
void launch_erase_if(const TableView& table, uint8_t compare, uint64_t threshold, CallState* state,
                     cudaStream_t stream);

// Empties every slot (keys, digests, bucket sizes, locks, score bounds).
void launch_clear(const TableView& table, cudaStream_t stream);

// Copies stored keys of slots [offset, offset + n_slots) compactly, in slot order, with rows and
// scores (each output optional except keys), keeping only score >= min_score when has_min;
// the count goes to state->count.
void launch_export(const TableView& table, uint64_t offset, uint64_t n_slots, bool has_min,
                   uint64_t min_score, uint64_t* keys, float* values, uint64_t* scores,
                   CallState* state, cudaStream_t stream);

// Writes, in batch order, the positions i with founds[i] false and keys[i]; count to
// state->count.
void launch_select_misses(const bool* founds, const uint64_t* keys, uint64_t n,
                          uint64_t* missed_keys, uint64_t* missed_indices, CallState* state,
                          cudaStream_t stream);

}  // namespace dynemb::table::cuda

// Memory the ops of a training step reuse from call to call, so that a warm step allocates
// nothing: backend scratch that grows to the largest call, a kept 0, 1, 2, ... sequence, host
// words the device can copy into without a staging copy (pinned on CUDA), and what the dedup
// learned about the keys' bits. One per sequence of calls on one stream (an Embedding's step):
// not safe for concurrent use, and two workspaces share nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "dynemb/core/memory.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/core/stream.hpp"
#include "dynemb/ops/stream_fan.hpp"

namespace dynemb {
class OpsBackend;
}  // namespace dynemb

namespace dynemb::ops::detail {

class StepWorkspace {
 public:
  static constexpr size_t kHostWords = 16;

  StepWorkspace(Backend backend, int device);
  ~StepWorkspace();
  StepWorkspace(const StepWorkspace&) = delete;
  StepWorkspace& operator=(const StepWorkspace&) = delete;

  Backend backend() const { return backend_; }

  // At least `bytes` of backend memory (256-byte aligned), valid until the next scratch() call.
  // Growing first waits for `stream` (the old block may still be in use there).
  void* scratch(size_t bytes, StreamHandle stream);

  // Backend memory holding 0, 1, ..., n - 1 (filled on `stream` when it grows; kept between calls).
  const uint32_t* iota(size_t n, StreamHandle stream);

  // At least n entries of backend memory for the dedup's bag of each id (contents not kept;
  // valid until the next bag_of() call; growing first waits for `stream`).
  uint32_t* bag_of(size_t n, StreamHandle stream);

  // At least n entries of backend memory for the dedup's narrow (32-bit) sort keys (contents not
  // kept; valid until the next narrow_keys() call; growing first waits for `stream`).
  uint32_t* narrow_keys(size_t n, StreamHandle stream);

  // kHostWords words of host memory that asynchronous device copies may target.
  uint64_t* host_words() const { return host_words_; }
  // kHostWords words of backend memory for a call's status (contents not kept).
  uint64_t* device_words() const { return device_words_.data(); }

  // The dedup's radix sort: the end bit the last batch needed (0 = no batch yet). The next batch
  // is sorted on these bits and checked on the device; a batch that needs more is sorted again.
  int sort_end_bit = 0;

  // A side stream of high priority the backward forks its hot rows' chain onto (so it runs beside
  // the cold rows' pass), made on first use by the backend's ops; empty until then.
  std::unique_ptr<StreamFan> priority_fan;

  // CUB's temporary-storage sizes for the last (items, end bit, key bytes) the dedup asked about.
  struct SortSizes {
    size_t items = SIZE_MAX;
    int end_bit = -1;
    size_t key_bytes = 0;
    size_t sort_bytes = 0, scan_bytes = 0;
  } sort_sizes;

 private:
  // Makes `buffer` hold at least `count` elements (a quarter more plus `slack` when it grows,
  // after waiting for `stream`: the old one may still be in use there). Returns whether it grew.
  template <class T>
  bool ensure(BackendBuffer<T>& buffer, size_t count, size_t slack, StreamHandle stream);

  const OpsBackend* ops_;
  Backend backend_;
  int device_;
  BackendBuffer<uint8_t> scratch_;
  BackendBuffer<uint32_t> iota_, bag_of_, narrow_keys_;
  BackendBuffer<uint64_t> device_words_;
  size_t iota_filled_ = 0;
  uint64_t* host_words_ = nullptr;
};

// Cuts one block of scratch into aligned arrays. Used twice with the same calls: first without
// a base to measure the bytes, then on the block.
class ScratchCarver {
 public:
  explicit ScratchCarver(void* base = nullptr) : base_(static_cast<uint8_t*>(base)) {}

  // The next `count` elements of T (nullptr while measuring), 256-byte aligned.
  template <class T>
  T* take(size_t count) {
    offset_ = (offset_ + 255) / 256 * 256;
    T* p = base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + offset_);
    offset_ += (count == 0 ? 1 : count) * sizeof(T);
    return p;
  }
  // Bytes taken so far.
  size_t bytes() const { return offset_; }

 private:
  uint8_t* base_;
  size_t offset_ = 0;
};

}  // namespace dynemb::ops::detail

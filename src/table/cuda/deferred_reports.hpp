// WARNING-mode reports without a host synchronization: a call's state is copied to pinned host
// memory on its stream, and its warnings are logged once that copy has landed, at a later call
// of the table or at stats() (docs/cuda_table.md, "Host synchronization").
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda/device_layout.hpp"

namespace dynemb::table::cuda {

class DeferredReports {
 public:
  // `emit` logs a call's warnings from its state (called with the call's name).
  using Emit = std::function<void(const std::string& call, const CallState& state)>;

  explicit DeferredReports(Emit emit);
  // Emits what has landed; waits for nothing.
  ~DeferredReports();
  DeferredReports(const DeferredReports&) = delete;
  DeferredReports& operator=(const DeferredReports&) = delete;

  // Copies `state` (device memory, valid until `stream` moves past this point) for a later
  // report. With every slot taken it first waits for the oldest.
  void enqueue(const char* call, const CallState* state, cudaStream_t stream);
  // Emits every report whose copy has landed, oldest first; waits for nothing.
  void poll();
  // Waits for every pending copy and emits it.
  void flush();

 private:
  static constexpr size_t kSlots = 16;
  struct Slot {
    CallState* host = nullptr;  // its entry of pinned_
    cudaEvent_t landed = nullptr;
    std::string call;
  };
  using Landed = std::vector<std::pair<std::string, CallState>>;
  // Moves the oldest pending slot (its copy must have landed) to `out`. Caller holds mutex_.
  void pop_oldest(Landed& out);
  // Moves every landed slot to `out`, oldest first. Caller holds mutex_.
  void take_landed(Landed& out);
  // Emits `landed` (outside the lock: a warning handler may call back into the table).
  void emit(const Landed& landed) const;

  Emit emit_;
  std::mutex mutex_;
  CallState* pinned_ = nullptr;  // kSlots states, one page-locked allocation
  std::array<Slot, kSlots> slots_{};
  size_t first_ = 0;  // oldest pending slot
  size_t count_ = 0;  // pending slots
  int device_ = 0;
};

}  // namespace dynemb::table::cuda

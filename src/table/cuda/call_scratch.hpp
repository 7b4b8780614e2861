// The call state of one call, on the device, that the host reads back where a call returns a
// count or may throw.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/device_layout.hpp"
#include "cuda/kernels.hpp"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_array.hpp"

namespace dynemb::table::cuda {

// The table's stream-ordered temporaries are core's.
using core::cuda::DeviceArray;

// The state of a table's writes, allocated and initialized once: each write takes it and, when
// the write ends, re-initializes it on the write's stream, after every use. So a write's kernel
// waits for no allocation or initialization before it (host API calls the GPU would sit idle
// through). Writes never overlap: the writer lock and its stream events order them, or a table
// that is not thread-safe is used from one stream.
class WriteState {
 public:
  WriteState();
  ~WriteState();
  WriteState(const WriteState&) = delete;
  WriteState& operator=(const WriteState&) = delete;

  // The join entries of the writes' launches (CopyJoins; their epoch is the state's).
  const CopyJoins& joins() const { return joins_; }

  // One write's use of the state: re-initializes it on `stream` when it goes out of scope.
  class Use {
   public:
    Use(WriteState& owner, cudaStream_t stream)
        : state_(owner.state_), joins_(owner.joins_), stream_(stream) {}
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    CallState* get() const { return state_; }
    // Copies the state to the host; synchronizes the stream.
    CallState read() const;

   private:
    CallState* state_;
    CopyJoins joins_;
    cudaStream_t stream_;
  };

 private:
  CallState* state_ = nullptr;
  CopyJoins joins_;
};

// Join entries of a table's writes: 2^16 (1 MiB with their keys).
inline constexpr uint32_t kJoinEntryBits = 16;

// One call's CallState on the device.
class CallScratch {
 public:
  // Allocates and initializes the state (budget as given) on `stream`.
  CallScratch(cudaStream_t stream, long long budget = 0) : stream_(stream), state_(1, stream) {
    launch_init_state(state_.data(), budget, stream);
  }
  CallState* get() const { return state_.data(); }
  // Copies the state to the host; synchronizes the stream.
  CallState read() const;

 private:
  cudaStream_t stream_;
  DeviceArray<CallState> state_;
};

}  // namespace dynemb::table::cuda

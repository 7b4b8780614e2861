// The host-side reader/writer lock of a CUDA table and the stream ordering that goes with it:
// a call holds the lock while it enqueues work, and CUDA events make the work of a writer wait
// for every earlier call on any stream, and the work of a reader wait for the last writer.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <shared_mutex>

namespace dynemb::table::cuda {

class StreamOrder {
 public:
  // `enabled` false (options.thread_safe false): no locking and no events (one stream).
  explicit StreamOrder(bool enabled);
  ~StreamOrder();
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  // Holds the exclusive lock; work enqueued on `stream` after construction runs after every
  // earlier call's work, and later calls' work runs after this guard's.
  class Write {
   public:
    Write(StreamOrder& order, cudaStream_t stream);
    ~Write();
    Write(const Write&) = delete;
    Write& operator=(const Write&) = delete;

   private:
    StreamOrder& order_;
    cudaStream_t stream_;
    std::unique_lock<std::shared_mutex> lock_;
  };

  // Holds the shared lock; work enqueued on `stream` runs after the last writer's work.
  class Read {
   public:
    Read(StreamOrder& order, cudaStream_t stream);
    ~Read();
    Read(const Read&) = delete;
    Read& operator=(const Read&) = delete;

   private:
    StreamOrder& order_;
    cudaStream_t stream_;
    std::shared_lock<std::shared_mutex> lock_;
  };

 private:
  cudaEvent_t event_for(cudaStream_t stream);  // caller holds events_mutex_

  bool enabled_;
  std::shared_mutex lock_;
  std::mutex events_mutex_;
  cudaEvent_t last_write_ = nullptr;
  bool have_write_ = false;
  std::map<cudaStream_t, cudaEvent_t> last_read_;  // per stream: its latest reader's work
};

}  // namespace dynemb::table::cuda

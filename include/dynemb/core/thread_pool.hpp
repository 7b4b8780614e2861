// A small fixed pool of worker threads that runs the tasks of one parallel loop at a time; the
// calling thread works too. A loop started while the pool is busy (another caller, or a task
// that starts a loop) runs on the calling thread alone, so nesting never deadlocks.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace dynemb::core {

class ThreadPool {
 public:
  // A pool where loops run on `threads` threads in all (0 = hardware threads; 1 = no workers).
  explicit ThreadPool(uint32_t threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  // Threads a loop may use (workers + the caller).
  uint32_t threads() const { return static_cast<uint32_t>(workers_.size()) + 1; }

  // Calls task(i) once for every i in [0, tasks), spread over the threads; returns when all
  // are done and rethrows the first exception a task threw.
  void run(size_t tasks, const std::function<void(size_t)>& task);

 private:
  void worker_loop();
  void work_on_current_loop();

  std::vector<std::thread> workers_;
  std::mutex busy_;  // held by the caller of the loop in flight

  std::mutex mutex_;  // guards everything below
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(size_t)>* task_ = nullptr;
  size_t tasks_ = 0;
  size_t next_ = 0;          // next task to hand out
  size_t unfinished_ = 0;    // tasks handed out or waiting, not yet finished
  uint64_t generation_ = 0;  // bumped per loop
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace dynemb::core

#include "dynemb/core/thread_pool.hpp"

namespace dynemb::core {

ThreadPool::ThreadPool(uint32_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(threads - 1);
  for (uint32_t i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run(size_t tasks, const std::function<void(size_t)>& task) {
  if (tasks == 0) return;
  std::unique_lock busy(busy_, std::try_to_lock);
  if (workers_.empty() || tasks == 1 || !busy.owns_lock()) {
    for (size_t i = 0; i < tasks; ++i) task(i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    task_ = &task;
    tasks_ = tasks;
    next_ = 0;
    unfinished_ = tasks;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  work_on_current_loop();
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return unfinished_ == 0; });
  task_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::work_on_current_loop() {
  std::unique_lock lock(mutex_);
  while (task_ != nullptr && next_ < tasks_) {
    const size_t i = next_++;
    const std::function<void(size_t)>* task = task_;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*task)(i);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (--unfinished_ == 0) done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    lock.unlock();
    work_on_current_loop();
    lock.lock();
  }
}

}  // namespace dynemb::core

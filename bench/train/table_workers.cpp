#include "bench/train/table_workers.hpp"

namespace dynemb::bench {

TableWorkers::TableWorkers(uint32_t tables) {
  for (uint32_t t = 1; t < tables; ++t) threads_.emplace_back([this, t] { worker(t); });
}

TableWorkers::~TableWorkers() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void TableWorkers::record(std::exception_ptr e) {
  std::lock_guard lock(error_mutex_);
  if (!error_) error_ = e;
}

void TableWorkers::run(const std::function<void(uint32_t)>& job) {
  job_ = &job;
  error_ = nullptr;
  remaining_.store(static_cast<uint32_t>(threads_.size()));
  generation_.fetch_add(1);  // publishes job_ to the workers
  generation_.notify_all();
  try {
    job(0);
  } catch (...) {
    record(std::current_exception());
  }
  for (uint32_t left = remaining_.load(); left != 0; left = remaining_.load()) {
    remaining_.wait(left);
  }
  if (error_) std::rethrow_exception(error_);
}

void TableWorkers::worker(uint32_t table) {
  uint64_t seen = 0;
  while (true) {
    // A short spin first: steps come back to back, and a futex wake-up costs tens of us.
    uint64_t now = generation_.load();
    for (int spin = 0; spin < 20000 && now == seen; ++spin) now = generation_.load();
    if (now == seen) {
      generation_.wait(seen);
      now = generation_.load();
    }
    seen = now;
    if (stop_.load()) return;
    try {
      (*job_)(table);
    } catch (...) {
      record(std::current_exception());
    }
    if (remaining_.fetch_sub(1) == 1) remaining_.notify_all();
  }
}

}  // namespace dynemb::bench

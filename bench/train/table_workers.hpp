// One host thread per table of `dynemb bench train --concurrent-tables`: run(job) calls job(t)
// for every table t at once, table 0 on the calling thread, and returns when all are done. The
// threads live as long as the object, so a step pays a wake-up, not a thread start.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dynemb::bench {

class TableWorkers {
 public:
  // Threads for tables 1 .. tables - 1 (table 0 runs on the caller).
  explicit TableWorkers(uint32_t tables);
  ~TableWorkers();
  TableWorkers(const TableWorkers&) = delete;
  TableWorkers& operator=(const TableWorkers&) = delete;

  // Calls job(t) for every t in [0, tables) concurrently; rethrows the first exception a job
  // threw once all are done.
  void run(const std::function<void(uint32_t)>& job);

 private:
  void worker(uint32_t table);
  void record(std::exception_ptr e);

  std::vector<std::thread> threads_;
  const std::function<void(uint32_t)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped per run(); workers wait for it to change
  std::atomic<uint32_t> remaining_{0};   // worker jobs of the current run not yet finished
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace dynemb::bench

// A two-stage pipeline over two alternating buffers: a helper thread produces buffer contents
// (export a chunk, read a chunk) while this thread consumes the previous one (write it, insert
// it), so the two copies of each byte run at the same time.
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace dynemb::checkpoint::detail {

// Calls produce(slot) on a helper thread and consume(slot) here, slots 0, 1, 0, 1, ... in
// order. produce returns false when there is nothing more (that slot is not consumed). The
// first exception of either stage is rethrown after both stopped.
template <class Produce, class Consume>
void run_two_stage(Produce&& produce, Consume&& consume) {
  std::mutex mutex;
  std::condition_variable cv;
  bool filled[2] = {false, false};
  bool done = false, stop = false;
  std::exception_ptr producer_error, consumer_error;
  std::thread producer([&] {
    try {
      for (unsigned i = 0;; ++i) {
        const unsigned slot = i & 1u;
        {
          std::unique_lock lock(mutex);
          cv.wait(lock, [&] { return !filled[slot] || stop; });
          if (stop) break;
        }
        const bool more = produce(slot);
        std::lock_guard lock(mutex);
        if (!more) break;
        filled[slot] = true;
        cv.notify_all();
      }
    } catch (...) {
      std::lock_guard lock(mutex);
      producer_error = std::current_exception();
    }
    std::lock_guard lock(mutex);
    done = true;
    cv.notify_all();
  });
  try {
    for (unsigned i = 0;; ++i) {
      const unsigned slot = i & 1u;
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return filled[slot] || done; });
        if (!filled[slot]) break;
      }
      consume(slot);
      std::lock_guard lock(mutex);
      filled[slot] = false;
      cv.notify_all();
    }
  } catch (...) {
    consumer_error = std::current_exception();
    std::lock_guard lock(mutex);
    stop = true;
    cv.notify_all();
  }
  producer.join();
  if (consumer_error) std::rethrow_exception(consumer_error);
  if (producer_error) std::rethrow_exception(producer_error);
}

}  // namespace dynemb::checkpoint::detail

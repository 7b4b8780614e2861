// Splits a loop of the CPU ops over one process-wide thread pool (all hardware threads).
// Each index range is handled by one thread in ascending order, so per-element results do not
// depend on the split.
#pragma once

#include <algorithm>
#include <cstddef>

#include "dynemb/core/thread_pool.hpp"

namespace dynemb::ops::detail {

// The pool the CPU ops share.
core::ThreadPool& ops_thread_pool();

// Calls body(begin, end) over [0, n) in ranges of at least `grain` indices, in parallel when
// n is large enough to pay for it.
template <class Body>
void parallel_for(size_t n, size_t grain, const Body& body) {
  core::ThreadPool& pool = ops_thread_pool();
  const size_t tasks = std::min<size_t>(size_t{pool.threads()} * 4, n / std::max<size_t>(grain, 1));
  if (tasks <= 1) {
    if (n > 0) body(size_t{0}, n);
    return;
  }
  pool.run(tasks, [&](size_t t) { body(n * t / tasks, n * (t + 1) / tasks); });
}

}  // namespace dynemb::ops::detail

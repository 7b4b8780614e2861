#include "cpu/parallel_for.hpp"

namespace dynemb::ops::detail {

core::ThreadPool& ops_thread_pool() {
  static core::ThreadPool pool(0);
  return pool;
}

}  // namespace dynemb::ops::detail

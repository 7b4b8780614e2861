#include "cpu/parallel_for.hpp"

namespace dynemb::detail {

cpu::ThreadPool& ops_thread_pool() {
  static cpu::ThreadPool pool(0);
  return pool;
}

}  // namespace dynemb::detail

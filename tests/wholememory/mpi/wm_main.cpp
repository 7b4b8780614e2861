// main() of the multi-process wholememory tests. Under mpirun (Open MPI's environment set) the
// ranks are the MPI job's; otherwise the binary forks `--ranks N` (default 2) processes of
// itself joined by a socket communicator (machines without mpirun). Every rank runs every test
// in the same order; the binary fails when any rank failed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "core/test_random.hpp"
#include "dynemb/dist/mpi_communicator.hpp"
#include "dynemb/wholememory/socket_communicator.hpp"
#include "wholememory/mpi/wm_main.hpp"

namespace dynemb::wholememory::testing {
namespace {

std::unique_ptr<dist::Communicator> g_world;

// On ranks other than 0: each failure, prefixed by the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(uint32_t rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::cerr << "rank " << rank_ << ": " << (r.file_name() ? r.file_name() : "?") << ":"
              << r.line_number() << ": Failure\n"
              << r.message() << std::endl;
  }

 private:
  uint32_t rank_;
};

// --ranks N from argv (removed from it), or 2.
uint32_t take_ranks_flag(int& argc, char** argv) {
  uint32_t ranks = 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--ranks=", 8) == 0) {
      ranks = std::max<uint32_t>(1, static_cast<uint32_t>(std::strtoul(argv[i] + 8, nullptr, 10)));
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      break;
    }
  }
  return ranks;
}

// Forks `ranks` processes; returns this process's rank in the child, or -1 in the parent after
// every child ended (then *failed says whether any failed).
int fork_ranks(uint32_t ranks, bool* failed) {
  std::vector<pid_t> children;
  for (uint32_t r = 0; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) return static_cast<int>(r);
    if (pid < 0) {
      std::perror("fork");
      *failed = true;
      break;
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) *failed = true;
  }
  return -1;
}

}  // namespace

dist::Communicator& world() {
  return *g_world;
}

uint64_t shared_seed() {
  const uint64_t mine = dynemb::testing::test_seed();
  const std::vector<uint64_t> all = dist::all_gather_values<uint64_t>(world(), {&mine, 1});
  if (world().rank() == 0) std::cout << "[   SEED   ] shared by every rank: " << all[0] << "\n";
  return all[0];
}

}  // namespace dynemb::wholememory::testing

int main(int argc, char** argv) {
  namespace wt = dynemb::wholememory::testing;
  const uint32_t ranks = wt::take_ranks_flag(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  const bool under_mpirun =
      std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_RANK") != nullptr;
  if (under_mpirun) {
    wt::g_world = dynemb::dist::make_mpi_communicator();
  } else {
    bool failed = false;
    const std::string job = std::to_string(::getpid());
    const int rank = wt::fork_ranks(ranks, &failed);
    if (rank < 0) {
      std::cout << "wholememory multi-process tests: " << ranks << " forked ranks, "
                << (failed ? "FAILED" : "passed") << "\n";
      return failed ? 1 : 0;
    }
    wt::g_world =
        dynemb::wholememory::make_socket_communicator(job, static_cast<uint32_t>(rank), ranks);
  }
  const uint32_t rank = wt::g_world->rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new wt::FailurePrinter(rank));
  }
  const int rc = RUN_ALL_TESTS();
  const uint64_t failed = rc != 0 ? 1 : 0;
  const uint64_t failed_ranks =
      dynemb::dist::all_reduce_values<uint64_t>(*wt::g_world, {&failed, 1})[0];
  if (failed != 0) std::cerr << "rank " << rank << ": tests FAILED\n";
  if (rank == 0) {
    std::cout << "wholememory multi-process tests (" << wt::g_world->name()
              << "): " << wt::g_world->world_size() << " ranks, " << failed_ranks << " failed\n";
  }
  wt::g_world.reset();
  return failed_ranks == 0 ? 0 : 1;
}

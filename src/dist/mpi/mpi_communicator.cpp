// Communicator over MPI: host buffers, blocking collectives on a duplicated communicator.
#include "dynemb/dist/mpi_communicator.hpp"

#include <mpi.h>

#include <climits>
#include <mutex>
#include <vector>

#include "dynemb/core/error.hpp"

namespace dynemb::dist {
namespace {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(std::string("MPI: ") + call + " failed: " + std::string(text, length));
}

// Initializes MPI once if the caller did not; finalizes it at exit if it did.
class MpiRuntime {
 public:
  static void ensure() {
    static MpiRuntime runtime;
    (void)runtime;
  }

 private:
  MpiRuntime() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owned_ = true;
    }
  }
  ~MpiRuntime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Finalize();
  }
  bool owned_ = false;
};

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::kUint8:
      return MPI_UINT8_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kUint32:
      return MPI_UINT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kUint64:
      return MPI_UINT64_T;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
    default:
      return MPI_DOUBLE;
  }
}

// MPI counts are int: a larger count is refused with a clear error.
int count_of(size_t n, const char* where) {
  require(n <= static_cast<size_t>(INT_MAX), where, "count", std::to_string(n),
          "<= INT_MAX elements per rank for MPI");
  return static_cast<int>(n);
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    int r = 0, w = 0;
    check(MPI_Comm_rank(comm_, &r), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &w), "MPI_Comm_size");
    rank_ = static_cast<uint32_t>(r);
    world_ = static_cast<uint32_t>(w);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  uint32_t rank() const override { return rank_; }
  uint32_t world_size() const override { return world_; }
  Backend backend() const override { return Backend::kCpu; }
  std::string name() const override { return "mpi"; }
  MPI_Comm comm() const { return comm_; }

  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs,
                    void* recv, const size_t* recv_counts, const size_t* recv_displs, DataType type,
                    StreamHandle) override {
    std::vector<int> sc(world_), sd(world_), rc(world_), rd(world_);
    for (uint32_t r = 0; r < world_; ++r) {
      sc[r] = count_of(send_counts[r], "MpiCommunicator::all_to_all_v");
      sd[r] = count_of(send_displs[r], "MpiCommunicator::all_to_all_v");
      rc[r] = count_of(recv_counts[r], "MpiCommunicator::all_to_all_v");
      rd[r] = count_of(recv_displs[r], "MpiCommunicator::all_to_all_v");
    }
    check(MPI_Alltoallv(send, sc.data(), sd.data(), mpi_type(type), recv, rc.data(), rd.data(),
                        mpi_type(type), comm_),
          "MPI_Alltoallv");
  }
  void all_gather(const void* send, void* recv, size_t count, DataType type,
                  StreamHandle) override {
    const int n = count_of(count, "MpiCommunicator::all_gather");
    check(MPI_Allgather(send, n, mpi_type(type), recv, n, mpi_type(type), comm_), "MPI_Allgather");
  }
  void all_reduce_sum(const void* send, void* recv, size_t count, DataType type,
                      StreamHandle) override {
    const int n = count_of(count, "MpiCommunicator::all_reduce_sum");
    check(
        MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, n, mpi_type(type), MPI_SUM, comm_),
        "MPI_Allreduce");
  }
  void broadcast(void* buffer, size_t count, DataType type, uint32_t root, StreamHandle) override {
    require(root < world_, "MpiCommunicator::broadcast", "root", std::to_string(root),
            "< world_size = " + std::to_string(world_));
    check(MPI_Bcast(buffer, count_of(count, "MpiCommunicator::broadcast"), mpi_type(type),
                    static_cast<int>(root), comm_),
          "MPI_Bcast");
  }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  MPI_Comm comm_;
  uint32_t rank_ = 0, world_ = 1;
};

MPI_Comm duplicate_world() {
  MpiRuntime::ensure();
  MPI_Comm comm;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  return comm;
}

class MpiIdExchanger final : public IdExchanger {
 public:
  MpiIdExchanger() : comm_(duplicate_world()) {}
  std::vector<uint8_t> share(uint32_t rank, const std::vector<uint8_t>& root_bytes) override {
    uint64_t n = rank == 0 ? root_bytes.size() : 0;
    check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm_), "MPI_Bcast");
    std::vector<uint8_t> bytes = rank == 0 ? root_bytes : std::vector<uint8_t>(n);
    if (n > 0) {
      check(MPI_Bcast(bytes.data(), count_of(n, "MpiIdExchanger::share"), MPI_UINT8_T, 0, comm_),
            "MPI_Bcast");
    }
    return bytes;
  }
  ~MpiIdExchanger() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

 private:
  MPI_Comm comm_;
};

}  // namespace

bool mpi_available() {
  return true;
}

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>(duplicate_world());
}

std::unique_ptr<Communicator> split_mpi_communicator(Communicator& parent, int color) {
  auto* mpi = dynamic_cast<MpiCommunicator*>(&parent);
  require(mpi != nullptr, "split_mpi_communicator", "parent", parent.name(), "an MPI communicator");
  MPI_Comm comm;
  check(MPI_Comm_split(mpi->comm(), color < 0 ? MPI_UNDEFINED : color,
                       static_cast<int>(parent.rank()), &comm),
        "MPI_Comm_split");
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(comm);
}

std::unique_ptr<IdExchanger> make_mpi_id_exchanger() {
  return std::make_unique<MpiIdExchanger>();
}

}  // namespace dynemb::dist

// Communicator over NCCL: device buffers; all-to-all-v as grouped ncclSend / ncclRecv.
#include "dynemb/dist/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "dynemb/core/error.hpp"

namespace dynemb::dist {
namespace {

void check_nccl(ncclResult_t rc, const char* call) {
  if (rc == ncclSuccess) return;
  throw Error(std::string("NCCL: ") + call + " failed: " + ncclGetErrorString(rc));
}

void check_cuda(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return;
  throw CudaError(std::string("CUDA: ") + call + " failed: " + cudaGetErrorString(rc));
}

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::kUint8:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kUint32:
      return ncclUint32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUint64:
      return ncclUint64;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
    default:
      return ncclFloat64;
  }
}

cudaStream_t as_stream(StreamHandle stream) {
  return static_cast<cudaStream_t>(stream);
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(uint32_t rank, uint32_t world, IdExchanger& exchanger, int device)
      : rank_(rank), world_(world), device_(device) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    // NVLink multicast stays off (docs/dist.md): it takes memory and is not used here.
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    std::vector<uint8_t> bytes;
    if (rank_ == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      bytes.assign(reinterpret_cast<const uint8_t*>(&id),
                   reinterpret_cast<const uint8_t*>(&id) + sizeof id);
    }
    bytes = exchanger.share(rank_, bytes);
    if (bytes.size() != sizeof id) {
      throw Error("NCCL bootstrap: rank 0's unique id arrived as " + std::to_string(bytes.size()) +
                  " bytes, expected " + std::to_string(sizeof id));
    }
    std::memcpy(&id, bytes.data(), sizeof id);
    check_nccl(ncclCommInitRank(&comm_, static_cast<int>(world_), id, static_cast<int>(rank_)),
               "ncclCommInitRank");
  }
  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  uint32_t rank() const override { return rank_; }
  uint32_t world_size() const override { return world_; }
  Backend backend() const override { return Backend::kCuda; }
  std::string name() const override { return "nccl"; }
  int device() const override { return device_; }

  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs,
                    void* recv, const size_t* recv_counts, const size_t* recv_displs, DataType type,
                    StreamHandle stream) override {
    const size_t bytes = data_type_bytes(type);
    const ncclDataType_t t = nccl_type(type);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (uint32_t r = 0; r < world_; ++r) {
      if (send_counts[r] > 0) {
        check_nccl(ncclSend(static_cast<const char*>(send) + send_displs[r] * bytes, send_counts[r],
                            t, static_cast<int>(r), comm_, as_stream(stream)),
                   "ncclSend");
      }
      if (recv_counts[r] > 0) {
        check_nccl(ncclRecv(static_cast<char*>(recv) + recv_displs[r] * bytes, recv_counts[r], t,
                            static_cast<int>(r), comm_, as_stream(stream)),
                   "ncclRecv");
      }
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }
  void all_gather(const void* send, void* recv, size_t count, DataType type,
                  StreamHandle stream) override {
    check_nccl(ncclAllGather(send, recv, count, nccl_type(type), comm_, as_stream(stream)),
               "ncclAllGather");
  }
  void all_reduce_sum(const void* send, void* recv, size_t count, DataType type,
                      StreamHandle stream) override {
    check_nccl(ncclAllReduce(send, recv, count, nccl_type(type), ncclSum, comm_, as_stream(stream)),
               "ncclAllReduce");
  }
  void broadcast(void* buffer, size_t count, DataType type, uint32_t root,
                 StreamHandle stream) override {
    require(root < world_, "NcclCommunicator::broadcast", "root", std::to_string(root),
            "< world_size = " + std::to_string(world_));
    check_nccl(ncclBroadcast(buffer, buffer, count, nccl_type(type), static_cast<int>(root), comm_,
                             as_stream(stream)),
               "ncclBroadcast");
  }
  // An all-reduce of one value on a stream of its own, waited for on the host.
  void barrier() override {
    cudaStream_t stream;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    void* word = nullptr;
    try {
      check_cuda(cudaMallocAsync(&word, sizeof(uint32_t), stream), "cudaMallocAsync");
      check_cuda(cudaMemsetAsync(word, 0, sizeof(uint32_t), stream), "cudaMemsetAsync");
      check_nccl(ncclAllReduce(word, word, 1, ncclUint32, ncclSum, comm_, stream),
                 "ncclAllReduce (barrier)");
      check_cuda(cudaFreeAsync(word, stream), "cudaFreeAsync");
      check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    } catch (...) {
      cudaStreamDestroy(stream);
      throw;
    }
    cudaStreamDestroy(stream);
  }

 private:
  uint32_t rank_, world_;
  int device_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_available() {
  return true;
}

std::unique_ptr<Communicator> make_nccl_communicator(uint32_t rank, uint32_t world_size,
                                                     IdExchanger& exchanger, int device) {
  require(world_size >= 1, "make_nccl_communicator", "world_size", std::to_string(world_size),
          ">= 1");
  require(rank < world_size, "make_nccl_communicator", "rank", std::to_string(rank),
          "< world_size = " + std::to_string(world_size));
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  require(device >= 0 && device < devices, "make_nccl_communicator", "device",
          std::to_string(device), "< the " + std::to_string(devices) + " CUDA devices visible");
  return std::make_unique<NcclCommunicator>(rank, world_size, exchanger, device);
}

}  // namespace dynemb::dist

// The element types, the one-rank communicator and the host-side control helpers.
#include "dynemb/dist/communicator.hpp"

#include <algorithm>
#include <cstring>

#include "dynemb/core/error.hpp"

namespace dynemb::dist {

size_t data_type_bytes(DataType type) {
  switch (type) {
    case DataType::kUint8:
      return 1;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64:
    default:
      return 8;
  }
}

std::string to_string(DataType type) {
  switch (type) {
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt32:
      return "int32";
    case DataType::kUint32:
      return "uint32";
    case DataType::kInt64:
      return "int64";
    case DataType::kUint64:
      return "uint64";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
    default:
      return "float64";
  }
}

namespace {

// World size 1: every collective is a copy within the backend's memory.
class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(Backend backend) : backend_(backend) {}
  uint32_t rank() const override { return 0; }
  uint32_t world_size() const override { return 1; }
  Backend backend() const override { return backend_; }
  std::string name() const override { return "local"; }

  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs,
                    void* recv, const size_t* recv_counts, const size_t* recv_displs, DataType type,
                    StreamHandle stream) override {
    require(send_counts[0] == recv_counts[0], "LocalCommunicator::all_to_all_v", "recv_counts[0]",
            std::to_string(recv_counts[0]),
            "equal to send_counts[0] = " + std::to_string(send_counts[0]));
    copy(static_cast<char*>(recv) + recv_displs[0] * data_type_bytes(type),
         static_cast<const char*>(send) + send_displs[0] * data_type_bytes(type),
         send_counts[0] * data_type_bytes(type), stream);
  }
  void all_gather(const void* send, void* recv, size_t count, DataType type,
                  StreamHandle stream) override {
    copy(recv, send, count * data_type_bytes(type), stream);
  }
  void all_reduce_sum(const void* send, void* recv, size_t count, DataType type,
                      StreamHandle stream) override {
    copy(recv, send, count * data_type_bytes(type), stream);
  }
  void broadcast(void*, size_t, DataType, uint32_t root, StreamHandle) override {
    require(root == 0, "LocalCommunicator::broadcast", "root", std::to_string(root),
            "< world_size = 1");
  }
  void barrier() override {}

 private:
  void copy(void* dst, const void* src, size_t bytes, StreamHandle stream) {
    if (bytes == 0 || dst == src) return;
    copy_within_backend(backend_, dst, src, bytes, stream);
  }
  Backend backend_;
};

// A host array staged in the communicator's memory (no copy for host-memory communicators).
template <class T>
class Staged {
 public:
  Staged(const Communicator& comm, size_t count) : backend_(comm.backend()), host_(count) {
    if (backend_ != Backend::kCpu) {
      device_ = BackendBuffer<T>(backend_, std::max<size_t>(count, 1), comm.device());
    }
  }
  T* comm_ptr() { return backend_ == Backend::kCpu ? host_.data() : device_.data(); }
  std::vector<T>& host() { return host_; }
  void upload() {
    if (backend_ != Backend::kCpu && !host_.empty()) device_.upload(host_.data(), host_.size());
  }
  void download() {
    if (backend_ != Backend::kCpu && !host_.empty()) {
      backend_synchronize(backend_);
      device_.download(host_.data(), host_.size());
    }
  }

 private:
  Backend backend_;
  std::vector<T> host_;
  BackendBuffer<T> device_;
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

std::unique_ptr<Communicator> make_local_communicator(Backend backend) {
  return std::make_unique<LocalCommunicator>(backend);
}

template <class T>
std::vector<T> all_gather_values(Communicator& comm, std::span<const T> values) {
  Staged<T> send(comm, values.size());
  std::copy(values.begin(), values.end(), send.host().begin());
  send.upload();
  Staged<T> recv(comm, values.size() * comm.world_size());
  if (!values.empty()) {
    comm.all_gather(send.comm_ptr(), recv.comm_ptr(), values.size(), data_type_of<T>());
  }
  recv.download();
  return std::move(recv.host());
}

template <class T>
std::vector<T> all_reduce_values(Communicator& comm, std::span<const T> values) {
  Staged<T> buffer(comm, values.size());
  std::copy(values.begin(), values.end(), buffer.host().begin());
  buffer.upload();
  if (!values.empty()) {
    comm.all_reduce_sum(buffer.comm_ptr(), buffer.comm_ptr(), values.size(), data_type_of<T>());
  }
  buffer.download();
  return std::move(buffer.host());
}

template std::vector<uint8_t> all_gather_values(Communicator&, std::span<const uint8_t>);
template std::vector<uint32_t> all_gather_values(Communicator&, std::span<const uint32_t>);
template std::vector<uint64_t> all_gather_values(Communicator&, std::span<const uint64_t>);
template std::vector<int64_t> all_gather_values(Communicator&, std::span<const int64_t>);
template std::vector<double> all_gather_values(Communicator&, std::span<const double>);
template std::vector<uint64_t> all_reduce_values(Communicator&, std::span<const uint64_t>);
template std::vector<int64_t> all_reduce_values(Communicator&, std::span<const int64_t>);
template std::vector<double> all_reduce_values(Communicator&, std::span<const double>);
template std::vector<float> all_reduce_values(Communicator&, std::span<const float>);

std::vector<uint64_t> all_to_all_counts(Communicator& comm, std::span<const uint64_t> counts,
                                        size_t per_rank) {
  const size_t world = comm.world_size();
  require(counts.size() == world * per_rank, "all_to_all_counts", "counts",
          std::to_string(counts.size()) + " entries",
          "world_size * per_rank = " + std::to_string(world * per_rank));
  Staged<uint64_t> send(comm, counts.size());
  std::copy(counts.begin(), counts.end(), send.host().begin());
  send.upload();
  Staged<uint64_t> recv(comm, counts.size());
  std::vector<size_t> sizes(world, per_rank), displs(world);
  for (size_t r = 0; r < world; ++r) displs[r] = r * per_rank;
  if (per_rank > 0) {
    comm.all_to_all_v(send.comm_ptr(), sizes.data(), displs.data(), recv.comm_ptr(), sizes.data(),
                      displs.data(), DataType::kUint64);
  }
  recv.download();
  return std::move(recv.host());
}

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine) {
  const uint64_t length = mine.size();
  const std::vector<uint64_t> lengths = all_gather_values<uint64_t>(comm, {&length, 1});
  const uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<uint8_t> padded(longest, 0);
  std::memcpy(padded.data(), mine.data(), mine.size());
  const std::vector<uint8_t> all = all_gather_values<uint8_t>(comm, padded);
  std::vector<std::string> out(comm.world_size());
  for (size_t r = 0; r < out.size(); ++r) {
    out[r].assign(reinterpret_cast<const char*>(all.data()) + r * longest, lengths[r]);
  }
  return out;
}

std::string broadcast_string(Communicator& comm, const std::string& value, uint32_t root) {
  uint64_t length = value.size();
  {
    Staged<uint64_t> n(comm, 1);
    n.host()[0] = length;
    n.upload();
    comm.broadcast(n.comm_ptr(), 1, DataType::kUint64, root);
    n.download();
    length = n.host()[0];
  }
  Staged<uint8_t> bytes(comm, length);
  if (comm.rank() == root) std::memcpy(bytes.host().data(), value.data(), length);
  bytes.upload();
  if (length > 0) comm.broadcast(bytes.comm_ptr(), length, DataType::kUint8, root);
  bytes.download();
  return std::string(bytes.host().begin(), bytes.host().end());
}

void require_same_on_all_ranks(Communicator& comm, const std::string& description,
                               const std::string& what) {
  const uint64_t hash = fnv1a(description);
  const std::vector<uint64_t> hashes = all_gather_values<uint64_t>(comm, {&hash, 1});
  if (std::all_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h == hashes[0]; })) {
    return;
  }
  // Every rank saw the same hashes, so every rank takes this branch: gather the texts.
  const std::vector<std::string> all = all_gather_strings(comm, description);
  std::string message = what + " differ between the ranks (every rank must be created alike):";
  for (size_t r = 0; r < all.size(); ++r) {
    if (r > 0 && all[r] == all[0]) continue;
    message += "\n  rank " + std::to_string(r) + (r > 0 ? "" : " (reference)") + ": " + all[r];
  }
  throw InvalidArgument(message);
}

bool all_ranks_ok(Communicator& comm, bool ok) {
  const uint64_t failed = ok ? 0 : 1;
  return all_reduce_values<uint64_t>(comm, {&failed, 1})[0] == 0;
}

}  // namespace dynemb::dist

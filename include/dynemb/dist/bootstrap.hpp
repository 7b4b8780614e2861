// How the ranks of a job agree on a few bytes before any communicator exists (NCCL's unique
// id): rank 0 creates them, an IdExchanger hands them to every rank. Three ways: MPI
// (mpi_communicator.hpp), a file on a shared filesystem (Slurm without MPI), and a key-value
// store such as torch.distributed's (the Python front end passes its store's set / get).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dynemb::dist {

// Shares rank 0's bytes with every rank. Every rank calls share() once per rendezvous, in the
// same order.
class IdExchanger {
 public:
  virtual ~IdExchanger() = default;
  // Rank 0 passes the bytes; every rank (rank 0 included) gets them back.
  virtual std::vector<uint8_t> share(uint32_t rank, const std::vector<uint8_t>& root_bytes) = 0;
};

// Through a file on a filesystem every rank sees: rank 0 writes `<path>.<n>` atomically (a
// temporary file, fsync, rename) for the n-th share() call; the others poll for it until
// `timeout`, then throw Error naming the file and the wait. The files stay (a rank may still be
// reading when rank 0 is done): use a fresh path per job (e.g. with the Slurm job id) and
// remove it when the job ends; a stale file at the path would hand out an old id.
std::unique_ptr<IdExchanger> make_file_id_exchanger(
    std::filesystem::path path, std::chrono::milliseconds timeout = std::chrono::seconds(300));

// Through a key-value store (torch.distributed's TCPStore / FileStore: set and a blocking get):
// rank 0 calls set(prefix + n, bytes), every rank get(prefix + n). The store's own timeout
// applies to get.
using StoreSet = std::function<void(const std::string& key, const std::vector<uint8_t>& value)>;
using StoreGet = std::function<std::vector<uint8_t>(const std::string& key)>;
std::unique_ptr<IdExchanger> make_store_id_exchanger(StoreSet set, StoreGet get,
                                                     std::string prefix = "dynemb/id/");

}  // namespace dynemb::dist

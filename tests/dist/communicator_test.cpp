// The one-rank communicator, the host helpers over it, the key routers and the file / store
// rendezvous (several threads standing in for ranks).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/dist/bootstrap.hpp"
#include "dynemb/dist/communicator.hpp"
#include "dynemb/dist/key_router.hpp"
#include "dynemb/dist/mpi_communicator.hpp"
#include "dynemb/dist/nccl_communicator.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::dist {
namespace {

TEST(DistLocalCommunicator, CollectivesCopyAtWorldOne) {
  testing::TestRng rng;
  auto comm = make_local_communicator();
  EXPECT_EQ(comm->rank(), 0u);
  EXPECT_EQ(comm->world_size(), 1u);
  std::vector<uint64_t> send(1 + rng.uniform(0, 50));
  for (auto& v : send) v = rng.next();
  std::vector<uint64_t> recv(send.size() + 3, 7);
  const size_t count = send.size(), displ = 0, rdispl = 3;
  comm->all_to_all_v(send.data(), &count, &displ, recv.data(), &count, &rdispl, DataType::kUint64);
  EXPECT_EQ(std::vector<uint64_t>(recv.begin() + 3, recv.end()), send);
  EXPECT_EQ(recv[0], 7u);
  EXPECT_EQ(all_gather_values<uint64_t>(*comm, send), send);
  EXPECT_EQ(all_reduce_values<uint64_t>(*comm, send), send);
  EXPECT_EQ(all_to_all_counts(*comm, send, send.size()), send);
  EXPECT_EQ(all_gather_strings(*comm, "abc"), std::vector<std::string>{"abc"});
  EXPECT_EQ(broadcast_string(*comm, "xyz"), "xyz");
  EXPECT_TRUE(all_ranks_ok(*comm, true));
  EXPECT_FALSE(all_ranks_ok(*comm, false));
  EXPECT_NO_THROW(require_same_on_all_ranks(*comm, "anything", "config"));
  const size_t wrong = count + 1;
  EXPECT_THROW(comm->all_to_all_v(send.data(), &count, &displ, recv.data(), &wrong, &rdispl,
                                  DataType::kUint64),
               InvalidArgument);
  EXPECT_THROW(comm->broadcast(send.data(), 1, DataType::kUint64, 1), InvalidArgument);
}

TEST(DistDataType, SizesAndNames) {
  EXPECT_EQ(data_type_bytes(DataType::kUint8), 1u);
  EXPECT_EQ(data_type_bytes(DataType::kFloat32), 4u);
  EXPECT_EQ(data_type_bytes(DataType::kInt64), 8u);
  EXPECT_EQ(to_string(DataType::kFloat64), "float64");
  EXPECT_EQ(data_type_of<int64_t>(), DataType::kInt64);
}

TEST(DistKeyRouter, RulesAndBadOwner) {
  testing::TestRng rng;
  const KeyRouter hash = KeyRouter::hash(), modulo = KeyRouter::modulo();
  const KeyRouter custom =
      KeyRouter::custom("table-major", [](uint32_t t, uint64_t, uint32_t w) { return t % w; });
  const KeyRouter broken = KeyRouter::custom("broken", [](uint32_t, uint64_t, uint32_t w) {
    return w;  // out of range
  });
  for (uint32_t world = 1; world <= 5; ++world) {
    std::vector<size_t> per_rank(world);
    for (int i = 0; i < 2000; ++i) {
      const uint64_t key = rng.next();
      const uint32_t h = hash.owner(0, key, world);
      EXPECT_EQ(h, rank_of_key_bits(key, world));  // what checkpoint loads route by
      ++per_rank[h];
      EXPECT_EQ(modulo.owner(3, key, world), key % world);
      EXPECT_EQ(custom.owner(7, key, world), 7 % world);
    }
    for (size_t n : per_rank) EXPECT_GT(n, 2000 / world / 2);  // spread over every rank
    EXPECT_THROW(broken.owner(0, 1, world), InvalidArgument);
  }
  EXPECT_EQ(custom.name(), "custom:table-major");
  EXPECT_THROW(KeyRouter::custom("", [](uint32_t, uint64_t, uint32_t) { return 0u; }),
               InvalidArgument);
  EXPECT_THROW(KeyRouter::custom("x", nullptr), InvalidArgument);
}

std::filesystem::path fresh_dir(const char* name) {
  auto dir = std::filesystem::temp_directory_path() /
             (std::string(name) + "-" + std::to_string(::getpid()) + "-" +
              std::to_string(testing::test_seed()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(DistBootstrap, FileExchangerSharesRankZerosBytesWithEveryRank) {
  testing::TestRng rng;
  const auto dir = fresh_dir("dynemb-file-id");
  const uint32_t world = 4;
  std::vector<std::vector<std::vector<uint8_t>>> got(world);
  std::vector<std::vector<uint8_t>> sent(3);
  for (auto& s : sent) {
    s.resize(rng.uniform(0, 300));
    for (auto& b : s) b = static_cast<uint8_t>(rng.next());
  }
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      auto ex = make_file_id_exchanger(dir / "nccl-id", std::chrono::seconds(20));
      // The others start first and wait; rank 0 publishes late.
      if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (const auto& s : sent)
        got[r].push_back(ex->share(r, r == 0 ? s : std::vector<uint8_t>{}));
    });
  }
  for (auto& t : ranks) t.join();
  for (uint32_t r = 0; r < world; ++r) EXPECT_EQ(got[r], sent) << "rank " << r;
  std::filesystem::remove_all(dir);
}

TEST(DistBootstrap, FileExchangerTimesOutNamingTheFile) {
  const auto dir = fresh_dir("dynemb-file-timeout");
  auto ex = make_file_id_exchanger(dir / "never", std::chrono::milliseconds(30));
  try {
    ex->share(1, {});
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("never.0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("timeout"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(DistBootstrap, StoreExchangerUsesSetAndGet) {
  std::map<std::string, std::vector<uint8_t>> store;  // a torch.distributed store stand-in
  std::mutex m;
  auto set = [&](const std::string& k, const std::vector<uint8_t>& v) {
    std::lock_guard lock(m);
    store[k] = v;
  };
  auto get = [&](const std::string& k) {
    std::lock_guard lock(m);
    return store.at(k);
  };
  auto root = make_store_id_exchanger(set, get, "job7/");
  auto other = make_store_id_exchanger(set, get, "job7/");
  EXPECT_EQ(root->share(0, {1, 2, 3}), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(other->share(2, {}), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(store.count("job7/0"), 1u);
  EXPECT_THROW(make_store_id_exchanger(nullptr, get), InvalidArgument);
}

// The NCCL communicator at world size 1 through the file rendezvous: the same code path as
// many ranks (unique id shared, grouped send / recv). Skips without a GPU.
TEST(DistNccl, WorldOneCollectivesOnTheDevice) {
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  testing::TestRng rng;
  const auto dir = fresh_dir("dynemb-nccl-id");
  auto ex = make_file_id_exchanger(dir / "id");
  auto comm = make_nccl_communicator(0, 1, *ex, 0);
  EXPECT_EQ(comm->backend(), Backend::kCuda);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  std::vector<uint64_t> values(1 + rng.uniform(0, 1000));
  for (auto& v : values) v = rng.next() >> 8;
  EXPECT_EQ(all_gather_values<uint64_t>(*comm, values), values);
  EXPECT_EQ(all_reduce_values<uint64_t>(*comm, values), values);
  EXPECT_EQ(all_to_all_counts(*comm, values, values.size()), values);
  EXPECT_EQ(broadcast_string(*comm, "nccl"), "nccl");
  comm->barrier();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dynemb::dist

// The CPU peers dynemb's table is measured against: libcuckoo and absl::flat_hash_map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dynemb::bench {

// A uint64 -> float[dim] map driven batch-wise like a dynemb table (host memory only).
class PeerMap {
 public:
  virtual ~PeerMap() = default;
  // The peer's name in tables and JSON.
  virtual std::string name() const = 0;
  // Stores values[i] under keys[i] (insert or overwrite).
  virtual void insert_or_assign(size_t n, const uint64_t* keys, const float* values) = 0;
  // Copies the rows of stored keys to values[i]; founds[i] says which were stored.
  virtual void find(size_t n, const uint64_t* keys, float* values, bool* founds) = 0;
  // Inserts missing keys with a zero row, then copies every key's row to values[i].
  virtual void find_or_insert(size_t n, const uint64_t* keys, float* values, bool* founds) = 0;
  // Overwrites the rows of stored keys; missing keys are ignored.
  virtual void assign(size_t n, const uint64_t* keys, const float* values) = 0;
  // Sets founds[i] to whether keys[i] is stored.
  virtual void contains(size_t n, const uint64_t* keys, bool* founds) = 0;
  // Removes the stored keys.
  virtual void erase(size_t n, const uint64_t* keys) = 0;
  // Copies every stored (key, row) out, in chunks of `chunk` pairs written over keys/values
  // from their start again and again (as a chunked export would); returns the pairs copied.
  virtual size_t export_all(size_t chunk, uint64_t* keys, float* values) = 0;
  // Number of stored keys.
  virtual size_t size() const = 0;
};

// True when the peers are compiled for `dim` (their value type is std::array<float, dim>).
bool peer_dim_supported(uint32_t dim);

// The dims the peers are compiled for, as "4, 8, ...".
std::string peer_dims_list();

// libcuckoo::cuckoohash_map sized for `reserve` keys; batches are split over `threads` threads.
std::unique_ptr<PeerMap> make_cuckoo_peer(uint32_t dim, size_t reserve, uint32_t threads);

// absl::flat_hash_map behind one std::mutex, sized for `reserve` keys; each batch runs under the
// lock on the calling thread (the single-thread floor).
std::unique_ptr<PeerMap> make_absl_peer(uint32_t dim, size_t reserve);

}  // namespace dynemb::bench

// Counter admission: how often each not-yet-admitted key was seen, kept in a small LFU table
// whose rarest keys are evicted when it is full. The counter lives on the host for every
// embedding backend (a CUDA embedding brings its step's candidates to the host).
#pragma once

#include <memory>
#include <vector>

#include "dynemb/embedding/embedding.hpp"

namespace dynemb::embedding::detail {

template <TableKey K>
class AdmissionCounter {
 public:
  // A CPU counter table of `capacity` slots (rounded up to whole buckets) admitting at
  // `threshold`.
  AdmissionCounter(uint32_t threshold, uint64_t capacity, uint32_t bucket_capacity);

  // Adds occurrences[i] to the count of keys[i] for the candidates (flags[i] == false: keys
  // without a row) and sets admit[i] for those whose count reached the threshold, which leave
  // the counter. Host memory.
  void count_and_admit(size_t n, const K* keys, const uint32_t* occurrences, const bool* has_row,
                       bool* admit);

  // Keys being counted.
  size_t size() const { return table_->size(); }

 private:
  uint32_t threshold_;
  std::unique_ptr<Table<K>> table_;
  std::vector<K> keys_;
  std::vector<uint64_t> scores_;
  std::vector<float> values_;
};

}  // namespace dynemb::embedding::detail

#include "cpu/bucket_storage.hpp"

#include <cstring>

namespace dynemb::table::cpu {

BucketStorage::BucketStorage(uint64_t num_buckets, uint32_t bucket_capacity, uint32_t dim)
    : num_buckets_(num_buckets),
      bucket_capacity_(bucket_capacity),
      dim_(dim),
      ctrl_(num_buckets * bucket_capacity),
      entries_(num_buckets * bucket_capacity),
      values_(num_buckets * bucket_capacity * static_cast<uint64_t>(dim)) {}

int32_t BucketStorage::lowest_score_slot(uint64_t b) const {
  const uint8_t* c = ctrl(b);
  const SlotEntry* e = entries_.data() + b * bucket_capacity_;
  int32_t best = -1;
  for (uint32_t i = 0; i < bucket_capacity_; ++i) {
    if ((c[i] & kCtrlFullBit) == 0) continue;
    if (best < 0 || e[i].score < e[best].score ||
        (e[i].score == e[best].score && e[i].key < e[best].key))
      best = static_cast<int32_t>(i);
  }
  return best;
}

void BucketStorage::clear() {
  // Runs with the table locked exclusively, so no predict_slot reads concurrently.
  std::memset(ctrl_.data(), kCtrlEmpty, ctrl_.size());
}

void BucketStorage::fault_in(uint64_t first, uint64_t last) const {
  const uint64_t begin = first * bucket_capacity_;
  const uint64_t end = last * bucket_capacity_;
  ctrl_.fault_in_elements(begin, end);
  entries_.fault_in_elements(begin, end);
  values_.fault_in_elements(begin * dim_, end * dim_);
}

}  // namespace dynemb::table::cpu

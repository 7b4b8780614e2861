#include "admission_counter.hpp"

#include <algorithm>
#include <memory>

namespace dynemb::embedding::detail {

template <TableKey K>
AdmissionCounter<K>::AdmissionCounter(uint32_t threshold, uint64_t capacity,
                                      uint32_t bucket_capacity)
    : threshold_(threshold) {
  TableOptions o;
  o.dim = 1;
  o.bucket_capacity = bucket_capacity;
  o.max_capacity =
      std::max<uint64_t>(1, (capacity + bucket_capacity - 1) / bucket_capacity) * bucket_capacity;
  o.init_capacity = std::min<uint64_t>(o.max_capacity, 64ull * bucket_capacity);
  o.score_policy = ScorePolicy::kLfu;
  o.safe_check = SafeCheck::kIgnore;  // a refused count only delays a rare key's admission
  o.initializer.kind = InitializerKind::kConstant;
  table_ = make_table<K>(Backend::kCpu, o);
}

template <TableKey K>
void AdmissionCounter<K>::count_and_admit(size_t n, const K* keys, const uint32_t* occurrences,
                                          const bool* has_row, bool* admit) {
  keys_.clear();
  scores_.clear();
  for (size_t i = 0; i < n; ++i) {
    admit[i] = false;
    if (has_row[i]) continue;
    keys_.push_back(keys[i]);
    scores_.push_back(occurrences[i]);
  }
  const size_t m = keys_.size();
  if (m == 0) return;
  values_.assign(m, 0.0f);
  table_->insert_or_assign(m, keys_.data(), values_.data(), scores_.data());  // LFU: adds
  std::unique_ptr<bool[]> found(new bool[m]);
  table_->find(m, keys_.data(), values_.data(), found.get(), scores_.data());
  std::vector<K> admitted;
  for (size_t i = 0, c = 0; i < n; ++i) {
    if (has_row[i]) continue;
    admit[i] = found[c] && scores_[c] >= threshold_;
    if (admit[i]) admitted.push_back(keys[i]);
    ++c;
  }
  table_->erase(admitted.size(), admitted.data());
}

template class AdmissionCounter<int64_t>;
template class AdmissionCounter<uint64_t>;

}  // namespace dynemb::embedding::detail

#include "bench/table/dynemb_scenario.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "dynemb/core/error.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::bench {
namespace {

// One dynemb table plus the backend buffers the timed calls read and write.
class DynembBench {
 public:
  DynembBench(const TableBenchConfig& config, uint32_t dim, double load_factor, KeySource& fresh,
              BenchClock& clock)
      : backend_(config.backend),
        dim_(dim),
        batch_(config.batch),
        capacity_(table_capacity(config, dim)),
        target_(static_cast<uint64_t>(std::floor(load_factor * double(capacity_)))),
        full_(target_ >= capacity_),
        export_chunk_(std::min<uint64_t>(batch_, capacity_)),
        fresh_(fresh),
        clock_(clock),
        stream_(clock.stream()),
        table_(make_table<uint64_t>(backend_, table_options(config, dim, capacity_))),
        keys_(backend_, batch_),
        fill_keys_(backend_, batch_),
        values_(backend_, batch_ * dim),
        founds_(backend_, batch_),
        row_ptrs_(backend_, batch_),
        evicted_keys_(backend_, batch_),
        evicted_values_(backend_, batch_ * dim),
        evicted_scores_(backend_, batch_),
        export_keys_(backend_, export_chunk_),
        export_values_(backend_, export_chunk_ * dim),
        host_keys_(batch_),
        host_founds_(new bool[batch_]) {
    std::vector<float> row_values(batch_ * dim);
    for (size_t i = 0; i < row_values.size(); ++i) row_values[i] = float(i % 1024) / 1024.0f;
    upload(values_, row_values.data(), row_values.size());
  }

  uint64_t capacity() const { return capacity_; }
  uint64_t target() const { return target_; }
  TableStats stats() const { return table_->stats(); }

  // Inserts fresh keys until size() reaches the target; returns how many were inserted. A full
  // table (load factor 1) that stops gaining keys is accepted at the size it reached.
  uint64_t fill() {
    uint64_t inserted = 0;
    uint64_t best = 0;
    uint32_t stalled = 0;
    for (;;) {
      const uint64_t size = table_->size(stream_);
      if (size >= target_) break;
      if (size > best) {
        best = size;
        stalled = 0;
      } else if (++stalled > 64) {
        target_ = size;  // the table holds no more keys of this stream: measure it as it is
        break;
      }
      const uint64_t n = full_ ? batch_ : std::min<uint64_t>(batch_, target_ - size);
      fresh_.next(n, host_keys_.data());
      upload(fill_keys_, host_keys_.data(), n);
      table_->insert_or_assign(n, fill_keys_.data(), values_.data(), nullptr, stream_);
      inserted += n;
    }
    return inserted;
  }

  // Every stored key, read back through export_batch.
  std::vector<uint64_t> stored_keys() {
    std::vector<uint64_t> out;
    out.reserve(target_);
    for (uint64_t offset = 0; offset < capacity_; offset += export_chunk_) {
      const uint64_t slots = std::min(export_chunk_, capacity_ - offset);
      const size_t n = table_->export_batch(offset, slots, export_keys_.data(),
                                            export_values_.data(), nullptr, std::nullopt, stream_);
      const size_t before = out.size();
      out.resize(before + n);
      download(export_keys_, out.data() + before, n);
    }
    return out;
  }

  // Makes `batch` the keys of the timed calls.
  void set_batch(const TimedBatch& batch) {
    batch_keys_ = &batch;
    sorted_present_ = batch.present_keys;
    std::sort(sorted_present_.begin(), sorted_present_.end());
    upload(keys_, batch.keys.data(), batch.keys.size());
    present_ = BackendBuffer<uint64_t>(backend_, std::max<size_t>(batch.present_keys.size(), 1));
    upload(present_, batch.present_keys.data(), batch.present_keys.size());
    new_ = BackendBuffer<uint64_t>(backend_, std::max<size_t>(batch.new_keys.size(), 1));
    upload(new_, batch.new_keys.data(), batch.new_keys.size());
  }

  // Brings the table back to the filled state: `target` keys, every present key of the batch
  // stored and none of its new keys. Throws StateError if that cannot be reached.
  void restore() {
    for (int attempt = 0; attempt < 8; ++attempt) {
      const uint64_t size = table_->size(stream_);
      table_->contains(batch_, keys_.data(), founds_.data(), stream_);
      clock_.synchronize();
      founds_.download(host_founds_.get(), batch_);
      size_t present_found = 0;
      size_t new_found = 0;
      for (size_t i = 0; i < batch_; ++i) {
        if (!host_founds_[i]) continue;
        if (is_present(batch_keys_->keys[i])) {
          ++present_found;
        } else {
          ++new_found;
        }
      }
      const size_t present = batch_keys_->present_keys.size();
      if (present_found == present && new_found == 0 && size == target_) return;
      if (new_found > 0) table_->erase(batch_keys_->new_keys.size(), new_.data(), stream_);
      if (present_found < present) {
        table_->insert_or_assign(present, present_.data(), values_.data(), nullptr, stream_);
      }
      fill();
    }
    throw StateError("dynemb bench table: could not restore the table to load factor " +
                     std::to_string(double(target_) / double(capacity_)) + " (dim " +
                     std::to_string(dim_) + ", capacity " + std::to_string(capacity_) + ")");
  }

  // Issues one call of `op` on the batch; returns the pairs it handles.
  uint64_t issue(TableOp op) {
    const size_t n = batch_;
    switch (op) {
      case TableOp::kInsertOrAssign:
        table_->insert_or_assign(n, keys_.data(), values_.data(), nullptr, stream_);
        return n;
      case TableOp::kFind:
        table_->find(n, keys_.data(), values_.data(), founds_.data(), nullptr, stream_);
        return n;
      case TableOp::kFindOrInsert:
        table_->find_or_insert(n, keys_.data(), values_.data(), founds_.data(), nullptr, stream_);
        return n;
      case TableOp::kFindOrInsertGiven:
        table_->find_or_insert_given(n, keys_.data(), values_.data(), founds_.data(), nullptr,
                                     stream_);
        return n;
      case TableOp::kFindPointers:
        table_->find_pointers(n, keys_.data(), row_ptrs_.data(), founds_.data(), nullptr, stream_);
        return n;
      case TableOp::kFindOrInsertPointers:
        table_->find_or_insert_pointers(n, keys_.data(), row_ptrs_.data(), founds_.data(), nullptr,
                                        stream_);
        return n;
      case TableOp::kFindOrReservePointers:
        table_->find_or_reserve_pointers(n, keys_.data(), row_ptrs_.data(), founds_.data(), nullptr,
                                         stream_);
        return n;
      case TableOp::kAssign:
        table_->assign(n, keys_.data(), values_.data(), nullptr, stream_);
        return n;
      case TableOp::kInsertAndEvict:
        table_->insert_and_evict(n, keys_.data(), values_.data(), nullptr, evicted_keys_.data(),
                                 evicted_values_.data(), evicted_scores_.data(), stream_);
        return n;
      case TableOp::kExport:
        for (uint64_t offset = 0; offset < capacity_; offset += export_chunk_) {
          table_->export_batch(offset, std::min(export_chunk_, capacity_ - offset),
                               export_keys_.data(), export_values_.data(), nullptr, std::nullopt,
                               stream_);
        }
        return capacity_;
      case TableOp::kContains:
        table_->contains(n, keys_.data(), founds_.data(), stream_);
        return n;
      case TableOp::kErase:
        table_->erase(n, keys_.data(), stream_);
        return n;
      case TableOp::kAccumOrAssign:
        table_->accum_or_assign(n, keys_.data(), values_.data(), nullptr, stream_);
        return n;
    }
    return 0;
  }

 private:
  static TableOptions table_options(const TableBenchConfig& config, uint32_t dim,
                                    uint64_t capacity) {
    TableOptions options;
    options.dim = dim;
    options.init_capacity = capacity;
    options.max_capacity = capacity;
    options.bucket_capacity = kBenchBucketCapacity;
    options.max_load_factor = 1.0;
    options.score_policy = ScorePolicy::kTimestamp;
    options.safe_check = SafeCheck::kIgnore;
    options.num_threads = effective_threads(config);
    options.thread_safe = config.backend == Backend::kCpu;
    if (config.backend == Backend::kCpu) {
      // New rows are zeros, as the CPU peers (libcuckoo, absl) insert them: the same work.
      options.initializer.kind = InitializerKind::kConstant;
      options.initializer.value = 0.0f;
    }
    options.grouped_write_min_batch = config.grouped_write_min_batch;
    options.host_keys_in_flight = config.host_keys_in_flight;
    options.join_contended_copies = config.join_contended_copies;
    options.coalesce_copies_min_batch = config.coalesce_copies_min_batch;
    if (config.hbm_budget_gb) {
      options.max_hbm_for_values = static_cast<uint64_t>(*config.hbm_budget_gb * 1073741824.0);
    }
    return options;
  }

  bool is_present(uint64_t key) const {
    return std::binary_search(sorted_present_.begin(), sorted_present_.end(), key);
  }

  template <class T>
  void upload(BackendBuffer<T>& buffer, const T* host, size_t count) {
    clock_.synchronize();
    buffer.upload(host, count);
    backend_synchronize(backend_);
  }

  template <class T>
  void download(const BackendBuffer<T>& buffer, T* host, size_t count) {
    clock_.synchronize();
    buffer.download(host, count);
  }

  Backend backend_;
  uint32_t dim_;
  uint64_t batch_;
  uint64_t capacity_;
  uint64_t target_;
  bool full_;
  uint64_t export_chunk_;
  KeySource& fresh_;
  BenchClock& clock_;
  StreamHandle stream_;
  std::unique_ptr<Table<uint64_t>> table_;
  BackendBuffer<uint64_t> keys_, fill_keys_;
  BackendBuffer<float> values_;
  BackendBuffer<bool> founds_;
  BackendBuffer<float*> row_ptrs_;
  BackendBuffer<uint64_t> evicted_keys_;
  BackendBuffer<float> evicted_values_;
  BackendBuffer<uint64_t> evicted_scores_;
  BackendBuffer<uint64_t> export_keys_;
  BackendBuffer<float> export_values_;
  BackendBuffer<uint64_t> present_, new_;
  std::vector<uint64_t> host_keys_;
  std::unique_ptr<bool[]> host_founds_;
  const TimedBatch* batch_keys_ = nullptr;
  std::vector<uint64_t> sorted_present_;
};

}  // namespace

DynembScenarioOutput run_dynemb_scenario(const TableBenchConfig& config, uint32_t dim,
                                         double load_factor, KeySource& fresh, std::mt19937_64& rng,
                                         BenchClock& clock) {
  DynembScenarioOutput out;
  ScenarioResult& result = out.result;
  result.dim = dim;
  result.load_factor = load_factor;

  DynembBench bench(config, dim, load_factor, fresh, clock);
  result.capacity = bench.capacity();
  result.fill_keys_inserted = bench.fill();
  result.stored_keys = bench.target();
  if (bench.target() < static_cast<uint64_t>(std::floor(load_factor * double(bench.capacity())))) {
    result.notes.push_back("the table stopped gaining keys at " + std::to_string(bench.target()) +
                           " of " + std::to_string(bench.capacity()) + " slots");
  }
  out.stored = bench.stored_keys();
  if (out.stored.size() != bench.target()) {
    throw StateError("dynemb bench table: export_batch returned " +
                     std::to_string(out.stored.size()) + " keys, size() says " +
                     std::to_string(bench.target()));
  }
  std::vector<uint64_t> draw_from = out.stored;
  out.batch = draw_timed_batch(draw_from, config.batch, fresh, rng);
  bench.set_batch(out.batch);

  const bool warm_up = config.backend == Backend::kCuda;
  for (TableOp op : config.ops) {
    OpTiming best{std::numeric_limits<double>::infinity(), 0};
    for (uint32_t run = 0; run < config.repeats + (warm_up ? 1 : 0); ++run) {
      bench.restore();
      const double cpu_before = process_cpu_seconds();
      clock.start();
      const uint64_t pairs = bench.issue(op);
      const double seconds = clock.stop();
      const double cpu_seconds = process_cpu_seconds() - cpu_before;
      if (warm_up && run == 0) continue;
      if (seconds < best.seconds) best = {seconds, pairs, cpu_seconds};
    }
    result.dynemb[op] = best;
  }
  bench.restore();
  result.dynemb_stats = bench.stats();
  return out;
}

}  // namespace dynemb::bench

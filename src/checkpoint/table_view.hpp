// What the checkpoint code needs to know of a named table, whatever it is (plain table or
// embedding, int64 or uint64 keys): its Table, the embedding width and the optimizer state.
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dynemb/checkpoint/checkpoint.hpp"

namespace dynemb::checkpoint::detail {

template <TableKey K>
struct TableView {
  Table<K>* table = nullptr;
  uint32_t dim = 0;        // embedding floats: the values file's width
  uint32_t state_dim = 0;  // optimizer-state floats after them in each table row
  std::string optimizer;   // "" for a plain table
  std::vector<std::pair<std::string, double>> optimizer_args;
};

template <TableKey K>
constexpr Dtype key_dtype() {
  return std::is_same_v<K, int64_t> ? Dtype::kInt64 : Dtype::kUint64;
}

template <TableKey K>
TableView<K> view_of(Table<K>* table) {
  TableView<K> v;
  v.table = table;
  v.dim = table->dim();
  return v;
}

template <TableKey K>
TableView<K> view_of(Embedding<K>* embedding) {
  TableView<K> v;
  v.table = &embedding->table();
  v.dim = embedding->options().dim;
  v.state_dim = embedding->row_dim() - v.dim;
  const OptimizerOptions& o = embedding->options().optimizer;
  v.optimizer = to_string(o.kind);
  v.optimizer_args = {{"learning_rate", o.learning_rate},
                      {"beta1", o.beta1},
                      {"beta2", o.beta2},
                      {"eps", o.eps},
                      {"rho", o.rho},
                      {"initial_accumulator", o.initial_accumulator},
                      {"ftrl_l1", o.ftrl_l1},
                      {"ftrl_l2", o.ftrl_l2},
                      {"ftrl_beta", o.ftrl_beta},
                      {"weight_decay", o.weight_decay},
                      {"clip_norm", o.clip_norm},
                      {"clip_value", o.clip_value}};
  return v;
}

// Calls f(TableView<K>) with the named table's view.
template <class F>
decltype(auto) visit_view(const NamedTable& named, F&& f) {
  return std::visit(
      [&](auto* table) -> decltype(auto) {
        if (table == nullptr) {
          throw InvalidArgument("checkpoint: table \"" + named.name + "\" is a null pointer");
        }
        return f(view_of(table));
      },
      named.table);
}

// Host copies of what a backend's buffers hold (no copy on the CPU backend).
template <class T>
class HostMirror {
 public:
  HostMirror(Backend backend, size_t count)
      : backend_(backend), host_(std::make_unique_for_overwrite<T[]>(count)) {
    if (backend_ != Backend::kCpu) device_ = BackendBuffer<T>(backend_, count);
  }
  // The pointer the table reads or writes.
  T* table_ptr() { return backend_ == Backend::kCpu ? host_.get() : device_.data(); }
  T* host() { return host_.get(); }
  // Brings the first n elements to the host / to the table's memory.
  void download(size_t n) {
    if (backend_ != Backend::kCpu && n > 0) device_.download(host_.get(), n);
  }
  void upload(size_t n) {
    if (backend_ != Backend::kCpu && n > 0) device_.upload(host_.get(), n);
  }

 private:
  Backend backend_;
  std::unique_ptr<T[]> host_;
  BackendBuffer<T> device_;
};

// The table's clock for the next incremental dump (nullopt for LFU, which has none).
template <TableKey K>
std::optional<uint64_t> incremental_clock(const Table<K>& table, uint64_t now_ns) {
  switch (table.options().score_policy) {
    case ScorePolicy::kTimestamp:
      return now_ns;
    case ScorePolicy::kStep:
    case ScorePolicy::kCustomized:
      return table.score();
    case ScorePolicy::kLfu:
    default:
      return std::nullopt;
  }
}

}  // namespace dynemb::checkpoint::detail

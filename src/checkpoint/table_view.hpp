// What the checkpoint code needs to know of a named table, whatever its key type: its Table,
// the embedding width and the optimizer state (its RowLayout).
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/memory.hpp"

namespace dynemb::checkpoint::detail {

template <TableKey K>
struct TableView {
  Table<K>* table = nullptr;
  uint32_t dim = 0;        // embedding elements: the values file's width
  uint32_t state_dim = 0;  // optimizer-state floats after them in each table row
  ValueType value_type = ValueType::kFloat32;  // what the embedding elements are stored as
  uint32_t embedding_words = 0;  // 32-bit words of the embedding (value_words(value_type, dim))
  std::string optimizer;         // "" for a plain table
  std::vector<std::pair<std::string, double>> optimizer_args;
};

template <TableKey K>
constexpr Dtype key_dtype() {
  return std::is_same_v<K, int64_t> ? Dtype::kInt64 : Dtype::kUint64;
}

// The view of `table` with `layout` (checked against the table's dim by the caller).
template <TableKey K>
TableView<K> view_of(Table<K>* table, const RowLayout& layout) {
  TableView<K> v;
  v.table = table;
  v.dim = layout.dim;
  v.state_dim = layout.state_dim;
  v.value_type = layout.value_type;
  v.embedding_words = layout.embedding_words();
  v.optimizer = layout.optimizer;
  v.optimizer_args = layout.optimizer_args;
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
        const RowLayout& l = named.layout;
        if (uint64_t{l.embedding_words()} + l.state_dim != table->dim() || l.dim == 0) {
          throw InvalidArgument("checkpoint: table \"" + named.name +
                                "\": layout's embedding words + layout.state_dim = " +
                                std::to_string(l.embedding_words()) + " (dim " +
                                std::to_string(l.dim) + " " + to_string(l.value_type) + ") + " +
                                std::to_string(l.state_dim) + " must equal the table's dim " +
                                std::to_string(table->dim()) + " (layout.dim > 0)");
        }
        return f(view_of(table, l));
      },
      named.table);
}

// Host copies of what a backend's buffers hold (no copy on the CPU backend).
template <class T>
class HostMirror {
 public:
  // `device`: the table's CUDA device (its kernels write there).
  HostMirror(Backend backend, size_t count, int device)
      : backend_(backend), host_(std::make_unique_for_overwrite<T[]>(count)) {
    if (backend_ != Backend::kCpu) device_ = BackendBuffer<T>(backend_, count, device);
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

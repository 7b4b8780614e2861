// The constructors of each backend's table, called only by make_table.
#pragma once

#include <memory>

#include "dynemb/table/table.hpp"

namespace dynemb::table::detail {

// Builds the CPU table (src/table/cpu).
template <TableKey K>
std::unique_ptr<Table<K>> make_cpu_table(const TableOptions& options);

// Builds the CUDA table (src/table/cuda); only linked when the CUDA backend is built.
template <TableKey K>
std::unique_ptr<Table<K>> make_cuda_table(const TableOptions& options);

// True when a CUDA device is visible (only linked when the CUDA backend is built).
bool cuda_device_present();

// How many CUDA devices are visible (only linked when the CUDA backend is built).
int cuda_devices_visible();

}  // namespace dynemb::table::detail

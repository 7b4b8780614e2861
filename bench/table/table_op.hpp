// The table operations `dynemb bench table` times, and their names.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace dynemb::bench {

// One timed batch call (export: a walk over the whole capacity in export_batch chunks).
enum class TableOp {
  kInsertOrAssign,
  kFind,
  kFindOrInsert,
  kAssign,
  kInsertAndEvict,
  kExport,
  kContains,
  kErase,
  kAccumOrAssign,
  kFindPointers,           // find_pointers: row addresses instead of copies
  kFindOrInsertPointers,   // find_or_insert_pointers: a training lookup's call
  kFindOrInsertGiven,      // find_or_insert_given: missing keys take the caller's rows (HKV's)
  kFindOrReservePointers,  // find_or_reserve_pointers: new rows not initialized (HKV's
                           // find_or_insert*)
};

// Every operation, in the column order of the printed table (HKV's order first).
inline constexpr std::array<TableOp, 13> kAllTableOps = {
    TableOp::kInsertOrAssign,
    TableOp::kFind,
    TableOp::kFindOrInsert,
    TableOp::kAssign,
    TableOp::kFindPointers,
    TableOp::kInsertAndEvict,
    TableOp::kExport,
    TableOp::kContains,
    TableOp::kErase,
    TableOp::kAccumOrAssign,
    TableOp::kFindOrInsertPointers,
    TableOp::kFindOrInsertGiven,
    TableOp::kFindOrReservePointers,
};

// The operation's name as the command line and the JSON spell it ("insert_or_assign", ...).
std::string_view op_name(TableOp op);

// Parses an operation name; InvalidArgument naming `option`, the value and the accepted names.
TableOp parse_op(std::string_view name, const char* option);

// Every operation as a vector (the default selection).
std::vector<TableOp> all_table_ops();

// The comma-separated list of every operation name (for help texts and error messages).
std::string op_names_list();

}  // namespace dynemb::bench

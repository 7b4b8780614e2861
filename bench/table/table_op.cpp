#include "bench/table/table_op.hpp"

#include "dynemb/core/error.hpp"

namespace dynemb::bench {

std::string_view op_name(TableOp op) {
  switch (op) {
    case TableOp::kInsertOrAssign:
      return "insert_or_assign";
    case TableOp::kFind:
      return "find";
    case TableOp::kFindOrInsert:
      return "find_or_insert";
    case TableOp::kAssign:
      return "assign";
    case TableOp::kInsertAndEvict:
      return "insert_and_evict";
    case TableOp::kExport:
      return "export";
    case TableOp::kContains:
      return "contains";
    case TableOp::kErase:
      return "erase";
    case TableOp::kAccumOrAssign:
      return "accum_or_assign";
    case TableOp::kFindPointers:
      return "find_pointers";
    case TableOp::kFindOrInsertPointers:
      return "find_or_insert_pointers";
    case TableOp::kFindOrInsertGiven:
      return "find_or_insert_given";
    case TableOp::kFindOrReservePointers:
      return "find_or_reserve_pointers";
  }
  return "unknown";
}

std::string op_names_list() {
  std::string names;
  for (TableOp op : kAllTableOps) {
    if (!names.empty()) names += ",";
    names += op_name(op);
  }
  return names;
}

TableOp parse_op(std::string_view name, const char* option) {
  for (TableOp op : kAllTableOps) {
    if (op_name(op) == name) return op;
  }
  require(false, "dynemb bench table", option, std::string(name),
          "must be one of " + op_names_list());
  return TableOp::kFind;
}

std::vector<TableOp> all_table_ops() {
  return {kAllTableOps.begin(), kAllTableOps.end()};
}

}  // namespace dynemb::bench

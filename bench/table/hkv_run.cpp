#include "bench/table/hkv_run.hpp"

#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "dynemb/core/error.hpp"

namespace dynemb::bench {
namespace {

constexpr const char* kWhere = "dynemb bench table";

// The cells of a markdown row "| a | b |" without their padding.
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  std::string cell;
  std::getline(in, cell, '|');  // before the first bar
  while (std::getline(in, cell, '|')) {
    const size_t first = cell.find_first_not_of(' ');
    const size_t last = cell.find_last_not_of(' ');
    cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
  }
  if (!cells.empty() && cells.back().empty()) cells.pop_back();  // after the last bar
  return cells;
}

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end != nullptr && *end == '\0';
}

}  // namespace

HkvRun parse_hkv_run(const std::string& text, const std::string& path) {
  HkvRun run;
  run.path = path;
  static const std::regex header(
      R"(## HKV \S+ benchmark: (.+), mode (hbm|hybrid), dim (\d+), capacity (\d+)M, HBM for values (\d+(?:\.\d+)?) GB)");
  std::smatch m;
  if (!std::regex_search(text, m, header)) {
    throw InvalidArgument(std::string(kWhere) + ": --hkv-output " + path +
                          " has no HKV benchmark header (\"## HKV ... benchmark: GPU, mode hbm, "
                          "dim D, capacity CM, HBM for values G GB\")");
  }
  run.gpu = m[1];
  run.mode = m[2];
  run.dim = static_cast<uint32_t>(std::stoul(m[3]));
  run.capacity = std::stoull(m[4]) * 1024 * 1024;
  run.hbm_gb = std::stod(m[5]);
  std::vector<std::string> columns;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '|') continue;
    const std::vector<std::string> cells = cells_of(line);
    if (cells.empty()) continue;
    if (cells[0] == "\u03BB") {
      columns = cells;
      continue;
    }
    if (!is_number(cells[0]) || columns.empty()) continue;
    for (size_t c = 1; c < cells.size() && c < columns.size(); ++c) {
      if (is_number(cells[c])) run.figures[cells[0]][columns[c]] = std::stod(cells[c]);
    }
  }
  if (run.figures.empty()) {
    throw InvalidArgument(std::string(kWhere) + ": --hkv-output " + path +
                          " holds no figure (no row of a table headed by \u03BB)");
  }
  return run;
}

std::vector<HkvRun> read_hkv_runs(const std::vector<std::string>& paths) {
  std::vector<HkvRun> runs;
  for (const std::string& path : paths) {
    std::ifstream in(path);
    if (!in)
      throw InvalidArgument(std::string(kWhere) + ": --hkv-output " + path + " cannot be read");
    std::stringstream text;
    text << in.rdbuf();
    runs.push_back(parse_hkv_run(text.str(), path));
  }
  return runs;
}

std::string hkv_column(TableOp op) {
  switch (op) {
    case TableOp::kInsertOrAssign:
      return "insert_or_assign";
    case TableOp::kFind:
      return "find";
    case TableOp::kFindOrInsert:
    case TableOp::kFindOrInsertGiven:
      return "find_or_insert";
    case TableOp::kAssign:
      return "assign";
    case TableOp::kFindPointers:
      return "find*";
    case TableOp::kFindOrInsertPointers:
    case TableOp::kFindOrReservePointers:
      return "find_or_insert*";
    case TableOp::kInsertAndEvict:
      return "insert_and_evict";
    case TableOp::kExport:
      return "export_batch";
    case TableOp::kContains:
      return "contains";
    case TableOp::kErase:
    case TableOp::kAccumOrAssign:
      return "";
  }
  return "";
}

std::optional<double> hkv_same_run(const std::vector<HkvRun>& runs, uint32_t dim, uint64_t capacity,
                                   double load_factor, TableOp op,
                                   std::optional<double> hbm_budget_gb) {
  const std::string column = hkv_column(op);
  if (column.empty()) return std::nullopt;
  const double value_bytes = double(capacity) * dim * sizeof(float);
  const bool hybrid = hbm_budget_gb && *hbm_budget_gb * 1073741824.0 < value_bytes;
  for (const HkvRun& run : runs) {
    if (run.dim != dim || run.capacity != capacity || (run.mode == "hybrid") != hybrid) continue;
    if (hybrid && std::abs(run.hbm_gb - *hbm_budget_gb) > 1e-9) continue;
    for (const auto& [lf, figures] : run.figures) {
      if (std::abs(std::stod(lf) - load_factor) > 1e-9) continue;
      const auto it = figures.find(column);
      if (it != figures.end()) return it->second;
    }
  }
  return std::nullopt;
}

}  // namespace dynemb::bench

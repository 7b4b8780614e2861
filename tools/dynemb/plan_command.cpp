// `dynemb plan`: the sharding planner's placement of tables over ranks (per-rank capacities and
// memory modes) for a world size and per-rank HBM and host budgets, printed as a table.
#include <cmath>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "command_registry.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/dist/planner.hpp"

namespace {

struct PlanArgs {
  std::vector<std::string> tables;
  uint32_t world = 1;
  double hbm_gib = 0;
  double host_gib = 0;
  std::string backend = "cuda";
};

// "name:rows:dim[:optimizer]".
dynemb::dist::PlanTableConfig parse_table(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
  dynemb::require(parts.size() == 3 || parts.size() == 4, "dynemb plan", "--table", text,
                  "name:rows:dim or name:rows:dim:optimizer");
  dynemb::dist::PlanTableConfig c;
  c.name = parts[0];
  c.rows = std::stoull(parts[1]);
  c.dim = static_cast<uint32_t>(std::stoul(parts[2]));
  if (parts.size() == 4) c.optimizer = dynemb::parse_optimizer(parts[3]);
  return c;
}

void run(const PlanArgs& a) {
  std::vector<dynemb::dist::PlanTableConfig> tables;
  for (const std::string& t : a.tables) tables.push_back(parse_table(t));
  dynemb::dist::PlanBudget budget;
  budget.world_size = a.world;
  budget.backend = dynemb::parse_backend(a.backend);
  budget.hbm_bytes = static_cast<uint64_t>(std::llround(a.hbm_gib * (1ull << 30)));
  budget.host_bytes = static_cast<uint64_t>(std::llround(a.host_gib * (1ull << 30)));
  const auto plan = dynemb::dist::plan_sharding(tables, budget);
  std::cout << plan.to_table();
  if (!plan.fits) throw dynemb::Error("the plan does not fit the budgets");
}

void install(CLI::App& cmd) {
  auto args = std::make_shared<PlanArgs>();
  cmd.add_option("--table", args->tables, "name:rows:dim[:optimizer] (repeat per table)")
      ->required();
  cmd.add_option("--world", args->world, "ranks (processes, one GPU each)")->default_val(1);
  cmd.add_option("--hbm-gib", args->hbm_gib, "HBM per rank for tables, GiB")->default_val(0);
  cmd.add_option("--host-gib", args->host_gib, "host memory per rank for tables, GiB")
      ->default_val(0);
  cmd.add_option("--backend", args->backend, "cuda or cpu")->default_val("cuda");
  cmd.footer("Exit status 1 when the tables do not fit the budgets (the table says which).");
  cmd.callback([args] { run(*args); });
}

const bool registered = dynemb::tools::register_command(
    {{"plan"},
     "Plan tables over ranks: per-rank capacities and memory modes (HBM, hybrid, caching)",
     install});

}  // namespace

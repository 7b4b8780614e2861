// The subcommands of the dynemb program. Each lives in its own *_command.cpp and registers
// itself at static-initialization time, so adding one (`train`, `inspect`, `bench cache`, ...)
// is adding one file to tools/dynemb/.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dynemb::tools {

// A leaf subcommand: its path below `dynemb` (e.g. {"bench", "table"}), its one-line
// description, and the function that adds its options and callback to its CLI::App.
struct CommandSpec {
  std::vector<std::string> path;
  std::string description;
  std::function<void(CLI::App&)> install;
};

// Adds `spec` to the program; returns true (so a file can register with a static bool).
bool register_command(CommandSpec spec);

// Gives the group subcommand at `path` (e.g. {"bench"}) its description; returns true.
bool register_group(std::vector<std::string> path, std::string description);

// Builds every registered group and subcommand under `root`, in path order.
void install_commands(CLI::App& root);

}  // namespace dynemb::tools

#include "command_registry.hpp"

#include <algorithm>
#include <map>

namespace dynemb::tools {
namespace {

std::vector<CommandSpec>& commands() {
  static std::vector<CommandSpec> registered;
  return registered;
}

std::map<std::vector<std::string>, std::string>& group_descriptions() {
  static std::map<std::vector<std::string>, std::string> registered;
  return registered;
}

// The child of `parent` named `name`, created as a group (one subcommand required) if absent.
CLI::App& child_group(CLI::App& parent, const std::vector<std::string>& path) {
  const std::string& name = path.back();
  for (CLI::App* sub : parent.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == name) return *sub;
  }
  const auto it = group_descriptions().find(path);
  CLI::App* group = parent.add_subcommand(name, it != group_descriptions().end() ? it->second : "");
  group->require_subcommand(1);
  return *group;
}

}  // namespace

bool register_command(CommandSpec spec) {
  commands().push_back(std::move(spec));
  return true;
}

bool register_group(std::vector<std::string> path, std::string description) {
  group_descriptions()[std::move(path)] = std::move(description);
  return true;
}

void install_commands(CLI::App& root) {
  std::vector<const CommandSpec*> sorted;
  for (const CommandSpec& spec : commands()) sorted.push_back(&spec);
  std::sort(sorted.begin(), sorted.end(),
            [](const CommandSpec* a, const CommandSpec* b) { return a->path < b->path; });
  for (const CommandSpec* spec : sorted) {
    CLI::App* parent = &root;
    std::vector<std::string> prefix;
    for (size_t i = 0; i + 1 < spec->path.size(); ++i) {
      prefix.push_back(spec->path[i]);
      parent = &child_group(*parent, prefix);
    }
    CLI::App* command = parent->add_subcommand(spec->path.back(), spec->description);
    spec->install(*command);
  }
}

}  // namespace dynemb::tools

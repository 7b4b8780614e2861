// The `dynemb bench` group; its targets (`bench table`, ...) are *_command.cpp files.
#include "command_registry.hpp"

namespace {

const bool registered = dynemb::tools::register_group(
    {"bench"}, "Benchmarks: time dynemb and its peers, print tables, write bench/results/*.json");

}  // namespace

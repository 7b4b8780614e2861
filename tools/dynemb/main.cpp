// The dynemb program: `dynemb <command> [<subcommand>] [options]`.
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "command_registry.hpp"
#include "dynemb/core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app("dynemb: dynamic embedding tables on CPU and GPU", "dynemb");
  app.require_subcommand(1);
  dynemb::tools::install_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const dynemb::InvalidArgument& e) {
    std::cerr << "dynemb: error: " << e.what() << "\n";
    return 2;
  } catch (const dynemb::NotAvailable& e) {
    std::cerr << "dynemb: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dynemb: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// The dynemb program: `dynemb <command> [<subcommand>] [options]`. Exit status: 0 done, 1 a
// failure while running, 2 a usage error (bad option, value out of range, refused resume),
// 130 interrupted (Ctrl-C) before the run had anything to finish.
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "command_registry.hpp"
#include "dynemb/core/error.hpp"
#include "train/stop_request.hpp"

int main(int argc, char** argv) {
  CLI::App app("dynemb: dynamic embedding tables on CPU and GPU", "dynemb");
  app.require_subcommand(1);
  dynemb::tools::install_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse or check failure is a usage error.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const dynemb::InvalidArgument& e) {
    std::cerr << "dynemb: error: " << e.what() << "\n";
    return 2;
  } catch (const dynemb::NotAvailable& e) {
    std::cerr << "dynemb: error: " << e.what() << "\n";
    return 2;
  } catch (const dynemb::train::Interrupted& e) {
    std::cerr << "dynemb: " << e.what() << "\n";
    return 130;
  } catch (const std::exception& e) {
    std::cerr << "dynemb: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// xentlab: numerics lab and verification harness for the LM-head cross-entropy loss.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <new>
#include <stdexcept>

#include "numerics/error.hpp"
#include "numerics/version.hpp"
#include "tools/cli/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"xentlab: how wrong is a cross-entropy kernel? Certified reference, audits, golden files."};
  app.set_version_flag("--version", std::string("xentlab ") + xentlab::kVersion);
  app.require_subcommand(1);
  xentlab::cli::register_audit(app);
  xentlab::cli::register_reference(app);
  xentlab::cli::register_datasets(app);
  xentlab::cli::register_golden(app);
  xentlab::cli::register_verify(app);
  xentlab::cli::register_regress(app);
  xentlab::cli::register_bench(app);
  xentlab::cli::set_command_line(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const xentlab::InputError& e) {
    fmt::print(stderr, "xentlab: invalid input: {}\n", e.what());
    return 2;
  } catch (const xentlab::FormatError& e) {
    fmt::print(stderr, "xentlab: bad file: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "xentlab: out of memory: the input declares, or the options ask for, more "
                       "than this machine can hold (sample rows with --rows / --vocab-rows, or use "
                       "smaller sizes)\n");
    return 3;
  } catch (const std::length_error& e) {
    fmt::print(stderr, "xentlab: a size is too large to allocate ({})\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    fmt::print(stderr, "xentlab: error: {}\n", e.what());
    return 3;
  }
  return 0;
}

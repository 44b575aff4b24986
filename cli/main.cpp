// xentlab: numerics lab and verification harness for the LM-head cross-entropy loss.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "cli/commands.hpp"
#include "numerics/blas.hpp"
#include "numerics/error.hpp"
#include "numerics/no_device.hpp"
#include "numerics/version.hpp"

int main(int argc, char** argv) {
  xentlab::choose_blas_kernels(argv);  // fast fp64 GEMM kernels for the reference
  CLI::App app{
      "xentlab: how wrong is a cross-entropy kernel? Certified reference, audits, golden files."};
  app.set_version_flag("--version", std::string("xentlab ") + xentlab::kVersion);
  app.require_subcommand(1);
  xentlab::cli::register_audit(app);
  xentlab::cli::register_reference(app);
  xentlab::cli::register_datasets(app);
  xentlab::cli::register_golden(app);
  xentlab::cli::register_verify(app);
  xentlab::cli::register_candidate(app);
  xentlab::cli::register_selftest(app);
  xentlab::cli::register_regress(app);
  xentlab::cli::register_fidelity(app);
  xentlab::cli::register_bench(app);
  xentlab::cli::require_decimal_integers(app);
  xentlab::cli::require_distinct_option_names(app);
  xentlab::cli::set_command_line(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help, --version (exit 0) and a command's own status (CLI::RuntimeError) pass through;
    // every other parse error is invalid input: CLI11's message, exit 2 (not CLI11's 1xx codes).
    const int code = app.exit(e);
    if (code == 0 || e.get_name() == "RuntimeError") return code;
    if (app.get_subcommands().empty()) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands({}))
        names += (names.empty() ? "" : ", ") + sub->get_name();
      const bool named = argc > 1 && argv[1][0] != '-';
      fmt::print(
          stderr, "xentlab: {}; the commands are: {} (xentlab COMMAND --help)\n",
          named ? fmt::format("unknown command '{}'", argv[1]) : std::string("no command given"),
          names);
    }
    return 2;
  } catch (const xentlab::InputError& e) {
    fmt::print(stderr, "xentlab: invalid input: {}\n", e.what());
    return 2;
  } catch (const xentlab::FormatError& e) {
    fmt::print(stderr, "xentlab: bad file: {}\n", e.what());
    return 2;
  } catch (const xentlab::NoDeviceError& e) {
    // "no CUDA device: why": the same status for every command (bench's too: cli/bench_cmd.cpp).
    fmt::print(stderr, "xentlab: {}\n", e.what());
    return 4;
  } catch (const xentlab::OutputError& e) {
    fmt::print(stderr, "xentlab: cannot write the output: {}\n", e.what());
    return 3;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "xentlab: out of memory: the input declares, or the options ask for, more "
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

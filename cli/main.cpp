// xentlab: numerics lab and verification harness for the LM-head cross-entropy loss.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstddef>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "numerics/blas.hpp"
#include "numerics/error.hpp"
#include "numerics/no_device.hpp"
#include "numerics/version.hpp"

namespace {

// Levenshtein distance of two option names.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// For each argument "--NAME[=…]" the command does not take: a line naming it and, when one of the
// command's long options is within two edits of it ("--polcy" for --policy), that option. CLI11's
// own message lists the arguments it did not expect, without saying which option was meant.
void suggest_options(const CLI::App& sub, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
    const std::string name =
        arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    if (sub.get_option_no_throw("--" + name) != nullptr || name == "help") continue;
    std::string best;
    std::size_t best_d = 3;
    for (const CLI::Option* o : sub.get_options())
      for (const std::string& l : o->get_lnames()) {
        const std::size_t d = edit_distance(name, l);
        if (d < best_d) best_d = d, best = l;
      }
    fmt::print(stderr, "xentlab {}: unknown option '--{}'{} (xentlab {} --help)\n", sub.get_name(),
               name, best.empty() ? "" : fmt::format("; did you mean --{}?", best), sub.get_name());
  }
}

}  // namespace

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
    for (const CLI::App* sub : app.get_subcommands()) suggest_options(*sub, argc, argv);
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

#pragma once
// The reference options that reference, golden and audit share: --reference (the tier) and
// --memory-budget, and a progress line for long reference runs.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "reference/reference.hpp"

namespace xentlab::cli {

struct ReferenceChoice {
  std::string tier = "auto";  ///< auto, compensated, blas, cuda
  std::string memory_budget;  ///< as bench's parse_bytes ("12G", "12GB"); "" or 0 = available
};

/// Adds --memory-budget (its value into `value`) to a subcommand, as every command that holds
/// host memory spells it: bytes or a size with a unit (parse_bytes); work whose estimate exceeds
/// it is refused before it starts.
void add_memory_budget_option(CLI::App* cmd, std::string& value);
/// The bytes of a --memory-budget value: 0 (the memory available now) for "" or 0. Throws
/// InputError naming the option and the value ("--memory-budget '12Q': …").
std::int64_t parse_memory_budget(const std::string& value);

/// Adds --reference and --memory-budget to a subcommand.
void add_reference_options(CLI::App* cmd, ReferenceChoice& choice);

/// Parses the choice into options.tier and options.max_bytes; throws InputError naming the option
/// and the value ("--memory-budget '12Q': …").
void apply_reference_choice(const ReferenceChoice& choice, ReferenceOptions& options);

/// A progress callback for ReferenceOptions::progress: after the first 2 s, prints
/// "\r<what>: rows r/S (p%), elapsed t s, ETA e s" to stderr at most twice a second, and a newline
/// at the end.
std::function<void(std::int64_t, std::int64_t)> progress_printer(std::string what);

}  // namespace xentlab::cli

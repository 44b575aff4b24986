#pragma once
// Subcommands of the xentlab program. One file per subcommand under cli/, each with one
// explicit registration function called from cli/main.cpp (no static self-registration).
#include <CLI/CLI.hpp>
#include <string>

namespace xentlab::cli {

/// Exit status of a judgement that reached no verdict: an output inconclusive (the checks cannot
/// tell it from a wrong one) or not judged (an output the golden file can check is missing). 0
/// passed, 1 failed, 2 invalid input, 3 output not written, 4 no CUDA device (README).
inline constexpr int kExitNoVerdict = 5;

/// `xentlab reference`: the certified reference on the embedded example or a generated problem.
void register_reference(CLI::App& app);
/// `xentlab datasets`: the catalog of named problem sources (datasets/catalog.hpp).
void register_datasets(CLI::App& app);
/// `xentlab golden`: write a golden file (harness/verify/golden.hpp, docs/formats.md).
void register_golden(CLI::App& app);
/// `xentlab verify`: score a candidate file against a golden file (harness/verify/verify.hpp).
void register_verify(CLI::App& app);
/// `xentlab candidate`: one of the lab's strategies on a golden problem, written as a candidate.
void register_candidate(CLI::App& app);
/// `xentlab selftest`: proof by mutation of verify (harness/selftest/selftest.hpp).
void register_selftest(CLI::App& app);
/// `xentlab audit`: the main job (harness/audit/).
void register_audit(CLI::App& app);
/// `xentlab regress`: compare two audit results files (nightly regression check).
void register_regress(CLI::App& app);
/// `xentlab fidelity`: CPU emulation against a device audit, run by run.
void register_fidelity(CLI::App& app);
/// `xentlab bench`: the memory/throughput table of the CUDA strategies (harness/bench/).
void register_bench(CLI::App& app);
/// Makes every integer option of `app` and its subcommands accept only plain decimal integers in
/// the range of a 64-bit integer (CLI11 would read "010" as octal 8, "0x10" as hexadecimal, "-1"
/// as 2^64 − 1 for an unsigned option, and clamp past the range without a word). Call after
/// every subcommand is registered; a rejected value is a parse error (exit 2) naming the value.
/// Floating-point options likewise refuse an empty value (CLI11 would read '' as 0).
void require_decimal_integers(CLI::App& app);
/// Throws std::logic_error when a command has a positional argument named as one of its
/// options' long names (candidate's "out" beside --out): CLI11 2.1 accepts it, CLI11 from 2.2 on
/// refuses it when the command is registered ("out is already added"), so every command of a
/// build against a newer CLI11 would fail. Called at startup: the test suite sees it with any
/// CLI11.
void require_distinct_option_names(const CLI::App& app);
/// Validators with plain messages ("must be ≥ 0, got -1"; CLI11's NonNegativeNumber and
/// PositiveNumber print a range with a 300-digit bound). A value that is not a number is left to
/// the option's type conversion.
const CLI::Validator& non_negative();
const CLI::Validator& positive();
/// Refuses an empty value (it would read as "not given"), naming the option: exit 2
/// (bench_cmd.cpp).
const CLI::Validator& non_empty();
/// The same for a closed range: "must be between 0 and 4096, got 5000" (CLI11's Range says "not in
/// range" of a value that is no number at all: that is left to the conversion, as above).
CLI::Validator in_range(double lo, double hi);
/// Records the command line (shell-quoted) for the outputs that carry it (bench's rows, the
/// --json reports).
void set_command_line(int argc, char** argv);
/// The command line set_command_line recorded ("xentlab" before it is called).
const std::string& recorded_command_line();

}  // namespace xentlab::cli

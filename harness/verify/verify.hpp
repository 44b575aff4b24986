#pragma once
// `xentlab verify`: scores a candidate file (what another implementation computed on a golden
// file's problem) against the golden reference, output by output, and decides pass/fail with the
// judge: the bound check with verify's tolerance (judge/tolerance.hpp) and the differential check
// against the emulated baseline of the policy's recipe (judge/differential.hpp). docs/verify.md.
// A finite candidate value where the reference is finite, every |e| ≤ k·tolerance, and the bias
// test of the loss (judge/policy.hpp judge) make a pass of the bound check.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "datasets/formats/golden.hpp"
#include "datasets/tensor.hpp"
#include "harness/json_report.hpp"
#include "judge/differential.hpp"
#include "judge/policy.hpp"
#include "judge/stats.hpp"
#include "judge/tolerance.hpp"

namespace xentlab {

/// One output's result.
struct OutputReport {
  std::string name;
  /// judge/output_verdict.hpp's outcome: "passed", "failed" (wrong values, or unusable: a
  /// shape, a dtype), "inconclusive" (the checks could not tell it from a wrong output: vacuous,
  /// or a sum over tokens against a sampled baseline), "not judged" (missing from the candidate,
  /// or the golden file holds no reference: no_reference).
  std::string status;
  std::string message;  ///< why (for anything but passed)
  /// The golden file holds no reference of this output (token rows sampled, or not computed):
  /// reported, and no obstacle to the candidate's verdict.
  bool no_reference = false;
  DType dtype = DType::fp32;        ///< the candidate's storage dtype (when dtype_known)
  bool dtype_known = false;         ///< the candidate holds it in a readable float dtype
  std::vector<std::int64_t> shape;  ///< compared shape (the golden's)
  std::optional<ErrorStats> stats;
  // The element that decided a failure (index = flat index in the compared shape, -1 if none).
  std::int64_t index = -1;
  std::string element;  ///< e.g. "dW[row 17 (vocab 4711), col 3]"
  double candidate = 0, reference = 0, error = 0, tolerance = 0;
  /// The bound check: "passed", "incorrect", "no bound" (some element's a-priori bound is
  /// infinite: the output is judged by the differential check alone), "not run" (--check
  /// differential), or status's value when the output was not compared.
  std::string bound_status;
  DifferentialResult differential;
  /// Judged by the differential check alone: its bound is infinite (or --check differential).
  bool differential_only = false;
};

struct VerifyReport {
  /// candidate: the candidate file's path, or "(in memory: <implementation>)" (verify_outputs).
  std::string golden, candidate, policy, provenance, implementation;
  bool candidate_in_memory = false;     ///< judged by verify_outputs: candidate names no file
  VerifyPolicy applied_policy;          ///< the policy the outputs were judged by
  std::optional<Recipe> policy_recipe;  ///< the recipe it declares here (none: --atol/--rtol)
  std::vector<std::string> required;    ///< outputs the candidate must hold and pass (--require)
  std::vector<OutputReport> outputs;
  VerifyCheck check = VerifyCheck::both;
  std::optional<Baseline> baseline;  ///< the policy recipe's emulated baseline (when run)
  std::vector<RecipeMatch> explain;  ///< --explain: every recipe tried, most similar first
  bool passed = false;
  /// The candidate's verdict, the worst of its outputs' (judge/output_verdict.hpp to_string):
  /// "passed", "failed", "inconclusive" or "not judged". Outputs with no_reference do not count.
  std::string verdict;
  std::string reason;  ///< overall verdict text
};

/// What verify_candidate does besides the policy.
struct VerifyOptions {
  std::vector<std::string> required;  ///< parse_required_outputs names
  VerifyCheck check = VerifyCheck::both;
  BaselineOptions baseline;
  /// Also run the emulation of every recipe of default_recipe_grid() with the golden problem's
  /// input dtype (every recipe of the grid on the stored inputs when the grid has none) and rank
  /// them by how close their error profiles are to the candidate's.
  bool explain = false;
  /// For verifying many candidates against one golden file: the policy recipe's baseline, as
  /// emulate_baseline returned it for this golden file (its recipe must be the policy's, else
  /// InputError); null: computed here.
  const Baseline* baseline_given = nullptr;
  /// Likewise the policy's a-priori bounds, as policy_bounds formed them for this golden file
  /// (their policy must be this one, else InputError); null: formed here. At the Llama-3-8B head
  /// forming them takes about a second.
  const PolicyBounds* bounds_given = nullptr;
  /// Likewise the baselines --explain compares with (explain_recipes of this golden file).
  const std::vector<Baseline>* explain_given = nullptr;
  /// Bytes verify may hold (harness/verify/memory.hpp verify_memory); 0 = the memory available
  /// now. Over it: InputError before the candidate is judged or a baseline runs.
  std::int64_t memory_budget = 0;
};

/// Reads the candidate (format "xentlab-candidate" version 1: datasets loss, lse, reduced_loss, dH,
/// dW, db, dz at the root, any float dtype, in the golden's sampled shape or the full shape) and
/// scores it. Unreadable files, foreign or wrong-version files throw FormatError; shape or dtype
/// mismatches of one output and non-finite values are reported failures, never exceptions.
/// Each name in `required` (parse_required_outputs) must be held by the candidate and checked: one
/// that is missing, or that the golden file cannot check, is a failed output naming it.
///
/// Checks (options.check): the bound check above, and the differential check (kDifferentialK):
/// each output's error profile against the emulated baseline of the policy's recipe
/// (emulate_baseline), which needs a recipe: with an explicit --atol/--rtol policy only the bound
/// is checked, and check = differential throws InputError. An output whose bound is infinite is
/// judged by the differential check alone (differential_only) when it runs, and is incorrect
/// ("no meaningful bound") when it does not (as judge/policy.hpp judge under default/strict). An
/// output with no a-priori bound at all (db of a golden file without db_cond) that the
/// differential check cannot judge either (not run, or no such output in its baseline) is "not
/// judged", naming both reasons; one non-finite where the reference is finite fails.
/// Throws InputError naming the estimate, its terms and the budget when verify_memory exceeds
/// options.memory_budget, before any output is judged.
VerifyReport verify_candidate(const Golden& golden, const std::string& candidate_path,
                              const VerifyPolicy& policy, const VerifyOptions& options);
/// A candidate's outputs held in memory, by name (the names of candidate_output_names).
using CandidateOutputs = std::vector<std::pair<std::string, Tensor>>;
/// verify_candidate of a candidate held in memory (no file written and read back: the selftest's
/// candidates are 2.4 GB at the Llama-3-8B head): the same checks and verdicts; the report's
/// candidate is "(in memory: <implementation>)", candidate_in_memory set. Throws InputError for
/// an output name verify does not know or given twice, and as verify_candidate (memory, bounds or
/// baseline given for another policy). `outputs` are read, not copied: they must outlive the call.
VerifyReport verify_outputs(const Golden& golden, const CandidateOutputs& outputs,
                            const std::string& implementation, const VerifyPolicy& policy,
                            const VerifyOptions& options);
/// verify_candidate with options {required, check both, default sampling, no explain}.
VerifyReport verify_candidate(const Golden& golden, const std::string& candidate_path,
                              const VerifyPolicy& policy,
                              const std::vector<std::string>& required = {});

/// The report as a table (one row per output) and the verdict lines.
std::string format_report(const VerifyReport& r);

/// The overall verdict in the judge's words (judge/policy.hpp to_string(Disposition)): "passed",
/// or "failed" when some output is anything else or none could be judged (FAILED in the text).
std::string_view verdict_word(const VerifyReport& r);

/// The JSON report of `xentlab verify --json` (docs/json.md, "verify"): the head of
/// json_report::report_head, the golden and candidate files with their SHA-256 (both files are
/// read for it: throws InputError when one cannot be, or when the report is of a candidate held
/// in memory, verify_outputs: there is no file to name), the verdict, the policy with its
/// multipliers and the differential check's constants, the baseline, every output (status as
/// judged, statistics, the deciding element, the differential check) and --explain's recipes.
/// Write it with json_report::write_json_output.
json_report::Json verify_json(const VerifyReport& r, const json_report::Invocation& inv);

/// JUnit XML (one <testsuite name="xentlab.verify">, one <testcase> per output), written
/// atomically. A report is a CI artefact rewritten by every run: an existing report of verify at
/// path (root <testsuites>, first <testsuite name="xentlab.verify">) is replaced; any other
/// existing file (another XML file or report included) is refused unless force, a folder always
/// (check_junit_output).
void write_junit(const std::string& path, bool force, const VerifyReport& r);
/// The check write_junit makes, for a caller to make it before any work: throws InputError naming
/// the path when it exists and is not a report of verify (unless force), or when its folder does
/// not take a file.
void check_junit_output(const std::string& path, bool force);

/// Writes a candidate file (format attributes + the given outputs in their dtypes), atomically.
/// For tests and C++ users; the Python example writes the same layout with h5py. Throws
/// InputError for an output name given twice (a file holds one dataset a name).
void write_candidate(const std::string& path, bool force,
                     const std::vector<std::pair<std::string, Tensor>>& outputs,
                     const std::string& implementation);

/// "(4, 16)", "(4,)" or "()": a shape as the report prints it.
std::string shape_text(const std::vector<std::int64_t>& s);
/// "dW[3, 5] (vocab row 3, col 5, flat index …)" for flat index i of the compared shape.
std::string element_name(const Golden& g, const std::string& name,
                         const std::vector<std::int64_t>& shape, std::int64_t i);

}  // namespace xentlab

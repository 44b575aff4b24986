#pragma once
// `xentlab verify`: scores a candidate file (what another implementation computed on a golden
// file's problem) against the golden reference, output by output, and decides pass/fail.
//
// Tolerance (docs/verify.md derives it): a candidate of unknown arithmetic is judged as a correct
// implementation of the recipe  input/X/fp32/X  (inputs as stored; logits, dz and output gradients
// held in the policy's dtype X; every reduction in fp32) with *worst-case* reduction orders
// (sequential: c(n) = n − 1 bounds every summation order), using the a-priori bounds of
// numerics/bounds.hpp evaluated on the golden file's covariates. To that bound we add, per element,
// u_out·|ref| (the candidate may round its result once into the dtype it stored it in) and the
// reference's own certified bound. A finite candidate value where the reference is finite, every
// |e| ≤ k·tolerance, and the bias test of the loss (numerics/bounds.hpp judge) make a pass.
// Explicit --atol/--rtol replace the bound by atol + rtol·|ref| (no bias test).
//
// Beside the bound, the differential check (below; docs/verify.md) compares each output's error
// with that of the policy's recipe run by the CPU emulation on the same golden problem: the bound
// finds bugs, the differential check a silently lowered precision.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "datasets/tensor.hpp"
#include "gpu/strategy.hpp"
#include "numerics/arithmetic.hpp"
#include "numerics/bounds.hpp"
#include "numerics/recipe.hpp"
#include "numerics/stats.hpp"
#include "tools/golden/golden_file.hpp"

namespace xentlab {

/// The outputs a candidate may hold (any subset), in report order.
const std::vector<std::string>& candidate_output_names();

struct VerifyPolicy {
  std::string name;  ///< "bf16", "fp16", "fp32", a recipe "in/logits/accum/grad", or "explicit"
  std::optional<Recipe> recipe;  ///< unset: input dtype taken from the golden file, X/fp32/X
  DType x = DType::fp32;         ///< the policy's dtype X (when recipe is unset)
  DeclaredArithmetic arith;      ///< worst-case orders (sequential) unless given
  Policy judge;                  ///< k, bias test (numerics/bounds.hpp policy_by_name)
  bool explicit_tol = false;
  double atol = 0, rtol = 0;
  /// "policy bf16: recipe bf16/bf16/fp32/bf16, sequential vocab and token reductions, k=1, …"
  std::string describe(DType input_dtype) const;
};

/// Builds a policy: name is a dtype ("bf16", "fp16", "fp32") or a recipe; strictness one of
/// numerics/bounds.hpp's policies (default, strict, lenient); k overrides the multiplier. Throws
/// InputError naming the unknown name.
VerifyPolicy make_verify_policy(const std::string& name, const std::string& strictness = "default",
                                std::optional<double> k = std::nullopt);
/// Explicit tolerance |e| ≤ atol + rtol·|ref| (atol, rtol ≥ 0, finite).
VerifyPolicy make_explicit_policy(double atol, double rtol);
/// Throws InputError "<option> must be a finite number ≥ 0, got <value>" (> 0 when !zero_ok):
/// the check of --k, --atol and --rtol, shared by the policies and the command line.
void check_tolerance_number(const std::string& option, double value, bool zero_ok);
/// The output names of a --require list, checked: each one of candidate_output_names(), none
/// twice. Throws InputError naming the first that is not.
std::vector<std::string> parse_required_outputs(const std::vector<std::string>& names);

/// Which checks verify applies (`--check`): the a-priori bound, the differential check against
/// the emulated baseline, or both (the default).
enum class VerifyCheck : std::uint8_t { bound, differential, both };
/// "bound", "differential" or "both"; throws InputError naming the value and the choices.
VerifyCheck parse_verify_check(std::string_view text);
std::string_view to_string(VerifyCheck c);

// The differential check (docs/verify.md, "The differential check", derives each constant).
// An output passes when, for its normwise relative error and for the kDifferentialQuantile-quantile
// of its element-wise relative errors,
//     candidate error ≤ kDifferentialK · baseline error + floor,
// the baseline being a correct implementation of the policy's recipe (the CPU emulation) on the
// same golden problem, and the floor one ULP of the format the recipe delivers the output in
// (normwise: one ULP of the largest reference element, 2u·max|ref|/‖ref‖₂; element-wise: 2u). An
// output stored coarser than that (an fp32 lse stored in bf16) is judged as the lowered precision
// it is, where the bound check allows one rounding into the storage dtype.
/// (k, the quantile and the minimum element count: numerics/bounds.hpp, with the tolerances.)
/// Work of the emulated baseline, in multiply-adds of the logits GEMM summed over the strategies
/// it runs (S·V·D each, or S·V for a logits problem): above it the baseline runs on a seeded
/// sample of token rows (at least kBaselineMinRows). Measured on the 2-core machine: 2^31 in 2.1 s
/// (16 rows of V = 32000, D = 1024, four strategies), so 2^33 is about 8 s.
inline constexpr std::int64_t kBaselineWork = std::int64_t{1} << 33;
/// Fewest token rows of a sampled baseline.
inline constexpr std::int64_t kBaselineMinRows = 4;
/// Buckets of the ULP histogram of ErrorProfile: distance 0, 1, [2,4), [4,8), …, ≥ 2^(n−2).
inline constexpr int kUlpBuckets = 24;

/// The error profile of one output against the certified reference: what the differential check
/// and `--explain` compare. Computed over the pairs where both values are finite.
struct ErrorProfile {
  std::int64_t n = 0;   ///< elements compared
  double normwise = 0;  ///< ‖e‖₂/‖ref‖₂ (0 when both are 0)
  double rel_q = 0;     ///< kDifferentialQuantile-quantile of |e_i|/max(|ref_i|, rel_floor)
  double rel_p50 = 0, rel_p99 = 0;
  double rel_floor = 0;  ///< 2^-20·max|ref| (as numerics/stats.hpp)
  double bias = 0;       ///< mean signed error / rms(ref): a systematic shift, dimensionless
  double max_ref = 0, norm_ref = 0;            ///< max|ref_i| and ‖ref‖₂
  DType ulp_dtype = DType::fp32;               ///< the format the ULP distances are counted in
  std::array<double, kUlpBuckets> ulp_hist{};  ///< fractions of elements per ULP bucket
};
/// The profile of out (n values) against ref, ULP distances counted in ulp_dtype (out rounded
/// into it first). Throws InputError for n < 0.
ErrorProfile error_profile(const double* out, const double* ref, std::int64_t n, DType ulp_dtype);

/// How the emulated baseline is sampled.
struct BaselineOptions {
  /// Token rows of the golden file the baseline runs on: 0 = all when their work is at most
  /// kBaselineWork, else a seeded sample of that work (at least kBaselineMinRows rows); k > 0: at
  /// most k rows.
  std::int64_t rows = 0;
  std::uint64_t seed = 1;  ///< of the samples
  /// The backends whose strategies make the baseline: the CPU emulation (IEEE arithmetic in the
  /// recipe's formats), and where a GPU is present the CUDA kernels, whose tensor-core GEMMs
  /// accumulate fp32 differently (docs/verify.md, "Tensor-core accumulation"). Per output the
  /// largest error over all of them. A backend this build lacks contributes no strategy.
  std::vector<Backend> backends{Backend::cpu_emulation};
  /// Strategies left out of the baseline, by name (on every backend): a baseline of the *other*
  /// correct implementations, against which one of them is judged (leave-one-out).
  std::vector<std::string> exclude;
};

/// The backends named by a baseline-backend value (`option` names it in messages, e.g.
/// "--baseline-backend" or "baseline_backend"): "cpu" the CPU emulation (the default of verify:
/// the same verdict on every machine), "cuda" the lab's CUDA kernels, "all" both, "auto" both
/// where this build has the CUDA backend and a GPU is present, else the emulation. With
/// `ask_device` false (no baseline will run) the value is checked and no device is asked for: the
/// emulation is returned. Throws InputError for another value, and for "cuda"/"all" without a
/// usable GPU (naming why).
std::vector<Backend> baseline_backends(const std::string& value, bool ask_device,
                                       const std::string& option);

/// The emulated baseline of one recipe on a golden problem: the CPU emulation of every strategy of
/// the registry that implements the recipe (their reduction orders and chunked accumulations are
/// all correct implementations of it), run on the golden file's problem, and per output the
/// error profile of the least accurate of them (largest normwise error; the largest quantiles)
/// against the golden file's certified reference. When the golden token rows are sampled, loss,
/// lse, dH and dz are compared on the sampled rows; dW, db and the reduced loss, sums over all
/// tokens, are not (a sum over the sample is another quantity: docs/verify.md).
struct Baseline {
  Recipe recipe;
  /// "naive, chunked, checkpointed, fused (cpu-emulation; per output the largest error)"
  std::string strategy;
  std::string status;                    ///< "ok", or why it could not run
  std::vector<std::int64_t> token_rows;  ///< problem rows it ran on
  std::vector<std::int64_t> vocab_rows;  ///< vocabulary rows of dW/db compared (none if sampled)
  bool sampled = false;                  ///< token rows are a sample of the golden file's
  std::int64_t golden_rows = 0;          ///< S of the golden file
  std::uint64_t seed = 1;
  double seconds = 0;
  /// Profiles, by output name (loss, lse, reduced_loss, dH, dW, db, dz: those the golden holds).
  std::vector<std::pair<std::string, ErrorProfile>> profiles;
  /// The dtype the recipe delivers each output in (loss, lse: the accumulator's; gradients: grad).
  DType loss_dtype = DType::fp32, grad_dtype = DType::fp32;
  const ErrorProfile* profile(const std::string& name) const;
  DType output_dtype(const std::string& name) const;
  /// "recipe bf16/bf16/fp32/bf16, naive, … (cpu-emulation; …), 64 of 256 token rows (seed 1), …"
  /// (not the time: a report is the same on a re-run)
  std::string describe() const;
};
/// Runs the baseline of recipe on the golden problem. A recipe the emulation does not implement,
/// or a run it refuses or cannot hold in memory, gives status ≠ "ok" saying why (no exception);
/// throws InputError for bad options (rows < 0).
Baseline emulate_baseline(const Golden& golden, const Recipe& recipe,
                          const BaselineOptions& options = {});

/// The differential check of one output.
struct DifferentialResult {
  std::string status = "not run";  ///< "passed", "incorrect", "not judged" (why in message)
  std::string message;
  ErrorProfile candidate, baseline;  ///< on the same elements (rows of the baseline)
  double floor_normwise = 0, floor_rel = 0;
  double limit_normwise = 0, limit_rel_q = 0;  ///< k·baseline + floor
  bool quantile_compared = false;              ///< n ≥ kDifferentialMinElements
};

/// One recipe of `--explain`: the candidate's profile against that recipe's emulated baseline.
struct RecipeMatch {
  Recipe recipe;
  /// every output judged passes the recipe's differential check and is not
  /// kExplainAccuracyFactor× more accurate than the recipe's baseline
  bool consistent = false;
  /// Σ over outputs: |log2 ratio| of the normwise errors and of the quantiles (each with its
  /// floor), the total variation of the ULP histograms, and |difference| of bias/normwise
  double distance = 0;
  std::string status;  ///< "ok", or why the emulation did not run
  std::vector<std::pair<std::string, ErrorProfile>> profiles;  ///< the recipe's baseline
};

/// One output's result.
struct OutputReport {
  std::string name;
  std::string status;   ///< "passed", "incorrect", "failed" (unusable), "skipped" (no reference)
  std::string message;  ///< why (for anything but passed)
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
  std::string golden, candidate, policy, provenance, implementation;
  std::vector<std::string> required;  ///< outputs the candidate must hold and pass (--require)
  std::vector<OutputReport> outputs;
  VerifyCheck check = VerifyCheck::both;
  std::optional<Baseline> baseline;  ///< the policy recipe's emulated baseline (when run)
  std::vector<RecipeMatch> explain;  ///< --explain: every recipe tried, most similar first
  bool passed = false;
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
  /// Likewise the baselines --explain compares with (explain_recipes of this golden file).
  const std::vector<Baseline>* explain_given = nullptr;
};

/// The recipes --explain emulates for a golden problem (see VerifyOptions::explain).
std::vector<Recipe> explain_recipes(const Golden& golden);

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
/// ("no meaningful bound") when it does not (as numerics/bounds.hpp judge under default/strict).
VerifyReport verify_candidate(const Golden& golden, const std::string& candidate_path,
                              const VerifyPolicy& policy, const VerifyOptions& options);
/// verify_candidate with options {required, check both, default sampling, no explain}.
VerifyReport verify_candidate(const Golden& golden, const std::string& candidate_path,
                              const VerifyPolicy& policy,
                              const std::vector<std::string>& required = {});

/// The recipe a policy declares for a golden problem of input dtype input_dtype (input/X/fp32/X
/// for a dtype policy); nullopt for an explicit --atol/--rtol policy.
std::optional<Recipe> policy_recipe(const VerifyPolicy& policy, DType input_dtype);

/// The per-element tolerance verify applies to output `name` (in the golden's compared shape) for
/// a candidate stored in out_dtype, before the policy's multiplier k. Throws InputError for an
/// unknown output name.
std::vector<double> verify_tolerance(const Golden& golden, const VerifyPolicy& policy,
                                     const std::string& name, DType out_dtype);

/// The report as a table (one row per output) and the verdict lines.
std::string format_report(const VerifyReport& r);

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
/// For tests and C++ users; the Python example writes the same layout with h5py.
void write_candidate(const std::string& path, bool force,
                     const std::vector<std::pair<std::string, Tensor>>& outputs,
                     const std::string& implementation);

}  // namespace xentlab

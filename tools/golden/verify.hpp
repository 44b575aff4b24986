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
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "datasets/tensor.hpp"
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
};

struct VerifyReport {
  std::string golden, candidate, policy, provenance, implementation;
  std::vector<std::string> required;  ///< outputs the candidate must hold and pass (--require)
  std::vector<OutputReport> outputs;
  bool passed = false;
  std::string reason;  ///< overall verdict text
};

/// Reads the candidate (format "xentlab-candidate" version 1: datasets loss, lse, reduced_loss, dH,
/// dW, db, dz at the root, any float dtype, in the golden's sampled shape or the full shape) and
/// scores it. Unreadable files, foreign or wrong-version files throw FormatError; shape or dtype
/// mismatches of one output and non-finite values are reported failures, never exceptions.
/// Each name in `required` (parse_required_outputs) must be held by the candidate and checked: one
/// that is missing, or that the golden file cannot check, is a failed output naming it.
VerifyReport verify_candidate(const Golden& golden, const std::string& candidate_path,
                              const VerifyPolicy& policy,
                              const std::vector<std::string>& required = {});

/// The per-element tolerance verify applies to output `name` (in the golden's compared shape) for
/// a candidate stored in out_dtype, before the policy's multiplier k. Throws InputError for an
/// unknown output name.
std::vector<double> verify_tolerance(const Golden& golden, const VerifyPolicy& policy,
                                     const std::string& name, DType out_dtype);

/// The report as a table (one row per output) and the verdict lines.
std::string format_report(const VerifyReport& r);

/// JUnit XML (one <testsuite name="xentlab.verify">, one <testcase> per output), written
/// atomically. A report is a CI artefact rewritten by every run: an existing XML file at path is
/// replaced; any other existing file (not XML, a folder) is refused unless force
/// (check_junit_output).
void write_junit(const std::string& path, bool force, const VerifyReport& r);
/// The check write_junit makes, for a caller to make it before any work: throws InputError naming
/// the path when it exists and is not an XML file (unless force), or when its folder does not take
/// a file.
void check_junit_output(const std::string& path, bool force);

/// Writes a candidate file (format attributes + the given outputs in their dtypes), atomically.
/// For tests and C++ users; the Python example writes the same layout with h5py.
void write_candidate(const std::string& path, bool force,
                     const std::vector<std::pair<std::string, Tensor>>& outputs,
                     const std::string& implementation);

}  // namespace xentlab

#pragma once
// The pass/fail policy: what turns a-priori bounds (judge/bounds.hpp) and error statistics
// (judge/stats.hpp) into a disposition, and the constants of the baseline-relative checks.
// docs/bounds.md (the bound check) and docs/verify.md (the differential check) derive them.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "judge/stats.hpp"

namespace xentlab {

/// A run's disposition. passed: consistent with its recipe's finite a-priori bound (and, where it
/// ran, the baseline-relative check); measured: every check that applies passed but the recipe
/// has no finite bound on the problem (c·u_accum ≥ 1), so nothing bounds its error: its errors are
/// measured, not judged; incorrect: a check failed; not_supported / failed: it did not run.
enum class Disposition : std::uint8_t { passed, incorrect, not_supported, failed, measured };
std::string_view to_string(Disposition d);
/// passed or measured: the run completed and no check found it wrong.
inline bool consistent(Disposition d) {
  return d == Disposition::passed || d == Disposition::measured;
}

/// A named policy. All thresholds of the project's pass/fail decisions live here.
struct Policy {
  std::string name = "default";
  double k = 1.0;          ///< incorrect when some |e| > k·bound
  bool bias_check = true;  ///< check the bias of the per-token loss
  double k_bias = 1.0;     ///< bias limit: k_bias·mean(bound) + bias_sigmas·stderr
  double bias_sigmas = 4.0;
  bool require_meaningful_bound = true;  ///< an output without a finite bound is incorrect
  double baseline_factor = 2.0;  ///< baseline-relative check: err ≤ factor·baseline err + bound·k
};
/// "default" (k = k_bias = 1, bias check, bounds must be finite), "strict" (k = 0.5, k_bias =
/// 0.25: a mean error beyond a quarter of the mean bound is suspect), "audit" (as default, but
/// infinite bounds allowed: the audit's verdict judges such recipes by their measured error),
/// "lenient" (k = 4, no bias check, infinite bounds allowed). Throws InputError naming the unknown
/// policy.
Policy policy_by_name(std::string_view name);

/// The decision and the numbers that decided it.
struct Verdict {
  Disposition disposition = Disposition::passed;
  std::string output;       ///< the output that decided it ("loss", "dH", …), empty if passed
  std::string reason;       ///< human-readable, names the numbers
  double ratio = 0.0;       ///< max |e|/bound over the outputs judged
  std::int64_t index = -1;  ///< element that decided it
  double error = 0.0, bound = 0.0;
  double bias = 0.0, bias_limit = 0.0;
};

/// One output to judge: its statistics (computed with bounds) and whether it is the per-token
/// loss (which gets the bias check).
struct JudgedOutput {
  std::string name;
  const ErrorStats* stats = nullptr;
  bool is_loss = false;
};

/// Statistical limit of the bias: k_bias·mean(bound) + bias_sigmas·bias_stderr; +Inf when some
/// element has an infinite bound (no meaningful limit).
double bias_limit(const ErrorStats& s, const Policy& p);

/// Judges the outputs in order: non-finite where the reference is finite (or any other finiteness
/// mismatch) → incorrect; |e| > k·bound → incorrect (the largest ratio decides); a +Inf bound when
/// the policy requires meaningful bounds → incorrect; |bias| > bias_limit on the loss → incorrect.
/// Otherwise passed, with the largest ratio. Outputs without bounds get only the finiteness check.
Verdict judge(const std::vector<JudgedOutput>& outputs, const Policy& policy);

/// Verdict for a run that did not produce outputs: not_supported or failed, with the message.
Verdict verdict_not_run(Disposition d, std::string message);

// ---- the differential check's constants (harness/verify/verify.hpp applies them) -------------
// docs/verify.md, "The criterion", derives each: an output passes when its normwise relative
// error and the kDifferentialQuantile-quantile of its element-wise relative errors are at most
// kDifferentialK × those of the least accurate correct implementation of the declared recipe plus
// a floor (one ULP of the recipe's output format and kElementaryUlps of fp32), and its projection
// on the reference passes the scale test (kScaleSigmas).
/// k: √4, the geometric middle of 1 (a candidate as accurate as the baseline must pass) and 4 (a
/// candidate 4× less accurate than the declared recipe must fail): it tolerates a spread factor r
/// between two correct implementations up to r² < 2 either way; measured, the errors of the
/// strategies at several chunk widths were 0.745–1.001× the baseline's.
inline constexpr double kDifferentialK = 2.0;
/// The quantile of the element-wise relative error |e_i|/max(|ref_i|, floor) compared.
inline constexpr double kDifferentialQuantile = 0.9;
/// Outputs with fewer elements do not compare the quantile (a 0.9-quantile of fewer than 64
/// values is one of its 7 largest, as noisy as the maximum).
inline constexpr std::int64_t kDifferentialMinElements = 64;
/// ULP of fp32 that two correct implementations' elementary functions may put between their
/// per-token values (CUDA's expf ≤ 2 ULP and logf ≤ 1 ULP — CUDA C++ Programming Guide, single
/// precision, no fast-math — against glibc's ≤ 1 ULP: 2 + 1 + 1): part of the criterion's floor.
inline constexpr double kElementaryUlps = 4.0;
/// The root mean square of that difference, in ULP of fp32, over many elements: each library's
/// error taken as uniform within its documented maximum (rms = maximum/√3) and independent of the
/// other's, for an exp and a log each: √((2² + 1² + 1² + 1²)/3) = √(7/3). The normwise floor of the
/// criterion for every element of an output (judge/differential.cpp compare_with_baseline).
inline constexpr double kElementaryUlpsRms = 1.5275252316519468;
/// The scale test's fewest elements: the baseline's spread is estimated from the output's own n
/// errors, with a relative standard error of about 1/√(2n) — 25 % at n = 8, which the test's four
/// standard deviations absorb; for fewer (a scalar: one draw, its spread its own size) the
/// normwise test alone holds the output (|projection| ≤ normwise, by Cauchy–Schwarz).
inline constexpr std::int64_t kScaleMinElements = 8;
/// The scale test: a candidate whose error projected on the reference (ErrorProfile::scale, the
/// s of an output off by a factor 1 + s) exceeds k·|the baseline's| + kScaleSigmas standard
/// deviations of the baseline's + one rounding (u of the output format) is systematically off —
/// a normaliser, a missing factor — even where every element is within its tolerance. 4, as the
/// bias test's bias_sigmas. Outputs of at least kScaleMinElements elements.
inline constexpr double kScaleSigmas = 4.0;
/// `--explain`: a candidate at least this many times more accurate than a recipe's baseline on
/// some output is not that recipe (the accuracy step the differential check must detect).
inline constexpr double kExplainAccuracyFactor = 4.0;

}  // namespace xentlab

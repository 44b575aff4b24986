#pragma once
// The verdict on one output judged by two checks: its a-priori bound (judge/policy.hpp judge,
// which also checks that every value is finite where the reference is) and a baseline-relative
// check (`xentlab verify`'s differential check against the emulated baseline). Four outcomes, so
// that nothing passes by omission (docs/verify.md, "Verdicts"): passed, failed, inconclusive (the
// checks that ran cannot tell this output from a wrong one) and not judged (no check ran).
#include <cstdint>
#include <string>
#include <string_view>

#include "judge/bounds.hpp"
#include "judge/policy.hpp"

namespace xentlab {

/// The verdict on one output, and (the worst over the outputs) on a candidate.
enum class Outcome : std::uint8_t { passed, failed, inconclusive, not_judged };
/// "passed", "failed", "inconclusive", "not judged".
std::string_view to_string(Outcome o);
/// The worse of two outcomes: failed > inconclusive > not judged > passed.
Outcome worse(Outcome a, Outcome b);

/// What the two checks of one output found.
struct OutputChecks {
  /// The bound check's verdict: judge() of the output's statistics with bounds, or of statistics
  /// without bounds (the finiteness check alone) when the bound was not checked.
  Verdict bound;
  bool bound_checked = true;     ///< the a-priori bound was checked, not the finiteness alone
  bool baseline_judged = false;  ///< the baseline-relative check judged the output
  Disposition baseline = Disposition::passed;  ///< its disposition, when it judged
  /// The baseline-relative check should have judged the output but could not (its baseline ran
  /// on a sample of token rows and the output sums over all of them): what the bound alone says
  /// is not enough to pass it.
  bool baseline_wanted = false;
  /// Every check that judged the output would also pass an output of zeros: its tolerance is at
  /// least the reference itself (an explicit --atol above every |ref|, or a recipe that loses all
  /// accuracy on this problem), so passing says nothing.
  bool vacuous = false;
};

/// failed when the bound check's verdict is not passed, or the baseline-relative check judged
/// and did not pass; inconclusive when the checks are vacuous or the wanted baseline check could
/// not run; passed when at least one of the two judged the output; not judged when neither did
/// (only finiteness was checked).
Outcome judge_output(const OutputChecks& c);

/// Whether a tolerance passes an output of zeros: |ref_i| ≤ k·tol_i for every element with a
/// finite non-zero reference (k: the policy's factor). An output with no such element (empty, or
/// all zeros: zeros are then the answer) is not vacuous.
bool zero_output_passes(const double* ref, const double* tol, std::int64_t n, double k = 1.0);

}  // namespace xentlab

#pragma once
// The disposition of one output judged by two checks: its a-priori bound (judge/policy.hpp
// judge, which also checks that every value is finite where the reference is) and a
// baseline-relative check (`xentlab verify`'s differential check against the emulated baseline).
#include <optional>

#include "judge/bounds.hpp"
#include "judge/policy.hpp"

namespace xentlab {

/// What the two checks of one output found.
struct OutputChecks {
  /// The bound check's verdict: judge() of the output's statistics with bounds, or of statistics
  /// without bounds (the finiteness check alone) when the bound was not checked.
  Verdict bound;
  bool bound_checked = true;     ///< the a-priori bound was checked, not the finiteness alone
  bool baseline_judged = false;  ///< the baseline-relative check judged the output
  Disposition baseline = Disposition::passed;  ///< its disposition, when it judged
};

/// incorrect when the bound check's verdict is not passed, or the baseline-relative check judged
/// and did not pass; passed when at least one of the two judged the output (the bound, or the
/// baseline); nullopt when neither did (only finiteness was checked: the output is not judged).
std::optional<Disposition> judge_output(const OutputChecks& c);

}  // namespace xentlab

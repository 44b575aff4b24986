// The disposition of one output judged by its bound and a baseline (see output_verdict.hpp).
#include "judge/output_verdict.hpp"

namespace xentlab {

std::optional<Disposition> judge_output(const OutputChecks& c) {
  if (c.bound.disposition != Disposition::passed) return Disposition::incorrect;
  if (c.baseline_judged && c.baseline != Disposition::passed) return Disposition::incorrect;
  if (!c.bound_checked && !c.baseline_judged) return std::nullopt;
  return Disposition::passed;
}

}  // namespace xentlab

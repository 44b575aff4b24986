// The verdict on one output judged by its bound and a baseline (see output_verdict.hpp).
#include "judge/output_verdict.hpp"

#include <cmath>

namespace xentlab {

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::passed:
      return "passed";
    case Outcome::failed:
      return "failed";
    case Outcome::inconclusive:
      return "inconclusive";
    case Outcome::not_judged:
      return "not judged";
  }
  return "?";
}

Outcome worse(Outcome a, Outcome b) {
  const auto rank = [](Outcome o) {
    switch (o) {
      case Outcome::failed:
        return 3;
      case Outcome::inconclusive:
        return 2;
      case Outcome::not_judged:
        return 1;
      case Outcome::passed:
        return 0;
    }
    return 0;
  };
  return rank(a) >= rank(b) ? a : b;
}

Outcome judge_output(const OutputChecks& c) {
  if (c.bound.disposition != Disposition::passed) return Outcome::failed;
  if (c.baseline_judged && c.baseline != Disposition::passed) return Outcome::failed;
  if (!c.bound_checked && !c.baseline_judged) return Outcome::not_judged;
  if (c.vacuous || (c.baseline_wanted && !c.baseline_judged)) return Outcome::inconclusive;
  return Outcome::passed;
}

bool zero_output_passes(const double* ref, const double* tol, std::int64_t n, double k) {
  bool any = false;
  for (std::int64_t i = 0; i < n; ++i) {
    // An element whose reference is 0 does not tell zeros from the right answer: it is the
    // right answer (the losses of an all-ignored batch).
    if (!std::isfinite(ref[i]) || ref[i] == 0) continue;
    any = true;
    if (!(std::fabs(ref[i]) <= tol[i] * k)) return false;
  }
  return any;
}

}  // namespace xentlab

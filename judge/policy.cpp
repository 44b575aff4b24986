// The pass/fail policy (judge/policy.hpp): dispositions, named policies, the verdict on a run's
// outputs and the baseline-relative check.
#include "judge/policy.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <utility>

#include "numerics/error.hpp"

namespace xentlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

std::string_view to_string(Disposition d) {
  switch (d) {
    case Disposition::passed:
      return "passed";
    case Disposition::incorrect:
      return "incorrect";
    case Disposition::not_supported:
      return "not-supported";
    case Disposition::failed:
      return "failed";
    case Disposition::measured:
      return "measured";
  }
  return "?";
}

Policy policy_by_name(std::string_view name) {
  Policy p;
  if (name == "default") return p;
  if (name == "strict") {
    p.name = "strict";
    p.k = 0.5;
    p.k_bias = 0.25;
    return p;
  }
  if (name == "audit") {
    // The audit's policy: k = 1 and the bias check as "default", but a declared arithmetic with no
    // finite bound (c·u_accum ≥ 1) is not incorrect for that alone — how inaccurate such a
    // recipe is, is what the audit's verdict measures (docs/audit.md). Non-finite values where
    // the reference is finite, errors beyond finite bounds and biased losses stay incorrect.
    p.name = "audit";
    p.require_meaningful_bound = false;
    return p;
  }
  if (name == "lenient") {
    p.name = "lenient";
    p.k = 4.0;
    p.bias_check = false;
    p.require_meaningful_bound = false;
    return p;
  }
  throw InputError("unknown pass/fail policy '" + std::string(name) +
                   "' (expected default, strict, audit or lenient)");
}

double bias_limit(const ErrorStats& s, const Policy& p) {
  if (s.n_finite_pairs == 0) return 0.0;
  // With an element whose bound is +Inf there is no meaningful limit on the bias either: the mean
  // over the finite bounds alone would understate it (a loss whose lse is accumulated in bf16 over
  // V = 128256 is biased low by design, not by a bug).
  if (s.n_infinite_bound > 0) return std::numeric_limits<double>::infinity();
  return p.k_bias * s.mean_bound + p.bias_sigmas * s.bias_stderr;
}

Verdict verdict_not_run(Disposition d, std::string message) {
  Verdict v;
  v.disposition = d;
  v.reason = std::move(message);
  return v;
}

Verdict judge(const std::vector<JudgedOutput>& outputs, const Policy& policy) {
  Verdict best;  // passed, with the largest ratio seen
  for (const auto& o : outputs) {
    if (!o.stats) continue;
    const ErrorStats& s = *o.stats;
    if (s.finiteness_mismatches > 0) {
      Verdict v;
      v.disposition = Disposition::incorrect;
      v.output = o.name;
      v.index = s.first_mismatch_index;
      v.reason = fmt::format(
          "{}: {} finiteness mismatch(es) ({} non-finite where the reference is finite; out "
          "NaN/+Inf/-Inf = {}/{}/{}, ref {}/{}/{}), first at element {}",
          o.name, s.finiteness_mismatches, s.nonfinite_where_ref_finite, s.out_nan, s.out_posinf,
          s.out_neginf, s.ref_nan, s.ref_posinf, s.ref_neginf, s.first_mismatch_index);
      return v;
    }
    if (!s.has_bounds) continue;
    if (s.max_ratio > policy.k) {
      Verdict v;
      v.disposition = Disposition::incorrect;
      v.output = o.name;
      v.ratio = s.max_ratio;
      v.index = s.max_ratio_index;
      v.error = s.max_ratio_err;
      v.bound = s.max_ratio_bound;
      v.reason = fmt::format(
          "{}: |e| = {:.6g} > k·bound = {}·{:.6g} at element {} (ratio {:.4g}, {} of {} elements "
          "over the bound, policy {})",
          o.name, s.max_ratio_err, policy.k, s.max_ratio_bound, s.max_ratio_index, s.max_ratio,
          s.n_over_bound, s.n_finite_pairs, policy.name);
      return v;
    }
    if (policy.require_meaningful_bound && s.n_infinite_bound > 0) {
      Verdict v;
      v.disposition = Disposition::incorrect;
      v.output = o.name;
      v.ratio = s.max_ratio;
      v.reason = fmt::format(
          "{}: {} element(s) have no meaningful a-priori bound (c·u_accum ≥ 1: "
          "the declared reduction cannot guarantee any accuracy), policy {}",
          o.name, s.n_infinite_bound, policy.name);
      return v;
    }
    if (o.is_loss && policy.bias_check && s.n_finite_pairs > 1) {
      const double lim = bias_limit(s, policy);
      if (std::fabs(s.bias) > lim) {
        Verdict v;
        v.disposition = Disposition::incorrect;
        v.output = o.name;
        v.bias = s.bias;
        v.bias_limit = lim;
        v.ratio = s.max_ratio;
        v.reason = fmt::format(
            "{}: bias {:.6g} beyond its statistical limit {:.6g} (k_bias·mean bound + {}·stderr, "
            "stderr {:.3g}, n {})",
            o.name, s.bias, lim, policy.bias_sigmas, s.bias_stderr, s.n_finite_pairs);
        return v;
      }
    }
    if (s.max_ratio >= best.ratio) {
      best.ratio = s.max_ratio;
      best.output = o.name;
      best.index = s.max_ratio_index;
      best.error = s.max_ratio_err;
      best.bound = s.max_ratio_bound;
    }
  }
  best.reason = best.output.empty()
                    ? std::string("passed (no bounded output)")
                    : fmt::format("passed: largest ratio {:.4g} ({}) ≤ k = {} (policy {})",
                                  best.ratio, best.output, policy.k, policy.name);
  return best;
}

}  // namespace xentlab

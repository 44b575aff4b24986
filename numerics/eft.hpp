#pragma once
// Error-free transformations and compensated accumulators (double and double-double).
//
// Source: T. Ogita, S. M. Rump, S. Oishi, "Accurate sum and dot product", SIAM J. Sci. Comput.
// 26(6), 2005 — TwoSum (Knuth), TwoProduct via FMA, Sum2 and Dot2. With u = 2^-53 and
// γ_n = n·u/(1 − n·u), Sum2 of p_1..p_n satisfies |res − Σp| ≤ u·|Σp| + γ_{n−1}²·Σ|p_i|
// (their Prop. 4.5), and Dot2 of x, y satisfies |res − xᵀy| ≤ u·|xᵀy| + γ_n²·|x|ᵀ|y| (Prop. 5.3).
// These need every operation rounded exactly where written: the project compiles with
// -ffp-contract=off and without fast-math; FMAs are explicit (std::fma).
#include <cmath>

#include "numerics/hd.hpp"

namespace xentlab::eft {

/// s + e == a + b exactly, s = fl(a + b). Six flops, no branch (Knuth's TwoSum).
XL_HD inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}

/// p + e == a · b exactly, p = fl(a · b) (needs a true FMA).
XL_HD inline void two_prod(double a, double b, double& p, double& e) {
  p = a * b;
  e = hd::fma(a, b, -p);
}

/// γ_n = n·u/(1 − n·u) for u = 2^-53 (Higham, Accuracy and Stability, §3.1).
XL_HD inline double gamma_n(double n) {
  const double u = 0x1p-53;
  return n * u / (1.0 - n * u);
}

/// Sum2 accumulator: value() is the compensated sum of the added terms. Carries the count so the
/// bound γ_{n−1}²·Σ|p| can be formed by the caller.
/// Non-finite terms are kept apart (TwoSum of an infinity gives inf − inf = NaN in its error term):
/// the value is their plain IEEE sum when there is any (+inf, −inf, or NaN for inf − inf or a NaN).
struct CompensatedSum {
  double s = 0.0;
  double c = 0.0;
  double nonfinite = 0.0;  ///< IEEE sum of the non-finite terms (0 when there is none)
  bool has_nonfinite = false;
  XL_HD void add(double x) {
    if (!hd::isfinite(x)) {
      nonfinite += x;
      has_nonfinite = true;
      return;
    }
    double e;
    two_sum(s, x, s, e);
    c += e;
  }
  XL_HD void add(const CompensatedSum& o) {
    if (o.has_nonfinite) {
      nonfinite += o.nonfinite;
      has_nonfinite = true;
    }
    add(o.s);
    c += o.c;
  }
  XL_HD double value() const { return has_nonfinite ? nonfinite : s + c; }
};

}  // namespace xentlab::eft

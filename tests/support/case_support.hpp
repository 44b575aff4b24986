#pragma once
// Helpers for tests against the known-hard cases (docs/cases.md): building small problems, and
// the one place where a test's tolerance against a printed case value is formed.
//
// Tolerance (derived, not tuned): a case value printed with k significant digits is the exact
// value rounded to k digits, so it is within half a unit of its last digit of the truth; the
// reference is within its own certified bound of the truth. Their distance is at most the sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "datasets/problem.hpp"
#include "gpu/strategy.hpp"

namespace xentlab::testing {

/// Half a unit in the last printed digit of a decimal literal such as "0.0485873515737" or
/// "3.7252903e-9".
inline double half_unit_last_digit(const std::string& lit) {
  std::string mant = lit;
  int exp10 = 0;
  const auto epos = lit.find_first_of("eE");
  if (epos != std::string::npos) {
    mant = lit.substr(0, epos);
    exp10 = std::atoi(lit.c_str() + epos + 1);
  }
  const auto dot = mant.find('.');
  const int decimals = dot == std::string::npos ? 0 : static_cast<int>(mant.size() - dot - 1);
  return 0.5 * std::pow(10.0, exp10 - decimals);
}

/// |value − printed| ≤ bound + half a unit in the printed value's last digit.
inline ::testing::AssertionResult matches_case(double value, double bound, const std::string& lit) {
  const double expected = std::strtod(lit.c_str(), nullptr);
  const double tol = bound + half_unit_last_digit(lit);
  const double err = std::fabs(value - expected);
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "value " << std::to_string(value) << " (" << value << ") differs from the case value "
         << lit << " by " << err << " > tolerance " << tol << " (reference bound " << bound
         << " + half a unit of the last printed digit)";
}

#define XL_EXPECT_CASE(value, bound, literal) \
  EXPECT_TRUE(::xentlab::testing::matches_case((value), (bound), (literal)))

/// Logits problem from rows of values (rounded into dtype; they should be exact).
inline Problem logits_problem(DType dtype, const std::vector<std::vector<double>>& rows,
                              std::vector<std::int64_t> targets, std::int64_t ignore_index = -100) {
  const auto N = static_cast<std::int64_t>(rows.size());
  const auto V = static_cast<std::int64_t>(rows.at(0).size());
  Tensor Z(dtype, {N, V}, "logits");
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t j = 0; j < V; ++j) {
      const double v = rows[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
      EXPECT_TRUE(representable(v, dtype)) << v << " is not exact in " << to_string(dtype);
      Z.set(i * V + j, v);
    }
  return Problem::from_logits(std::move(Z), std::move(targets), ignore_index, "case");
}

/// docs/cases.md C03: N rows of V = 10 fp32 logits x_ij = 0.1·(i+1)·(j−4.5), every target ignored.
inline Problem c03_problem(std::int64_t N) {
  std::vector<std::vector<double>> rows;
  for (std::int64_t i = 0; i < N; ++i) {
    std::vector<double> r;
    for (int j = 0; j < 10; ++j)
      r.push_back(round_to(0.1 * static_cast<double>(i + 1) * (j - 4.5), DType::fp32));
    rows.push_back(r);
  }
  return logits_problem(DType::fp32, rows,
                        std::vector<std::int64_t>(static_cast<std::size_t>(N), -100));
}

/// Linear problem reproducing a (finite) logits problem exactly: H = I_N (one-hot rows), W = Zᵀ.
inline Problem linear_from_logits(const Problem& lp, std::int64_t ignore_index = -100) {
  const std::int64_t N = lp.N, V = lp.V;
  Tensor H(lp.logits.dtype(), {N, N}, "H"), W(lp.logits.dtype(), {V, N}, "W");
  for (std::int64_t i = 0; i < N; ++i) H.set(i * N + i, 1.0);
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t j = 0; j < V; ++j) W.set(j * N + i, lp.logits.get(i * V + j));
  return Problem::linear(std::move(H), std::move(W), std::nullopt, lp.targets, ignore_index,
                         "case-linear");
}

// Bitwise equality of two arrays of doubles (std::vector or HostArray; −0 and +0 differ).
template <class A, class B>
::testing::AssertionResult same_bits(const A& a, const B& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " and " << b.size();
  for (std::size_t k = 0; k < a.size(); ++k)
    if (std::memcmp(&a[k], &b[k], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "element " << k << ": " << a[k] << " vs " << b[k];
  return ::testing::AssertionSuccess();
}
/// The same for two braced scalars or vectors: same_bits({x}, {y}).
inline ::testing::AssertionResult same_bits(const std::vector<double>& a,
                                            const std::vector<double>& b) {
  return same_bits<std::vector<double>, std::vector<double>>(a, b);
}

/// Every output of two runs bit for bit (loss, lse, reduced loss, dz, dH, dW, db); `ctx` names the
/// comparison in a failure.
inline void expect_same_outputs(const StrategyOutputs& a, const StrategyOutputs& b,
                                const std::string& ctx) {
  EXPECT_TRUE(same_bits(a.loss, b.loss)) << ctx << " loss";
  EXPECT_TRUE(same_bits(a.lse, b.lse)) << ctx << " lse";
  EXPECT_TRUE(same_bits({a.reduced_loss}, {b.reduced_loss})) << ctx << " reduced loss";
  EXPECT_TRUE(same_bits(a.dz, b.dz)) << ctx << " dz";
  EXPECT_TRUE(same_bits(a.dH, b.dH)) << ctx << " dH";
  EXPECT_TRUE(same_bits(a.dW, b.dW)) << ctx << " dW";
  EXPECT_TRUE(same_bits(a.db, b.db)) << ctx << " db";
}

}  // namespace xentlab::testing

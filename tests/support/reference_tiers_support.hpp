#pragma once
// Helpers of the reference-tier tests: two results of one problem agree within the sum of their
// bounds on every output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "datasets/synthetic.hpp"
#include "numerics/eft.hpp"
#include "reference/reference.hpp"

namespace xentlab::tier_tests {

inline std::string fmt_pair(double a, double b, double ab, double bb) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%.17g vs %.17g (bounds %.3g + %.3g)", a, b, ab, bb);
  return buf;
}

// |a − b| ≤ bound_a + bound_b element by element (both claim to be within their bound of the
// same exact value). NaN must match NaN, infinities must be equal.
template <class A>
void expect_within(const char* what, const A& a, const A& ab, const A& b, const A& bb,
                   const std::string& ctx) {
  ASSERT_EQ(a.size(), b.size()) << what << " " << ctx;
  ASSERT_EQ(a.size(), ab.size()) << what << " " << ctx;
  std::size_t bad = 0, first = a.size();
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (!(ab[k] >= 0.0) || !(bb[k] >= 0.0)) {  // a bound is never NaN or negative
      ++bad, first = std::min(first, k);
      continue;
    }
    if (std::isnan(a[k]) || std::isnan(b[k])) {
      if (std::isnan(a[k]) != std::isnan(b[k])) ++bad, first = std::min(first, k);
      continue;
    }
    if (std::isinf(a[k]) || std::isinf(b[k])) {
      if (a[k] != b[k]) ++bad, first = std::min(first, k);
      continue;
    }
    if (std::fabs(a[k] - b[k]) > ab[k] + bb[k]) ++bad, first = std::min(first, k);
  }
  EXPECT_EQ(bad, 0u) << what << " " << ctx << ": first at [" << first << "] "
                     << (first < a.size() ? fmt_pair(a[first], b[first], ab[first], bb[first])
                                          : "");
}

inline void expect_agree(const ReferenceResult& x, const ReferenceResult& y,
                         const std::string& ctx) {
  expect_within("loss", x.loss, x.loss_bound, y.loss, y.loss_bound, ctx);
  expect_within("lse", x.lse, x.lse_bound, y.lse, y.lse_bound, ctx);
  expect_within<std::vector<double>>("reduced", {x.reduced_loss}, {x.reduced_loss_bound},
                                     {y.reduced_loss}, {y.reduced_loss_bound}, ctx);
  expect_within("dH", x.dH, x.dH_bound, y.dH, y.dH_bound, ctx);
  expect_within("dW", x.dW, x.dW_bound, y.dW, y.dW_bound, ctx);
  expect_within("db", x.db, x.db_bound, y.db, y.db_bound, ctx);
  expect_within("dz", x.dz, x.dz_bound, y.dz, y.dz_bound, ctx);
  // The condition quantities |dz|·|W| and |dz|ᵀ·|H| of the two results differ through their dz
  // (by at most the propagated part of the gradient bounds) and their rounding (γ_n relative).
  const double g = eft::gamma_n(static_cast<double>(x.V + x.N + 2));
  auto cond_check = [&](const char* what, const auto& cx, const auto& bx, const auto& cy,
                        const auto& by) {
    ASSERT_EQ(cx.size(), cy.size()) << what << " " << ctx;
    std::size_t bad = 0;
    for (std::size_t k = 0; k < cx.size(); ++k)
      if (!(std::fabs(cx[k] - cy[k]) <= bx[k] + by[k] + 2 * g * (cx[k] + cy[k]))) ++bad;
    EXPECT_EQ(bad, 0u) << what << " " << ctx;
  };
  cond_check("dH_cond", x.dH_cond, x.dH_bound, y.dH_cond, y.dH_bound);
  cond_check("dW_cond", x.dW_cond, x.dW_bound, y.dW_cond, y.dW_bound);
}

inline ReferenceResult run(const Problem& p, const LossSpec& s, ReferenceOptions o,
                           ReferenceTier t) {
  o.tier = t;
  const ReferenceResult r = compute_reference(p, s, o);
  EXPECT_EQ(r.tier, t);
  return r;
}

inline LossSpec all_options(Reduction red) {
  LossSpec s;
  s.reduction = red;
  s.label_smoothing = 0.1;
  s.z_loss = 1e-3;
  s.softcap = 15;
  s.logit_scale = 0.75;
  return s;
}

// A head with a bias that masks some vocabulary entries (−inf), ignored rows, unaligned sizes.
inline Problem masked_head(DType dt, std::uint64_t seed) {
  Problem p = make_gaussian_linear(37, 509, 23, dt, 4.0, seed);
  Tensor b(DType::fp32, {509}, "bias");
  for (std::int64_t j = 0; j < 509; ++j)
    b.set(j, j % 11 == 3 ? -std::numeric_limits<double>::infinity() : 0.25 * (j % 5));
  p.bias = b;
  for (std::size_t i = 0; i < p.targets.size(); ++i) {
    if (i % 7 == 2)
      p.targets[i] = -100;
    else if (p.targets[i] % 11 == 3)
      p.targets[i] = (p.targets[i] + 1) % 509;  // unmasked target
  }
  return p;
}

}  // namespace xentlab::tier_tests

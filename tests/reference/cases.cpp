// The known-hard cases of docs/cases.md, on the certified reference: every expected
// value is the case file's (computed at 40 digits); the tolerance is the reference's own bound plus
// half a unit of the printed value's last digit (tests/support/case_support.hpp). Each case runs on
// the logits path and, where the case allows it, on the linear path (H = I, W = Zᵀ, or the case's
// H, W).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "numerics/error.hpp"
#include "reference/reference.hpp"
#include "tests/support/case_support.hpp"

namespace xentlab {
namespace {

using testing::c03_problem;
using testing::linear_from_logits;
using testing::logits_problem;
constexpr double kInf = std::numeric_limits<double>::infinity();

ReferenceOptions with_dz() {
  ReferenceOptions o;
  o.want_dz = true;
  return o;
}

LossSpec spec_of(Reduction r) {
  LossSpec s;
  s.reduction = r;
  return s;
}

// dL/dz of row q, entry j, from a logits result or (linear twin) from dW = dzᵀ·I.
double grad_entry(const ReferenceResult& r, bool linear, std::int64_t q, std::int64_t j) {
  if (!linear) return r.dz[static_cast<std::size_t>(q * r.V + j)];
  return r.dW[static_cast<std::size_t>(j * r.D + q)];
}
double grad_bound(const ReferenceResult& r, bool linear, std::int64_t q, std::int64_t j) {
  if (!linear) return r.dz_bound[static_cast<std::size_t>(q * r.V + j)];
  return r.dW_bound[static_cast<std::size_t>(j * r.D + q)];
}

// Runs a logits problem and its exact linear twin.
template <class F>
void both_paths(const Problem& lp, const LossSpec& spec, F check) {
  check(compute_reference(lp, spec, with_dz()), false);
  check(compute_reference(linear_from_logits(lp, spec.ignore_index), spec), true);
}

TEST(CaseC01, LargeCommonOffsetFp32) {
  const LossSpec sum = spec_of(Reduction::sum);
  both_paths(logits_problem(DType::fp32, {{1e8, 1e8}}, {1}), sum, [](const auto& r, bool lin) {
    XL_EXPECT_CASE(r.loss[0], r.loss_bound[0], "0.693147180560");
    XL_EXPECT_CASE(grad_entry(r, lin, 0, 0), grad_bound(r, lin, 0, 0), "0.5");
    XL_EXPECT_CASE(grad_entry(r, lin, 0, 1), grad_bound(r, lin, 0, 1), "-0.5");
  });
  for (auto row : {std::vector<double>{10002, 9999}, std::vector<double>{1000002, 999999},
                   std::vector<double>{-999999, -1000002}}) {
    both_paths(logits_problem(DType::fp32, {row}, {0}), sum, [](const auto& r, bool lin) {
      XL_EXPECT_CASE(r.loss[0], r.loss_bound[0], "0.0485873515737");
      XL_EXPECT_CASE(grad_entry(r, lin, 0, 0), grad_bound(r, lin, 0, 0), "-0.0474258731776");
      XL_EXPECT_CASE(grad_entry(r, lin, 0, 1), grad_bound(r, lin, 0, 1), "0.0474258731776");
    });
  }
}

TEST(CaseC01, LargeCommonOffsetHalfFormats) {
  const LossSpec sum = spec_of(Reduction::sum);
  both_paths(logits_problem(DType::bf16, {{4096, 4096}}, {0}), sum, [](const auto& r, bool) {
    XL_EXPECT_CASE(r.loss[0], r.loss_bound[0], "0.693147180560");
  });
  both_paths(logits_problem(DType::bf16, {{4096, 4064}}, {1}), sum, [](const auto& r, bool) {
    XL_EXPECT_CASE(r.loss[0], r.loss_bound[0], "32.0000000000000127");
  });
  both_paths(logits_problem(DType::fp16, {{60000, 60000}}, {0}), sum, [](const auto& r, bool) {
    XL_EXPECT_CASE(r.loss[0], r.loss_bound[0], "0.693147180560");
  });
}

// C02 (fp16 token-sum overflow) is tests/reference/c02.cpp.

TEST(CaseC03, EveryTargetIgnored) {
  const Problem lp = c03_problem(5);
  for (Reduction red : {Reduction::none, Reduction::sum, Reduction::mean}) {
    both_paths(lp, spec_of(red), [&](const ReferenceResult& r, bool lin) {
      for (double l : r.loss) EXPECT_EQ(l, 0.0);
      if (red == Reduction::mean)
        EXPECT_TRUE(std::isnan(r.reduced_loss)) << "mean of an all-ignored batch is NaN by default";
      else
        EXPECT_EQ(r.reduced_loss, 0.0);
      const auto& g = lin ? r.dW : r.dz;
      for (double x : g) EXPECT_EQ(x, 0.0);
      for (double x : r.dH) EXPECT_EQ(x, 0.0);
      for (double x : r.db) EXPECT_EQ(x, 0.0);
    });
  }
  LossSpec zero = spec_of(Reduction::mean);
  zero.empty_mean = EmptyMean::zero;
  both_paths(lp, zero, [](const ReferenceResult& r, bool) { EXPECT_EQ(r.reduced_loss, 0.0); });
}

TEST(CaseC03, TwoBatchesOneFullyIgnored) {
  // The fully ignored batch is all-zero; the other is the same logits with valid targets: its
  // results must not be disturbed (compare with the exact closed form through the oracle test).
  Problem lp = c03_problem(5);
  Problem other = lp;
  for (auto& t : other.targets) t = 3;
  const ReferenceResult a = compute_reference(lp, spec_of(Reduction::mean), with_dz());
  const ReferenceResult b = compute_reference(other, spec_of(Reduction::mean), with_dz());
  EXPECT_TRUE(std::isnan(a.reduced_loss));
  EXPECT_TRUE(std::isfinite(b.reduced_loss));
  for (double x : a.dz) EXPECT_EQ(x, 0.0);
  for (double x : b.dz) EXPECT_TRUE(std::isfinite(x));
}

Problem c04_problem() {
  return logits_problem(DType::fp32, {{2, 0, -1}, {0, 3, 1}, {1, 1, 4}, {-2, 5, 0}},
                        {0, -100, 2, -100});
}

TEST(CaseC04, LabelSmoothingWithIgnoredRows) {
  LossSpec s = spec_of(Reduction::none);
  s.label_smoothing = 0.2;
  both_paths(c04_problem(), s, [](const ReferenceResult& r, bool) {
    XL_EXPECT_CASE(r.loss[0], r.loss_bound[0], "0.503179352890");
    EXPECT_EQ(r.loss[1], 0.0);
    XL_EXPECT_CASE(r.loss[2], r.loss_bound[2], "0.494922956421");
    EXPECT_EQ(r.loss[3], 0.0);
  });
  s.reduction = Reduction::sum;
  both_paths(c04_problem(), s, [](const ReferenceResult& r, bool lin) {
    XL_EXPECT_CASE(r.reduced_loss, r.reduced_loss_bound, "0.998102309311");
    const char* row0[] = {"-0.0228719321853", "0.0475285327179", "-0.0246566005326"};
    const char* row2[] = {"-0.021388165923", "-0.021388165923", "0.0427763318461"};
    for (int j = 0; j < 3; ++j) {
      XL_EXPECT_CASE(grad_entry(r, lin, 0, j), grad_bound(r, lin, 0, j), row0[j]);
      XL_EXPECT_CASE(grad_entry(r, lin, 2, j), grad_bound(r, lin, 2, j), row2[j]);
      EXPECT_EQ(grad_entry(r, lin, 1, j), 0.0);
      EXPECT_EQ(grad_entry(r, lin, 3, j), 0.0);
    }
  });
  s.reduction = Reduction::mean;
  both_paths(c04_problem(), s, [](const ReferenceResult& r, bool) {
    XL_EXPECT_CASE(r.reduced_loss, r.reduced_loss_bound, "0.499051154655");
  });
  s.label_smoothing = 0.0;
  both_paths(c04_problem(), s, [](const ReferenceResult& r, bool) {
    XL_EXPECT_CASE(r.reduced_loss, r.reduced_loss_bound, "0.132384487989");
  });
}

Problem c05_problem() {
  return logits_problem(DType::fp32, {{1, 2, 3, 4}, {10, 0, 0, 0}, {0, 0, 0, 8}, {-3, -3, -3, -3}},
                        {0, -100, 3, -100});
}

TEST(CaseC05, ZLossWithIgnoredRows) {
  LossSpec s = spec_of(Reduction::mean);
  s.z_loss = 0.01;
  both_paths(c05_problem(), s, [](const ReferenceResult& r, bool lin) {
    const char* lse[] = {"4.44018969856", "10.0001361905", "8.00100588181", "-1.61370563888"};
    for (std::size_t q = 0; q < 4; ++q) XL_EXPECT_CASE(r.lse[q], r.lse_bound[q], lse[q]);
    XL_EXPECT_CASE(r.reduced_loss, r.reduced_loss_bound, "2.13925468859");
    double ce = (r.ce[0] + r.ce[2]) / 2, zt = (r.z_term[0] + r.z_term[2]) / 2;
    const double b = r.loss_bound[0] + r.loss_bound[2];
    XL_EXPECT_CASE(ce, b, "1.72059779019");
    XL_EXPECT_CASE(zt, b, "0.418656898400");
    const char* row0[] = {"-0.48254723556", "0.0474415324347", "0.128959455531", "0.350548144579"};
    const char* row2[] = {"0.000194376080808", "0.000194376080808", "0.000194376080808",
                          "0.0794269305757"};
    for (int j = 0; j < 4; ++j) {
      XL_EXPECT_CASE(grad_entry(r, lin, 0, j), grad_bound(r, lin, 0, j), row0[j]);
      XL_EXPECT_CASE(grad_entry(r, lin, 2, j), grad_bound(r, lin, 2, j), row2[j]);
    }
    // Each valid row's gradient sums to 2λ·lse_i/n_valid.
    for (int q : {0, 2}) {
      double sum = 0, bnd = 0;
      for (int j = 0; j < 4; ++j) {
        sum += grad_entry(r, lin, q, j);
        bnd += grad_bound(r, lin, q, j) + 0x1p-52 * std::fabs(sum);
      }
      EXPECT_NEAR(sum, 2 * 0.01 * r.lse[static_cast<std::size_t>(q)] / 2,
                  bnd + 0.01 * r.lse_bound[static_cast<std::size_t>(q)]);
    }
  });
  s.reduction = Reduction::sum;
  both_paths(c05_problem(), s, [](const ReferenceResult& r, bool) {
    XL_EXPECT_CASE(r.reduced_loss, r.reduced_loss_bound, "4.27850937718");
  });
  s.reduction = Reduction::mean;
  s.z_loss = 0.0;
  both_paths(c05_problem(), s, [](const ReferenceResult& r, bool) {
    XL_EXPECT_CASE(r.reduced_loss, r.reduced_loss_bound, "1.72059779019");
  });
}

TEST(CaseC06, SoftcapNoPaddedLanes) {
  LossSpec s = spec_of(Reduction::sum);
  s.softcap = 30;
  const std::pair<std::int64_t, const char*> cases[] = {
      {1000, "6.90775527898"}, {32000, "10.3734911818"}, {65537, "11.0903701476"}};
  for (auto [V, lit] : cases) {
    const Problem lp = logits_problem(DType::fp32, {std::vector<double>(V, -100.0)}, {0});
    const ReferenceResult r = compute_reference(lp, s, with_dz());
    XL_EXPECT_CASE(r.loss[0], r.loss_bound[0], lit);
  }
}

TEST(CaseC06, SoftcapChainRule) {
  LossSpec s = spec_of(Reduction::mean);
  s.softcap = 30;
  both_paths(logits_problem(DType::fp32, {{40, 10, -20, 0}}, {1}), s,
             [](const ReferenceResult& r, bool lin) {
               XL_EXPECT_CASE(r.loss[0], r.loss_bound[0], "16.4564677976");
               const char* g[] = {"0.242992687441", "-0.896629495682", "7.77878031071e-20",
                                  "4.61435082775e-12"};
               for (int j = 0; j < 4; ++j)
                 XL_EXPECT_CASE(grad_entry(r, lin, 0, j), grad_bound(r, lin, 0, j), g[j]);
             });
}

TEST(CaseC07, VocabularyNotAMultipleOfAnyBlock) {
  const std::pair<std::int64_t, const char*> cases[] = {{130, "4.86753445046"},
                                                        {129920, "11.7746741554"}};
  for (DType dt : {DType::fp32, DType::bf16})
    for (auto [V, lit] : cases) {
      const Problem lp = logits_problem(
          dt, std::vector<std::vector<double>>(3, std::vector<double>(V, -20.0)), {5, 0, V - 1});
      const ReferenceResult r = compute_reference(lp, spec_of(Reduction::sum), with_dz());
      for (std::size_t q = 0; q < 3; ++q) XL_EXPECT_CASE(r.loss[q], r.loss_bound[q], lit);
      if (V == 130) {
        for (std::int64_t q = 0; q < 3; ++q) {
          const std::int64_t t = lp.targets[static_cast<std::size_t>(q)];
          const std::int64_t off = (t + 1) % V;
          XL_EXPECT_CASE(r.dz[static_cast<std::size_t>(q * V + t)],
                         r.dz_bound[static_cast<std::size_t>(q * V + t)], "-0.992307692308");
          XL_EXPECT_CASE(r.dz[static_cast<std::size_t>(q * V + off)],
                         r.dz_bound[static_cast<std::size_t>(q * V + off)], "0.00769230769231");
        }
      }
    }
}

TEST(CaseC07, LinearHeadDHExactlyZero) {
  const std::int64_t V = 130, D = 4;
  Tensor H(DType::fp32, {1, D}, "H"), W(DType::fp32, {V, D}, "W");
  H.set(0, 1.0);
  for (std::int64_t j = 0; j < V; ++j) W.set(j * D, -20.0);
  const Problem pb = Problem::linear(std::move(H), std::move(W), std::nullopt, {5});
  const ReferenceResult r = compute_reference(pb, spec_of(Reduction::sum));
  // The exact dH is 0 (Σ_j dz_j = 0 times a constant column); the reference is within its bound.
  for (std::int64_t d = 0; d < D; ++d)
    EXPECT_LE(std::fabs(r.dH[static_cast<std::size_t>(d)]),
              r.dH_bound[static_cast<std::size_t>(d)]);
  for (std::int64_t d = 1; d < D; ++d) EXPECT_EQ(r.dH[static_cast<std::size_t>(d)], 0.0);
  for (std::int64_t j = 0; j < V; ++j) {
    const char* lit = j == 5 ? "-0.992307692308" : "0.00769230769231";
    XL_EXPECT_CASE(r.dW[static_cast<std::size_t>(j * D)],
                   r.dW_bound[static_cast<std::size_t>(j * D)], lit);
    for (std::int64_t d = 1; d < D; ++d) EXPECT_EQ(r.dW[static_cast<std::size_t>(j * D + d)], 0.0);
  }
}

TEST(CaseC08, MaskedVocabulary) {
  const std::int64_t V = 100000;
  for (DType dt : {DType::fp32, DType::bf16, DType::fp16}) {
    for (std::int64_t pos : {std::int64_t{0}, std::int64_t{50000}, V - 1}) {
      std::vector<double> a(V, -kInf), b(V, -kInf), c(V, 0.0);
      a[static_cast<std::size_t>(pos)] = 10.0;
      const Problem lp = logits_problem(dt, {a, b, c}, {pos, -100, 7});
      const ReferenceResult r = compute_reference(lp, spec_of(Reduction::mean), with_dz());
      EXPECT_EQ(r.loss[0], 0.0);
      EXPECT_EQ(r.loss[1], 0.0);
      XL_EXPECT_CASE(r.loss[2], r.loss_bound[2], "11.5129254650");
      XL_EXPECT_CASE(r.reduced_loss, r.reduced_loss_bound, "5.75646273249");
      for (std::int64_t j = 0; j < 2 * V; ++j) EXPECT_EQ(r.dz[static_cast<std::size_t>(j)], 0.0);
      for (double x : r.dz) EXPECT_FALSE(std::isnan(x));
    }
    // A row whose target logit is −inf: loss +inf; the other rows unchanged.
    std::vector<double> bad(V, 0.0), c(V, 0.0);
    bad[3] = -kInf;
    const Problem lp = logits_problem(dt, {bad, c}, {3, 7});
    const ReferenceResult r = compute_reference(lp, spec_of(Reduction::none), with_dz());
    EXPECT_EQ(r.loss[0], kInf);
    XL_EXPECT_CASE(r.loss[1], r.loss_bound[1], "11.5129254650");
  }
}

TEST(CaseC09, ConfidentTokenTrueClassGradientBf16) {
  const std::int64_t V = 32000;
  struct Row {
    double a;
    const char *loss, *gt, *other;
  };
  const Row rows[] = {{12.5625, "0.106181987486", "-0.100739021061", "3.148192789e-6"},
                      {14.9375, "0.0103659640432", "-0.0103124226006", "3.222732773e-7"},
                      {17.25, "0.00103117566963", "-0.0010306441907", "3.220863748e-8"}};
  for (const Row& row : rows) {
    std::vector<double> z(V, 0.0);
    z[42] = row.a;
    const Problem lp = logits_problem(DType::bf16, {z}, {42});
    const ReferenceResult r = compute_reference(lp, spec_of(Reduction::mean), with_dz());
    XL_EXPECT_CASE(r.loss[0], r.loss_bound[0], row.loss);
    XL_EXPECT_CASE(r.dz[42], r.dz_bound[42], row.gt);
    XL_EXPECT_CASE(r.dz[0], r.dz_bound[0], row.other);
    // Rounded once to bf16, the true-class gradient is the case's allowed bf16 value.
  }
  std::vector<double> z(V, 0.0);
  z[42] = 12.5625;
  const ReferenceResult r = compute_reference(logits_problem(DType::bf16, {z}, {42}),
                                              spec_of(Reduction::mean), with_dz());
  EXPECT_EQ(round_to(r.dz[42], DType::bf16), -0.1005859375);
}

TEST(CaseC10, LossOnTheBf16Grid) {
  std::vector<double> row0(100, 0.0), row1(100);
  for (int k = 0; k < 100; ++k) row1[static_cast<std::size_t>(k)] = k / 8.0;
  const Problem lp = logits_problem(DType::bf16, {row0, row1}, {7, 50});
  both_paths(lp, spec_of(Reduction::mean), [](const ReferenceResult& r, bool) {
    XL_EXPECT_CASE(r.loss[0], r.loss_bound[0], "4.60517018599");
    XL_EXPECT_CASE(r.loss[1], r.loss_bound[1], "8.26628685810");
    XL_EXPECT_CASE(r.reduced_loss, r.reduced_loss_bound, "6.43572852205");
  });
  both_paths(lp, spec_of(Reduction::sum), [](const ReferenceResult& r, bool lin) {
    XL_EXPECT_CASE(r.reduced_loss, r.reduced_loss_bound, "12.8714570441");
    XL_EXPECT_CASE(grad_entry(r, lin, 1, 50), grad_bound(r, lin, 1, 50), "-0.99974296206");
    XL_EXPECT_CASE(grad_entry(r, lin, 1, 99), grad_bound(r, lin, 1, 99), "0.11750353531");
    XL_EXPECT_CASE(grad_entry(r, lin, 1, 0), grad_bound(r, lin, 1, 0), "4.96199954144e-7");
  });
}

TEST(CaseC11, ChunkInvariantMean) {
  const std::int64_t N = 4096, V = 8;
  const Problem lp =
      Problem::from_logits(Tensor(DType::fp32, {N, V}), std::vector<std::int64_t>(N, 0));
  const ReferenceResult r = compute_reference(lp, spec_of(Reduction::mean), ReferenceOptions{});
  XL_EXPECT_CASE(r.reduced_loss, r.reduced_loss_bound, "2.07944154168");
  const ReferenceResult none = compute_reference(lp, spec_of(Reduction::none), ReferenceOptions{});
  EXPECT_EQ(none.loss.size(), 4096u);
}

TEST(CaseC11, UnevenMaskIsNotTheMeanOfChunkMeans) {
  const std::int64_t V = 8;
  std::vector<std::vector<double>> rows(64, std::vector<double>(V, 0.0));
  std::vector<std::int64_t> t(64, -100);
  t[0] = 0;
  for (int i = 32; i < 64; ++i) {
    rows[static_cast<std::size_t>(i)][0] = 6.0;
    t[static_cast<std::size_t>(i)] = 0;
  }
  const Problem lp = logits_problem(DType::fp32, rows, t);
  both_paths(lp, spec_of(Reduction::mean), [&](const ReferenceResult& r, bool lin) {
    XL_EXPECT_CASE(r.reduced_loss, r.reduced_loss_bound, "0.0796945446358");
    // Every valid gradient is scaled by 1/33: compare with the sum-reduction gradient / 33.
    const ReferenceResult s =
        lin ? compute_reference(linear_from_logits(lp), spec_of(Reduction::sum))
            : compute_reference(lp, spec_of(Reduction::sum), with_dz());
    for (std::int64_t q : {std::int64_t{0}, std::int64_t{40}})
      for (std::int64_t j = 0; j < V; ++j) {
        const double a = grad_entry(r, lin, q, j), b = grad_entry(s, lin, q, j) / 33.0;
        EXPECT_LE(std::fabs(a - b), grad_bound(r, lin, q, j) + grad_bound(s, lin, q, j) / 33.0 +
                                        0x1p-53 * std::fabs(b));
      }
  });
}

TEST(CaseC12, InvalidTargetsAreNamed) {
  const std::vector<double> row = {0, 1, 2, 3, 4};
  Tensor Z(DType::fp32, {5, 5});
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) Z.set(i * 5 + j, row[static_cast<std::size_t>(j)]);
  try {
    Problem::from_logits(Z, {1, 5, -4, -100, 4});
    FAIL() << "target 5 must be rejected";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("row 1 is 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Problem::from_logits(Z, {1, 0, -4, -100, 4}), InputError);
  EXPECT_THROW(Problem::from_logits(Z, {1, 0, std::int64_t{1} << 31, -100, 4}), InputError);
  EXPECT_THROW(Problem::from_logits(Z, {1, 0, std::numeric_limits<std::int64_t>::min(), -100, 4}),
               InputError);
  // ignore_index −1: −1 is ignored, −100 becomes invalid.
  EXPECT_THROW(Problem::from_logits(Z, {1, 0, 0, -100, 4}, -1), InputError);
  const Problem ok = Problem::from_logits(Z, {1, 0, 0, -1, 4}, -1);
  LossSpec s = spec_of(Reduction::none);
  s.ignore_index = -1;
  const ReferenceResult r = compute_reference(ok, s, with_dz());
  XL_EXPECT_CASE(r.loss[0], r.loss_bound[0], "3.45191439594");
  XL_EXPECT_CASE(r.loss[4], r.loss_bound[4], "0.451914395938");
  EXPECT_EQ(r.loss[3], 0.0);
  // The valid rows' values do not depend on the other rows.
  const Problem valid_only = Problem::from_logits(Z, {1, -100, -100, -100, 4});
  const ReferenceResult v = compute_reference(valid_only, spec_of(Reduction::none), with_dz());
  EXPECT_EQ(v.loss[0], r.loss[0]);
  EXPECT_EQ(v.loss[4], r.loss[4]);
}

}  // namespace
}  // namespace xentlab

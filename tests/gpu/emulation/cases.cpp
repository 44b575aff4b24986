// The known-hard cases of docs/cases.md on every emulated strategy × recipe. Expected
// values are the case file's; the tolerance is the a-priori bound of the strategy's declared
// arithmetic (judge/bounds.hpp via judge/bounds_for.hpp) plus the reference's bound plus half a
// unit of the printed value (tests/support/case_support.hpp):
// |emu − case| ≤ |emu − ref| + |ref − case|. Where the case lists a wrong answer, the recipe whose
// arithmetic produces it is run and must produce exactly that wrong value (so the emulation
// explains the fault), and the policy must say so where the recipe has no bound.
#include <gtest/gtest.h>

#include "numerics/emulate.hpp"
#include "tests/support/emulation_case_support.hpp"

namespace xentlab {
namespace {

using namespace ::xentlab::testing;

TEST(EmuCaseC01, LargeCommonOffsetWithinBoundsAndTheCancellingFormReproduced) {
  const LossSpec sum = spec_of(Reduction::sum);
  for (auto row : {std::vector<double>{10002, 9999}, std::vector<double>{1000002, 999999}}) {
    both_paths(logits_problem(DType::fp32, {row}, {0}), sum, [](const RunCtx& c) {
      EXPECT_TRUE(within(c, c.out.loss[0], loss_bound(c, 0), "0.0485873515737")) << c.what;
      EXPECT_TRUE(within(c, grad_of(c, 0, 1), grad_bound(c, 0, 1), "0.0474258731776")) << c.what;
    });
  }
  both_paths(logits_problem(DType::fp32, {{1e8, 1e8}}, {1}), sum, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.loss[0], loss_bound(c, 0), "0.693147180560")) << c.what;
    EXPECT_TRUE(within(c, grad_of(c, 0, 0), grad_bound(c, 0, 0), "0.5")) << c.what;
  });
  // docs/arithmetic.md §5 forms loss = lse − x_t from absolute values: in all-fp32 arithmetic this
  // is the wrong answer the case lists. lse = fl32(a + log(1 + e^-3)) with a = 10002 (spacing
  // 2^-10), 1000002 (spacing 2^-4), 1e8 + ln 2 (spacing 8): loss 50·2^-10 = 0.048828125, 0.0625, 0.
  const Recipe fp32 = R("fp32/fp32/fp32/fp32");
  const std::vector<std::pair<std::vector<double>, double>> wrong{
      {{10002, 9999}, 0.048828125}, {{1000002, 999999}, 0.0625}, {{1e8, 1e8}, 0.0}};
  for (const auto& [row, w] : wrong) {
    const std::int64_t t = row[0] == row[1] ? 1 : 0;
    each_run(logits_problem(DType::fp32, {row}, {t}), sum,
             [&, w = w](const RunCtx& c) { EXPECT_EQ(c.out.loss[0], w) << c.what; }, {fp32});
  }
  // bf16 and fp16 inputs.
  both_paths(logits_problem(DType::bf16, {{4096, 4096}}, {0}), sum, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.loss[0], loss_bound(c, 0), "0.693147180560")) << c.what;
  });
  both_paths(logits_problem(DType::bf16, {{4096, 4064}}, {1}), sum, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.loss[0], loss_bound(c, 0), "32.0000000000000127")) << c.what;
  });
  both_paths(logits_problem(DType::fp16, {{60000, 60000}}, {0}), sum, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.loss[0], loss_bound(c, 0), "0.693147180560")) << c.what;
  });
}

TEST(EmuCaseC03, EveryTargetIgnored) {
  const Problem lp = c03_problem(5);
  for (Reduction red : {Reduction::none, Reduction::sum, Reduction::mean}) {
    both_paths(lp, spec_of(red), [&](const RunCtx& c) {
      for (double l : c.out.loss) EXPECT_EQ(l, 0.0) << c.what;
      if (red == Reduction::mean)
        EXPECT_TRUE(std::isnan(c.out.reduced_loss)) << c.what;
      else
        EXPECT_EQ(c.out.reduced_loss, 0.0) << c.what;
      for (const auto* g : {&c.out.dz, &c.out.dH, &c.out.dW})
        for (double x : *g) EXPECT_EQ(x, 0.0) << c.what;
      for (double x : c.out.db) EXPECT_EQ(x, 0.0) << c.what;
    });
  }
  LossSpec zero = spec_of(Reduction::mean);
  zero.empty_mean = EmptyMean::zero;
  both_paths(lp, zero, [](const RunCtx& c) { EXPECT_EQ(c.out.reduced_loss, 0.0) << c.what; });
  // Two chunks of 5 (chunked/checkpointed with chunk 5): the first fully ignored, the second with
  // targets; the mean is over the second chunk's valid rows, as the reference's.
  Problem two = c03_problem(10);
  for (std::size_t i = 5; i < 10; ++i) two.targets[i] = static_cast<std::int64_t>(i % 10);
  ReferenceOptions ro;
  ro.want_dz = true;
  const ReferenceResult ref = compute_reference(two, spec_of(Reduction::mean), ro);
  for (const auto& s : make_strategies(Backend::cpu_emulation)) {
    RunRequest req;
    req.problem = &two;
    req.recipe = R("fp32/fp32/fp32/fp32");
    req.chunk_tokens = 5;
    const StrategyOutputs out = s->run(req);
    const Bounds b =
        bounds_for_reference(two, req.spec, req.recipe, s->arithmetic(req.recipe), ref);
    EXPECT_LE(std::fabs(out.reduced_loss - ref.reduced_loss),
              b.reduced_loss + ref.reduced_loss_bound)
        << s->name();
    for (std::size_t k = 0; k < 50; ++k) EXPECT_EQ(out.dz[k], 0.0) << s->name();
  }
}

TEST(EmuCaseC04, LabelSmoothingWithIgnoredRows) {
  LossSpec s = spec_of(Reduction::none);
  s.label_smoothing = 0.2;
  const Problem lp = logits_problem(DType::fp32, {{2, 0, -1}, {0, 3, 1}, {1, 1, 4}, {-2, 5, 0}},
                                    {0, -100, 2, -100});
  both_paths(lp, s, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.loss[0], loss_bound(c, 0), "0.503179352890")) << c.what;
    EXPECT_EQ(c.out.loss[1], 0.0) << c.what;
    EXPECT_TRUE(within(c, c.out.loss[2], loss_bound(c, 2), "0.494922956421")) << c.what;
    EXPECT_EQ(c.out.loss[3], 0.0) << c.what;
  });
  s.reduction = Reduction::sum;
  both_paths(lp, s, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.reduced_loss, reduced_bound(c), "0.998102309311")) << c.what;
    const char* g0[] = {"-0.0228719321853", "0.0475285327179", "-0.0246566005326"};
    const char* g2[] = {"-0.021388165923", "-0.021388165923", "0.0427763318461"};
    for (std::int64_t j = 0; j < 3; ++j) {
      EXPECT_TRUE(within(c, grad_of(c, 0, j), grad_bound(c, 0, j), g0[j])) << c.what;
      EXPECT_TRUE(within(c, grad_of(c, 2, j), grad_bound(c, 2, j), g2[j])) << c.what;
      EXPECT_EQ(grad_of(c, 1, j), 0.0) << c.what;
      EXPECT_EQ(grad_of(c, 3, j), 0.0) << c.what;
    }
  });
  s.reduction = Reduction::mean;
  both_paths(lp, s, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.reduced_loss, reduced_bound(c), "0.499051154655")) << c.what;
  });
  s.label_smoothing = 0.0;
  both_paths(lp, s, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.reduced_loss, reduced_bound(c), "0.132384487989")) << c.what;
  });
}

TEST(EmuCaseC05, ZLossWithIgnoredRows) {
  LossSpec s = spec_of(Reduction::mean);
  s.z_loss = 0.01;
  const Problem lp =
      logits_problem(DType::fp32, {{1, 2, 3, 4}, {10, 0, 0, 0}, {0, 0, 0, 8}, {-3, -3, -3, -3}},
                     {0, -100, 3, -100});
  both_paths(lp, s, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.reduced_loss, reduced_bound(c), "2.13925468859")) << c.what;
    const char* g0[] = {"-0.48254723556", "0.0474415324347", "0.128959455531", "0.350548144579"};
    for (std::int64_t j = 0; j < 4; ++j)
      EXPECT_TRUE(within(c, grad_of(c, 0, j), grad_bound(c, 0, j), g0[j])) << c.what;
    EXPECT_TRUE(within(c, grad_of(c, 2, 0), grad_bound(c, 2, 0), "0.000194376080808")) << c.what;
    EXPECT_TRUE(within(c, grad_of(c, 2, 3), grad_bound(c, 2, 3), "0.0794269305757")) << c.what;
  });
  s.reduction = Reduction::sum;
  both_paths(lp, s, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.reduced_loss, reduced_bound(c), "4.27850937718")) << c.what;
  });
  s.z_loss = 0.0;
  s.reduction = Reduction::mean;
  both_paths(lp, s, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.reduced_loss, reduced_bound(c), "1.72059779019")) << c.what;
  });
}

TEST(EmuCaseC06, SoftcapNoPaddedLanesAndChainRule) {
  LossSpec s = spec_of(Reduction::sum);
  s.softcap = 30;
  const std::vector<std::pair<std::int64_t, const char*>> sizes{
      {1000, "6.90775527898"}, {32000, "10.3734911818"}, {65537, "11.0903701476"}};
  for (const auto& [V, lit] : sizes) {
    const Problem lp = logits_problem(
        DType::fp32, {std::vector<double>(static_cast<std::size_t>(V), -100.0)}, {0});
    each_run(lp, s,
             [lit = lit](const RunCtx& c) {
               EXPECT_TRUE(within(c, c.out.loss[0], loss_bound(c, 0), lit)) << c.what;
             },
             {R("fp32/fp32/fp32/fp32"), R("fp32/bf16/fp32/fp32")});
  }
  const Problem lp = logits_problem(DType::fp32, {{40, 10, -20, 0}}, {1});
  both_paths(lp, s, [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.loss[0], loss_bound(c, 0), "16.4564677976")) << c.what;
    const char* g[] = {"0.242992687441", "-0.896629495682", "7.77878031071e-20",
                       "4.61435082775e-12"};
    for (std::int64_t j = 0; j < 4; ++j)
      EXPECT_TRUE(within(c, grad_of(c, 0, j), grad_bound(c, 0, j), g[j])) << c.what;
  });
}

TEST(EmuCaseC07, VocabularyNotAMultipleOfAnyBlock) {
  const LossSpec sum = spec_of(Reduction::sum);
  for (DType dt : {DType::fp32, DType::bf16})
    for (std::int64_t V : {130, 129920}) {
      const std::vector<double> row(static_cast<std::size_t>(V), -20.0);
      const Problem lp = logits_problem(dt, {row, row, row}, {5, 0, V - 1});
      each_run(
          lp, sum,
          [V = V](const RunCtx& c) {
            for (std::size_t q = 0; q < 3; ++q)
              EXPECT_TRUE(within(c, c.out.loss[q], loss_bound(c, q),
                                 V == 130 ? "4.86753445046" : "11.7746741554"))
                  << c.what << " row " << q;
            if (V == 130) {
              EXPECT_TRUE(within(c, grad_of(c, 0, 7), grad_bound(c, 0, 7), "0.00769230769231"))
                  << c.what;
              EXPECT_TRUE(within(c, grad_of(c, 0, 5), grad_bound(c, 0, 5), "-0.992307692308"))
                  << c.what;
            }
          },
          V == 130 ? recipes_for(dt)
                   : std::vector<Recipe>{Recipe{dt, dt, DType::fp32, DType::fp32}});
    }
  // Linear: D = 4, H = [1, 0, 0, 0], W[:, 0] = −20: dH = 0 exactly, dW[j, 0] = p_j − [j = t].
  Tensor H(DType::fp32, {1, 4}, "H"), W(DType::fp32, {130, 4}, "W");
  H.set(0, 1.0);
  for (std::int64_t j = 0; j < 130; ++j) W.set(j * 4, -20.0);
  const Problem pb = Problem::linear(std::move(H), std::move(W), std::nullopt, {5});
  each_run(pb, sum, [](const RunCtx& c) {
    // dH = −20·Σ_j dz_j is 0 in exact arithmetic; an emulated recipe sums rounded dz in fp32, so
    // the value is 0 within the run's bound.
    for (std::size_t k = 0; k < c.out.dH.size(); ++k) {
      EXPECT_TRUE(within(c, c.out.dH[k], c.b.dH[k] + c.ref.dH_bound[k], "0")) << c.what;
    }
    EXPECT_TRUE(
        within(c, c.out.dW[7 * 4], c.b.dW[7 * 4] + c.ref.dW_bound[7 * 4], "0.00769230769231"))
        << c.what;
    EXPECT_TRUE(
        within(c, c.out.dW[5 * 4], c.b.dW[5 * 4] + c.ref.dW_bound[5 * 4], "-0.992307692308"))
        << c.what;
  });
}

TEST(EmuCaseC08, MaskedVocabulary) {
  const std::int64_t V = 100000;
  for (DType dt : {DType::fp32, DType::bf16, DType::fp16}) {
    for (std::int64_t pos : {std::int64_t{0}, std::int64_t{50000}, V - 1}) {
      std::vector<double> a(static_cast<std::size_t>(V), -kInf), bneg(a),
          c0(static_cast<std::size_t>(V), 0.0);
      a[static_cast<std::size_t>(pos)] = 10;
      const Problem lp = logits_problem(dt, {a, bneg, c0}, {pos, -100, 7});
      each_run(
          lp, spec_of(Reduction::mean),
          [&](const RunCtx& c) {
            EXPECT_EQ(c.out.loss[0], 0.0) << c.what;
            EXPECT_EQ(c.out.loss[1], 0.0) << c.what;
            for (std::int64_t j = 0; j < V; ++j) {
              ASSERT_EQ(grad_of(c, 0, j), 0.0) << c.what << " j=" << j;
              ASSERT_EQ(grad_of(c, 1, j), 0.0) << c.what << " j=" << j;
            }
            if (c.recipe.accum == DType::fp16) {
              // Row C sums 100000 ones: past 65504 the fp16 sum is +Inf, so lse and loss are +Inf —
              // the fp16-accumulation fault of NUMERICS.md §2, caught by the finiteness rule.
              EXPECT_EQ(c.out.loss[2], kInf) << c.what;
              const ErrorStats st = compute_error_stats(c.out.loss.data(), c.ref.loss.data(), 3,
                                                        c.out.loss_dtype, c.b.loss.data());
              EXPECT_EQ(judge({{"loss", &st, true}}, policy_by_name("default")).disposition,
                        Disposition::incorrect);
            } else {
              EXPECT_TRUE(within(c, c.out.loss[2], loss_bound(c, 2), "11.5129254650")) << c.what;
              EXPECT_TRUE(within(c, c.out.reduced_loss, reduced_bound(c), "5.75646273249"))
                  << c.what;
            }
          },
          {Recipe{dt, dt, DType::fp32, DType::fp32}, Recipe{dt, dt, DType::fp16, DType::fp32}});
    }
  }
  // A row whose target logit is −Inf: loss +Inf, never finite; the other row unchanged.
  std::vector<double> r0(100, 0.0), r1(100, 0.0);
  r0[3] = -kInf;
  each_run(logits_problem(DType::fp32, {r0, r1}, {3, 7}), spec_of(Reduction::none),
           [](const RunCtx& c) {
             EXPECT_EQ(c.out.loss[0], kInf) << c.what;
             EXPECT_TRUE(within(c, c.out.loss[1], loss_bound(c, 1), "4.60517018599")) << c.what;
           },
           {R("fp32/fp32/fp32/fp32")});
}

TEST(EmuCaseC09, ConfidentTokenTrueClassGradientBf16) {
  const std::int64_t V = 32000;
  struct Row {
    double a;
    const char *loss, *gt, *off, *rounded;
  };
  const Row rows[] = {
      {12.5625, "0.106181987486", "-0.100739021061", "3.148192789e-6", "-0.1005859375"},
      {14.9375, "0.0103659640432", "-0.0103124226006", "3.222732773e-7", "-0.01031494140625"},
      {17.25, "0.00103117566963", "-0.0010306441907", "3.220863748e-8", "-0.00102996826171875"}};
  for (const Row& r : rows) {
    std::vector<double> z(static_cast<std::size_t>(V), 0.0);
    z[11] = r.a;
    const Problem lp = logits_problem(DType::bf16, {z}, {11});
    each_run(lp, spec_of(Reduction::sum), [&](const RunCtx& c) {
      EXPECT_TRUE(within(c, c.out.loss[0], loss_bound(c, 0), r.loss)) << c.what;
      EXPECT_TRUE(within(c, grad_of(c, 0, 11), grad_bound(c, 0, 11), r.gt)) << c.what;
      EXPECT_TRUE(within(c, grad_of(c, 0, 12), grad_bound(c, 0, 12), r.off)) << c.what;
      // dz held in bf16 (logits dtype): one final rounding of the true-class gradient. The
      // contract's cancelling form p_t − 1 uses p_t = expf(x_t − lse) with lse in fp32 (spacing
      // 2^-19 in [16, 32), so |Δp_t| ≤ about 2^-20 plus expf's 2 ULP), which can move the value
      // across a bf16 rounding boundary (spacing 2^-17 near 1e-3): at most one bf16 ULP from the
      // correctly rounded value; at a = 12.5625 and 14.9375 the margins are wide enough for
      // equality.
      if (c.recipe.logits == DType::bf16 && c.recipe.accum == DType::fp32) {
        if (r.a < 17)
          EXPECT_EQ(grad_of(c, 0, 11), std::strtod(r.rounded, nullptr)) << c.what;
        else
          EXPECT_LE(ulp_distance(grad_of(c, 0, 11), std::strtod(r.rounded, nullptr), DType::bf16),
                    1.0)
              << c.what;
      }
    });
  }
  // The faulty recipe: lse rounded to bf16 (accum bf16). At a = 14.9375, lse = 14.94787 rounds to
  // 14.9375 (bf16 spacing 1/16 in [8, 16)), so loss and the true-class gradient are exactly 0 — the
  // wrong answers the case lists. The blocked strategies' bf16 sum over V = 32000 has no
  // meaningful a-priori bound (c = 133, c·u ≥ 1/2): the policy reports the run as incorrect. The
  // fused tree is shallower (judge/bounds.hpp online_tree, N = 1: at least 16 ranges of ≤ 16
  // tiles, c = 7 + 1 + 2·15 + 2·(5 + 16) = 80): γ_80(2^-8) ≈ 0.45 is a finite bound, and one loose
  // enough to contain this answer — the arithmetic permits it, so nothing is caught there. So are
  // vocab_parallel's shorter shard sums (docs/bounds.md): P = 2, shards of 16000, c = 63 + 8 + 1 =
  // 72; P = 3, 10667, c = 47 + 8 + 2 = 57; P = 8, 4000, c = 15 + 8 + 7 = 30.
  std::vector<double> z(static_cast<std::size_t>(V), 0.0);
  z[11] = 14.9375;
  each_run(
      logits_problem(DType::bf16, {z}, {11}), spec_of(Reduction::sum),
      [](const RunCtx& c) {
        EXPECT_EQ(c.out.loss[0], 0.0) << c.what;
        EXPECT_EQ(grad_of(c, 0, 11), 0.0) << c.what;
        const ErrorStats st = compute_error_stats(c.out.loss.data(), c.ref.loss.data(), 1,
                                                  c.out.loss_dtype, c.b.loss.data());
        const Disposition d = judge({{"loss", &st, true}}, policy_by_name("default")).disposition;
        if (c.what.rfind("fused ", 0) == 0 || c.what.rfind("vocab_parallel ", 0) == 0) {
          EXPECT_TRUE(c.b.meaningful) << c.what;
          EXPECT_LE(std::fabs(c.out.loss[0] - c.ref.loss[0]), loss_bound(c, 0)) << c.what;
          EXPECT_EQ(d, Disposition::passed) << c.what;
        } else {
          EXPECT_FALSE(c.b.meaningful) << c.what;
          EXPECT_EQ(d, Disposition::incorrect) << c.what;
        }
      },
      {R("bf16/bf16/bf16/fp32")});
}

// The other listed wrong answer, −0.01171875, comes from a kernel that rounds p_t to bf16 before
// forming p_t − 1 (not the contract's arithmetic): p_t = expf(14.9375 − lse) = 0.98969… rounds to
// 0.98828125, and 0.98828125 − 1 = −0.01171875. Substituting that value into an emulated run's dz,
// the policy reports the run as incorrect against the a-priori bound of the declared arithmetic.
TEST(EmuCaseC09, RoundedTrueClassProbabilityIsCaught) {
  const std::int64_t V = 32000;
  std::vector<double> z(static_cast<std::size_t>(V), 0.0);
  z[11] = 14.9375;
  each_run(logits_problem(DType::bf16, {z}, {11}), spec_of(Reduction::sum),
           [](const RunCtx& c) {
             const float lse = static_cast<float>(c.out.lse[0]);
             const float pt = std::exp(14.9375f - lse);
             const double faulty = static_cast<double>(emu::rnd_bf16(pt)) - 1.0;
             EXPECT_EQ(faulty, -0.01171875) << c.what;
             std::vector<double> dz(c.out.dz.begin(), c.out.dz.end());
             const ErrorStats good = compute_error_stats(dz.data(), c.ref.dz.data(), V,
                                                         c.out.grad_dtype, c.b.dz.data());
             dz[11] = faulty;
             const ErrorStats bad = compute_error_stats(dz.data(), c.ref.dz.data(), V,
                                                        c.out.grad_dtype, c.b.dz.data());
             const Policy p = policy_by_name("default");
             EXPECT_EQ(judge({{"dz", &good, false}}, p).disposition, Disposition::passed) << c.what;
             const Verdict v = judge({{"dz", &bad, false}}, p);
             EXPECT_EQ(v.disposition, Disposition::incorrect) << c.what;
             EXPECT_EQ(v.index, 11) << c.what;
           },
           {R("bf16/bf16/fp32/fp32"), R("bf16/fp32/fp32/fp32")});
}

TEST(EmuCaseC10, LossOnTheBf16Grid) {
  std::vector<double> r0(100, 0.0), r1(100);
  for (int k = 0; k < 100; ++k) r1[static_cast<std::size_t>(k)] = k / 8.0;
  const Problem lp = logits_problem(DType::bf16, {r0, r1}, {7, 50});
  both_paths(lp, spec_of(Reduction::mean), [](const RunCtx& c) {
    EXPECT_TRUE(within(c, c.out.loss[0], loss_bound(c, 0), "4.60517018599")) << c.what;
    EXPECT_TRUE(within(c, c.out.loss[1], loss_bound(c, 1), "8.26628685810")) << c.what;
    EXPECT_TRUE(within(c, c.out.reduced_loss, reduced_bound(c), "6.43572852205")) << c.what;
    // In fp32 accumulation the loss is not on the bf16 grid.
    if (c.recipe.accum == DType::fp32) {
      EXPECT_NE(c.out.loss[0], 4.59375) << c.what;
      EXPECT_NE(c.out.reduced_loss, 6.4375) << c.what;
    }
  });
  both_paths(lp, spec_of(Reduction::sum), [](const RunCtx& c) {
    EXPECT_TRUE(within(c, grad_of(c, 1, 50), grad_bound(c, 1, 50), "-0.99974296206")) << c.what;
    EXPECT_TRUE(within(c, grad_of(c, 1, 99), grad_bound(c, 1, 99), "0.11750353531")) << c.what;
    EXPECT_TRUE(within(c, grad_of(c, 1, 0), grad_bound(c, 1, 0), "4.96199954144e-7")) << c.what;
  });
  // The faulty recipe (loss and token reduction in bf16) returns exactly the wrong answers listed:
  // lse = ln 100 → 4.59375 (spacing 1/32 in [4, 8)); row 1 lse 14.516 → 14.5, loss 14.5 − 6.25;
  // sum 4.59375 + 8.25 = 12.84375 → 12.875 (tie to even, spacing 1/16); mean 6.4375.
  each_run(lp, spec_of(Reduction::mean),
           [](const RunCtx& c) {
             EXPECT_EQ(c.out.loss[0], 4.59375) << c.what;
             EXPECT_EQ(c.out.loss[1], 8.25) << c.what;
             EXPECT_EQ(c.out.reduced_loss, 6.4375) << c.what;
           },
           {R("bf16/bf16/bf16/fp32"), R("bf16/fp32/bf16/fp32")});
  each_run(lp, spec_of(Reduction::sum),
           [](const RunCtx& c) { EXPECT_EQ(c.out.reduced_loss, 12.875) << c.what; },
           {R("bf16/bf16/bf16/fp32")});
}

TEST(EmuCaseC11, ChunkedReductions) {
  const Problem flat = logits_problem(
      DType::fp32, std::vector<std::vector<double>>(4096, std::vector<double>(8, 0.0)),
      std::vector<std::int64_t>(4096, 3));
  for (std::int64_t chunk : {32, 1024, 4096})
    each_run(
        flat, spec_of(Reduction::mean),
        [](const RunCtx& c) {
          EXPECT_TRUE(within(c, c.out.reduced_loss, reduced_bound(c), "2.07944154168")) << c.what;
          EXPECT_EQ(c.out.loss.size(), 4096u);
        },
        {R("fp32/fp32/fp32/fp32")}, {}, chunk);
  // Uneven mask: chunk A = token 0 zeros (t = 0) + 31 ignored; chunk B = 32 × [6, 0, …, 0], t = 0.
  std::vector<std::vector<double>> rows;
  std::vector<std::int64_t> t;
  for (int i = 0; i < 32; ++i) {
    rows.push_back(std::vector<double>(8, 0.0));
    t.push_back(i == 0 ? 0 : -100);
  }
  for (int i = 0; i < 32; ++i) {
    std::vector<double> r(8, 0.0);
    r[0] = 6;
    rows.push_back(r);
    t.push_back(0);
  }
  both_paths(logits_problem(DType::fp32, rows, t), spec_of(Reduction::mean),
             [](const RunCtx& c) {
               EXPECT_TRUE(within(c, c.out.reduced_loss, reduced_bound(c), "0.0796945446358"))
                   << c.what;
             },
             {R("fp32/fp32/fp32/fp32")});
}

TEST(EmuCaseC12, InvalidTargetsAreNamed) {
  Problem pb = logits_problem(DType::fp32, std::vector<std::vector<double>>(5, {0, 1, 2, 3, 4}),
                              {1, 0, 0, -100, 4});
  each_run(pb, spec_of(Reduction::none),
           [](const RunCtx& c) {
             EXPECT_TRUE(within(c, c.out.loss[0], loss_bound(c, 0), "3.45191439594")) << c.what;
             EXPECT_TRUE(within(c, c.out.loss[4], loss_bound(c, 4), "0.451914395938")) << c.what;
             EXPECT_EQ(c.out.loss[3], 0.0) << c.what;
           },
           {R("fp32/fp32/fp32/fp32")});
  for (std::int64_t bad : {std::int64_t{5}, std::int64_t{-4}, std::int64_t{1} << 31,
                           std::numeric_limits<std::int64_t>::min()}) {
    Problem p = pb;
    p.targets[1] = bad;
    for (const auto& s : make_strategies(Backend::cpu_emulation)) {
      RunRequest req;
      req.problem = &p;
      req.recipe = R("fp32/fp32/fp32/fp32");
      try {
        s->run(req);
        ADD_FAILURE() << s->name() << " accepted target " << bad;
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
      }
    }
  }
  // ignore_index −1: row 3 (target −1) ignored, −100 is then invalid.
  Problem q = pb;
  q.targets[3] = -1;
  LossSpec s1 = spec_of(Reduction::none);
  s1.ignore_index = -1;
  each_run(q, s1, [](const RunCtx& c) { EXPECT_EQ(c.out.loss[3], 0.0) << c.what; },
           {R("fp32/fp32/fp32/fp32")});
}

}  // namespace
}  // namespace xentlab

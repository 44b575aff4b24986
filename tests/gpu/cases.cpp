// The known-hard cases of docs/cases.md on every CUDA strategy: C01 and C04–C10 within the bound
// and against the CPU emulation, C03 (every target ignored) exactly, C11 for several chunk sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/gpu_fixture.hpp"

namespace xentlab::gpu_tests {
namespace {

// ---- the known-hard cases (docs/cases.md) -------------------------------------------------------

TEST(GpuStrategies, SharedCases) {
  XL_REQUIRE_DEVICE();
  using testing::linear_from_logits;
  using testing::logits_problem;
  const Recipe f32 = parse_recipe("fp32");
  std::vector<std::pair<Case, std::vector<Recipe>>> cases;
  // C01: large common offsets (fp32, bf16, fp16).
  cases.push_back(
      {{"C01-fp32",
        logits_problem(DType::fp32,
                       {{1e8, 1e8}, {10002, 9999}, {1000002, 999999}, {-999999, -1000002}},
                       {1, 0, 0, 0}),
        {},
        {}},
       {f32}});
  cases.push_back(
      {{"C01-bf16", logits_problem(DType::bf16, {{4096, 4096}, {4096, 4064}}, {0, 1}), {}, {}},
       grid_for(DType::bf16)});
  cases.push_back({{"C01-fp16", logits_problem(DType::fp16, {{60000, 60000}}, {0}), {}, {}},
                   grid_for(DType::fp16)});
  // C03 (every target ignored) has its own exact test below.
  // C04: label smoothing with ignored rows.
  {
    LossSpec s;
    s.label_smoothing = 0.2;
    Problem p = logits_problem(DType::fp32, {{2, 0, -1}, {0, 3, 1}, {1, 1, 4}, {-2, 5, 0}},
                               {0, -100, 2, -100});
    cases.push_back({{"C04", p, s, {}}, {f32}});
    cases.push_back({{"C04-linear", linear_from_logits(p), s, {}}, {f32}});
  }
  // C05: z-loss with ignored rows.
  {
    LossSpec s;
    s.z_loss = 0.01;
    Problem p =
        logits_problem(DType::fp32, {{1, 2, 3, 4}, {10, 0, 0, 0}, {0, 0, 0, 8}, {-3, -3, -3, -3}},
                       {0, -100, 3, -100});
    cases.push_back({{"C05", p, s, {}}, {f32}});
    cases.push_back({{"C05-linear", linear_from_logits(p), s, {}}, {f32}});
  }
  // C06: softcap, V not a multiple of the block, and the chain rule.
  {
    LossSpec s;
    s.softcap = 30.0;
    cases.push_back({{"C06-V1000",
                      logits_problem(DType::fp32, {std::vector<double>(1000, -100.0)}, {0}),
                      s,
                      {}},
                     {f32}});
    cases.push_back({{"C06-V65537",
                      logits_problem(DType::fp32, {std::vector<double>(65537, -100.0)}, {0}),
                      s,
                      {}},
                     {f32}});
    Problem p = logits_problem(DType::fp32, {{40, 10, -20, 0}}, {1});
    cases.push_back({{"C06-chain", p, s, {}}, {f32}});
    cases.push_back({{"C06-chain-linear", linear_from_logits(p), s, {}}, {f32}});
  }
  // C07: V = 130 and 129920, every logit −20; linear D = 4.
  for (DType dt : {DType::fp32, DType::bf16}) {
    const Recipe r = dt == DType::fp32 ? f32 : parse_recipe("bf16/bf16/fp32/bf16");
    cases.push_back(
        {{"C07-V130",
          logits_problem(dt, std::vector<std::vector<double>>(3, std::vector<double>(130, -20.0)),
                         {5, 0, 129}),
          {},
          {}},
         {r}});
    cases.push_back(
        {{"C07-V129920",
          logits_problem(dt,
                         std::vector<std::vector<double>>(3, std::vector<double>(129920, -20.0)),
                         {5, 0, 129919}),
          {},
          {}},
         {r}});
  }
  {
    Tensor H(DType::fp32, {1, 4}, "H"), W(DType::fp32, {130, 4}, "W");
    H.set(0, 1.0);
    for (int j = 0; j < 130; ++j) W.set(j * 4, -20.0);
    cases.push_back(
        {{"C07-linear", Problem::linear(std::move(H), std::move(W), std::nullopt, {7}), {}, {}},
         {f32}});
  }
  // C08: masked (−inf) vocabulary, V = 100000; rows A (one finite logit at the target), B (all
  // −inf, ignored), C (all 0).
  for (DType dt : {DType::fp32, DType::bf16, DType::fp16}) {
    const double ninf = -INFINITY;
    std::vector<double> a(100000, ninf), b(100000, ninf), c0(100000, 0.0), a2(100000, ninf);
    a[50000] = 10.0;
    a2[99999] = 10.0;
    const Recipe r = dt == DType::fp32 ? f32 : Recipe{dt, dt, DType::fp32, dt};
    cases.push_back(
        {{"C08", logits_problem(dt, {a, b, c0, a2}, {50000, -100, 7, 99999}), {}, {}}, {r}});
  }
  // C09: confident token in bf16, V = 32000.
  for (double av : {12.5625, 14.9375, 17.25}) {
    std::vector<double> row(32000, 0.0);
    row[123] = av;
    cases.push_back(
        {{"C09", logits_problem(DType::bf16, {row, row, row, row}, {123, 123, 123, 123}), {}, {}},
         grid_for(DType::bf16)});
  }
  // C10: loss on the bf16 grid.
  {
    std::vector<double> r0(100, 0.0), r1(100);
    for (int k = 0; k < 100; ++k) r1[k] = k / 8.0;
    Problem p = logits_problem(DType::bf16, {r0, r1}, {7, 50});
    for (Reduction red : {Reduction::mean, Reduction::sum}) {
      LossSpec s;
      s.reduction = red;
      cases.push_back({{"C10", p, s, {}}, grid_for(DType::bf16)});
    }
  }
  for (auto& [c, recipes] : cases) check_all_strategies(c, recipes, 2);
}

TEST(GpuStrategies, SharedCaseC03AllIgnored) {
  XL_REQUIRE_DEVICE();
  // Exact expectations: loss 0 per token, every gradient exactly 0 (never NaN), mean NaN by
  // default (PyTorch) or 0 with empty_mean = zero, sum 0.
  std::vector<std::vector<double>> rows(5, std::vector<double>(10));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 10; ++j) rows[i][j] = static_cast<float>(0.1 * (i + 1) * (j - 4.5));
  const Problem lp = testing::logits_problem(DType::fp32, rows, std::vector<std::int64_t>(5, -100));
  const Problem pl = testing::linear_from_logits(lp);
  const Problem plb = with_input_dtype(pl, DType::bf16, -100);  // for fused (bf16 operands)
  for (const Problem* p : {&lp, &pl, &plb})
    for (const auto& s : make_strategies(Backend::cuda))
      for (int variant = 0; variant < 3; ++variant) {
        RunRequest req;
        req.problem = p;
        req.recipe = parse_recipe(p == &plb ? "bf16/bf16/fp32/bf16" : "fp32");
        if (!every_recipe(s->name()) && !s->can_implement(*p, req.spec, req.recipe).ok()) continue;
        req.chunk_tokens = 2;
        if (variant == 1) req.spec.empty_mean = EmptyMean::zero;
        if (variant == 2) req.spec.reduction = Reduction::sum;
        const StrategyOutputs o = s->run(req);
        const std::string ctx =
            s->name() + " " + p->describe() + " variant " + std::to_string(variant);
        for (double v : o.loss) EXPECT_EQ(v, 0.0) << ctx;
        for (const auto* g : {&o.dz, &o.dH, &o.dW})
          for (double v : *g) EXPECT_EQ(v, 0.0) << ctx << " gradient";
        for (double v : o.db) EXPECT_EQ(v, 0.0) << ctx << " gradient";
        if (variant == 0) {
          EXPECT_TRUE(std::isnan(o.reduced_loss)) << ctx << " " << o.reduced_loss;
        } else {
          EXPECT_EQ(o.reduced_loss, 0.0) << ctx;
        }
      }
}

TEST(GpuStrategies, SharedCaseC11ChunkedReductions) {
  XL_REQUIRE_DEVICE();
  // N = 4096, V = 8, logits 0: ln 8 for every chunk size.
  Problem p = testing::logits_problem(
      DType::fp32, std::vector<std::vector<double>>(4096, std::vector<double>(8, 0.0)),
      std::vector<std::int64_t>(4096, 3));
  Case c{"C11", p, {}, {}};
  const ReferenceResult ref = reference_for(c);
  for (const auto& s : make_strategies(Backend::cuda))
    for (std::int64_t chunk : {32, 1024, 4096}) check_run(c, ref, *s, parse_recipe("fp32"), chunk);
  // Uneven mask: chunk A = token 0 zeros t=0 and 31 ignored; chunk B = 32 tokens [6,0,…] t=0.
  std::vector<std::vector<double>> rows(64, std::vector<double>(8, 0.0));
  std::vector<std::int64_t> t(64, -100);
  t[0] = 0;
  for (int i = 32; i < 64; ++i) {
    rows[i][0] = 6.0;
    t[i] = 0;
  }
  Problem p2 = testing::logits_problem(DType::fp32, rows, t);
  for (Problem q : {p2, testing::linear_from_logits(p2)}) {
    Case c2{"C11-uneven", q, {}, {}};
    const ReferenceResult ref2 = reference_for(c2);
    for (const auto& s : make_strategies(Backend::cuda))
      check_run(c2, ref2, *s, parse_recipe("fp32"), 32);
  }
}

}  // namespace
}  // namespace xentlab::gpu_tests

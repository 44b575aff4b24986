// GPU tests of the CUDA strategies (naive, chunked, checkpointed; gpu/cuda), label "gpu".
// Without a device every test skips with the reason query_device() gives (CI has nvcc, no GPU).
//
// What is checked, for every strategy of the registry (none is named by hand except where a test
// compares two of them):
//  - against the certified reference: every output within its a-priori bound for the declared
//    arithmetic (judge/bounds_for.hpp assess_run, policy "default"); where the recipe has no
//    meaningful bound (16-bit sum-exp over a long row), finiteness only;
//  - against the CPU emulation of the same strategy and recipe (same chunking): max|e| ≤ 2× the
//    emulation's max|e| + the output's rounding floor u_out·max|ref| (judge_against_baseline);
//  - all outputs written: the host wrapper poisons every device output with NaN before each run,
//    and a NaN where the reference is finite fails the finiteness rule;
//  - chunked = checkpointed bit for bit (same chunks: the recomputed logits are identical), and
//    chunked with one chunk = naive bit for bit;
//  - clean refusals (InputError naming the bytes / the row), and 64-bit indexing (N·V > 2^31).
// Failures print the problem, seed, recipe, spec and the verdict's numbers.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "case_support.hpp"
#include "datasets/problem_ops.hpp"
#include "datasets/synthetic.hpp"
#include "gpu/cuda/device.hpp"
#include "gpu/cuda/fused/fused.hpp"
#ifdef XENTLAB_HAVE_NCCL
#include <cuda_runtime.h>

#include "gpu/cuda/vocab_parallel.hpp"
#endif
#include "gpu/registry.hpp"
#include "judge/bounds_for.hpp"
#include "numerics/bounds.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"

namespace xentlab {
namespace {

using testing::same_bits;

const gpu::DeviceInfo& device() {
  static const gpu::DeviceInfo d = gpu::query_device();
  return d;
}
#define XL_REQUIRE_DEVICE() \
  if (!device().available) GTEST_SKIP() << "no CUDA device: " << device().reason

std::unique_ptr<Strategy> find_strategy(Backend b, const std::string& name) {
  return make_strategy(b, name);
}

struct Case {
  std::string name;
  Problem pb;
  LossSpec spec;
  std::vector<double> upstream;  ///< reduction none
};

/// Linear Gaussian problem; optional fp32 bias and ignored rows (every 7th row from 3).
Problem gaussian(std::int64_t N, std::int64_t V, std::int64_t D, DType dt, double sigma,
                 std::uint64_t seed, bool bias, bool ignore) {
  Problem p = make_gaussian_linear(N, V, D, dt, sigma, seed);
  std::vector<std::int64_t> t = p.targets;
  if (ignore)
    for (std::int64_t i = 3; i < N; i += 7) t[static_cast<std::size_t>(i)] = -100;
  std::optional<Tensor> b;
  if (bias) {
    Tensor bt(DType::fp32, {V}, "bias");
    NormalStream ns(seed + 101);
    for (std::int64_t j = 0; j < V; ++j) bt.set(j, ns.next());
    b = std::move(bt);
  }
  return Problem::linear(std::move(p.H), std::move(p.W), std::move(b), std::move(t), -100,
                         "gaussian-" + std::to_string(seed));
}

std::vector<double> random_upstream(std::int64_t N, std::uint64_t seed) {
  NormalStream ns(seed);
  std::vector<double> u(static_cast<std::size_t>(N));
  for (auto& v : u) v = ns.next();
  return u;
}

template <class Values = std::vector<double>>
double max_abs_finite(const Values& v) {
  double m = 0.0;
  for (double x : v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

ReferenceResult reference_for(const Case& c) {
  ReferenceOptions o;
  o.want_dz = !c.pb.is_linear();
  o.upstream = c.upstream;
  return compute_reference(c.pb, c.spec, o);
}

std::string describe(const Case& c, const Recipe& r, const std::string& strategy,
                     std::int64_t chunk) {
  return c.name + " [" + c.pb.describe() + "] spec {" + c.spec.describe() + "} recipe " + r.name() +
         " strategy " + strategy + " chunk_tokens " + std::to_string(chunk);
}

/// Output-rounding floor of the baseline comparison: one spacing (ulp ≤ 2u·|x|) of the largest
/// reference value in the output dtype, or the smallest subnormal near 0, whichever is larger.
/// Two procedures that each round their result to the output dtype last can land on adjacent
/// values even when their unrounded results agree closely, so the GPU may differ from its
/// emulation by one spacing however small the emulation's error.
template <class Values = std::vector<double>>
double rounding_floor(DType out, const Values& ref) {
  return std::max(2.0 * unit_roundoff(out) * max_abs_finite(ref), min_subnormal(out));
}

/// Whether the strategy implements every recipe of fp32/fp16/bf16 storage (the registry's trait;
/// fused refuses some).
bool every_recipe(const std::string& strategy) {
  return strategy_traits(strategy).every_recipe;
}

/// Whether the strategy works through the tokens in chunks (the registry's trait).
bool chunks_tokens(const std::string& strategy) {
  return strategy_traits(strategy).chunks_tokens;
}

/// The CPU emulation a CUDA strategy is compared with: its registry row's.
std::unique_ptr<Strategy> emulated_twin(const std::string& strategy) {
  return find_strategy(Backend::cpu_emulation, strategy);
}

/// Runs one strategy on one case and recipe; checks bound, finiteness and the emulation baseline.
/// Where the CPU emulation of the same declared arithmetic does not meet the a-priori bound
/// either (the recipe itself leaves the bound's validity: 16-bit lse at large offsets, outputs in
/// the subnormal range), the GPU is held to the emulation baseline and the finiteness rule only,
/// and the test log says so.
/// `ranks`: RunRequest::ranks (vocab_parallel; the other strategies ignore it).
void check_run(const Case& c, const ReferenceResult& ref, const Strategy& s, const Recipe& r,
               std::int64_t chunk, int ranks = 0) {
  const std::string ctx =
      describe(c, r, s.name(), chunk) + (ranks > 0 ? " ranks " + std::to_string(ranks) : "");
  const Status st = s.can_implement(c.pb, c.spec, r);
  if (!st.ok() && st.code == Status::Code::not_supported && !every_recipe(s.name())) {
    // A strategy without the every_recipe trait (fused: only recipes whose dz is an exact
    // tensor-core operand, docs/fused.md) must say why it refuses one.
    EXPECT_FALSE(st.message.empty()) << ctx;
    return;
  }
  ASSERT_TRUE(st.ok()) << ctx << ": not supported: " << st.message;
  RunRequest req;
  req.problem = &c.pb;
  req.spec = c.spec;
  req.recipe = r;
  req.upstream = c.upstream;
  req.chunk_tokens = chunk;
  req.ranks = ranks;
  req.emulated_sms = device().multiprocessors;  // the fused emulation models this device's launch
  const StrategyOutputs out = s.run(req);
  // A strategy that does not chunk tokens accumulates dW in fp32 over all of them (one "chunk"
  // for the bounds).
  const std::int64_t n_chunks = chunks_tokens(s.name()) ? (c.pb.N + chunk - 1) / chunk : 1;
  const Policy policy = policy_by_name("default");
  RunAssessment a;
  try {
    a = assess_run(c.pb, c.spec, r, s.run_arithmetic(req), out, ref, policy, n_chunks);
  } catch (const std::exception& e) {
    ADD_FAILURE() << ctx << ": assess_run failed: " << e.what();
    return;
  }

  // Baseline: the CPU emulation of the same strategy and recipe (same chunking).
  const auto emu = emulated_twin(s.name());
  const bool have_emu = emu && emu->can_implement(c.pb, c.spec, r).ok();
  RunAssessment ea;
  if (have_emu) {
    try {
      const StrategyOutputs eo = emu->run(req);
      ea = assess_run(c.pb, c.spec, r, emu->run_arithmetic(req), eo, ref, policy, n_chunks);
    } catch (const std::exception& e) {
      ADD_FAILURE() << ctx << ": CPU emulation baseline failed: " << e.what();
      return;
    }
  }
  const bool emu_meets_bound = have_emu && ea.verdict.disposition == Disposition::passed;
  if (!have_emu || emu_meets_bound) {
    for (const ErrorStats* e : {&a.loss, &a.lse, &a.dz, &a.dH, &a.dW, &a.db}) {
      EXPECT_EQ(e->nonfinite_where_ref_finite, 0)
          << ctx << ": non-finite output where the reference is finite";
    }
  }
  // (Otherwise the baseline judge below compares the non-finite counts with the emulation's.)
  if (a.bounds.meaningful && (!have_emu || emu_meets_bound)) {
    EXPECT_EQ(a.verdict.disposition, Disposition::passed)
        << ctx << ": " << a.verdict.output << ": " << a.verdict.reason;
  } else if (have_emu && !emu_meets_bound) {
    std::cout << "[ note ] " << ctx << ": the emulated arithmetic misses the bound too ("
              << ea.verdict.output << ": " << ea.verdict.reason << "); baseline check only\n";
  }
  if (!have_emu) return;
  struct Item {
    const char* name;
    const ErrorStats& g;
    const ErrorStats& e;
    bool present;
    double floor;
  };
  const Item items[] = {
      {"loss", a.loss, ea.loss, true, rounding_floor(r.accum, ref.loss)},
      {"lse", a.lse, ea.lse, true, rounding_floor(r.accum, ref.lse)},
      // One scalar summing N independently rounded terms: its floor is its a-priori bound.
      {"reduced_loss", a.reduced_loss, ea.reduced_loss, true,
       std::isfinite(a.bounds.reduced_loss) ? a.bounds.reduced_loss
                                            : rounding_floor(r.accum, {ref.reduced_loss})},
      {"dz", a.dz, ea.dz, a.has_dz && ea.has_dz, rounding_floor(r.grad, ref.dz)},
      {"dH", a.dH, ea.dH, a.has_dH && ea.has_dH, rounding_floor(r.grad, ref.dH)},
      {"dW", a.dW, ea.dW, a.has_dW && ea.has_dW, rounding_floor(r.grad, ref.dW)},
      {"db", a.db, ea.db, a.has_db && ea.has_db, rounding_floor(r.grad, ref.db)},
  };
  for (const Item& it : items) {
    if (!it.present) continue;
    const Verdict v = judge_against_baseline(it.name, it.g, it.e, it.floor, policy);
    EXPECT_EQ(v.disposition, Disposition::passed)
        << ctx << ": " << it.name << " vs CPU emulation: " << v.reason
        << "\n  gpu:       " << it.g.summary() << "\n  emulation: " << it.e.summary();
  }
}

void check_all_strategies(const Case& c, const std::vector<Recipe>& recipes, std::int64_t chunk) {
  const ReferenceResult ref = reference_for(c);
  for (const auto& s : make_strategies(Backend::cuda))
    for (const Recipe& r : recipes) {
      SCOPED_TRACE(describe(c, r, s->name(), chunk));
      check_run(c, ref, *s, r, chunk);
    }
}

std::vector<Recipe> grid_for(DType input) {
  std::vector<Recipe> out;
  for (const Recipe& r : default_recipe_grid())
    if (r.input == input) out.push_back(r);
  // Recipes whose grad dtype differs from the input (fp32 gradients).
  Recipe f = out.front();
  f.logits = input;
  f.accum = DType::fp32;
  f.grad = DType::fp32;
  out.push_back(f);
  return out;
}

// ---- recipes × strategies on small problems (unaligned V = 507, D = 123) ---------------------

TEST(GpuStrategies, RecipeGridSmallLinear) {
  XL_REQUIRE_DEVICE();
  for (DType dt : {DType::bf16, DType::fp16, DType::fp32}) {
    Case c{"V507-D123", gaussian(67, 507, 123, dt, 4.0, 5, false, false), {}, {}};
    check_all_strategies(c, grid_for(dt), 16);
  }
}

TEST(GpuStrategies, RecipeGridLogits) {
  XL_REQUIRE_DEVICE();
  for (DType dt : {DType::bf16, DType::fp16, DType::fp32}) {
    Case c{"logits-V3001", make_gaussian_logits(45, 3001, dt, 3.0, 7), {}, {}};
    check_all_strategies(c, grid_for(dt), 16);
  }
}

// ---- every LossSpec option on every strategy --------------------------------------------------

/// The loss settings of the option tests: mean, sum, none, label smoothing, z-loss, softcap with
/// a logit scale, all of them at once with ignore_index and reduction none, and a normaliser.
std::vector<LossSpec> loss_option_specs() {
  std::vector<LossSpec> specs;
  LossSpec s;
  specs.push_back(s);  // mean
  s.reduction = Reduction::sum;
  specs.push_back(s);
  s = LossSpec{};
  s.reduction = Reduction::none;
  specs.push_back(s);
  s = LossSpec{};
  s.label_smoothing = 0.1;
  specs.push_back(s);
  s = LossSpec{};
  s.z_loss = 1e-3;
  specs.push_back(s);
  s = LossSpec{};
  s.softcap = 30.0;
  s.logit_scale = 0.5;
  specs.push_back(s);
  s = LossSpec{};
  s.ignore_index = -1;
  s.label_smoothing = 0.2;
  s.z_loss = 1e-4;
  s.softcap = 20.0;
  s.logit_scale = 1.25;
  s.reduction = Reduction::none;
  specs.push_back(s);
  s = LossSpec{};
  s.normalizer = 200;  // the mean over the valid tokens of several micro-batches
  specs.push_back(s);
  return specs;
}

TEST(GpuStrategies, LossOptions) {
  XL_REQUIRE_DEVICE();
  const std::vector<LossSpec> specs = loss_option_specs();
  const std::vector<Recipe> recipes = {parse_recipe("bf16/fp32/fp32/bf16"),
                                       parse_recipe("bf16/bf16/fp32/bf16"),
                                       parse_recipe("bf16/bf16/bf16/bf16")};
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const LossSpec& sp = specs[k];
    for (bool bias : {false, true}) {
      Problem p = gaussian(61, 507, 123, DType::bf16, 4.0, 11 + k, bias, true);
      if (sp.ignore_index != -100)
        for (auto& t : p.targets)
          if (t == -100) t = sp.ignore_index;
      Case c{"options-" + std::to_string(k) + (bias ? "-bias" : ""), std::move(p), sp,
             sp.reduction == Reduction::none ? random_upstream(61, 99 + k) : std::vector<double>{}};
      check_all_strategies(c, recipes, 16);
    }
    Problem lp = make_gaussian_logits(37, 1001, DType::bf16, 3.0, 21 + k);
    for (std::int64_t i = 2; i < lp.N; i += 5)
      lp.targets[static_cast<std::size_t>(i)] = sp.ignore_index;
    Case lc{"options-logits-" + std::to_string(k), std::move(lp), sp,
            sp.reduction == Reduction::none ? random_upstream(37, 7 + k) : std::vector<double>{}};
    check_all_strategies(lc, recipes, 16);
  }
}

// ---- medium problem -----------------------------------------------------------------------------

TEST(GpuStrategies, MediumLinear) {
  XL_REQUIRE_DEVICE();
  Case c{"medium", gaussian(512, 8192, 256, DType::bf16, 6.0, 3, true, true), {}, {}};
  check_all_strategies(c,
                       {parse_recipe("bf16/fp32/fp32/bf16"), parse_recipe("bf16/bf16/fp32/fp32"),
                        parse_recipe("bf16/bf16/fp32/bf16")},
                       128);
}

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

// ---- algebraic identities: bit-for-bit equality ------------------------------------------------

void expect_same_outputs(const StrategyOutputs& a, const StrategyOutputs& b,
                         const std::string& ctx) {
  EXPECT_TRUE(same_bits(a.loss, b.loss)) << ctx << " loss";
  EXPECT_TRUE(same_bits(a.lse, b.lse)) << ctx << " lse";
  EXPECT_TRUE(same_bits({a.reduced_loss}, {b.reduced_loss})) << ctx << " reduced loss";
  EXPECT_TRUE(same_bits(a.dz, b.dz)) << ctx << " dz";
  EXPECT_TRUE(same_bits(a.dH, b.dH)) << ctx << " dH";
  EXPECT_TRUE(same_bits(a.dW, b.dW)) << ctx << " dW";
  EXPECT_TRUE(same_bits(a.db, b.db)) << ctx << " db";
}

/// The registry's deterministic trait, on the device: a strategy that declares it gives every
/// output bit for bit on a repeat run; one that does not (atomics in the gradients) still gives
/// loss and lse bit for bit. Every registered strategy declares it since fused's additions take
/// turns (the second branch is for a future strategy that does not; RepeatRunsAreBitIdentical
/// checks fused and chunked on several waves of tiles).
TEST(GpuStrategies, DeterministicStrategiesRepeatBitForBit) {
  XL_REQUIRE_DEVICE();
  const Problem pb = gaussian(256, 2000, 64, DType::bf16, 3.0, 5, true, true);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/fp32/fp32");
  req.chunk_tokens = 64;
  int deterministic = 0;
  for (const auto& s : make_strategies(Backend::cuda)) {
    if (!s->can_implement(pb, req.spec, req.recipe).ok()) continue;
    const StrategyOutputs a = s->run(req), b = s->run(req);
    if (strategy_traits(s->name()).deterministic) {
      ++deterministic;
      expect_same_outputs(a, b, s->name() + " repeat");
    } else {
      EXPECT_TRUE(same_bits(a.loss, b.loss)) << s->name() << " repeat loss";
      EXPECT_TRUE(same_bits(a.lse, b.lse)) << s->name() << " repeat lse";
    }
  }
  EXPECT_GT(deterministic, 0);
}

TEST(GpuStrategies, ChunkedEqualsCheckpointedAndNaive) {
  XL_REQUIRE_DEVICE();
  const auto naive = find_strategy(Backend::cuda, "naive");
  const auto chunked = find_strategy(Backend::cuda, "chunked");
  const auto ckpt = find_strategy(Backend::cuda, "checkpointed");
  ASSERT_TRUE(naive && chunked && ckpt);
  LossSpec none;
  none.reduction = Reduction::none;
  none.label_smoothing = 0.05;
  none.z_loss = 1e-4;
  const Problem p = gaussian(100, 507, 123, DType::bf16, 4.0, 17, true, true);
  const Problem lp = make_gaussian_logits(50, 999, DType::bf16, 3.0, 19);
  for (const Problem* pb : {&p, &lp})
    for (const char* rn : {"bf16/fp32/fp32/bf16", "bf16/bf16/fp32/fp32", "bf16/bf16/bf16/bf16",
                           "bf16/fp16/fp16/fp16"}) {
      RunRequest req;
      req.problem = pb;
      req.spec = none;
      req.recipe = parse_recipe(rn);
      req.upstream = random_upstream(pb->N, 5);
      const std::string ctx = pb->describe() + " recipe " + std::string(rn);
      req.chunk_tokens = 16;
      expect_same_outputs(chunked->run(req), ckpt->run(req),
                          ctx + " chunked(16) vs checkpointed(16)");
      req.chunk_tokens = pb->N;
      expect_same_outputs(chunked->run(req), naive->run(req), ctx + " chunked(N) vs naive");
      // reduction none with unit upstream = reduction sum.
      RunRequest s = req;
      s.spec.reduction = Reduction::sum;
      s.upstream.clear();
      RunRequest n1 = req;
      n1.upstream.assign(static_cast<std::size_t>(pb->N), 1.0);
      StrategyOutputs a = naive->run(s), b = naive->run(n1);
      EXPECT_TRUE(same_bits(a.dH, b.dH)) << ctx << " none(1) vs sum dH";
      EXPECT_TRUE(same_bits(a.dz, b.dz)) << ctx << " none(1) vs sum dz";
      EXPECT_TRUE(same_bits(a.loss, b.loss)) << ctx << " none(1) vs sum loss";
    }
}

// ---- refusals --------------------------------------------------------------------------------

TEST(GpuStrategies, CleanRefusals) {
  XL_REQUIRE_DEVICE();
  const Problem p = gaussian(64, 4096, 64, DType::bf16, 1.0, 23, false, false);
  for (const auto& s : make_strategies(Backend::cuda)) {
    // Recipe whose input dtype is not the problem's.
    EXPECT_EQ(s->can_implement(p, {}, parse_recipe("fp16/fp16/fp32/fp16")).code,
              Status::Code::not_supported)
        << s->name();
    // A memory budget below what one token needs: InputError with the byte count.
    RunRequest req;
    req.problem = &p;
    req.recipe = parse_recipe("bf16/bf16/fp32/bf16");
    req.memory_budget = 1024;
    try {
      (void)s->run(req);
      ADD_FAILURE() << s->name() << " ran with a 1024-byte budget";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
    }
  }
  // C12: invalid targets name the row and the value; never a finite loss.
  Problem bad;
  bad.N = 5;
  bad.V = 5;
  bad.logits = Tensor(DType::fp32, {5, 5}, "logits");
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) bad.logits.set(i * 5 + j, j);
  bad.targets = {1, 5, -4, -100, 4};
  for (const auto& s : make_strategies(Backend::cuda)) {
    RunRequest req;
    req.problem = &bad;
    req.recipe = parse_recipe("fp32");
    EXPECT_THROW((void)s->run(req), InputError) << s->name();
  }
}

// ---- 64-bit indexing: N·V > 2^31 in one kernel launch and one GEMM ----------------------------

/// The N·V > 2^31 problem of the indexing tests: N = 17000 identical token rows (one Gaussian H
/// row), V = 128256, hidden size D (8 by default; the fused test uses 64, the smallest that its
/// wgmma kernels take), every target the last vocabulary entry.
Problem identical_rows_past_2pow31(std::int64_t D = 8) {
  const std::int64_t N = 17000, V = 128256;
  Problem g = make_gaussian_linear(1, V, D, DType::bf16, 4.0, 31);
  Tensor H(DType::bf16, {N, D}, "H");
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t d = 0; d < D; ++d) H.set(i * D + d, g.H.get(d));
  return Problem::linear(std::move(H), std::move(g.W), std::nullopt,
                         std::vector<std::int64_t>(static_cast<std::size_t>(N), V - 1));
}

TEST(GpuStrategies, IndexingPast2Pow31) {
  XL_REQUIRE_DEVICE();
  if (device().memory_gib < 24) GTEST_SKIP() << "needs about 20 GiB of device memory";
  // N·V = 17000·128256 ≈ 2.18e9 > 2^31; every token row identical, so every per-token output and
  // every dH row must equal row 0's bit for bit (a 32-bit index overflow would break that).
  const Problem p = identical_rows_past_2pow31();
  const std::int64_t N = p.N, D = p.D;
  for (const char* name : {"naive", "chunked"}) {
    const auto s = find_strategy(Backend::cuda, name);
    RunRequest req;
    req.problem = &p;
    req.recipe = parse_recipe("bf16/bf16/fp32/fp32");
    req.chunk_tokens = N;  // one chunk: N·V elements in one launch
    const StrategyOutputs o = s->run(req);
    ASSERT_EQ(o.loss.size(), static_cast<std::size_t>(N));
    ASSERT_TRUE(std::isfinite(o.loss[0]) && std::isfinite(o.lse[0])) << name;
    std::int64_t first_bad = -1;
    for (std::int64_t i = 0; i < N && first_bad < 0; ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (std::memcmp(&o.loss[k], &o.loss[0], 8) != 0 ||
          std::memcmp(&o.lse[k], &o.lse[0], 8) != 0 ||
          std::memcmp(&o.dH[k * D], &o.dH[0], 8 * D) != 0)
        first_bad = i;
    }
    EXPECT_EQ(first_bad, -1) << name << ": token row " << first_bad << " differs from row 0";
    for (double v : o.dW) ASSERT_TRUE(std::isfinite(v)) << name << ": non-finite dW";
  }
}

// ---- fused: the cases in bf16 linear form, unaligned shapes, repeat runs, 64-bit indexing ------

/// Runs `body(path name, fused strategy)` once per fused kernel path this device has: the
/// automatic choice (on sm_90 the wgmma kernels where the shape allows) and the forced mma.sync
/// kernels, each a fused strategy of its own (gpu/cuda/fused/fused.hpp).
template <class Body>
void for_each_fused_kernel_path(Body&& body) {
  for (const auto path : {gpu::FusedKernelPath::automatic, gpu::FusedKernelPath::mma_sync}) {
    const auto fused = gpu::make_cuda_fused(path);
    body(path == gpu::FusedKernelPath::automatic ? "automatic" : "mma.sync", *fused);
  }
}

/// Whether this device runs the fused wgmma kernels (sm_90 exactly: the sm_90a build).
bool fused_wgmma_device() {
  return device().sm_major == 9 && device().sm_minor == 0;
}

/// The kernels of the last run of `fused`, "forward/backward": "wgmma/wgmma" or
/// "mma.sync/mma.sync".
std::string fused_kernels_of_last_run(const Strategy& fused) {
  const gpu::FusedKernels k = gpu::last_fused_kernels(fused);
  return std::string(k.forward) + "/" + k.backward;
}

/// A logits case as a linear bf16 problem: H = I (N×N), W = the finite logits (V×N), and an fp32
/// bias of −inf where a logit is −inf (0 elsewhere), so masked entries stay masked exactly.
/// Every finite logit of the cases used here is a bf16 value (checked).
/// With `wgmma_shape`, the shape the fused wgmma kernels take (N ≥ 128, D ≥ 64; the case must
/// have V ≥ 256 and N ≤ 128): 128 token rows, row i being the case's row i mod N (its target
/// too), and D = 64 with H's and W's extra columns zero, so every logit is still the case's.
Problem bf16_linear_with_mask(const Problem& lp, bool wgmma_shape = false) {
  const std::int64_t N = lp.N, V = lp.V;
  const std::int64_t rows = wgmma_shape ? 128 : N,
                     D = wgmma_shape ? std::max<std::int64_t>(N, 64) : N;
  EXPECT_TRUE(!wgmma_shape || (V >= 256 && N <= rows)) << "case too small or too tall for wgmma";
  Tensor H(DType::bf16, {rows, D}, "H"), W(DType::bf16, {V, D}, "W"), b(DType::fp32, {V}, "bias");
  bool masked = false;
  std::vector<std::int64_t> targets(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) {
    H.set(i * D + i % N, 1.0);
    targets[static_cast<std::size_t>(i)] = lp.targets[static_cast<std::size_t>(i % N)];
  }
  for (std::int64_t j = 0; j < V; ++j) b.set(j, 0.0);
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t j = 0; j < V; ++j) {
      const double z = lp.logits.get(i * V + j);
      if (std::isinf(z) && z < 0) {
        b.set(j, -INFINITY);
        masked = true;
        continue;
      }
      EXPECT_EQ(round_to(z, DType::bf16), z) << "case logit not exact in bf16";
      W.set(j * D + i, z);
    }
  std::optional<Tensor> bias;
  if (masked) bias = std::move(b);
  return Problem::linear(std::move(H), std::move(W), std::move(bias), std::move(targets), -100,
                         wgmma_shape ? "case-linear-bf16-128rows" : "case-linear-bf16");
}

TEST(GpuStrategies, FusedSharedCasesLinearBf16) {
  XL_REQUIRE_DEVICE();
  using testing::logits_problem;
  const auto fused = find_strategy(Backend::cuda, "fused");
  ASSERT_TRUE(fused);
  const std::vector<Recipe> recipes = {parse_recipe("bf16/bf16/fp32/bf16"),
                                       parse_recipe("bf16/bf16/fp32/fp32"),
                                       parse_recipe("bf16/bf16/bf16/bf16")};
  std::vector<Case> cases;
  {
    LossSpec s;
    s.label_smoothing = 0.2;
    cases.push_back(
        {"C04-bf16",
         bf16_linear_with_mask(logits_problem(
             DType::fp32, {{2, 0, -1}, {0, 3, 1}, {1, 1, 4}, {-2, 5, 0}}, {0, -100, 2, -100})),
         s,
         {}});
  }
  {
    LossSpec s;
    s.z_loss = 0.01;
    cases.push_back({"C05-bf16",
                     bf16_linear_with_mask(logits_problem(
                         DType::fp32, {{1, 2, 3, 4}, {10, 0, 0, 0}, {0, 0, 0, 8}, {-3, -3, -3, -3}},
                         {0, -100, 3, -100})),
                     s,
                     {}});
  }
  {
    LossSpec s;
    s.softcap = 30.0;
    cases.push_back({"C06-chain-bf16",
                     bf16_linear_with_mask(logits_problem(DType::fp32, {{40, 10, -20, 0}}, {1})),
                     s,
                     {}});
  }
  // The cases with V ≥ 256 also in the wgmma kernels' shape (128 rows, D = 64; suffix "-wgmma"):
  // the small ones above stay below it, on the mma.sync kernels.
  const auto add_both = [&](const std::string& name, const Problem& lp) {
    cases.push_back({name, bf16_linear_with_mask(lp), {}, {}});
    cases.push_back({name + "-wgmma", bf16_linear_with_mask(lp, true), {}, {}});
  };
  add_both("C07-V129920-bf16",
           logits_problem(DType::fp32,
                          std::vector<std::vector<double>>(3, std::vector<double>(129920, -20.0)),
                          {5, 0, 129919}));
  {
    const double ninf = -INFINITY;
    std::vector<double> a(100000, ninf), c0(100000, 0.0);
    a[50000] = 10.0;
    // Row C of C08 (all 0) shares the vocabulary mask of row A in linear form, so it is its own
    // problem.
    add_both("C08-A-bf16", logits_problem(DType::fp32, {a, a}, {50000, 50000}));
    add_both("C08-C-bf16", logits_problem(DType::fp32, {c0}, {7}));
  }
  for (double av : {12.5625, 14.9375, 17.25}) {
    std::vector<double> row(32000, 0.0);
    row[123] = av;
    add_both("C09-bf16", logits_problem(DType::fp32, {row, row, row, row}, {123, 123, 123, 123}));
  }
  const bool sm90 = fused_wgmma_device();
  for (const Case& c : cases) {
    const ReferenceResult ref = reference_for(c);
    const bool wgmma_case =
        c.name.size() > 6 && c.name.compare(c.name.size() - 6, 6, "-wgmma") == 0;
    for (const Recipe& r : recipes) {
      SCOPED_TRACE(describe(c, r, "fused", 0));
      check_run(c, ref, *fused, r, 1);
      if (sm90 && wgmma_case && fused->can_implement(c.pb, c.spec, r).ok()) {
        EXPECT_EQ(fused_kernels_of_last_run(*fused), "wgmma/wgmma");
      }
    }
  }
}

TEST(GpuStrategies, FusedShapesAndOptions) {
  XL_REQUIRE_DEVICE();
  const auto fused = find_strategy(Backend::cuda, "fused");
  ASSERT_TRUE(fused);
  const Recipe r = parse_recipe("bf16/bf16/fp32/bf16");
  // N = 1; unaligned D; V just past a tile; a tile-aligned shape with D % 8 == 0 (vector loads).
  for (const auto& [N, V, D] : std::vector<std::array<std::int64_t, 3>>{
           {1, 507, 123}, {1, 129, 64}, {131, 257, 40}, {256, 1024, 256}, {300, 2000, 96}}) {
    for (bool bias : {false, true}) {
      Case c{"fused-shape", gaussian(N, V, D, DType::bf16, 4.0, 41 + N, bias, N > 3), {}, {}};
      const ReferenceResult ref = reference_for(c);
      check_run(c, ref, *fused, r, 1);
    }
    Case h{"fused-shape-fp16", gaussian(N, V, D, DType::fp16, 2.0, 43 + N, false, false), {}, {}};
    check_run(h, reference_for(h), *fused, parse_recipe("fp16/fp16/fp32/fp32"), 1);
  }
  // Refusals name the reason.
  const Problem p = gaussian(8, 64, 16, DType::bf16, 1.0, 3, false, false);
  for (const char* rn : {"bf16/fp32/fp32/bf16", "bf16/fp16/fp32/bf16"}) {
    const Status st = fused->can_implement(p, {}, parse_recipe(rn));
    EXPECT_EQ(st.code, Status::Code::not_supported) << rn;
    EXPECT_NE(st.message.find("logits"), std::string::npos) << st.message;
  }
  const Problem pf = gaussian(8, 64, 16, DType::fp32, 1.0, 3, false, false);
  EXPECT_EQ(fused->can_implement(pf, {}, parse_recipe("fp32")).code, Status::Code::not_supported);
  const Problem lp = make_gaussian_logits(4, 100, DType::bf16, 1.0, 3);
  EXPECT_EQ(fused->can_implement(lp, {}, parse_recipe("bf16/bf16/fp32/bf16")).code,
            Status::Code::not_supported);
}

/// The record of the kernels a fused run took belongs to the strategy object (no process-wide
/// state): empty before any run, refused for a strategy not made by make_cuda_fused, and a run of
/// one object leaves another's record as it was. The first two need no device.
TEST(GpuStrategies, FusedKernelRecordIsPerObject) {
  const auto automatic = gpu::make_cuda_fused(gpu::FusedKernelPath::automatic);
  const auto mma = gpu::make_cuda_fused(gpu::FusedKernelPath::mma_sync);
  EXPECT_EQ(fused_kernels_of_last_run(*automatic), "/");
  EXPECT_EQ(fused_kernels_of_last_run(*mma), "/");
  const auto emulated = find_strategy(Backend::cpu_emulation, "fused");
  ASSERT_TRUE(emulated);
  EXPECT_THROW(gpu::last_fused_kernels(*emulated), std::invalid_argument);
  XL_REQUIRE_DEVICE();
  Case c{"fused-record", gaussian(256, 1024, 256, DType::bf16, 4.0, 9, false, true), {}, {}};
  RunRequest req;
  req.problem = &c.pb;
  req.recipe = parse_recipe("bf16/bf16/fp32/fp32");
  req.want_grads = false;
  (void)mma->run(req);
  EXPECT_EQ(fused_kernels_of_last_run(*mma), "mma.sync/");
  EXPECT_EQ(fused_kernels_of_last_run(*automatic), "/");
  req.want_grads = true;
  (void)automatic->run(req);
  EXPECT_EQ(fused_kernels_of_last_run(*automatic),
            fused_wgmma_device() ? "wgmma/wgmma" : "mma.sync/mma.sync");
  EXPECT_EQ(fused_kernels_of_last_run(*mma), "mma.sync/");
}

/// The fused strategy's two kernel paths — wgmma with TMA (sm_90a) and mma.sync (every device, the
/// only one for unaligned shapes) — for forward and backward.
/// Forward: both fold the same tree (gpu/fused_plan.hpp), so loss and lse must agree bit for bit,
/// provided the two tensor-core instructions give the same fp32 dot products over D in the same k
/// order (which each backward's recompute relies on too: its z must equal the forward's).
/// Backward: the wgmma kernel (tiles 128 × 256, wgmma m64n64k16 gradient GEMMs with transposed
/// operands) and the mma.sync one (128 × 128) sum dH, dW and db in different orders, so each is
/// held to the a-priori bound and to 2× its CPU emulation's error (check_run), and the test prints
/// how far apart the two are. Shapes where the wgmma kernels apply, with N, V and D off their tile
/// multiples (TMA's zero fill at the edges; D = 72 and 96 end in a partial slice of 64), every
/// loss option, bias and ignored rows, bf16 and fp16, fp32 and bf16 accumulators, per-token
/// upstream gradients. On an sm_90a device the automatic path must have taken wgmma for both.
/// Case 3 (fp32 accumulator, no bias, no option) takes the wgmma forward's plain fold, which the
/// mma.sync kernel never does: its equality checks that the plain fold drops only identities.
/// The automatic path is the registry's fused strategy; the mma.sync one a strategy made with
/// FusedKernelPath::mma_sync (gpu/cuda/fused/fused.hpp).
TEST(GpuStrategies, FusedKernelPathsAgree) {
  XL_REQUIRE_DEVICE();
  const auto fused = find_strategy(Backend::cuda, "fused");
  ASSERT_TRUE(fused);
  const auto fused_mma = gpu::make_cuda_fused(gpu::FusedKernelPath::mma_sync);
  const bool sm90 = fused_wgmma_device();
  std::vector<LossSpec> specs(3);
  specs[1].label_smoothing = 0.1;
  specs[1].z_loss = 1e-4;
  specs[2].softcap = 20.0;
  specs[2].logit_scale = 1.25;
  specs[2].reduction = Reduction::none;
  int k = 0;
  for (const auto& [N, V, D] : std::vector<std::array<std::int64_t, 3>>{
           {300, 2000, 96}, {256, 1024, 256}, {129, 257, 72}}) {
    for (const char* rn : {"bf16/bf16/fp32/bf16", "bf16/bf16/bf16/bf16", "fp16/fp16/fp32/fp32"}) {
      const Recipe r = parse_recipe(rn);
      const LossSpec& sp = specs[static_cast<std::size_t>(k % 3)];
      Case c{
          "fused-fwd-kernels-" + std::to_string(k),
          gaussian(N, V, D, r.input, r.input == DType::fp16 ? 2.0 : 4.0, 71 + k, k % 2 == 0, true),
          sp, sp.reduction == Reduction::none ? random_upstream(N, 5 + k) : std::vector<double>{}};
      ++k;
      const std::string ctx = describe(c, r, "fused", 0);
      const ReferenceResult ref = reference_for(c);
      RunRequest req;
      req.problem = &c.pb;
      req.spec = c.spec;
      req.recipe = r;
      req.upstream = c.upstream;
      check_run(c, ref, *fused, r, 1);
      const StrategyOutputs a = fused->run(req);
      const std::string path = gpu::last_fused_kernels(*fused).forward;
      if (sm90) {
        EXPECT_EQ(path, "wgmma") << ctx;
        EXPECT_EQ(std::string(gpu::last_fused_kernels(*fused).backward), "wgmma") << ctx;
      }
      check_run(c, ref, *fused_mma, r, 1);
      const StrategyOutputs b = fused_mma->run(req);
      EXPECT_EQ(std::string(gpu::last_fused_kernels(*fused_mma).forward), "mma.sync") << ctx;
      EXPECT_EQ(std::string(gpu::last_fused_kernels(*fused_mma).backward), "mma.sync") << ctx;
      // How far apart the two backwards are, relative to the largest reference entry.
      auto rel = [](const auto& x, const auto& y, const auto& exact) {
        double d = 0.0, m = 0.0;
        for (std::size_t k = 0; k < x.size() && k < y.size(); ++k)
          d = std::max(d, std::fabs(x[k] - y[k]));
        for (const double v : exact) m = std::max(m, std::fabs(v));
        return m > 0.0 ? d / m : d;
      };
      std::cout << "[ note ] " << ctx << ": " << path
                << " vs mma.sync backward: max |ΔdH|/max|dH| = " << rel(a.dH, b.dH, ref.dH)
                << ", max |ΔdW|/max|dW| = " << rel(a.dW, b.dW, ref.dW) << "\n";
      EXPECT_TRUE(same_bits(a.loss, b.loss))
          << ctx << ": loss differs between " << path << " and mma.sync";
      EXPECT_TRUE(same_bits(a.lse, b.lse))
          << ctx << ": lse differs between " << path << " and mma.sync";
    }
  }
}

/// Repeat runs give the same bits in every output. Fused: loss and lse come from a fixed merge
/// order, and the additions into dH, dW and db take turns in increasing vocabulary tile / token
/// block (gpu/cuda/fused/backward.cuh); chunked: cuBLAS GEMMs (bitwise reproducible on one device
/// and toolkit, per cuBLAS's documentation) and row kernels without atomics, chunks added in
/// order. The problem (4480 × 4096 × 256) has 35 token blocks: several raster groups on each
/// fused kernel path (groups of 8 and 16 token blocks) with a partial last group, and about four
/// waves of backward tiles (560 wgmma tiles, 1120 mma.sync tiles on 132 SMs); every 7th row is
/// ignored and two whole token blocks (9, and 33 in the last group) are ignored — their tiles add
/// nothing but must pass their turns on, or the next token block's tiles would wait forever.
/// With and without a bias (db's turns). Both runs are also checked against the reference.
TEST(GpuStrategies, RepeatRunsAreBitIdentical) {
  XL_REQUIRE_DEVICE();
  for (const bool bias : {true, false}) {
    Problem g = gaussian(4480, 4096, 256, DType::bf16, 6.0, 3, bias, true);
    std::vector<std::int64_t> t = g.targets;
    for (const std::int64_t block : {9, 33})
      for (std::int64_t i = 128 * block; i < 128 * (block + 1); ++i)
        t[static_cast<std::size_t>(i)] = -100;
    Case c{"repeat-runs",
           Problem::linear(std::move(g.H), std::move(g.W), std::move(g.bias), std::move(t), -100,
                           bias ? "repeat-runs-bias" : "repeat-runs"),
           {},
           {}};
    const ReferenceResult ref = reference_for(c);
    auto check = [&](const std::string& label, const Strategy& s, const Recipe& r, RunRequest req) {
      SCOPED_TRACE(label + ", recipe " + r.name() + (bias ? ", bias" : ", no bias"));
      req.problem = &c.pb;
      req.recipe = r;
      const StrategyOutputs a = s.run(req), b = s.run(req);
      expect_same_outputs(a, b, label + " repeat");
      EXPECT_EQ(a.db.size(), bias ? static_cast<std::size_t>(c.pb.V) : 0u);
      for (const StrategyOutputs* o : {&a, &b}) {
        const RunAssessment as =
            assess_run(c.pb, c.spec, r, s.arithmetic(r), *o, ref, policy_by_name("default"), 1);
        EXPECT_EQ(as.verdict.disposition, Disposition::passed)
            << as.verdict.output << ": " << as.verdict.reason;
      }
    };
    for (const char* recipe : {"bf16/bf16/fp32/fp32", "bf16/bf16/fp32/bf16"}) {
      const Recipe r = parse_recipe(recipe);
      for_each_fused_kernel_path([&](const char* path, const Strategy& fused) {
        check(std::string("fused, path ") + path, fused, r, RunRequest{});
        if (std::string(path) == "mma.sync") {
          EXPECT_EQ(fused_kernels_of_last_run(fused), "mma.sync/mma.sync");
        } else if (fused_wgmma_device()) {
          EXPECT_EQ(fused_kernels_of_last_run(fused), "wgmma/wgmma");
        }
      });
      const auto chunked = find_strategy(Backend::cuda, "chunked");
      ASSERT_TRUE(chunked);
      RunRequest chunks;  // five chunks: dW and db added over them
      chunks.chunk_tokens = 1024;
      check("chunked, 5 chunks", *chunked, r, chunks);
    }
  }
}

/// N·V past 2^31 (17000 × 128256, D = 64) in one fused launch, on each kernel path (on sm_90 the
/// automatic path must be the wgmma kernels, so both are covered): every token row identical,
/// targets the last vocabulary entry; loss and lse of every row must equal row 0's bit for bit
/// (same arithmetic per row, no atomics), and dH rows must be finite and within the summation-order
/// bound of row 0 (|Δ| ≤ 2·γ_V·Σ_j|dz_j||W_jd| ≤ 2·γ_V·2g·max|W|, γ_V = V·u32/(1 − V·u32): the
/// rows' sums in different orders, a bound that does not assume the additions' turns).
TEST(GpuStrategies, FusedIndexingPast2Pow31) {
  XL_REQUIRE_DEVICE();
  if (device().memory_gib < 24) GTEST_SKIP() << "needs about 20 GiB of device memory";
  const Problem p = identical_rows_past_2pow31(64);
  const std::int64_t N = p.N, V = p.V, D = p.D;
  double wmax = 0.0;
  for (std::int64_t k = 0; k < V * D; ++k) wmax = std::max(wmax, std::fabs(p.W.get(k)));
  const double u = unit_roundoff(DType::fp32);
  const double gamma = V * u / (1.0 - V * u);
  const double tol = 2.0 * gamma * 2.0 * (1.0 / N) * wmax;
  for_each_fused_kernel_path([&](const char* path, const Strategy& s) {
    RunRequest req;
    req.problem = &p;
    req.recipe = parse_recipe("bf16/bf16/fp32/fp32");
    const StrategyOutputs o = s.run(req);
    const std::string kernels = fused_kernels_of_last_run(s);
    SCOPED_TRACE(std::string("path ") + path + ", kernels " + kernels);
    if (fused_wgmma_device() && std::string(path) == "automatic") {
      EXPECT_EQ(kernels, "wgmma/wgmma");
    }
    ASSERT_EQ(o.loss.size(), static_cast<std::size_t>(N));
    ASSERT_TRUE(std::isfinite(o.loss[0]) && std::isfinite(o.lse[0]));
    std::int64_t first_bad = -1;
    for (std::int64_t i = 0; i < N && first_bad < 0; ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (std::memcmp(&o.loss[k], &o.loss[0], 8) != 0 || std::memcmp(&o.lse[k], &o.lse[0], 8) != 0)
        first_bad = i;
      for (std::int64_t d = 0; d < D; ++d) {
        const double v = o.dH[k * D + d], v0 = o.dH[d];
        if (!std::isfinite(v) || std::fabs(v - v0) > tol) first_bad = i;
      }
    }
    EXPECT_EQ(first_bad, -1) << "token row " << first_bad << " differs from row 0";
    for (double v : o.dW) ASSERT_TRUE(std::isfinite(v)) << "non-finite dW";
  });
}

/// V·D past 2^31 (W of 524416 × 4096 bf16, 4.3 GB) in one fused run: every W row identical, so
/// every logit of a row is the same value; the target is the last vocabulary row (its W offset
/// is past 2^31 elements). N identical token rows in one token block: N = 2 (the mma.sync
/// kernels: fewer rows than a wgmma tile) and N = 128 (on sm_90 the wgmma kernels). Each dW
/// element then receives exactly one fp32 reduction per hidden slice, of the same products, so
/// every non-target dW row must equal row 0 bit for bit (a 32-bit offset would leave rows as zeros
/// or add into the wrong ones), the target row must be finite and differ, and the loss must be
/// ln V (all logits equal; fp32 accumulator: the sum of V exact ones is exact, lse and loss are
/// two roundings of ≈ |x| + ln V).
TEST(GpuStrategies, FusedWeightsPast2Pow31) {
  XL_REQUIRE_DEVICE();
  if (device().memory_gib < 40) GTEST_SKIP() << "needs about 15 GiB of device memory";
  const std::int64_t D = 4096, V = (std::int64_t{1} << 31) / D + 128;
  ASSERT_GT(V * D, std::int64_t{1} << 31);
  Problem g = make_gaussian_linear(1, 1, D, DType::bf16, 1.0, 77);  // one H row, one W row
  Tensor W(DType::bf16, {V, D}, "W");
  for (std::int64_t j = 0; j < V; ++j)
    std::memcpy(static_cast<char*>(W.data()) + j * D * 2, g.W.data(),
                static_cast<std::size_t>(D * 2));
  const auto s = find_strategy(Backend::cuda, "fused");
  for (const std::int64_t N : {std::int64_t{2}, std::int64_t{128}}) {
    Tensor H(DType::bf16, {N, D}, "H");
    for (std::int64_t i = 0; i < N; ++i)
      std::memcpy(static_cast<char*>(H.data()) + i * D * 2, g.H.data(),
                  static_cast<std::size_t>(D * 2));
    const Problem p =
        Problem::linear(std::move(H), W, std::nullopt,
                        std::vector<std::int64_t>(static_cast<std::size_t>(N), V - 1));
    RunRequest req;
    req.problem = &p;
    req.recipe = parse_recipe("bf16/bf16/fp32/fp32");
    const StrategyOutputs o = s->run(req);
    const std::string kernels = fused_kernels_of_last_run(*s);
    SCOPED_TRACE("N = " + std::to_string(N) + ", kernels " + kernels);
    if (fused_wgmma_device()) {
      EXPECT_EQ(kernels, N >= 128 ? "wgmma/wgmma" : "mma.sync/mma.sync");
    }
    ASSERT_EQ(o.dW.size(), static_cast<std::size_t>(V * D));
    EXPECT_EQ(std::memcmp(&o.loss[0], &o.loss[static_cast<std::size_t>(N - 1)], 8), 0);
    const double x = o.lse[0] - o.loss[0];  // the common logit
    const double u = unit_roundoff(DType::fp32);
    EXPECT_NEAR(o.loss[0], std::log(static_cast<double>(V)),
                4 * u * (std::fabs(x) + std::log(static_cast<double>(V))))
        << "lse " << o.lse[0];
    std::int64_t first_bad = -1;
    for (std::int64_t j = 1; j < V - 1 && first_bad < 0; ++j)
      if (std::memcmp(&o.dW[static_cast<std::size_t>(j * D)], &o.dW[0], 8 * D) != 0) first_bad = j;
    EXPECT_EQ(first_bad, -1) << "dW row " << first_bad << " (offset " << first_bad * D
                             << ") differs from row 0";
    bool differs = false;
    for (std::int64_t d = 0; d < D; ++d) {
      const double v = o.dW[static_cast<std::size_t>((V - 1) * D + d)];
      ASSERT_TRUE(std::isfinite(v)) << "target dW row, column " << d;
      differs = differs || v != o.dW[static_cast<std::size_t>(d)];
    }
    EXPECT_TRUE(differs) << "the target row's dW equals the others'";
  }
}

// ---- vocab_parallel on NCCL (gpu/cuda/vocab_parallel.cu) ---------------------------------------
#ifdef XENTLAB_HAVE_NCCL

int cuda_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/// The rank counts the vocab_parallel tests run: 1 (the whole code path with one NCCL rank), and
/// every device of the machine when it has more than one.
std::vector<int> rank_counts() {
  std::vector<int> p{1};
  if (cuda_devices() > 1) p.push_back(cuda_devices());
  return p;
}

std::unique_ptr<Strategy> vocab_parallel() {
  return gpu::make_cuda_vocab_parallel();
}

/// The linked NCCL, printed; ncclBfloat16 (the bf16 accumulator's all-reduce) needs NCCL ≥ 2.10.
/// No device needed.
TEST(GpuVocabParallel, NcclIsLinked) {
  const int v = gpu::nccl_version();
  std::cout << "[ note ] NCCL version " << v / 10000 << "." << (v / 100) % 100 << "." << v % 100
            << " (ncclGetVersion " << v << ")\n";
  EXPECT_GE(v, 21000) << "NCCL older than 2.10 has no ncclBfloat16";
  const auto s = vocab_parallel();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->name(), "vocab_parallel");
  EXPECT_EQ(s->backend(), Backend::cuda);
}

/// More ranks than devices: not_supported naming both numbers, through the check and through
/// run() (InputError); as many ranks as devices are accepted. A budget below one token's needs
/// and a rank without a vocabulary row (P > V) are InputErrors naming the cause.
TEST(GpuVocabParallel, RefusalsNameTheCause) {
  XL_REQUIRE_DEVICE();
  const int n = cuda_devices();
  ASSERT_GT(n, 0);
  EXPECT_TRUE(gpu::vocab_parallel_ranks_supported(n).ok());
  EXPECT_TRUE(gpu::vocab_parallel_ranks_supported(0).ok());  // ≤ 0 means one rank
  const Status st = gpu::vocab_parallel_ranks_supported(n + 1);
  EXPECT_EQ(st.code, Status::Code::not_supported);
  EXPECT_NE(st.message.find(std::to_string(n + 1) + " ranks"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("has " + std::to_string(n)), std::string::npos) << st.message;
  const auto s = vocab_parallel();
  const Problem p = gaussian(64, 4096, 64, DType::bf16, 1.0, 23, false, false);
  RunRequest req;
  req.problem = &p;
  req.recipe = parse_recipe("bf16/bf16/fp32/bf16");
  req.ranks = n + 1;
  try {
    (void)s->run(req);
    ADD_FAILURE() << "ran with " << n + 1 << " ranks on " << n << " devices";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("has " + std::to_string(n)), std::string::npos)
        << e.what();
  }
  req.ranks = 1;
  req.memory_budget = 1024;
  try {
    (void)s->run(req);
    ADD_FAILURE() << "ran with a 1024-byte budget";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  }
  if (n > 1) {
    const Problem tiny = make_gaussian_logits(3, 1, DType::fp32, 1.0, 5);  // V = 1 < P
    RunRequest t;
    t.problem = &tiny;
    t.recipe = parse_recipe("fp32");
    t.ranks = n;
    try {
      (void)s->run(t);
      ADD_FAILURE() << "ran " << n << " ranks over a vocabulary of 1";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("own no row"), std::string::npos) << e.what();
    }
  }
}

/// Whether chunked's dH GEMM writes the grad dtype directly: its operands (the input dtype when
/// the logits are stored in it, fp32 otherwise) are 16-bit and grad is that dtype
/// (gemm_output_direct). vocab_parallel's dH GEMM always writes fp32 (it is all-reduced before its
/// rounding), so only where chunked's writes fp32 too are the two the same GEMM.
bool chunked_dH_direct_16bit(const Recipe& r) {
  const DType op = r.logits == r.input ? r.input : DType::fp32;
  return op != DType::fp32 && r.grad == op;
}

/// One rank: the declared arithmetic is chunked's operation for operation (the all-reduces of one
/// rank copy), so loss, lse, the reduced loss, dz, dW and db equal the CUDA chunked strategy's bit
/// for bit with the same chunks; dH too where both dH GEMMs write fp32. Where chunked writes a
/// 16-bit dH directly, the two are different cuBLAS calls: each is held to the a-priori bound
/// against the reference (check_run). Every option together, per-token upstream gradients, bias,
/// ignored rows, several chunks and one.
TEST(GpuVocabParallel, OneRankEqualsChunked) {
  XL_REQUIRE_DEVICE();
  const auto vp = vocab_parallel();
  const auto chunked = find_strategy(Backend::cuda, "chunked");
  ASSERT_TRUE(vp && chunked);
  LossSpec none;
  none.reduction = Reduction::none;
  none.label_smoothing = 0.05;
  none.z_loss = 1e-4;
  none.softcap = 20.0;
  none.logit_scale = 1.25;
  const Problem p = gaussian(100, 507, 123, DType::bf16, 4.0, 17, true, true);
  const Problem pf = gaussian(70, 300, 40, DType::fp32, 2.0, 29, true, true);
  const Problem lp = make_gaussian_logits(50, 999, DType::bf16, 3.0, 19);
  struct Run {
    const Problem* pb;
    const char* recipe;
  };
  std::vector<Run> runs;
  for (const char* rn : {"bf16/fp32/fp32/bf16", "bf16/bf16/fp32/fp32", "bf16/bf16/bf16/bf16",
                         "bf16/fp16/fp16/fp16", "bf16/bf16/fp32/bf16"}) {
    runs.push_back({&p, rn});
    runs.push_back({&lp, rn});
  }
  runs.push_back({&pf, "fp32"});
  for (const LossSpec& spec : {LossSpec{}, none})
    for (const Run& run : runs)
      for (const std::int64_t chunk : {std::int64_t{16}, run.pb->N}) {
        RunRequest req;
        req.problem = run.pb;
        req.spec = spec;
        req.recipe = parse_recipe(run.recipe);
        if (spec.reduction == Reduction::none) req.upstream = random_upstream(run.pb->N, 5);
        req.chunk_tokens = chunk;
        req.ranks = 1;
        const std::string ctx = run.pb->describe() + " recipe " + run.recipe + " spec {" +
                                spec.describe() + "} chunk_tokens " + std::to_string(chunk);
        const StrategyOutputs a = vp->run(req), b = chunked->run(req);
        EXPECT_TRUE(same_bits(a.loss, b.loss)) << ctx << " loss";
        EXPECT_TRUE(same_bits(a.lse, b.lse)) << ctx << " lse";
        EXPECT_TRUE(same_bits({a.reduced_loss}, {b.reduced_loss})) << ctx << " reduced loss";
        EXPECT_TRUE(same_bits(a.dz, b.dz)) << ctx << " dz";
        EXPECT_TRUE(same_bits(a.dW, b.dW)) << ctx << " dW";
        EXPECT_TRUE(same_bits(a.db, b.db)) << ctx << " db";
        if (!run.pb->is_linear() || !chunked_dH_direct_16bit(req.recipe)) {
          EXPECT_TRUE(same_bits(a.dH, b.dH)) << ctx << " dH";
        } else {
          Case c{"vp-vs-chunked", *run.pb, spec, req.upstream};
          check_run(c, reference_for(c), *vp, req.recipe, chunk, 1);
        }
        EXPECT_GT(a.peak_extra_bytes, 0) << ctx;
      }
}

/// Every loss option (as LossOptions), with and without bias, linear and logits problems, three
/// recipes: within the a-priori bound of the certified reference, for one rank and for every
/// device of the machine (P > 1: uneven shards since 507 and 1001 are odd), and, with P ranks, a
/// row whose maximum and target lie in different shards.
TEST(GpuVocabParallel, LossOptionsWithinBound) {
  XL_REQUIRE_DEVICE();
  const auto vp = vocab_parallel();
  const std::vector<LossSpec> specs = loss_option_specs();
  const std::vector<Recipe> recipes = {parse_recipe("bf16/fp32/fp32/bf16"),
                                       parse_recipe("bf16/bf16/fp32/bf16"),
                                       parse_recipe("bf16/bf16/bf16/bf16")};
  for (const int P : rank_counts()) {
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const LossSpec& sp = specs[k];
      for (bool bias : {false, true}) {
        Problem p = gaussian(61, 507, 123, DType::bf16, 4.0, 11 + k, bias, true);
        if (sp.ignore_index != -100)
          for (auto& t : p.targets)
            if (t == -100) t = sp.ignore_index;
        Case c{
            "vp-options-" + std::to_string(k) + (bias ? "-bias" : ""), std::move(p), sp,
            sp.reduction == Reduction::none ? random_upstream(61, 99 + k) : std::vector<double>{}};
        const ReferenceResult ref = reference_for(c);
        for (const Recipe& r : recipes) check_run(c, ref, *vp, r, 16, P);
      }
      Problem lp = make_gaussian_logits(37, 1001, DType::bf16, 3.0, 21 + k);
      for (std::int64_t i = 2; i < lp.N; i += 5)
        lp.targets[static_cast<std::size_t>(i)] = sp.ignore_index;
      Case lc{"vp-options-logits-" + std::to_string(k), std::move(lp), sp,
              sp.reduction == Reduction::none ? random_upstream(37, 7 + k) : std::vector<double>{}};
      const ReferenceResult ref = reference_for(lc);
      for (const Recipe& r : recipes) check_run(lc, ref, *vp, r, 16, P);
    }
    if (P > 1) {
      // Row 0: its maximum in the last shard, its target in the first; row 1 the reverse.
      const std::int64_t V = 10 * P + 3;
      std::vector<double> r0(static_cast<std::size_t>(V), 0.0), r1 = r0;
      r0[static_cast<std::size_t>(V - 1)] = 8.0;
      r0[1] = 2.0;
      r1[0] = 8.0;
      r1[static_cast<std::size_t>(V - 2)] = 2.0;
      for (const LossSpec& sp : {LossSpec{}, specs[6]}) {
        const Problem lp = testing::logits_problem(DType::fp32, {r0, r1}, {1, V - 2});
        for (const Problem& q : {lp, testing::linear_from_logits(lp)}) {
          Case c{"vp-split-max-target", q, sp,
                 sp.reduction == Reduction::none ? random_upstream(2, 3) : std::vector<double>{}};
          check_run(c, reference_for(c), *vp, parse_recipe("fp32"), 1, P);
        }
      }
    }
  }
}

/// Every target ignored (shared case C03): loss 0, every gradient exactly 0, mean NaN by default,
/// sum 0; for each rank count.
TEST(GpuVocabParallel, AllIgnoredIsExact) {
  XL_REQUIRE_DEVICE();
  const auto vp = vocab_parallel();
  std::vector<std::vector<double>> rows(5, std::vector<double>(10));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 10; ++j) rows[i][j] = static_cast<float>(0.1 * (i + 1) * (j - 4.5));
  const Problem lp = testing::logits_problem(DType::fp32, rows, std::vector<std::int64_t>(5, -100));
  const Problem pl = testing::linear_from_logits(lp);
  for (const int P : rank_counts())
    for (const Problem* p : {&lp, &pl})
      for (int variant = 0; variant < 2; ++variant) {
        RunRequest req;
        req.problem = p;
        req.recipe = parse_recipe("fp32");
        req.chunk_tokens = 2;
        req.ranks = P;
        if (variant == 1) req.spec.reduction = Reduction::sum;
        const StrategyOutputs o = vp->run(req);
        const std::string ctx = p->describe() + " ranks " + std::to_string(P);
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

/// Repeat runs give every output bit for bit (fixed reduction orders; NCCL's all-reduce order is
/// fixed for a communicator and a message size), for each rank count, on a medium problem with
/// bias, ignored rows and several chunks; and a repeat after another rank count's run too.
TEST(GpuVocabParallel, RepeatRunsBitForBit) {
  XL_REQUIRE_DEVICE();
  const auto vp = vocab_parallel();
  const Problem pb = gaussian(256, 2000, 64, DType::bf16, 3.0, 5, true, true);
  for (const char* rn : {"bf16/bf16/fp32/fp32", "bf16/bf16/bf16/bf16"}) {
    RunRequest req;
    req.problem = &pb;
    req.recipe = parse_recipe(rn);
    req.chunk_tokens = 64;
    std::vector<StrategyOutputs> first;
    for (const int P : rank_counts()) {
      req.ranks = P;
      first.push_back(vp->run(req));
      expect_same_outputs(first.back(), vp->run(req),
                          std::string(rn) + " ranks " + std::to_string(P) + " repeat");
    }
    for (std::size_t k = 0; k < first.size(); ++k) {
      req.ranks = rank_counts()[k];
      expect_same_outputs(
          first[k], vp->run(req),
          std::string(rn) + " ranks " + std::to_string(req.ranks) + " after the other rank counts");
    }
  }
}

#endif  // XENTLAB_HAVE_NCCL

}  // namespace
}  // namespace xentlab

// The judge's check of a device run against its CPU emulation (judge/emulation_check.hpp): the
// limit is baseline_factor·(emulation's max|e|) + k·8·u(out)·max|ref| (judge/policy.hpp
// judge_against_baseline; the floor's derivation is in the header). Expected verdicts follow from
// that formula on hand-made errors. And the judge of a run checked on sampled rows
// (judge/sampled_check.hpp, the bench's): emulated strategies pass, corrupted outputs do not.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "datasets/synthetic.hpp"
#include "gpu/registry.hpp"
#include "judge/bounds.hpp"
#include "judge/emulation_check.hpp"
#include "judge/output_verdict.hpp"
#include "judge/policy.hpp"
#include "judge/sampled_check.hpp"
#include "judge/stats.hpp"
#include "numerics/dtype.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"

namespace xentlab {
namespace {

// Statistics of ref + e (every element off by e) against ref = {1, 2, 3}, returned in fp32.
ErrorStats off_by(double e) {
  const std::vector<double> ref{1.0, 2.0, 3.0};
  std::vector<double> out(ref);
  for (double& x : out) x += e;
  return compute_error_stats(out.data(), ref.data(), 3, DType::fp32);
}

RunAssessment with_loss_error(double e) {
  RunAssessment a;
  a.loss = off_by(e);
  return a;
}

TEST(Judge, EmulationCheckFloorIsEightUnitRoundoffsOfTheLargestReference) {
  // 8 · 2^-24 · max|ref| = 8 · 2^-24 · 3.
  EXPECT_DOUBLE_EQ(emulation_check_floor(off_by(0.0)), 8.0 * 0x1p-24 * 3.0);
}

TEST(Judge, AssessedOutputsInAFixedOrder) {
  RunAssessment a;
  a.has_dH = true;
  a.has_db = true;
  std::vector<std::string> names;
  for (const auto& [name, stats] : assessed_outputs(a)) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"loss", "lse", "reduced", "dH", "db"}));
}

TEST(Judge, DeviceRunHeldToItsEmulation) {
  // Errors are powers of two, exact in fp32 at 1, 2 and 3. Policy default: factor 2, k = 1.
  const Policy policy = policy_by_name("default");
  const RunAssessment emulation = with_loss_error(0x1p-22);
  // Limit: 2 · 2^-22 + 8 · 2^-24 · 3 = 2^-21 + 3 · 2^-21 = 2^-19.
  const RunAssessment close = with_loss_error(0x1p-20);
  EXPECT_EQ(judge_against_emulation(close, emulation, policy).disposition, Disposition::passed);
  const RunAssessment far = with_loss_error(0x1p-18);
  const Verdict v = judge_against_emulation(far, emulation, policy);
  EXPECT_EQ(v.disposition, Disposition::incorrect);
  EXPECT_EQ(v.output, "loss");
  EXPECT_DOUBLE_EQ(v.bound, 0x1p-19);
  EXPECT_DOUBLE_EQ(v.error, 0x1p-18);
  // A device verdict that did not pass is returned as it is.
  RunAssessment failed = far;
  failed.verdict = verdict_not_run(Disposition::failed, "kernel failed");
  EXPECT_EQ(judge_against_emulation(failed, emulation, policy).reason, "kernel failed");
}

// One output's disposition from its bound verdict and its baseline-relative check (verify's):
// either check that judged and did not pass makes it incorrect; with neither judging (the
// finiteness check alone), it is not judged.
TEST(Judge, OutputDispositionFromBoundAndBaseline) {
  Verdict passed, incorrect;
  incorrect.disposition = Disposition::incorrect;
  OutputChecks c;
  c.bound = passed;
  EXPECT_EQ(judge_output(c), Disposition::passed);  // the bound alone
  c.baseline_judged = true;
  EXPECT_EQ(judge_output(c), Disposition::passed);  // both
  c.baseline = Disposition::incorrect;
  EXPECT_EQ(judge_output(c), Disposition::incorrect);
  c.bound_checked = false;  // the baseline alone
  EXPECT_EQ(judge_output(c), Disposition::incorrect);
  c.baseline = Disposition::passed;
  EXPECT_EQ(judge_output(c), Disposition::passed);
  c.baseline_judged = false;  // neither: finiteness only
  EXPECT_EQ(judge_output(c), std::nullopt);
  c.bound = incorrect;  // a non-finite value where the reference is finite
  EXPECT_EQ(judge_output(c), Disposition::incorrect);
  c.bound_checked = true;
  c.baseline_judged = true;
  EXPECT_EQ(judge_output(c), Disposition::incorrect);  // the bound fails, the baseline passes
}

// The fused kernel splits each row's vocabulary into ranges by its token count
// (gpu/plans/fused_plan.hpp): a run on N tokens judged on a sub-problem of its rows is bounded with
// the run's N (run_tokens), which changes the declared vocabulary constant where N is large enough
// to shrink the ranges; a blocked declaration does not depend on N.
TEST(SampledCheck, RunTokensReachTheVocabularyConstant) {
  const Problem pb = make_gaussian_linear(8, 4096, 16, DType::bf16, 2.0, 3);
  LossSpec spec;
  ReferenceOptions ro;
  ro.want_dW = false;
  const ReferenceResult ref = compute_reference(pb, spec, ro);
  const Recipe recipe = parse_recipe("bf16/bf16/fp32/bf16");
  const DeclaredArithmetic fused =
      make_strategy(Backend::cpu_emulation, "fused")->arithmetic(recipe);
  const DeclaredArithmetic blocked =
      make_strategy(Backend::cpu_emulation, "chunked")->arithmetic(recipe);
  const std::int64_t big = std::int64_t{1} << 22;  // ranges limited by the kernel's row states
  EXPECT_NE(bounds_for_reference(pb, spec, recipe, fused, ref, 0, big).c_vocab,
            bounds_for_reference(pb, spec, recipe, fused, ref).c_vocab);
  EXPECT_EQ(bounds_for_reference(pb, spec, recipe, blocked, ref, 0, big).c_vocab,
            bounds_for_reference(pb, spec, recipe, blocked, ref).c_vocab);
  // 0 means the problem's own N.
  EXPECT_EQ(bounds_for_reference(pb, spec, recipe, fused, ref, 0, pb.N).c_vocab,
            bounds_for_reference(pb, spec, recipe, fused, ref).c_vocab);
}

// The bench's check (judge/sampled_check.hpp): a full run of N tokens judged on S sampled rows
// against the reference of the sub-problem of those rows, dH at the full run's gradient scale 1/N,
// dW from a second run on the sub-problem. Every emulated strategy passes; the errors are the
// normwise relative errors the bench reported before it judged (the same doubles); and the judge
// finds the wrong results a bench can meet: dH judged at the sub-problem's scale (a scaling bug),
// one dW entry moved by twice its bound, outputs of the wrong size.
TEST(SampledCheck, SampledRowsJudgedAsTheAudit) {
  const std::int64_t N = 48, V = 300, D = 24;
  const Problem pb = make_gaussian_linear(N, V, D, DType::bf16, 2.0, 7);
  const std::vector<std::int64_t> rows = sample_rows(N, 8, 1);
  const auto S = static_cast<std::int64_t>(rows.size());
  ASSERT_EQ(S, 8);
  Tensor H(DType::bf16, {S, D}, "H (sampled rows)");
  std::vector<std::int64_t> t;
  for (std::int64_t q = 0; q < S; ++q) {
    const std::int64_t i = rows[static_cast<std::size_t>(q)];
    for (std::int64_t d = 0; d < D; ++d) H.set(q * D + d, pb.H.get(i * D + d));
    t.push_back(pb.targets[static_cast<std::size_t>(i)]);
  }
  const Problem sub = Problem::linear(std::move(H), pb.W, std::nullopt, t);
  LossSpec spec;
  ReferenceOptions ro;
  ro.vocab_rows = sample_rows(V, 64, 2);
  ro.want_db = false;
  const ReferenceResult ref = compute_reference(sub, spec, ro);
  const auto J = static_cast<std::int64_t>(ref.vocab_rows.size());
  const Recipe recipe = parse_recipe("bf16/bf16/fp32/bf16");
  const Policy policy = policy_by_name("audit");
  StatsOptions plain;  // the bench's former statistics: no bounds, no histograms
  plain.keep_histograms = false;
  auto normwise = [&](const std::vector<double>& out, const double* r, DType dt) {
    return compute_error_stats(out.data(), r, static_cast<std::int64_t>(out.size()), dt, nullptr,
                               plain)
        .normwise_rel_err;
  };
  for (const auto& s : make_strategies(Backend::cpu_emulation)) {
    const std::string name = s->name();
    const DeclaredArithmetic arith = s->arithmetic(recipe);
    RunRequest req;
    req.problem = &pb;
    req.spec = spec;
    req.recipe = recipe;
    req.chunk_tokens = 16;
    const StrategyOutputs full = s->run(req);
    req.problem = &sub;
    req.chunk_tokens = 3;
    const StrategyOutputs subrun = s->run(req);
    SampledOutputs so;
    for (std::int64_t i : rows) {
      so.loss.push_back(full.loss[static_cast<std::size_t>(i)]);
      so.lse.push_back(full.lse[static_cast<std::size_t>(i)]);
      so.dH.insert(so.dH.end(), full.dH.begin() + i * D, full.dH.begin() + (i + 1) * D);
    }
    for (std::int64_t j : ref.vocab_rows)
      so.dW.insert(so.dW.end(), subrun.dW.begin() + j * D, subrun.dW.begin() + (j + 1) * D);
    so.reduced_loss = subrun.reduced_loss;
    so.loss_dtype = recipe.accum;
    so.grad_dtype = recipe.grad;
    so.dH_scale = double(S) / double(N);
    const RunAssessment ra = assess_sampled_run(sub, spec, recipe, arith, so, ref, policy);
    EXPECT_EQ(ra.verdict.disposition, Disposition::passed) << name << ": " << ra.verdict.reason;
    ASSERT_TRUE(ra.has_dH && ra.has_dW) << name;
    // The bench's former formulas, the same doubles.
    EXPECT_EQ(ra.loss.normwise_rel_err, normwise(so.loss, ref.loss.data(), recipe.accum)) << name;
    EXPECT_EQ(ra.lse.normwise_rel_err, normwise(so.lse, ref.lse.data(), recipe.accum)) << name;
    EXPECT_EQ(ra.reduced_loss.normwise_rel_err,
              std::fabs(so.reduced_loss - ref.reduced_loss) / std::fabs(ref.reduced_loss))
        << name;
    std::vector<double> ref_dH(ref.dH.begin(), ref.dH.end());
    for (double& x : ref_dH) x *= double(S) / double(N);
    EXPECT_EQ(ra.dH.normwise_rel_err, normwise(so.dH, ref_dH.data(), recipe.grad)) << name;
    EXPECT_EQ(ra.dW.normwise_rel_err, normwise(so.dW, ref.dW.data(), recipe.grad)) << name;
    EXPECT_GT(ra.dH.normwise_rel_err, 0.0) << name;  // bf16 gradients: not exact

    // A scaling bug: the full run's dH (scale 1/N) held to the sub-problem's (1/S), N/S = 6×.
    SampledOutputs unscaled = so;
    unscaled.dH_scale = 1.0;
    const Verdict v1 = assess_sampled_run(sub, spec, recipe, arith, unscaled, ref, policy).verdict;
    EXPECT_EQ(v1.disposition, Disposition::incorrect) << name;
    EXPECT_EQ(v1.output, "dH") << name;
    // One dW entry moved by twice its bound.
    SampledOutputs moved = so;
    moved.dW[5] = ref.dW[5] + 2 * ra.bounds.dW[5];
    const Verdict v2 = assess_sampled_run(sub, spec, recipe, arith, moved, ref, policy).verdict;
    EXPECT_EQ(v2.disposition, Disposition::incorrect) << name;
    EXPECT_EQ(v2.output, "dW") << name;
    EXPECT_EQ(v2.index, 5) << name;
  }
  // Outputs of the wrong size, and a scale that is not a positive number, are input errors.
  SampledOutputs bad;
  bad.loss.assign(static_cast<std::size_t>(S), 0.0);
  bad.lse.assign(static_cast<std::size_t>(S), 0.0);
  bad.dW.assign(static_cast<std::size_t>(J * D - 1), 0.0);
  const DeclaredArithmetic arith = make_strategies(Backend::cpu_emulation)[0]->arithmetic(recipe);
  EXPECT_THROW(assess_sampled_run(sub, spec, recipe, arith, bad, ref, policy), InputError);
  bad.dW.clear();
  bad.dH_scale = 0.0;
  EXPECT_THROW(assess_sampled_run(sub, spec, recipe, arith, bad, ref, policy), InputError);
}

}  // namespace
}  // namespace xentlab

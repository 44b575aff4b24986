#pragma once
// Helpers of the tests of the strategies that split the vocabulary (the emulations of
// vocab_parallel and vocab_chunked: tests/gpu/emulation/vocab_parallel.cpp, vocab_chunked.cpp;
// the device's vocab_chunked: tests/gpu/vocab_chunked.cpp): every loss option as a variant, a run
// judged against the reference within the a-priori bound of its declaration, and a head whose dH
// tells the order of the cross-split additions apart.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "datasets/problem.hpp"
#include "judge/bounds_for.hpp"
#include "reference/reference.hpp"

namespace xentlab::testing {

struct SplitVariant {
  std::string name;
  LossSpec spec;
  bool non_uniform_upstream = false;
};

/// Every loss option: ignore_index (every fifth row, and one spec with ignore_index −1), label
/// smoothing, z-loss, softcap, logit scale, reduction none/mean/sum, a non-uniform upstream
/// gradient, and a normaliser.
inline std::vector<SplitVariant> every_loss_option() {
  std::vector<SplitVariant> v;
  LossSpec s;
  v.push_back({"mean", s});
  s.reduction = Reduction::sum;
  v.push_back({"sum", s});
  s = LossSpec{};
  s.reduction = Reduction::none;
  v.push_back({"none+upstream", s, true});
  s = LossSpec{};
  s.label_smoothing = 0.1;
  v.push_back({"smoothing", s});
  s = LossSpec{};
  s.z_loss = 1e-3;
  v.push_back({"z-loss", s});
  s = LossSpec{};
  s.softcap = 5.0;
  v.push_back({"softcap", s});
  s = LossSpec{};
  s.logit_scale = 1.5;
  s.ignore_index = -1;
  s.normalizer = 7;
  v.push_back({"scale+ignore-1+normalizer", s});
  s = LossSpec{};
  s.reduction = Reduction::none;
  s.label_smoothing = 0.05;
  s.z_loss = 1e-4;
  s.softcap = 8.0;
  s.logit_scale = 0.75;
  v.push_back({"all-options+upstream", s, true});
  return v;
}

/// One run's outputs against the reference: passed under "default" where the bounds of its
/// declaration `ar` are meaningful; otherwise (no a-priori guarantee, c·u_accum ≥ 1) every finite
/// bound still holds, and an fp16 accumulator may overflow (reported as a finiteness mismatch).
/// `n_chunks`: the token chunks of its dW accumulation.
inline void expect_within_declared_bound(const Problem& p, const LossSpec& spec, const Recipe& rc,
                                         const DeclaredArithmetic& ar, const StrategyOutputs& out,
                                         const ReferenceResult& ref, std::int64_t n_chunks,
                                         const std::string& what) {
  const RunAssessment ra =
      assess_run(p, spec, rc, ar, out, ref, policy_by_name("default"), n_chunks);
  if (ra.bounds.meaningful) {
    EXPECT_EQ(ra.verdict.disposition, Disposition::passed) << what << ": " << ra.verdict.reason;
    return;
  }
  Policy p1 = policy_by_name("lenient");
  p1.k = 1.0;
  std::vector<JudgedOutput> j{{"loss", &ra.loss, false}, {"lse", &ra.lse, false}};
  if (ra.has_dH) j.push_back({"dH", &ra.dH, false});
  if (ra.has_dW) j.push_back({"dW", &ra.dW, false});
  if (ra.has_dz) j.push_back({"dz", &ra.dz, false});
  const Verdict v = judge(j, p1);
  if (v.disposition != Disposition::passed) {
    EXPECT_TRUE(rc.accum == DType::fp16 && v.reason.find("finiteness") != std::string::npos)
        << what << ": " << v.reason;
  }
}

/// For every loss option (every fifth target ignored), its reference, and every recipe × count:
/// run(problem, variant, reference, upstream, recipe, count, label).
inline void for_every_loss_option(
    const Problem& pb, const std::vector<Recipe>& recipes, const std::vector<int>& counts,
    const std::string& label,
    const std::function<void(const Problem&, const SplitVariant&, const ReferenceResult&,
                             const std::vector<double>&, const Recipe&, int, const std::string&)>&
        run) {
  for (const SplitVariant& var : every_loss_option()) {
    Problem p = pb;
    for (std::size_t i = 0; i < p.targets.size(); i += 5) p.targets[i] = var.spec.ignore_index;
    std::vector<double> upstream;
    if (var.non_uniform_upstream)
      for (std::int64_t i = 0; i < p.N; ++i)
        upstream.push_back(0.25 * static_cast<double>((i % 7) - 3));
    ReferenceOptions ro;
    ro.want_dz = !p.is_linear();
    ro.upstream = upstream;
    const ReferenceResult ref = compute_reference(p, var.spec, ro);
    for (const Recipe& rc : recipes)
      for (const int P : counts)
        run(p, var, ref, upstream, rc, P,
            label + " " + var.name + " P=" + std::to_string(P) + " " + rc.name());
  }
}

/// A one-token linear head whose dH tells the order of vocab_chunked's cross-split dH additions
/// apart, worked by hand: N = 1, V = 4, D = 2, fp32, H = (1, 0), W rows (0, 2^24), (−200, −8),
/// (−200, −8), (−200, −2^27), target 1, label smoothing ε = 1/2 (dH_order_spec). The logits are
/// (0, −200, −200, −200): p = (1, 0, 0, 0) in fp32 (e^−200 underflows), lse = 0, and dz = p − ε/V
/// − (1 − ε)·[j = t] = (0.875, −0.625, −0.125, −0.125), every value exact. dH's first entry is
/// 0 + 125 + 25 + 25 = 175 in any order; its second sums the exact products (14680064, 5, 1,
/// 16777216) of the four splits of one column (vocab_splits = 4): dH_order_sum gives that sum in
/// fp32 from the first split to the last or the reverse, and the two differ.
inline Problem dH_order_problem() {
  Tensor H(DType::fp32, {1, 2}, "H");
  H.set(0, 1.0);
  H.set(1, 0.0);
  Tensor W(DType::fp32, {4, 2}, "W");
  const double w[4][2] = {
      {0.0, 16777216.0}, {-200.0, -8.0}, {-200.0, -8.0}, {-200.0, -134217728.0}};
  for (int j = 0; j < 4; ++j)
    for (int d = 0; d < 2; ++d) W.set(j * 2 + d, w[j][d]);
  return Problem::linear(std::move(H), std::move(W), std::nullopt, {1}, -100, "dH order");
}
inline LossSpec dH_order_spec() {
  LossSpec s;
  s.label_smoothing = 0.5;
  return s;
}
/// dH's second entry of dH_order_problem: the four splits' fp32 products added in fp32 in split
/// order (reverse = false) or from the last split to the first (reverse = true).
inline float dH_order_sum(bool reverse) {
  const float t[4] = {0.875f * 16777216.0f, -0.625f * -8.0f, -0.125f * -8.0f,
                      -0.125f * -134217728.0f};
  volatile float acc = reverse ? t[3] : t[0];  // volatile: each addition rounded to fp32
  for (int k = 1; k < 4; ++k) acc = acc + t[reverse ? 3 - k : k];
  return acc;
}

}  // namespace xentlab::testing

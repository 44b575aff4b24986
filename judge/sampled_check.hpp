#pragma once
// The judge of a run checked on sampled token rows (`xentlab bench`): the full-size run is too
// large for the certified reference, so its per-token outputs at S sampled rows, and the dW of a
// second run of the same strategy and recipe on the sub-problem of those rows, are judged against
// the reference of that sub-problem — with the same a-priori bounds (bounds_for_reference), error
// statistics and policy (judge/policy.hpp judge) as the audit's assess_run.
#include <cstdint>
#include <vector>

#include "judge/bounds_for.hpp"

namespace xentlab {

/// What a sampled-row check holds of a run. The sub-problem is the S sampled rows of the full
/// problem (its H rows and targets, the same W), in the order of the sample.
struct SampledOutputs {
  /// (S) the full run's per-token loss and lse at the sampled rows (a row's loss does not depend
  /// on the other rows, so they are the sub-problem's values).
  std::vector<double> loss, lse;
  /// Those S losses reduced as the strategy reduces tokens (mean over S).
  double reduced_loss = 0.0;
  DType loss_dtype = DType::fp32;
  /// (S, D) the full run's dH at the sampled rows; empty: not judged.
  std::vector<double> dH;
  /// The full run's gradient scale over the reference's (S/N for a mean over N tokens against
  /// the sub-problem's mean over S): the reference's dH, its condition |dz|·|W| and its gradient
  /// scale are multiplied by it (each a relative perturbation ≤ 2^-53, below every term of the
  /// bound) and dH is judged with the bound of a run of that scale.
  double dH_scale = 1.0;
  /// N of the full run (its kernel's vocabulary plan may depend on it: fused's ranges): the
  /// bounds of loss, lse, the reduced loss and dH are those of a run on run_tokens tokens, dW's
  /// those of the sub-problem's run. 0 = the sub-problem's N.
  std::int64_t run_tokens = 0;
  /// (J, D) dW of the run on the sub-problem, at the reference's vocab_rows; empty: not judged.
  std::vector<double> dW;
  DType grad_dtype = DType::fp32;
};

/// Statistics of every output of `out` against `ref` (computed by compute_reference on the
/// sub-problem `sub`, all its S rows, dW on ref.vocab_rows) with the a-priori bounds of a
/// strategy declaring `arith` for `recipe` (dW's with one token chunk per row: the worst case, as
/// the audit's), and the verdict of `policy`. Judged: loss, lse, reduced loss, then dH and dW
/// where given (RunAssessment's has_dH, has_dW). Throws InputError when the sizes do not match
/// ref (loss, lse: S; dH: S·D; dW: J·D), when ref does not hold all of sub's rows, or when
/// dH_scale is not finite and > 0.
RunAssessment assess_sampled_run(const Problem& sub, const LossSpec& spec, const Recipe& recipe,
                                 const DeclaredArithmetic& arith, const SampledOutputs& out,
                                 const ReferenceResult& ref, const Policy& policy);

}  // namespace xentlab

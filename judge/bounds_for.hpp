#pragma once
// The judge's adapter between the certified reference and the a-priori bounds / statistics /
// policy of numerics/: given a Problem, the reference's result for it and a strategy's outputs,
// forms the covariates that judge/bounds.hpp needs and judges the outputs. judge/ sits above
// both reference/ (the oracle) and gpu/ (the code under test): the strategies never link the
// reference, and the reference never links the strategies (docs/design.md, "Layers").
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/strategy.hpp"
#include "judge/bounds.hpp"
#include "judge/policy.hpp"
#include "judge/profile.hpp"
#include "judge/stats.hpp"
#include "reference/reference.hpp"

namespace xentlab {

/// The covariates of the a-priori bounds on S token rows and J vocabulary rows of a problem: the
/// per-row quantities of the exact result and the reference gradients with their conditions, as
/// a ReferenceResult holds them (bounds_for_reference) or as a golden file stores them (`xentlab
/// verify`). Arrays of the sizes given (judge/bounds.hpp BoundInputs); null where absent.
struct RowCovariates {
  const std::vector<std::int64_t>* token_rows = nullptr;  ///< (S) sorted rows of the problem
  const std::vector<std::int64_t>* vocab_rows = nullptr;  ///< (J) sorted vocabulary rows
  const double *lse = nullptr, *loss = nullptr, *sum_p_abs_z = nullptr;  ///< (S)
  const double *max_logit = nullptr, *max_abs_logit = nullptr;           ///< (S)
  const double* max_abs_raw = nullptr;                                   ///< (S), optional
  const double *mean_abs_logit = nullptr, *target_logit = nullptr;       ///< (S)
  const double *p_target = nullptr, *grad_scale = nullptr;               ///< (S)
  const double* gemm_abs = nullptr;  ///< (S) linear problems (optional)
  double reduced_loss = 0.0;
  const double* dz = nullptr;                      ///< (S, V) logits problems
  const double *dH = nullptr, *dH_cond = nullptr;  ///< (S, D) linear problems
  const double *dW = nullptr, *dW_cond = nullptr;  ///< (J, D) linear problems
  const double *db = nullptr, *db_cond = nullptr;  ///< (J) linear problems
  /// The problem's magnitudes the bounds need, when the caller already has them (else read from
  /// the problem here): |H| of the token rows (S, D), |W_t| of each valid row's target (S, D),
  /// max_j |W_jk| (D), and the raw logits of the token rows (S, V) of a logits problem.
  const double *H_abs = nullptr, *W_target_abs = nullptr, *W_colmax_abs = nullptr;
  const double* raw_logits = nullptr;
};

/// Sets the covariates that the certified reference's own quantities give — the token and
/// vocabulary rows, lse, loss, Σ_j p_j|z_j|, the max logit, p_target, the gradient scale, and dH,
/// dW with their conditions where present — from `src`, a ReferenceResult or a golden file read
/// back (the same fields in both). The rest (|x| maxima and means, target logits, Σ|h||w|, dz, db)
/// is the caller's: each source forms them its own way (judge/covariates.hpp).
template <class Source>
void set_reference_quantities(RowCovariates& cov, const Source& src) {
  cov.token_rows = &src.token_rows;
  cov.vocab_rows = &src.vocab_rows;
  cov.lse = src.lse.data();
  cov.loss = src.loss.data();
  cov.sum_p_abs_z = src.sum_p_abs_z.data();
  cov.max_logit = src.max_logit.data();
  cov.p_target = src.p_target.data();
  cov.grad_scale = src.grad_scale.data();
  if (!src.dH.empty()) {
    cov.dH = src.dH.data();
    cov.dH_cond = src.dH_cond.data();
  }
  if (!src.dW.empty()) {
    cov.dW = src.dW.data();
    cov.dW_cond = src.dW_cond.data();
  }
}

/// The a-priori bounds (judge/bounds.hpp compute_bounds) of a strategy that declares `arith`
/// running `recipe` on `pb` with `spec`, from the covariates `cov`: the one place where the
/// judge's callers turn covariates into bounds. n_chunks: the token chunks whose dW/db are added
/// in the accum dtype, as given (BoundInputs::n_chunks). A bound whose arrays are absent is left
/// empty; non-finite covariates give NaN bounds (bounds_for_reference sanitizes them).
/// run_tokens: the token count of the run whose kernel planned its vocabulary reduction (the
/// fused kernel's ranges depend on N, gpu/plans/fused_plan.hpp); 0 = pb.N. It differs from pb.N
/// where a run on N tokens is judged on a sub-problem of its rows (`xentlab bench`).
Bounds bounds_for_covariates(const Problem& pb, const LossSpec& spec, const Recipe& recipe,
                             const DeclaredArithmetic& arith, const RowCovariates& cov,
                             std::int64_t n_chunks, std::int64_t run_tokens = 0);

/// Per-element a-priori bounds (judge/bounds.hpp, docs/bounds.md) for a strategy that declares
/// `arith` running `recipe` on `pb` with `spec`, on the rows of `ref` (its token_rows and
/// vocab_rows). ref must come from compute_reference(pb, spec, …) with want_dz for dz bounds.
/// n_chunks: number of token chunks whose dW are added in the accum dtype; 0 = assume one chunk
/// per row (the worst case). db bounds are not formed (the reference records no Σ_i|dz_ij|).
/// Cost O(S·(V + D) + V·D) for linear problems, O(S·V) for logits problems.
/// run_tokens: as bounds_for_covariates's.
Bounds bounds_for_reference(const Problem& pb, const LossSpec& spec, const Recipe& recipe,
                            const DeclaredArithmetic& arith, const ReferenceResult& ref,
                            std::int64_t n_chunks = 0, std::int64_t run_tokens = 0);

/// Statistics of every output of a run against the reference, the bounds, and the verdict.
struct RunAssessment {
  Bounds bounds;
  ErrorStats loss, lse, reduced_loss, dz, dH, dW, db;
  bool has_dz = false, has_dH = false, has_dW = false, has_db = false;
  /// The error profile of every output judged (loss, lse, reduced_loss, dz, dH, dW, db: those
  /// present), ULP distances in the output's dtype: what the baseline-relative criterion compares
  /// (judge/emulation_check.hpp).
  std::vector<std::pair<std::string, ErrorProfile>> profiles;
  /// The profile of output `name`, or nullptr.
  const ErrorProfile* profile(const std::string& name) const;
  Verdict verdict;
  double bounds_seconds = 0.0;  ///< wall time of the a-priori bounds (the rest: error statistics)
};

/// Compares `out` (from strategy.run of a request on pb/spec/recipe) with `ref`: per-token loss and
/// lse (dtype out.loss_dtype), reduced loss, dz/dH (rows of ref.token_rows, which must equal
/// out.token_rows or cover all rows), dW/db (rows ref.vocab_rows of out's V×D), each with its
/// a-priori bound, then judges them with `policy` (judge/policy.hpp judge). Throws InputError
/// when the token rows of out and ref differ or sizes do not match. dz_stats: the options of dz's
/// statistics (the audit's blocks of token rows give a shared relative floor and take the prefix
/// counts, BlockedErrorStats). want_profiles false: no error profiles (`profiles` empty), for a
/// run no baseline-relative check will compare (a profile costs a pass over the output and a
/// selection of its quantiles: seconds for the 5·10⁸ elements of the Llama-3-8B head's dW).
RunAssessment assess_run(const Problem& pb, const LossSpec& spec, const Recipe& recipe,
                         const DeclaredArithmetic& arith, const StrategyOutputs& out,
                         const ReferenceResult& ref, const Policy& policy,
                         std::int64_t n_chunks = 0, const StatsOptions& dz_stats = {},
                         bool want_profiles = true);

}  // namespace xentlab

#pragma once
// The per-row covariates that the a-priori bounds (judge/bounds.hpp) need beyond the certified
// reference's own quantities: per token row, the (transformed) target logit, max_j |x_j| and
// (1/V)Σ_j |x_j| over finite entries, and for linear problems scale·max_j (Σ_d |H_id||W_jd| +
// |b_j|). Two ways, one room:
//  - exact_row_covariates (what a golden file stores: harness/verify/golden.hpp): fp64 GEMMs of
//    H·Wᵀ and |H|·|W|ᵀ, the true maxima and means;
//  - bounded_row_covariates (the audit's and the bench's, through bounds_for_reference): upper
//    bounds without a second GEMM — Σ|h||w| ≤ min(‖H_i‖₂·max_j‖W_j‖₂, Σ_d |H_id|·max_j|W_jd|) —
//    affordable at every shape; for linear problems max and mean |x| are both set to that bound.
// Either bounds the true covariates from above (bounded ≥ exact), so a bound formed from them
// holds.
#include <cstdint>
#include <vector>

#include "datasets/problem.hpp"
#include "numerics/loss_spec.hpp"

namespace xentlab {

/// Per sampled row (S values each; gemm_abs only for linear problems).
struct ExactRowCovariates {
  std::vector<double> target_logit, max_abs_logit, mean_abs_logit, gemm_abs;
};

/// The covariates of `rows` of pb under spec. Logits of linear problems are fp64 GEMMs of exact
/// products (absolute error ≤ γ_D·Σ|h||w|, immaterial for a covariate of a bound), in blocks of
/// at most 2^27 logits (1 GiB).
ExactRowCovariates exact_row_covariates(const Problem& pb, const LossSpec& spec,
                                        const std::vector<std::int64_t>& rows);
/// The most exact_row_covariates holds for S rows of a V-vocabulary problem (D = 0: given
/// logits; else a linear head whose W is stored in w_dtype), in bytes: the results, and for a
/// linear head |W| and two HeadLogits, each with a block of logits and rows of H as doubles.
double exact_row_covariates_bytes(std::int64_t S, std::int64_t V, std::int64_t D, DType w_dtype);

/// The bounded covariates of token rows `token_rows` (S, sorted) of pb under sp (S values each;
/// linear problems also |H| of the rows (S, D), |W_t| of each valid row's target (S, D) and
/// max_j |W_jd| (D); logits problems the raw logits of the rows (S, V) when keep_raw). Bits do not
/// depend on the thread count.
struct BoundedRowCovariates {
  std::vector<double> max_raw, max_abs, mean_abs, target_logit, gemm_abs;  ///< (S)
  std::vector<double> raw_logits;                                          ///< (S, V) or empty
  std::vector<double> H_abs, W_target_abs, W_colmax_abs;                   ///< linear problems
};
BoundedRowCovariates bounded_row_covariates(const Problem& pb, const LossSpec& sp,
                                            const std::vector<std::int64_t>& token_rows,
                                            bool keep_raw);

}  // namespace xentlab

#pragma once
// The per-row arithmetic of the certified reference, shared by its CPU tiers (compensated and
// BLAS): the spec's transformation of raw logits, the stable forward of one row and the gradient
// entries dL/dz of one row, each with its a-priori error bound (docs/reference.md, "One row").
// Internal to reference/: the public interface is reference.hpp.
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/problem.hpp"
#include "numerics/loss_spec.hpp"
#include "reference/reference.hpp"
#include "reference/row_math.hpp"

namespace xentlab::detail {

/// Applies the spec's logit scale and softcap in place: on entry z[j] holds the raw logit r_j and
/// zb[j] its error bound; on exit z[j] is the transformed logit with bound zb[j], chain[j] is
/// dz/dr and chain_b[j] its bound. (V entries each.)
void transform_logits(const LossSpec& sp, std::int64_t V, double* z, double* zb, double* chain,
                      double* chain_b);

/// Forward of one row from its transformed logits z (bounds zb), with target t (−1 when the row
/// is ignored, then valid = false). Fills e (V: the unnormalised softmax e_j = exp(z_j − a)),
/// one_plus_s = 1 + Σ_{j≠k} e_j and one_minus_pt = 1 − p_t without cancellation.
RowStats row_forward(const LossSpec& sp, std::int64_t V, std::int64_t t, bool valid,
                     const double* z, const double* zb, double* e, double& one_plus_s,
                     double& one_minus_pt);

/// Gradient of the row's loss with respect to its raw logits, times the gradient scale gs:
///   dz_j = gs · G_j · chain_j,  G_j = p_j(1 + 2λ·lse) − (1 − ε)[j = t] − ε/V,
/// with its bound in gb (V entries each). Zero for an ignored row, an undefined softmax or gs = 0.
void row_gradient(const LossSpec& sp, std::int64_t V, std::int64_t t, bool valid,
                  const RowStats& st, double gs, const double* e, double one_plus_s,
                  double one_minus_pt, const double* chain, const double* chain_b, double* g,
                  double* gb);

/// dL/dloss_i of one row: 0 (ignored), 1/n_valid (mean), 1 (sum) or upstream[i] (none; 1 when
/// upstream is empty).
double row_grad_scale(const LossSpec& sp, std::int64_t n_valid, const std::vector<double>& upstream,
                      std::int64_t i, bool valid);

/// Stores one computed row's per-token outputs at position q of res (loss, lse and their bounds,
/// the covariates, the gradient scale gs).
void store_row_outputs(ReferenceResult& res, std::int64_t q, const RowStats& st, double gs);

/// db and its bound from the Sum2 accumulators of the S token rows (acc), the propagated error
/// Σ_i δdz_ij and Σ_i |dz_ij| per vocabulary row: bound = propagated + u|db| + γ_S²·Σ|dz|.
void finish_db(const std::vector<eft::CompensatedSum>& acc, const std::vector<double>& propagated,
               const std::vector<double>& abs_sum, std::int64_t S, ReferenceResult& res);

/// Sizes res's per-token vectors (res.token_rows.size() entries), and dz (S×V) and dH (S×D,
/// with bound and condition) when asked for.
void allocate_outputs(ReferenceResult& res, bool want_dz, bool want_dH);

/// The BLAS tier (tiers/blas.cpp) and the cuda tier (tiers/cuda.cu): every output of res that
/// compute_reference asks for except the reduced loss. res.token_rows, vocab_rows, n_valid and
/// partial are set by the caller, which has validated the problem, the spec and the options.
void blas_tier(const Problem& pb, const LossSpec& sp, const ReferenceOptions& opt,
               ReferenceResult& res, std::int64_t budget, bool budget_given);

void cuda_tier(const Problem& pb, const LossSpec& sp, const ReferenceOptions& opt,
               ReferenceResult& res, std::int64_t budget, bool budget_given);

/// cuBLAS DGEMM's rate on 8192² (flop/s); throws where there is no cuda tier.
double cuda_dgemm_rate();

/// Column maxima of |T| and column norms ‖T_:d‖₂ (rounded up) over the given rows of a
/// (rows × cols) tensor (every row when rows is empty; n_rows of them), on `threads` threads.
struct ColumnStats {
  std::vector<double> max_abs, norm;  ///< (cols)
};
ColumnStats column_stats(const Tensor& T, std::int64_t cols, const std::vector<std::int64_t>& rows,
                         std::int64_t n_rows, int threads);

/// The relative factor that turns a computed ‖x‖₂ of n terms into an upper bound.
double norm_margin(std::int64_t n);

/// ‖row r‖₂ of a (rows × cols) tensor for every row, rounded up (a rigorous upper bound).
std::vector<double> row_norms_upper(const Tensor& T, std::int64_t rows, std::int64_t cols,
                                    int threads);

}  // namespace xentlab::detail

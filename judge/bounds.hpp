#pragma once
// A-priori per-element error bounds of a strategy's outputs, from its recipe and its declared
// reduction order; judge/policy.hpp turns bounds and statistics into a disposition. Together they
// are the ONE place where tolerances of the project are formed; docs/bounds.md derives every
// term (shared NUMERICS.md §5, docs/arithmetic.md for the arithmetic being bounded).
//
// Units: loss, lse in nats; dz, dH, dW, db in the units of the gradient (dL/d·). Every bound is
// first order in the unit roundoffs, except the sum-exp term, which uses −log(1 − γ) with
// γ = c·u_accum/(1 − c·u_accum) and becomes +Inf ("no meaningful bound") once c·u_accum ≥ 1
// (e.g. sequential bf16 over V ≥ 256; NUMERICS.md §2).
//
// numerics/ depends on nothing of ours: the covariates come as plain arrays. A caller holding a
// ReferenceResult uses judge/bounds_for.hpp (bounds_for_reference), which fills them.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/arithmetic.hpp"
#include "numerics/host_array.hpp"
#include "numerics/loss_spec.hpp"
#include "numerics/recipe.hpp"

namespace xentlab {

/// Worst-case constant c of a reduction of n terms in the given order, so that the computed sum of
/// non-negative terms s̃ satisfies |s̃ − s| ≤ γ_c(u)·s with γ_c(u) = c·u/(1 − c·u) (Higham,
/// Accuracy and Stability of Numerical Algorithms, 2nd ed., §4.2 and §4.6):
///   sequential  c = n − 1
///   pairwise    c = ⌈log2 n⌉
///   blocked     c = (min(n, ⌈⌈n/8⌉/T⌉·8) − 1) + ⌈log2 min(T, ⌈n/8⌉)⌉  (a thread sums at most
///               that many elements sequentially, then a tree over the partials; arithmetic.md §4)
///   online_tiles c = (tile − 1) + 2·⌈n/tile⌉  (sequential within a tile; per merge one rescale
///               multiply and one add)
///   online_tree  c = (tile − 1) + 1 + 2·(⌈T/R⌉ − 1) + 2·(tree_lane_merges + 2⌈log2 T⌉) with
///               T = ⌈n/(tile·block_threads)⌉ vocabulary tiles and R the least number of ranges
///               for N tokens (DeclaredArithmetic): in-tile adds, the add into the thread's state,
///               one rescale and one add per later tile of its range, per lane merge and per range
///               merge (a binary-counter merge of ≤ T ranges has depth ≤ 2⌈log2 T⌉); N ≤ 0 takes
///               R = 1, the worst case.
/// n ≤ 0 gives 0. Throws InputError for block_threads < 1 (blocked, online_tree) or tile < 1
/// (online_tiles, online_tree).
double reduction_constant(ReductionOrder order, std::int64_t n, const DeclaredArithmetic& a,
                          std::int64_t N = 0);

/// Constant c of a row's sum over the vocabulary (sum-exp, and Σx for label smoothing) of n = V
/// terms under the declaration a: reduction_constant(a.vocab_order, V, a, N) when a.vocab_ranks
/// ≤ 1; with P = a.vocab_ranks > 1 (vocabulary-parallel, docs/arithmetic.md §10) each rank reduces
/// its shard of at most ⌈V/P⌉ terms in a.vocab_order and the P partials are added in any order,
/// which puts at most P − 1 further additions on a term's path:
///   c = reduction_constant(a.vocab_order, ⌈V/P⌉, a, N) + (P − 1)
/// (the constants are non-decreasing in n, so the largest shard bounds every shard; docs/bounds.md,
/// "Vocabulary-parallel sums"); with an online order (online_tiles, online_tree), or a plain one
/// with a.rescaled_ranks, each rank's state is rescaled once to the global maximum before the sum,
/// one more rounding:
///   c = reduction_constant(a.vocab_order, ⌈V/P⌉, a, N) + 1 + (P − 1).
/// V ≤ 0 gives 0. Throws InputError when P > V.
double vocab_reduction_constant(const DeclaredArithmetic& a, std::int64_t V, std::int64_t N = 0);

/// The rescaling merges on a term's path in a row's sum-exp of V terms under the declaration a:
/// online_rescales(a, V, N) when a.vocab_ranks ≤ 1; with P > 1 ranks those of the largest shard
/// online_rescales(a, ⌈V/P⌉, N), plus 1 for an online order or a.rescaled_ranks (the rank's
/// rescale to the global maximum; 0 for the plain orders whose ranks sum with the global maximum).
/// Throws InputError when P > V.
double vocab_online_rescales(const DeclaredArithmetic& a, std::int64_t V, std::int64_t N = 0);

/// Roundings on a term's path in dH's fp32 sum over the vocabulary (dH = dz·W, docs/bounds.md
/// "dH"): V (one fma per term) for one sum over the row; ⌈V/k⌉ + ⌈log2 k⌉ with a GEMM k-split of
/// k = a.gemm_k_split; with P = a.vocab_ranks > 1 ranks the count of the largest shard ⌈V/P⌉ plus
/// P − 1 cross-rank additions in any order. Throws InputError when P > V.
double dH_vocab_constant(const DeclaredArithmetic& a, std::int64_t V);

/// The most rescaling merges (s·expf(m_old − m_new)) a term of an online reduction of n terms
/// passes: ⌈n/tile⌉ for online_tiles; (⌈T/R⌉ − 1) + tree_lane_merges + 2⌈log2 T⌉ for online_tree
/// (as reduction_constant); 0 for the other orders.
double online_rescales(const DeclaredArithmetic& a, std::int64_t n, std::int64_t N = 0);

/// γ_c(u) = c·u/(1 − c·u), +Inf when c·u ≥ 1 (Higham §3.1).
double gamma_bound(double c, double u);

/// Covariates and shapes the bounds need. Pointers are non-owning; "(S)" arrays have one entry per
/// computed token row, "(S,V)" etc. are row-major. Optional arrays may be null; the bound of an
/// output whose arrays are missing is left empty.
struct BoundInputs {
  Recipe recipe;
  DeclaredArithmetic arith;
  LossSpec spec;
  DType stored_logits_dtype = DType::fp32;  ///< logits problems: dtype of the given logits
  bool linear = true;                       ///< linear (H, W) problem, else given logits
  std::int64_t S = 0;                       ///< computed token rows
  std::int64_t V = 0;                       ///< vocabulary size
  std::int64_t D = 0;                       ///< hidden size (linear)
  std::int64_t N = 0;         ///< tokens of the whole problem (token reduction length)
  std::int64_t n_chunks = 1;  ///< token chunks whose dW/db are added in the accum dtype

  // Per token (S). Required for any bound.
  const std::int64_t* valid = nullptr;    ///< 1 for non-ignored rows, 0 for ignored
  const std::int64_t* target = nullptr;   ///< target index t_i (dz bounds; may be null otherwise)
  const double* lse = nullptr;            ///< reference lse
  const double* loss = nullptr;           ///< reference per-token loss
  const double* sum_p_abs_z = nullptr;    ///< Σ_j p_j·|z_j|
  const double* max_logit = nullptr;      ///< a = max_j z_j
  const double* max_abs_logit = nullptr;  ///< upper bound on max_j |z_j| (finite entries)
  const double* max_abs_raw =
      nullptr;  ///< upper bound on max_j |raw logit| before scale (optional:
                ///< past max_finite(logits) the stored logits overflow)
  const double* mean_abs_logit =
      nullptr;  ///< (1/V)·Σ_j |z_j| (label smoothing); may be null if ε = 0
  const double* target_logit = nullptr;  ///< z_t (0 for ignored rows)
  const double* p_target = nullptr;      ///< softmax at the target (any value for ignored rows)
  const double* grad_scale = nullptr;    ///< g_i = dL/dloss_i
  const double* gemm_abs =
      nullptr;  ///< upper bound on max_j Σ_d |H_id|·|W_jd| + |b_j| (linear, raw units)

  // dz (logits problems): the reference dz and the raw stored logits (before scale/softcap).
  const double* dz_ref = nullptr;      ///< (S, V)
  const double* raw_logits = nullptr;  ///< (S, V)
  // dH (linear): reference dH, its condition |dz|·|W|, and |W_{t_i,:}| of each row's target.
  const double* dH_ref = nullptr;        ///< (S, D)
  const double* dH_cond = nullptr;       ///< (S, D)
  const double* W_target_abs = nullptr;  ///< (S, D), zeros for ignored rows
  const double* W_colmax_abs = nullptr;  ///< (D) max_j |W_jk|: needed with smoothing/softcap
  // dW (linear): reference dW over J vocabulary rows, its condition |dz|ᵀ·|H|, |H| of the rows,
  // and for each token row the position of its target among the J vocabulary rows (−1: absent).
  std::int64_t J = 0;
  const double* dW_ref = nullptr;                  ///< (J, D)
  const double* dW_cond = nullptr;                 ///< (J, D)
  const double* H_abs = nullptr;                   ///< (S, D)
  const std::int64_t* target_vocab_pos = nullptr;  ///< (S)
  // db: reference db and Σ_i |dz_ij| over the token rows (J).
  const double* db_ref = nullptr;   ///< (J)
  const double* db_cond = nullptr;  ///< (J)
  double reduced_loss_ref = 0.0;
};

/// Per-element bounds on |computed − exact| for a correct implementation of the declared
/// arithmetic. Sizes as the matching inputs; empty where the inputs were not given.
struct Bounds {
  std::vector<double> loss, lse;  ///< (S); ignored rows: 0 (they must be exactly 0)
  HostArray<double> dz;           ///< (S, V)
  HostArray<double> dH;           ///< (S, D)
  HostArray<double> dW;           ///< (J, D)
  std::vector<double> db;         ///< (J)
  double reduced_loss = 0.0;
  double c_vocab = 0.0;    ///< reduction constant of the sum-exp over V
  double c_tokens = 0.0;   ///< reduction constant of the token reduction
  bool meaningful = true;  ///< false when some bound is +Inf (c·u_accum ≥ 1)
  std::string note;        ///< e.g. "sum-exp: blocked T=256, c=509, u_accum=2^-8: no bound"
};

/// Computes the bounds (formulas: docs/bounds.md). Throws InputError when a required per-token
/// array is null while S > 0, or on negative sizes.
Bounds compute_bounds(const BoundInputs& in);

}  // namespace xentlab

#pragma once
// A-priori per-element error bounds of a strategy's outputs, from its recipe and its declared
// reduction order, and the pass/fail policy that turns bounds and statistics into a disposition.
// This is the ONE place where tolerances of the project are formed; docs/bounds.md derives every
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
#include "numerics/stats.hpp"

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
/// "Vocabulary-parallel sums"). V ≤ 0 gives 0. Throws InputError when P > V, or when P > 1 with an
/// online order (their cross-shard merge rescales, which this constant does not count).
double vocab_reduction_constant(const DeclaredArithmetic& a, std::int64_t V, std::int64_t N = 0);

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

// ---------------------------------------------------------------------------------------------
// Pass/fail policy.

enum class Disposition : std::uint8_t { passed, incorrect, not_supported, failed };
std::string_view to_string(Disposition d);

/// A named policy. All thresholds of the project's pass/fail decisions live here.
struct Policy {
  std::string name = "default";
  double k = 1.0;          ///< incorrect when some |e| > k·bound
  bool bias_check = true;  ///< check the bias of the per-token loss
  double k_bias = 1.0;     ///< bias limit: k_bias·mean(bound) + bias_sigmas·stderr
  double bias_sigmas = 4.0;
  bool require_meaningful_bound = true;  ///< an output without a finite bound is incorrect
  double baseline_factor = 2.0;  ///< baseline-relative check: err ≤ factor·baseline err + bound·k
};
/// "default" (k = k_bias = 1, bias check, bounds must be finite), "strict" (k = 0.5, k_bias =
/// 0.25: a mean error beyond a quarter of the mean bound is suspect), "audit" (as default, but
/// infinite bounds allowed: the audit's verdict judges such recipes by their measured error),
/// "lenient" (k = 4, no bias check, infinite bounds allowed). Throws InputError naming the unknown
/// policy.
Policy policy_by_name(std::string_view name);

/// The decision and the numbers that decided it.
struct Verdict {
  Disposition disposition = Disposition::passed;
  std::string output;       ///< the output that decided it ("loss", "dH", …), empty if passed
  std::string reason;       ///< human-readable, names the numbers
  double ratio = 0.0;       ///< max |e|/bound over the outputs judged
  std::int64_t index = -1;  ///< element that decided it
  double error = 0.0, bound = 0.0;
  double bias = 0.0, bias_limit = 0.0;
};

/// One output to judge: its statistics (computed with bounds) and whether it is the per-token
/// loss (which gets the bias check).
struct JudgedOutput {
  std::string name;
  const ErrorStats* stats = nullptr;
  bool is_loss = false;
};

/// Statistical limit of the bias: k_bias·mean(bound) + bias_sigmas·bias_stderr; +Inf when some
/// element has an infinite bound (no meaningful limit).
double bias_limit(const ErrorStats& s, const Policy& p);

/// Judges the outputs in order: non-finite where the reference is finite (or any other finiteness
/// mismatch) → incorrect; |e| > k·bound → incorrect (the largest ratio decides); a +Inf bound when
/// the policy requires meaningful bounds → incorrect; |bias| > bias_limit on the loss → incorrect.
/// Otherwise passed, with the largest ratio. Outputs without bounds get only the finiteness check.
Verdict judge(const std::vector<JudgedOutput>& outputs, const Policy& policy);

/// Verdict for a run that did not produce outputs: not_supported or failed, with the message.
Verdict verdict_not_run(Disposition d, std::string message);

/// Baseline-relative check (flash-attention/cut-cross-entropy style, NUMERICS.md §5): passes when
/// max|e| ≤ baseline_factor·baseline max|e| + k·max bound-free floor `floor`. Returns the verdict
/// for the named output.
Verdict judge_against_baseline(const std::string& name, const ErrorStats& candidate,
                               const ErrorStats& baseline, double floor, const Policy& policy);

// ---- the differential check's constants (tools/golden/verify.hpp applies them) -------------
// docs/verify.md, "The differential check", derives each: an output passes when its normwise
// relative error and the kDifferentialQuantile-quantile of its element-wise relative errors are at
// most kDifferentialK × those of a correct implementation of the declared recipe plus one ULP of
// the recipe's output format.
/// k: √4, the geometric middle of 1 (a candidate as accurate as the baseline must pass) and 4 (a
/// candidate 4× less accurate than the declared recipe must fail): it tolerates a spread factor r
/// between two correct implementations up to r² < 2 either way; measured, the errors of the
/// strategies at several chunk widths were 0.745–1.001× the baseline's.
inline constexpr double kDifferentialK = 2.0;
/// The quantile of the element-wise relative error |e_i|/max(|ref_i|, floor) compared.
inline constexpr double kDifferentialQuantile = 0.9;
/// Outputs with fewer elements compare the normwise error only (a 0.9-quantile of fewer than 64
/// values is one of its 7 largest, as noisy as the maximum).
inline constexpr std::int64_t kDifferentialMinElements = 64;
/// `--explain`: a candidate at least this many times more accurate than a recipe's baseline on
/// some output is not that recipe (the accuracy step the differential check must detect).
inline constexpr double kExplainAccuracyFactor = 4.0;

}  // namespace xentlab

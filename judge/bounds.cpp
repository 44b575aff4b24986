// A-priori error bounds. Derivation of every term: docs/bounds.md.
// Notation: u_32 = 2^-24; u_L, u_A, u_G the unit roundoffs of the recipe's logits, accum and grad
// dtypes; a primed u (u_A', u_L', u_G') is 0 when that dtype is fp32 (rounding a binary32 value to
// fp32 is exact) and u otherwise. Elementary functions of binary32 (expf, logf, tanhf) are charged
// 2 ULP = 4·u_32 relative (glibc documents ≤ 1–2 ULP on x86-64).
#include "judge/bounds.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "numerics/error.hpp"

namespace xentlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kU32 = 0x1p-24;
constexpr double kLibm32 = 4 * kU32;

double ceil_log2(std::int64_t n) {
  if (n <= 1) return 0.0;
  double c = 0.0;
  std::int64_t p = 1;
  while (p < n) {
    p *= 2;
    c += 1.0;
  }
  return c;
}

// Rounding a binary32 value into t: 0 when t ⊇ fp32, else u_t.
double u_prime(DType t) {
  return (t == DType::fp32 || t == DType::fp64) ? 0.0 : unit_roundoff(t);
}

// True when every value of `from` is a value of `to` (rounding from → to is exact).
bool contains(DType to, DType from) {
  if (to == from || to == DType::fp64) return true;
  if (to == DType::fp32) return from != DType::fp64;
  return false;
}

// a·b where a zero factor wins over an infinite one (an infinite coefficient of a zero condition
// number bounds an error that is exactly zero).
double mul0(double a, double b) {
  return (a == 0.0 || b == 0.0) ? 0.0 : a * b;
}

// Half the smallest subnormal of t: the absolute error of rounding a tiny value into t (gradual
// underflow, Higham §2.1), on top of the relative u·|x|.
double half_sub(DType t) {
  return 0.5 * min_subnormal(t == DType::fp64 ? DType::fp32 : t);
}

}  // namespace

double gamma_bound(double c, double u) {
  const double cu = c * u;
  if (cu >= 1.0) return kInf;
  return cu / (1.0 - cu);
}

namespace {

/// online_tree: tiles T, tiles per range ⌈T/R⌉ for the least R, and the range-merge depth bound.
struct TreeShape {
  std::int64_t tiles = 0, per_range = 0;
  double range_depth = 0.0;
};
TreeShape tree_shape(std::int64_t n, const DeclaredArithmetic& a, std::int64_t N) {
  if (a.tile < 1 || a.block_threads < 1)
    throw InputError(fmt::format("online tree: tile = {} and block_threads = {} must be ≥ 1",
                                 a.tile, a.block_threads));
  TreeShape t;
  const std::int64_t cols = a.tile * a.block_threads;
  t.tiles = (n + cols - 1) / cols;
  std::int64_t r = 1;
  if (N > 0) {
    r = std::min(a.tree_min_ranges, t.tiles);
    if (a.tree_state_rows > 0) r = std::min(r, a.tree_state_rows / N);
    r = std::max<std::int64_t>(1, r);
  }
  t.per_range = (t.tiles + r - 1) / r;
  t.range_depth = 2.0 * ceil_log2(t.tiles);
  return t;
}

}  // namespace

double online_rescales(const DeclaredArithmetic& a, std::int64_t n, std::int64_t N) {
  if (n <= 0) return 0.0;
  if (a.vocab_order == ReductionOrder::online_tiles && a.tile > 0)
    return static_cast<double>((n + a.tile - 1) / a.tile);
  if (a.vocab_order == ReductionOrder::online_tree) {
    const TreeShape t = tree_shape(n, a, N);
    return static_cast<double>(t.per_range - 1) + static_cast<double>(a.tree_lane_merges) +
           t.range_depth;
  }
  return 0.0;
}

double reduction_constant(ReductionOrder order, std::int64_t n, const DeclaredArithmetic& a,
                          std::int64_t N) {
  if (n <= 0) return 0.0;
  switch (order) {
    case ReductionOrder::sequential:
      return static_cast<double>(n - 1);
    case ReductionOrder::pairwise:
      return ceil_log2(n);
    case ReductionOrder::blocked: {
      if (a.block_threads < 1)
        throw InputError(
            fmt::format("reduction_constant: block_threads = {} < 1", a.block_threads));
      // A thread owns ⌈groups/T⌉ groups of 8 at most: that many·8 − 1 sequential additions, then
      // the tree over T partials adds ⌈log2 T⌉ levels.
      const std::int64_t groups = (n + 7) / 8;
      const std::int64_t per_thread =
          std::min<std::int64_t>(n, ((groups + a.block_threads - 1) / a.block_threads) * 8);
      return static_cast<double>(per_thread - 1) + ceil_log2(std::min(a.block_threads, groups));
    }
    case ReductionOrder::online_tiles: {
      if (a.tile < 1)
        throw InputError(fmt::format("reduction_constant: online tile = {} < 1", a.tile));
      const std::int64_t tiles = (n + a.tile - 1) / a.tile;
      return static_cast<double>(std::min(a.tile, n) - 1) + 2.0 * static_cast<double>(tiles);
    }
    case ReductionOrder::online_tree: {
      const TreeShape t = tree_shape(n, a, N);
      return static_cast<double>(std::min(a.tile, n) - 1) + 1.0 +
             2.0 * static_cast<double>(t.per_range - 1) +
             2.0 * (static_cast<double>(a.tree_lane_merges) + t.range_depth);
    }
  }
  return static_cast<double>(n - 1);
}

namespace {

bool is_online(ReductionOrder o) {
  return o == ReductionOrder::online_tiles || o == ReductionOrder::online_tree;
}

// A rank's state rescaled once to the global maximum before the cross-rank sum: an online order's
// always, a plain order's where the declaration says so (DeclaredArithmetic::rescaled_ranks).
bool rescales_ranks(const DeclaredArithmetic& a) {
  return is_online(a.vocab_order) || a.rescaled_ranks;
}

// ⌈V/P⌉ for the declaration's ranks P (V when P ≤ 1). Throws InputError when P > V.
std::int64_t largest_shard(const DeclaredArithmetic& a, std::int64_t V) {
  const std::int64_t P = a.vocab_ranks;
  if (P <= 1) return V;
  if (P > V)
    throw InputError(
        fmt::format("bounds: {} vocabulary-parallel ranks exceed the vocabulary ({} rows)", P, V));
  return (V + P - 1) / P;
}

}  // namespace

double vocab_reduction_constant(const DeclaredArithmetic& a, std::int64_t V, std::int64_t N) {
  if (V <= 0) return 0.0;
  if (a.vocab_ranks <= 1) return reduction_constant(a.vocab_order, V, a, N);
  // An online rank's state (or a plain one's, rescaled_ranks) is rescaled to the global maximum
  // once before the cross-rank sum: one more rounding (the product, rounded to the accum dtype) on
  // each of its terms' paths.
  const double rescale = rescales_ranks(a) ? 1.0 : 0.0;
  return reduction_constant(a.vocab_order, largest_shard(a, V), a, N) + rescale +
         static_cast<double>(a.vocab_ranks - 1);
}

double vocab_online_rescales(const DeclaredArithmetic& a, std::int64_t V, std::int64_t N) {
  if (V <= 0) return 0.0;
  if (a.vocab_ranks <= 1) return online_rescales(a, V, N);
  const double within = online_rescales(a, largest_shard(a, V), N);
  return rescales_ranks(a) ? within + 1.0 : within;
}

double dH_vocab_constant(const DeclaredArithmetic& a, std::int64_t V) {
  const std::int64_t n = largest_shard(a, V);
  const double c = a.gemm_k_split > 1
                       ? std::ceil(static_cast<double>(n) / static_cast<double>(a.gemm_k_split)) +
                             ceil_log2(a.gemm_k_split)
                       : static_cast<double>(n);
  return a.vocab_ranks > 1 ? c + static_cast<double>(a.vocab_ranks - 1) : c;
}

namespace {

// What every output's bound shares: the recipe's unit roundoffs, the error coefficients of a
// loss-kernel logit, and the constants of the GEMM and of the sum-exp over V (docs/bounds.md).
struct Terms {
  double uA = 0, uA1 = 0, uL1 = 0, uG1 = 0;  // u_A; u_A', u_L', u_G' (0 for fp32)
  double subA = 0, subL = 0, subG = 0;       // half the smallest subnormal of accum, logits, grad
  double uLstore = 0;  // relative error of storing a logit in the logits dtype
  double s = 1;        // logit scale
  bool capped = false;
  double mu = 0;            // per-magnitude error coefficient of a loss-kernel logit
  double gD = 0;            // γ_{D+1}(u_32) of the logits' GEMM
  double gV = 0;            // γ_c(u_A) of the sum-exp over V
  double log_sum_term = 0;  // −log(1 − γ_c(u_A)): +Inf when there is no bound
  double logV = 0;
  double online_extra_rel = 0;  // rescaling merges of an online sum-exp
  double lam = 0, eps = 0;      // z-loss λ, label smoothing ε
};

void check_inputs(const BoundInputs& in) {
  if (in.S < 0 || in.V < 0 || in.D < 0 || in.N < 0 || in.J < 0)
    throw InputError(fmt::format("compute_bounds: negative size (S={}, V={}, D={}, N={}, J={})",
                                 in.S, in.V, in.D, in.N, in.J));
  if (in.S > 0 && (!in.valid || !in.lse || !in.loss || !in.sum_p_abs_z || !in.max_logit ||
                   !in.max_abs_logit || !in.target_logit || !in.p_target || !in.grad_scale))
    throw InputError(
        "compute_bounds: a required per-token covariate (valid, lse, loss, "
        "sum_p_abs_z, max_logit, max_abs_logit, target_logit, p_target, grad_scale) is null");
  if (in.spec.label_smoothing > 0 && in.S > 0 && !in.mean_abs_logit)
    throw InputError("compute_bounds: label smoothing needs mean_abs_logit");
  if (in.linear && in.S > 0 && !in.gemm_abs)
    throw InputError("compute_bounds: linear problem needs gemm_abs");
}

// The shared terms; sets b.c_vocab, and b.meaningful and b.note when the sum-exp has no bound.
Terms terms_of(const BoundInputs& in, Bounds& b) {
  const LossSpec& sp = in.spec;
  const Recipe& r = in.recipe;
  Terms k;
  k.uA = unit_roundoff(r.accum);
  k.uA1 = u_prime(r.accum);
  k.uL1 = u_prime(r.logits);
  k.uG1 = u_prime(r.grad);
  k.subA = half_sub(r.accum);
  k.subL = half_sub(r.logits);
  k.subG = half_sub(r.grad);
  // Storage of the logits: linear problems round the fp32 GEMM result into `logits`; given logits
  // are rounded from their stored dtype, exactly when `logits` contains it.
  k.uLstore = in.linear
                  ? k.uL1
                  : (contains(r.logits, in.stored_logits_dtype) ? 0.0 : unit_roundoff(r.logits));
  k.s = sp.logit_scale;
  k.capped = sp.softcap > 0;
  // Per-magnitude coefficient of the error of a loss-kernel logit x (storage, scale multiply,
  // softcap division/tanhf/multiply; softcap contracts errors: |Δ(c·tanh(a/c))| ≤ |Δa|, and
  // (1 − th²)·|a| ≤ |c·th| so storage error u·|raw|·s·(1−th²) ≤ u·|x|).
  const double kappa = (k.s != 1.0 ? 1.0 : 0.0) + (k.capped ? 2.0 + 4.0 + 1.0 : 0.0);
  k.mu = k.uLstore + kappa * kU32;
  // GEMM: D exact-or-rounded products and one bias add, sequential fp32 (worst case of any order
  // within γ_{D+1}; Higham §3.1).
  k.gD = gamma_bound(static_cast<double>(in.D + 1), kU32);

  b.c_vocab = vocab_reduction_constant(in.arith, in.V, in.N);
  k.gV = gamma_bound(b.c_vocab, k.uA);
  k.log_sum_term = k.gV >= 1.0 ? kInf : -std::log1p(-k.gV);
  k.logV = std::max(1.0, std::log(static_cast<double>(std::max<std::int64_t>(in.V, 1))));
  k.online_extra_rel = vocab_online_rescales(in.arith, in.V, in.N) * (kLibm32 + kU32);
  if (!std::isfinite(k.log_sum_term)) {
    b.meaningful = false;
    b.note = fmt::format(
        "sum-exp: {} over V={}{} has c={} and u_accum={:.3g}: c·u ≥ 1, no meaningful bound",
        to_string(in.arith.vocab_order), in.V,
        in.arith.vocab_ranks > 1 ? fmt::format(" in {} ranks", in.arith.vocab_ranks) : "",
        b.c_vocab, k.uA);
  }
  k.lam = sp.z_loss;
  k.eps = sp.label_smoothing;
  return k;
}

// Absolute GEMM error of a logit x of row i (linear problems; 0 for given logits).
double gemm_error(const BoundInputs& in, const Terms& k, std::int64_t i) {
  return in.linear ? k.s * k.gD * in.gemm_abs[i] : 0.0;
}

// lse of row i: propagated logit errors Σ p_j δ_j; sum-exp (argument x − a in fp32, expf,
// rounding to accum, reduction); logf; the fp32 add a + log S; rounding to accum.
double lse_bound(const BoundInputs& in, const Terms& k, std::int64_t i) {
  const Recipe& r = in.recipe;
  const double lse = in.lse[i], a = in.max_logit[i], zabs = in.max_abs_logit[i];
  const double nu = gemm_error(in, k, i);
  const double spz = in.sum_p_abs_z[i];
  const double prop = k.mu * spz + nu;
  // (+ V·subA: terms that underflow in the accum dtype, relative to a sum ≥ 1 — the max term
  // is 1.)
  const double sum_rel = k.log_sum_term + kLibm32 + k.uA1 + kU32 * (spz + std::fabs(a)) +
                         static_cast<double>(in.V) * k.subA + k.online_extra_rel * (1.0 + 0.0) +
                         (k.online_extra_rel > 0 ? kU32 * 2 * zabs : 0.0);
  double blse = prop + sum_rel + kLibm32 * k.logV + (kU32 + k.uA1) * std::fabs(lse);
  // Overflow of the accum dtype (fp16: 65504): a partial sum-exp can reach S·(1 + γ) with
  // S = e^{lse − a} (blocked, pairwise, sequential: partial sums of non-negative terms are below
  // the total), or the number of terms seen (online tiles, relative to a running max); lse and
  // the loss are held in the accum dtype too. Past max_finite the result may be ±Inf: no bound.
  const double maxA = max_finite(r.accum);
  const bool online = in.arith.vocab_order == ReductionOrder::online_tiles ||
                      in.arith.vocab_order == ReductionOrder::online_tree;
  const double partial_max = online ? static_cast<double>(in.V) : std::exp(lse - a);
  if (partial_max * (1.0 + k.gV) > maxA || std::fabs(lse) + blse > maxA) blse = kInf;
  // Stored logits past the largest finite value of the logits dtype become ±Inf (then NaN in
  // x − max): no bound for the row.
  if (in.max_abs_raw &&
      in.max_abs_raw[i] > max_finite(r.logits == DType::fp64 ? DType::fp32 : r.logits))
    blse = kInf;
  if (!std::isfinite(lse)) blse = 0.0;  // all-masked rows: lse = −Inf exactly
  return blse;
}

// Per-token loss of a valid row i whose lse bound is blse: ce = lse − (1−ε)x_t − (ε/V)Σx in fp32,
// rounded to accum, plus the z-loss λ·lse².
double loss_bound(const BoundInputs& in, const Terms& k, std::int64_t i, double blse) {
  const double lse = in.lse[i];
  const double nu = gemm_error(in, k, i);
  const double maxA = max_finite(in.recipe.accum);
  const double xt = std::fabs(in.target_logit[i]);
  const double loss = std::fabs(in.loss[i]);
  double bce = blse + (1.0 - k.eps) * (k.mu * xt + nu) + 3 * kU32 * (std::fabs(lse) + xt);
  if (k.eps > 0) {
    const double mabs = in.mean_abs_logit[i];
    bce += k.eps * ((k.gV + k.mu) * mabs + nu) + 3 * kU32 * k.eps * mabs;
  }
  double bl = bce + (kU32 + k.uA1) * loss + k.subA;
  if (loss + bl > maxA) bl = kInf;
  if (k.lam > 0)
    bl += mul0(2 * k.lam * std::fabs(lse), blse) + 2 * kU32 * k.lam * lse * lse +
          (kU32 + k.uA1) * loss;
  return bl;
}

// Per token row, the coefficients the gradient bounds propagate (docs/bounds.md §dz): η, the
// relative error of an off-target dz entry; τ, the absolute error of the target entry per |W|;
// and the label-smoothing and softcap terms of dH and dW.
struct RowCoefficients {
  std::vector<double> eta, tau, extra_h, extra_w;  // (S)
  explicit RowCoefficients(std::int64_t S)
      : eta(static_cast<std::size_t>(S), 0.0), tau(eta), extra_h(eta), extra_w(eta) {}
};

void gradient_coefficients(const BoundInputs& in, const Terms& k, std::int64_t i, double blse,
                           RowCoefficients& c) {
  const Recipe& r = in.recipe;
  const double lam = k.lam, s = k.s;
  const double lse = in.lse[i], zabs = in.max_abs_logit[i];
  const double nu = gemm_error(in, k, i);
  const double xt = std::fabs(in.target_logit[i]);
  const auto q = static_cast<std::size_t>(i);
  // ρ: relative error of p_j = expf(x_j − lse).
  const double g = std::fabs(in.grad_scale[i]);
  const double w_num = 1.0 + 2 * lam * std::fabs(lse), w_den = std::fabs(1.0 + 2 * lam * lse);
  const double w = lam > 0 ? (w_den > 0 ? w_num / w_den : kInf) : 1.0;
  const double rho_max = k.mu * zabs + nu + blse + kU32 * (zabs + std::fabs(lse)) + kLibm32;
  const double rho_t = k.mu * xt + nu + blse + kU32 * (xt + std::fabs(lse)) + kLibm32;
  // p̃_j = p_j·e^{Δ_j} with |Δ_j| ≤ ρ: |p̃_j − p_j| ≤ p_j·expm1(ρ) (exact, not first order: a
  // wrong lse of several nats multiplies every probability by e^{Δ}).
  c.eta[q] = mul0(w, std::expm1(rho_max) + mul0(2 * lam, blse) + 3 * kU32) + 2 * kU32 + k.uL1 +
             (k.capped ? 3 * kU32 : 0.0);
  const double pt = std::isfinite(in.p_target[i]) ? in.p_target[i] : 1.0;
  const double cmax = k.capped ? s : s;  // |chain factor| ≤ scale
  c.tau[q] = mul0(g * cmax, mul0(pt * w_num, std::expm1(rho_t)) + mul0(2 * lam * pt, blse) +
                                3 * kU32 * (pt * w_num + 1.0));
  // dz̃ itself must stay finite in the logits dtype: |dz̃_j| ≤ g·scale·(w·p_j·e^{ρ} + 1).
  if (g * s * (w_num * std::exp(std::min(rho_max, 700.0)) + 1.0) >
      max_finite(r.logits == DType::fp64 ? DType::fp32 : r.logits)) {
    c.eta[q] = kInf;
    c.tau[q] = kInf;
  }
  double cap_abs = 0.0;  // absolute error of the softcap chain factor, per unit p-part
  if (k.capped) {
    const double araw = in.linear ? s * in.gemm_abs[i] : zabs;  // bound on the pre-cap |a|
    cap_abs = s * (12 * kU32 + 2 * (k.uLstore * araw + nu) / in.spec.softcap) * w_num;
  }
  c.extra_h[q] = mul0(g, mul0(s * k.eps, c.eta[q]) + cap_abs);
  c.extra_w[q] =
      mul0(g, mul0(s * k.eps / static_cast<double>(std::max<std::int64_t>(in.V, 1)), c.eta[q]) +
                  cap_abs);
}

// lse and loss bounds of every row into b; the gradient coefficients of the valid rows.
RowCoefficients row_bounds(const BoundInputs& in, const Terms& k, Bounds& b) {
  const std::int64_t S = in.S;
  b.lse.assign(static_cast<std::size_t>(S), 0.0);
  b.loss.assign(static_cast<std::size_t>(S), 0.0);
  RowCoefficients c(S);
  for (std::int64_t i = 0; i < S; ++i) {
    const double blse = lse_bound(in, k, i);
    b.lse[static_cast<std::size_t>(i)] = blse;
    if (!in.valid[i]) continue;
    b.loss[static_cast<std::size_t>(i)] = loss_bound(in, k, i, blse);
    gradient_coefficients(in, k, i, blse, c);
  }
  return c;
}

// Reduced loss: pairwise over tokens in accum (docs/arithmetic.md §6).
void reduced_loss_bound(const BoundInputs& in, const Terms& k, Bounds& b) {
  const LossSpec& sp = in.spec;
  const std::int64_t S = in.S;
  double sum_b = 0.0, sum_abs = 0.0;
  std::int64_t nv = 0;
  for (std::int64_t i = 0; i < S; ++i) {
    if (!in.valid[i]) continue;
    ++nv;
    const double g = sp.reduction == Reduction::none ? std::fabs(in.grad_scale[i]) : 1.0;
    sum_b += mul0(g, b.loss[static_cast<std::size_t>(i)]);
    sum_abs += g * std::fabs(in.loss[i]);
  }
  b.c_tokens = reduction_constant(in.arith.token_order, S, in.arith);
  const double gT = gamma_bound(b.c_tokens, k.uA);
  double rb =
      sum_b + mul0(gT, sum_abs) + (sp.reduction == Reduction::none ? 2 * kU32 * sum_abs : 0.0);
  const std::int64_t n_mean = sp.normalizer > 0 ? sp.normalizer : nv;  // the mean's divisor
  if (sp.reduction == Reduction::mean && n_mean > 0) rb /= static_cast<double>(n_mean);
  if (sum_abs * (1.0 + gT) + sum_b > max_finite(in.recipe.accum))
    rb = kInf;  // the token sum may overflow
  rb += (kU32 + k.uA1) * std::fabs(in.reduced_loss_ref);
  b.reduced_loss = rb;
}

// dz (logits problems), per element from the raw logits.
void dz_bounds(const BoundInputs& in, const Terms& k, Bounds& b) {
  const Recipe& r = in.recipe;
  const LossSpec& sp = in.spec;
  const double lam = k.lam, eps = k.eps, s = k.s;
  const std::int64_t S = in.S, V = in.V;
  b.dz.resize(static_cast<std::size_t>(S * V));  // zeros, written in parallel (HostArray)
  const double dz_max = std::min(max_finite(r.logits), max_finite(r.grad));
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < S; ++i) {
    if (!in.valid[i]) continue;
    const double lse = in.lse[i], blse = b.lse[static_cast<std::size_t>(i)];
    const double g = std::fabs(in.grad_scale[i]);
    const double w_num = 1.0 + 2 * lam * std::fabs(lse);
    for (std::int64_t j = 0; j < V; ++j) {
      const double raw = in.raw_logits[i * V + j];
      if (raw == -kInf) continue;  // masked: p = 0 exactly, dz = −ε/V·g (exact in fp32 ops)
      double x = s * raw, cf = s, cf_err = 0.0;
      if (k.capped) {
        const double th = std::tanh(x / sp.softcap);
        x = sp.softcap * th;
        cf = s * (1 - th * th);
        cf_err = s * (12 * kU32 * th * th +
                      2 * std::fabs(th) * (k.uLstore * std::fabs(s * raw)) / sp.softcap);
      }
      const double p = std::exp(x - lse);
      const double rho = k.mu * std::fabs(x) + blse + kU32 * std::fabs(x - lse) + kLibm32;
      const double ppart = p * w_num;
      const double onehot = in.target && j == in.target[i] ? 1.0 - eps : 0.0;
      const double dzr = std::fabs(in.dz_ref[i * V + j]);
      const double bt0 = mul0(g * cf, mul0(ppart, std::expm1(rho)) + mul0(2 * lam * p, blse) +
                                          3 * kU32 * (ppart + onehot + eps / V)) +
                         g * cf_err * (ppart + 1.0) + (2 * kU32 + k.uL1 + k.uG1) * dzr + k.subL +
                         k.subG;
      // Overflow of dz in the logits or grad dtype: no bound.
      const double bt = dzr + bt0 > dz_max ? kInf : bt0;
      b.dz[static_cast<std::size_t>(i * V + j)] = bt;
    }
  }
}

// dH = dz̃·W (fp32 GEMM over V, output rounded to grad): propagated dz errors (η·|dz|·|W| for
// the off-target part, τ·|W_t| for the target entry, extra·max|W| for smoothing/softcap), the
// GEMM accumulation γ(u_32)·|dz|·|W|, and the output rounding.
void dH_bounds(const BoundInputs& in, const Terms& k, const RowCoefficients& c, Bounds& b) {
  const std::int64_t S = in.S;
  const double gGemmV = gamma_bound(dH_vocab_constant(in.arith, in.V), kU32);
  const std::int64_t D = in.D;
  b.dH.resize(static_cast<std::size_t>(S * D));  // zeros, written in parallel (HostArray)
  const double dH_max = max_finite(in.recipe.grad);
  // Element by element (each its own formula): the same bits on any number of threads.
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < S; ++i) {
    if (!in.valid[i]) continue;
    const auto row = static_cast<std::size_t>(i);
    for (std::int64_t kk = 0; kk < D; ++kk) {
      const std::size_t q = static_cast<std::size_t>(i * D + kk);
      const double cond = in.dH_cond[q];
      const double wmax = in.W_colmax_abs ? in.W_colmax_abs[kk] : kInf;
      double v = mul0(c.eta[row] + gGemmV, cond) + k.uG1 * std::fabs(in.dH_ref[q]) + k.subG;
      if (in.W_target_abs) v += mul0(c.tau[row], in.W_target_abs[q]);
      if (c.extra_h[row] > 0) v += mul0(c.extra_h[row], wmax);
      // dz̃ entries that underflow in the logits dtype: subL each, Σ_j subL·|W_jk| ≤
      // subL·V·max|W_k|.
      v += mul0(k.subL * static_cast<double>(in.V), wmax);
      if (std::fabs(in.dH_ref[q]) + v > dH_max) v = kInf;
      b.dH[q] = v;
    }
  }
}

// dW = dz̃ᵀ·H over the token rows: fp32 GEMM over each chunk's tokens, chunk results added in
// the accum dtype (γ_{n_chunks}(u_A) when accum is not fp32 or there are several chunks); db the
// same sums without H.
void dW_db_bounds(const BoundInputs& in, const Terms& k, const RowCoefficients& c, Bounds& b) {
  const Recipe& r = in.recipe;
  const std::int64_t S = in.S;
  const double gGemmS = gamma_bound(static_cast<double>(S), kU32);
  const double gChunks =
      in.n_chunks > 1 || k.uA1 > 0 ? gamma_bound(static_cast<double>(in.n_chunks), k.uA) : 0.0;
  double eta_max = 0.0;
  for (std::int64_t i = 0; i < S; ++i)
    if (in.valid[i]) eta_max = std::max(eta_max, c.eta[static_cast<std::size_t>(i)]);
  const std::int64_t D = in.D, J = in.J;
  // Σ_i extra_w_i·|H_ik| (every vocabulary row) and the target terms Σ_{t_i = j} τ_i·|H_ik|.
  std::vector<double> extra_col(static_cast<std::size_t>(D), 0.0),
      habs_col(static_cast<std::size_t>(D), 0.0);
  // The target terms live on the vocabulary rows that are some valid row's target: one
  // D-vector per such row (slot), not a J × D matrix that is zero almost everywhere.
  std::vector<std::int64_t> slot_of(static_cast<std::size_t>(J), -1);
  std::vector<double> tgt;  // (slots × D)
  std::vector<double> tgt_db(static_cast<std::size_t>(J), 0.0);
  double extra_db = 0.0;
  std::vector<std::int64_t> slot_of_row(static_cast<std::size_t>(S), -1);
  std::int64_t slots = 0;
  for (std::int64_t i = 0; i < S; ++i) {
    if (!in.valid[i]) continue;
    extra_db += c.extra_w[static_cast<std::size_t>(i)];
    const std::int64_t pos = in.target_vocab_pos ? in.target_vocab_pos[i] : -1;
    if (pos >= 0) tgt_db[static_cast<std::size_t>(pos)] += c.tau[static_cast<std::size_t>(i)];
    if (pos >= 0 && in.H_abs) {
      std::int64_t& slot = slot_of[static_cast<std::size_t>(pos)];
      if (slot < 0) slot = slots++;
      slot_of_row[static_cast<std::size_t>(i)] = slot;
    }
  }
  if (in.H_abs) {
    tgt.assign(static_cast<std::size_t>(slots * D), 0.0);
    // In parallel over blocks of columns, each column's sums over the rows in row order: the
    // same bits on any number of threads.
    constexpr std::int64_t kCols = 64;
#pragma omp parallel for schedule(static)
    for (std::int64_t k0 = 0; k0 < D; k0 += kCols) {
      const std::int64_t k1 = std::min(D, k0 + kCols);
      for (std::int64_t i = 0; i < S; ++i) {
        if (!in.valid[i]) continue;
        const double ew = c.extra_w[static_cast<std::size_t>(i)];
        const std::int64_t slot = slot_of_row[static_cast<std::size_t>(i)];
        double* t_row = slot >= 0 ? tgt.data() + slot * D : nullptr;
        for (std::int64_t kk = k0; kk < k1; ++kk) {
          const double h = in.H_abs[i * D + kk];
          extra_col[static_cast<std::size_t>(kk)] += mul0(ew, h);
          habs_col[static_cast<std::size_t>(kk)] += h;
          if (t_row) t_row[kk] += mul0(c.tau[static_cast<std::size_t>(i)], h);
        }
      }
    }
  }
  if (in.dW_ref && in.dW_cond) {
    b.dW.resize(static_cast<std::size_t>(J * D));  // zeros, written in parallel (HostArray)
    const double dW_max = std::min(max_finite(r.grad), max_finite(r.accum));
    // Element by element (each its own formula): the same bits on any number of threads.
#pragma omp parallel for schedule(static)
    for (std::int64_t j = 0; j < J; ++j) {
      const std::int64_t slot = slot_of[static_cast<std::size_t>(j)];
      for (std::int64_t kk = 0; kk < D; ++kk) {
        const std::size_t q = static_cast<std::size_t>(j * D + kk);
        const double cond = in.dW_cond[q];
        const double t_jk = slot >= 0 ? tgt[static_cast<std::size_t>(slot * D + kk)] : 0.0;
        double v = mul0(eta_max + gGemmS + gChunks, cond) + k.uG1 * std::fabs(in.dW_ref[q]) + t_jk +
                   extra_col[static_cast<std::size_t>(kk)] + k.subG +
                   k.subL * habs_col[static_cast<std::size_t>(kk)] +
                   (gChunks > 0 ? static_cast<double>(in.n_chunks) * k.subA
                                : 0.0);    // chunk adds underflow
        if (!in.H_abs && S > 0) v = kInf;  // target terms need |H|
        if (std::fabs(in.dW_ref[q]) + v > dW_max) v = kInf;
        b.dW[q] = v;
      }
    }
  }
  if (in.db_ref && in.db_cond) {
    const double gS = gamma_bound(static_cast<double>(S), k.uA);
    b.db.assign(static_cast<std::size_t>(J), 0.0);
    for (std::int64_t j = 0; j < J; ++j)
      b.db[static_cast<std::size_t>(j)] =
          mul0(eta_max + gS, in.db_cond[j]) + tgt_db[static_cast<std::size_t>(j)] + extra_db +
          k.uG1 * std::fabs(in.db_ref[j]) + k.subG + (k.subL + k.subA) * static_cast<double>(S);
  }
}

// A bound that is +Inf anywhere makes the whole set not meaningful.
bool any_infinite(const double* v, std::int64_t n) {
  bool inf = false;
#pragma omp parallel for schedule(static) reduction(|| : inf)
  for (std::int64_t q = 0; q < n; ++q) inf = inf || std::isinf(v[q]);
  return inf;
}
template <class Vec>
bool any_infinite(const Vec& v) {
  return any_infinite(v.data(), static_cast<std::int64_t>(v.size()));
}
void mark_meaningful(Bounds& b) {
  if (any_infinite(b.loss) || any_infinite(b.lse) || any_infinite(b.dz) || any_infinite(b.dH) ||
      any_infinite(b.dW) || any_infinite(b.db) || std::isinf(b.reduced_loss))
    b.meaningful = false;
}

}  // namespace

Bounds compute_bounds(const BoundInputs& in) {
  check_inputs(in);
  Bounds b;
  const Terms k = terms_of(in, b);
  const RowCoefficients c = row_bounds(in, k, b);
  reduced_loss_bound(in, k, b);
  if (in.dz_ref && in.raw_logits) dz_bounds(in, k, b);
  if (in.dH_ref && in.dH_cond) dH_bounds(in, k, c, b);
  if ((in.dW_ref && in.dW_cond) || in.db_ref) dW_db_bounds(in, k, c, b);
  mark_meaningful(b);
  return b;
}

}  // namespace xentlab

// Fast tier of the certified reference. See reference.hpp for the arithmetic, and
// docs/reference.md for the derivation of every bound below (first order in u = 2^-53).
#include "reference/reference.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "numerics/eft.hpp"
#include "numerics/error.hpp"

namespace xentlab {
namespace {

constexpr double kU = 0x1p-53;  // unit roundoff of double
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// libm exp, log1p, tanh and cosh of glibc are documented within 1–2 ULP on x86-64; one ULP is at
// most 2u relative, so 2 ULP ≤ 4u. We charge every elementary function 4u relative.
constexpr double kLibm = 4 * kU;
constexpr int kLanes = 8;  // independent compensated accumulators per dot product

// Sum2 of the exact products h[d]·w[d] and the bias: lane-parallel TwoSum accumulation, lanes
// merged with TwoSum. Products of fp32/fp16/bf16 values are exact in double.
inline double dot_exact_products(const double* h, const double* w, std::int64_t D, double bias) {
  double s[kLanes] = {}, c[kLanes] = {};
  std::int64_t d = 0;
  for (; d + kLanes <= D; d += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double p = h[d + l] * w[d + l];
      const double t = s[l] + p;
      const double bb = t - s[l];
      c[l] += (s[l] - (t - bb)) + (p - bb);
      s[l] = t;
    }
  }
  eft::CompensatedSum acc;
  for (; d < D; ++d) acc.add(h[d] * w[d]);
  for (int l = 0; l < kLanes; ++l) {
    acc.add(s[l]);
    acc.c += c[l];
  }
  acc.add(bias);
  return acc.value();
}

// Dot2 accumulation over a stream of (x, y-row) pairs into D-vectors: acc += x·y, with the
// error terms in err, and the condition/bound accumulators cond += |x|·|y|, bnd += bx·|y|.
struct Dot2Rows {
  std::vector<double> s, c, cond, bnd;
  explicit Dot2Rows(std::int64_t D = 0) { reset(D); }
  void reset(std::int64_t D) {
    s.assign(static_cast<std::size_t>(D), 0.0);
    c.assign(static_cast<std::size_t>(D), 0.0);
    cond.assign(static_cast<std::size_t>(D), 0.0);
    bnd.assign(static_cast<std::size_t>(D), 0.0);
  }
  void add(double x, double bx, const double* y, std::int64_t D) {
    double* __restrict ps = s.data();
    double* __restrict pc = c.data();
    double* __restrict pcond = cond.data();
    double* __restrict pbnd = bnd.data();
    const double ax = std::fabs(x);
    for (std::int64_t d = 0; d < D; ++d) {
      const double p = x * y[d];
      const double ep = std::fma(x, y[d], -p);  // TwoProduct
      const double t = ps[d] + p;               // TwoSum
      const double bb = t - ps[d];
      pc[d] += ((ps[d] - (t - bb)) + (p - bb)) + ep;
      ps[d] = t;
      const double ay = std::fabs(y[d]);
      pcond[d] = std::fma(ax, ay, pcond[d]);
      pbnd[d] = std::fma(bx, ay, pbnd[d]);
    }
  }
  // Writes value, bound (propagated + Dot2 rounding u|v| + γ_n²·cond) and cond.
  void finish(std::int64_t D, double n_terms, double* value, double* bound, double* condition) const {
    const double g2 = eft::gamma_n(n_terms) * eft::gamma_n(n_terms);
    for (std::int64_t d = 0; d < D; ++d) {
      const double v = s[static_cast<std::size_t>(d)] + c[static_cast<std::size_t>(d)];
      value[d] = v;
      bound[d] = bnd[static_cast<std::size_t>(d)] + 2 * kU * std::fabs(v) +
                 g2 * cond[static_cast<std::size_t>(d)];
      if (condition) condition[d] = cond[static_cast<std::size_t>(d)];
    }
  }
};

// Per-row scalars of the forward pass.
struct RowStats {
  double lse, lse_b, ce, ce_b, z_term, z_term_b, maxz, pt, entropy, sum_p_abs_z;
  double dzmax;  // max_j δz_j over finite logits (input error of this row's logits)
};

struct Context {
  const Problem& pb;
  const LossSpec& sp;
  std::int64_t N, V, D;
  std::vector<double> w_norm;  // ‖W_j‖₂ (upper bound), linear problems
  double dot_g2 = 0;           // γ²_{D+kLanes+1}
};

// Logits of one row, in z (after scale and softcap), with per-element error bound in dz_b and the
// chain factor d z / d raw in chain (and its error bound in chain_b).
void row_logits(const Context& cx, std::int64_t i, const double* h_row, double h_norm,
                std::vector<double>& wbuf, double* z, double* zb, double* chain, double* chain_b) {
  const std::int64_t V = cx.V, D = cx.D;
  const LossSpec& sp = cx.sp;
  const bool linear = cx.pb.is_linear();
  if (!linear) cx.pb.logits.read(i * V, V, z);
  for (std::int64_t j = 0; j < V; ++j) {
    double r, rb = 0.0;
    if (linear) {
      cx.pb.W.read(j * D, D, wbuf.data());
      const double b = cx.pb.bias ? cx.pb.bias->get(j) : 0.0;
      if (b == -kInf) {
        r = -kInf;
      } else {
        r = dot_exact_products(h_row, wbuf.data(), D, b);
        // Sum2 bound: u|r| + γ²·Σ|p|, Σ|p| ≤ ‖H_i‖‖W_j‖ + |b|.
        rb = kU * std::fabs(r) + cx.dot_g2 * (h_norm * cx.w_norm[static_cast<std::size_t>(j)] +
                                              std::fabs(b));
      }
    } else {
      r = z[j];
    }
    double v = r, vb = rb, ch = 1.0, chb = 0.0;
    if (sp.logit_scale != 1.0) {
      v = sp.logit_scale * r;
      vb = sp.logit_scale * rb + kU * std::fabs(v);
      ch = sp.logit_scale;
    }
    if (sp.softcap > 0.0) {
      const double c = sp.softcap;
      const double x = v / c;
      const double th = std::tanh(x);
      const double zc = c * th;
      const double co = std::cosh(x);
      const double sech2 = std::isinf(co) ? 0.0 : 1.0 / (co * co);
      // δz' ≤ sech²·(δv + u|v|) + |z'|·(kLibm + u) ; d/dv of sech²(v/c) is −2·sech²·th/c.
      const double zcb = sech2 * (vb + kU * std::fabs(v)) + std::fabs(zc) * (kLibm + kU);
      chb = ch * sech2 * (2 * std::fabs(th) * (vb + kU * std::fabs(v)) / c + kLibm + 4 * kU);
      ch = ch * sech2;
      v = zc;
      vb = zcb;
    }
    z[j] = v;
    zb[j] = vb;
    chain[j] = ch;
    chain_b[j] = chb;
  }
}

// Forward of one row from its logits; fills e (unnormalised softmax e_j = exp(z_j − a)).
RowStats row_forward(const Context& cx, std::int64_t t, bool valid, const double* z,
                     const double* zb, double* e, double& one_plus_s, double& one_minus_pt) {
  const std::int64_t V = cx.V;
  const LossSpec& sp = cx.sp;
  RowStats r{};
  std::int64_t k = -1;
  double a = -kInf;
  double dzmax = 0.0;
  for (std::int64_t j = 0; j < V; ++j) {
    if (z[j] > a) {
      a = z[j];
      k = j;
    }
    if (std::isfinite(z[j])) dzmax = std::max(dzmax, zb[j]);
  }
  r.maxz = a;
  r.dzmax = dzmax;
  if (k < 0) {  // every logit −inf: softmax undefined
    std::fill(e, e + V, 0.0);
    r.lse = -kInf;
    r.lse_b = 0;
    r.ce = valid ? kInf : 0.0;
    r.ce_b = 0;
    r.z_term = valid && sp.z_loss > 0 ? kInf : 0.0;
    r.z_term_b = 0;
    r.pt = valid ? 0.0 : kNaN;
    r.entropy = kNaN;
    r.sum_p_abs_z = kNaN;
    one_plus_s = 1.0;
    one_minus_pt = 1.0;
    return r;
  }
  // s = Σ_{j≠k} e_j and s_ex = Σ_{j∉{k,t}} e_j (Sum2); err_s bounds the error of s from the
  // rounding of (z_j − a) (u|z_j − a| in the argument) and of exp (kLibm relative), per term.
  eft::CompensatedSum s, s_ex, gap_sum, ent, pz, zsum_gap;
  double err_s = 0.0;
  for (std::int64_t j = 0; j < V; ++j) {
    if (j == k) {
      e[j] = 1.0;
      continue;
    }
    if (z[j] == -kInf) {
      e[j] = 0.0;
      continue;
    }
    const double g = a - z[j];  // ≥ 0
    const double ej = std::exp(-g);
    e[j] = ej;
    s.add(ej);
    if (j != t) s_ex.add(ej);
    err_s += ej * (kU * g + kLibm);
    ent.add(ej * g);
    pz.add(ej * std::fabs(z[j]));
  }
  const double sv = s.value();
  const double g2V = eft::gamma_n(static_cast<double>(V)) * eft::gamma_n(static_cast<double>(V));
  err_s += 2 * kU * sv + g2V * sv;
  const double l1p = std::log1p(sv);
  r.lse = a + l1p;
  // δlse: input error ≤ Σ p δz ≤ max δz; s error through log1p; log1p and the final addition.
  r.lse_b = dzmax + err_s / (1.0 + sv) + kLibm * l1p + kU * std::fabs(r.lse);
  one_plus_s = 1.0 + sv;
  const double inv = 1.0 / one_plus_s;
  r.entropy = l1p + ent.value() * inv;  // Σ p (lse − z) = log1p(s) + Σ e (a − z)/(1+s)
  r.sum_p_abs_z = (pz.value() + std::fabs(a)) * inv;
  if (t >= 0) {
    r.pt = e[t] * inv;
    // 1 − p_t without cancellation.
    one_minus_pt = (t == k) ? sv * inv : (1.0 + s_ex.value()) * inv;
  } else {
    r.pt = kNaN;
    one_minus_pt = kNaN;
  }
  if (!valid) {
    r.ce = r.ce_b = r.z_term = r.z_term_b = 0.0;
    return r;
  }
  const double eps = sp.label_smoothing;
  const double gap_t = a - z[t];  // +inf when the target is masked
  double ce = (1.0 - eps) * gap_t + l1p;
  double ce_b = (1.0 - eps) * (dzmax + zb[t] + kU * std::fabs(gap_t)) + err_s / (1.0 + sv) +
                kLibm * l1p;
  if (eps > 0.0) {
    // (ε/V)·Σ_j (a − z_j): mean gap, Sum2 over non-negative terms (+inf for masked logits).
    for (std::int64_t j = 0; j < V; ++j) zsum_gap.add(a - z[j]);
    const double mg = zsum_gap.value() / static_cast<double>(V);
    ce += eps * mg;
    ce_b += eps * (2 * dzmax + 3 * kU * std::fabs(mg) + g2V * std::fabs(mg));
  }
  ce_b += 3 * kU * std::fabs(ce);
  r.ce = ce;
  r.ce_b = std::isfinite(ce) ? ce_b : 0.0;
  if (sp.z_loss > 0.0) {
    r.z_term = sp.z_loss * r.lse * r.lse;
    r.z_term_b = sp.z_loss * 2 * std::fabs(r.lse) * r.lse_b + 3 * kU * r.z_term;
  }
  return r;
}

}  // namespace

std::vector<std::int64_t> sample_rows(std::int64_t n, std::int64_t k, std::uint64_t seed) {
  if (n < 0 || k < 0) throw InputError("sample_rows: negative size");
  k = std::min(k, n);
  std::vector<std::int64_t> all;
  if (k * 4 >= n) {  // dense: shuffle-select
    all.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = i;
    std::mt19937_64 rng(seed);
    for (std::int64_t i = 0; i < k; ++i) {
      std::uniform_int_distribution<std::int64_t> pick(i, n - 1);
      std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(pick(rng))]);
    }
    all.resize(static_cast<std::size_t>(k));
  } else {  // sparse: rejection of duplicates
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> pick(0, n - 1);
    std::vector<std::int64_t> seen;
    while (static_cast<std::int64_t>(all.size()) < k) {
      const std::int64_t v = pick(rng);
      if (!std::binary_search(seen.begin(), seen.end(), v)) {
        seen.insert(std::upper_bound(seen.begin(), seen.end(), v), v);
        all.push_back(v);
      }
    }
  }
  std::sort(all.begin(), all.end());
  return all;
}

namespace {

std::vector<std::int64_t> checked_rows(const std::vector<std::int64_t>& rows, std::int64_t n,
                                       const char* what) {
  if (rows.empty()) {
    std::vector<std::int64_t> all(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = i;
    return all;
  }
  for (std::size_t q = 0; q < rows.size(); ++q) {
    if (rows[q] < 0 || rows[q] >= n)
      throw InputError(fmt::format("{} [{}] = {} is outside [0, {})", what, q, rows[q], n));
    if (q > 0 && rows[q] <= rows[q - 1])
      throw InputError(fmt::format("{} must be sorted and unique ([{}] = {} after {})", what, q,
                                   rows[q], rows[q - 1]));
  }
  return rows;
}

}  // namespace

ReferenceResult compute_reference(const Problem& pb, const LossSpec& sp,
                                  const ReferenceOptions& opt) {
  sp.validate();
  pb.validate(sp.ignore_index);
  if (opt.threads < 0 || opt.threads > 4096)
    throw InputError(fmt::format("threads must be in [0, 4096] (0 = OpenMP's default), got {}", opt.threads));
  const bool linear = pb.is_linear();
  if (linear && pb.H.dtype() == DType::fp64)
    throw InputError("H/W in fp64 are not supported: products of fp64 values are not exact");
  const std::int64_t N = pb.N, V = pb.V, D = pb.D;
  const bool want_dH = linear && opt.want_dH;
  const bool want_dW = linear && opt.want_dW;
  const bool want_db = linear && opt.want_db;

  ReferenceResult res;
  res.N = N;
  res.V = V;
  res.D = D;
  res.token_rows = checked_rows(opt.token_rows, N, "token_rows");
  res.vocab_rows = checked_rows(opt.vocab_rows, V, "vocab_rows");
  const auto S = static_cast<std::int64_t>(res.token_rows.size());
  const auto J = static_cast<std::int64_t>(res.vocab_rows.size());
  res.partial = S < N;
  res.n_valid = pb.count_valid(sp.ignore_index);
  if (!opt.upstream.empty()) {
    if (sp.reduction != Reduction::none)
      throw InputError("an upstream gradient is only taken with reduction none");
    if (static_cast<std::int64_t>(opt.upstream.size()) != N)
      throw InputError(fmt::format("upstream gradient has {} entries, expected N={}",
                                   opt.upstream.size(), N));
    for (std::size_t i = 0; i < opt.upstream.size(); ++i)
      if (!std::isfinite(opt.upstream[i]))
        throw InputError(fmt::format("upstream gradient [{}] = {} is not finite", i, opt.upstream[i]));
  }
  if (want_dW && static_cast<double>(J) * static_cast<double>(D) * 32.0 >
                     static_cast<double>(opt.max_bytes))
    throw InputError(fmt::format(
        "dW for {} vocabulary rows × D={} needs {:.1f} GiB of accumulators (limit {:.1f} GiB): "
        "sample vocabulary rows (ReferenceOptions::vocab_rows; --vocab-rows of xentlab audit, "
        "golden and bench)",
        J, D, J * D * 32.0 / (1 << 30), opt.max_bytes / double(1 << 30)));
  if (opt.want_dz && static_cast<double>(S) * V * 16.0 > static_cast<double>(opt.max_bytes))
    throw InputError(fmt::format("dz for {} rows × V={} needs {:.1f} GiB (limit {:.1f} GiB): "
                                 "sample token rows (--rows)",
                                 S, V, S * V * 16.0 / (1 << 30), opt.max_bytes / double(1 << 30)));

  Context cx{pb, sp, N, V, D, {}, 0.0};
  if (linear) {
    const double gd = eft::gamma_n(static_cast<double>(D + kLanes + 1));
    cx.dot_g2 = gd * gd;
    cx.w_norm.resize(static_cast<std::size_t>(V));
#pragma omp parallel num_threads(opt.threads > 0 ? opt.threads : omp_get_max_threads())
    {
      std::vector<double> w(static_cast<std::size_t>(D));
#pragma omp for schedule(static)
      for (std::int64_t j = 0; j < V; ++j) {
        pb.W.read(j * D, D, w.data());
        double ss = 0;
        for (double x : w) ss += x * x;
        // sqrt of a sum of squares rounded D times: (1 + γ_{D+2}) covers it; take 1e-12 margin.
        cx.w_norm[static_cast<std::size_t>(j)] = std::sqrt(ss) * (1.0 + 1e-12);
      }
    }
  }

  // Gradient scale per row: dL/dloss_i.
  auto grad_scale = [&](std::int64_t i, bool valid) -> double {
    if (!valid) return 0.0;
    switch (sp.reduction) {
      case Reduction::mean: return res.n_valid > 0 ? 1.0 / static_cast<double>(res.n_valid) : 0.0;
      case Reduction::sum: return 1.0;
      case Reduction::none:
        return opt.upstream.empty() ? 1.0 : opt.upstream[static_cast<std::size_t>(i)];
    }
    return 0.0;
  };

  auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  res.loss.resize(sz(S));
  res.loss_bound.resize(sz(S));
  res.lse.resize(sz(S));
  res.lse_bound.resize(sz(S));
  res.ce.resize(sz(S));
  res.z_term.resize(sz(S));
  res.max_logit.resize(sz(S));
  res.p_target.resize(sz(S));
  res.entropy.resize(sz(S));
  res.sum_p_abs_z.resize(sz(S));
  res.grad_scale.resize(sz(S));
  if (opt.want_dz) {
    res.dz.resize(sz(S * V));
    res.dz_bound.resize(sz(S * V));
  }
  if (want_dH) {
    res.dH.resize(sz(S * D));
    res.dH_bound.resize(sz(S * D));
    res.dH_cond.resize(sz(S * D));
  }
  std::vector<Dot2Rows> dW_acc;
  std::vector<eft::CompensatedSum> db_acc;
  std::vector<double> db_bnd, db_abs;
  if (want_dW) dW_acc.assign(sz(J), Dot2Rows(D));
  if (want_db) {
    db_acc.assign(sz(J), {});
    db_bnd.assign(sz(J), 0.0);
    db_abs.assign(sz(J), 0.0);
  }

  // Token blocks: the dz of a block (and its bounds) is kept for the dW/db pass.
  const bool keep_block = want_dW || want_db;
  std::int64_t B = S;
  if (keep_block) {
    B = std::max<std::int64_t>(1, (std::int64_t{512} << 20) / std::max<std::int64_t>(1, V * 16));
    B = std::min(B, std::max<std::int64_t>(S, 1));
  }
  std::vector<double> blk_dz, blk_bdz, blk_h;
  if (keep_block) {
    blk_dz.resize(sz(B * V));
    blk_bdz.resize(sz(B * V));
    blk_h.resize(sz(B * std::max<std::int64_t>(D, 1)));
  }
  const int nthreads = opt.threads > 0 ? opt.threads : omp_get_max_threads();

  for (std::int64_t b0 = 0; b0 < S; b0 += B) {
    const std::int64_t b1 = std::min(S, b0 + B);
#pragma omp parallel num_threads(nthreads)
    {
      std::vector<double> z(sz(V)), zb(sz(V)), ch(sz(V)), chb(sz(V)), e(sz(V)), g(sz(V)),
          gb(sz(V)), wbuf(sz(std::max<std::int64_t>(D, 1))), hbuf(sz(std::max<std::int64_t>(D, 1)));
      Dot2Rows dh(want_dH ? D : 0);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t q = b0; q < b1; ++q) {
        const std::int64_t i = res.token_rows[sz(q)];
        const std::int64_t t = pb.targets[sz(i)];
        const bool valid = t != sp.ignore_index;
        double h_norm = 0.0;
        if (linear) {
          pb.H.read(i * D, D, hbuf.data());
          double ss = 0;
          for (std::int64_t d = 0; d < D; ++d) ss += hbuf[sz(d)] * hbuf[sz(d)];
          h_norm = std::sqrt(ss) * (1.0 + 1e-12);
          if (keep_block) std::copy(hbuf.begin(), hbuf.end(), blk_h.begin() + (q - b0) * D);
        }
        row_logits(cx, i, hbuf.data(), h_norm, wbuf, z.data(), zb.data(), ch.data(), chb.data());
        double ops = 1.0, omp_t = 0.0;
        const RowStats st =
            row_forward(cx, valid ? t : -1, valid, z.data(), zb.data(), e.data(), ops, omp_t);
        res.lse[sz(q)] = st.lse;
        res.lse_bound[sz(q)] = std::isfinite(st.lse) ? st.lse_b : 0.0;
        res.ce[sz(q)] = st.ce;
        res.z_term[sz(q)] = st.z_term;
        res.loss[sz(q)] = st.ce + st.z_term;
        res.loss_bound[sz(q)] =
            std::isfinite(res.loss[sz(q)]) ? st.ce_b + st.z_term_b + kU * res.loss[sz(q)] : 0.0;
        res.max_logit[sz(q)] = st.maxz;
        res.p_target[sz(q)] = st.pt;
        res.entropy[sz(q)] = st.entropy;
        res.sum_p_abs_z[sz(q)] = st.sum_p_abs_z;
        const double gs = grad_scale(i, valid);
        res.grad_scale[sz(q)] = gs;

        // Gradient of loss_i w.r.t. z_j (before the reduction scale):
        //   G_j = p_j·(1 + 2λ·lse) − (1 − ε)·[j = t] − ε/V,
        // with the target entry formed as −(1 − p_t) + 2λ·lse·p_t + ε·(1 − 1/V).
        // |Δp_j| ≤ p_j·(2·max δz + δs-terms): input error enters p_j through z_j and lse.
        const double eps = sp.label_smoothing, lam = sp.z_loss;
        const bool undefined = !std::isfinite(st.lse);
        const double inv = 1.0 / ops;
        const double prel = 2 * st.dzmax + 8 * kU + kLibm;  // relative bound of each p_j
        const double zl = 1.0 + 2 * lam * (undefined ? 0.0 : st.lse);
        const double zl_b = 2 * lam * st.lse_b;
        const double epsV = eps / static_cast<double>(V);
        for (std::int64_t j = 0; j < V; ++j) {
          double gj = 0.0, gjb = 0.0;
          if (valid && !undefined && gs != 0.0) {
            const double pj = e[sz(j)] * inv;
            const double pjb = pj * prel;
            if (j == t) {
              gj = -omp_t + 2 * lam * st.lse * pj + eps * (1.0 - 1.0 / static_cast<double>(V));
              gjb = omp_t * prel + 2 * lam * (std::fabs(st.lse) * pjb + pj * st.lse_b) +
                    4 * kU * (omp_t + std::fabs(2 * lam * st.lse * pj) + eps);
            } else {
              gj = pj * zl - epsV;
              gjb = pjb * std::fabs(zl) + pj * zl_b + 3 * kU * (pj * std::fabs(zl) + epsV);
            }
            // Chain to raw logits, reduction scale: dz_raw = gs · G_j · chain_j.
            const double v = gs * gj * ch[sz(j)];
            gjb = std::fabs(gs) * (gjb * std::fabs(ch[sz(j)]) + std::fabs(gj) * chb[sz(j)]) +
                  2 * kU * std::fabs(v);
            gj = v;
          }
          g[sz(j)] = gj;
          gb[sz(j)] = gjb;
        }
        if (opt.want_dz) {
          std::copy(g.begin(), g.end(), res.dz.begin() + q * V);
          std::copy(gb.begin(), gb.end(), res.dz_bound.begin() + q * V);
        }
        if (keep_block) {
          std::copy(g.begin(), g.end(), blk_dz.begin() + (q - b0) * V);
          std::copy(gb.begin(), gb.end(), blk_bdz.begin() + (q - b0) * V);
        }
        if (want_dH) {
          dh.reset(D);
          for (std::int64_t j = 0; j < V; ++j) {
            if (g[sz(j)] == 0.0 && gb[sz(j)] == 0.0) continue;  // exact zero: no contribution
            pb.W.read(j * D, D, wbuf.data());
            dh.add(g[sz(j)], gb[sz(j)], wbuf.data(), D);
          }
          dh.finish(D, static_cast<double>(V) + 1, res.dH.data() + q * D,
                    res.dH_bound.data() + q * D, res.dH_cond.data() + q * D);
        }
      }
      // dW/db over this block of tokens, parallel over vocabulary rows.
      if (keep_block) {
        std::vector<double> wcol;
#pragma omp for schedule(static)
        for (std::int64_t jj = 0; jj < J; ++jj) {
          const std::int64_t j = res.vocab_rows[sz(jj)];
          for (std::int64_t q = b0; q < b1; ++q) {
            const double x = blk_dz[sz((q - b0) * V + j)];
            const double bx = blk_bdz[sz((q - b0) * V + j)];
            if (x == 0.0 && bx == 0.0) continue;
            if (want_dW) dW_acc[sz(jj)].add(x, bx, blk_h.data() + (q - b0) * D, D);
            if (want_db) {
              db_acc[sz(jj)].add(x);
              db_bnd[sz(jj)] += bx;
              db_abs[sz(jj)] += std::fabs(x);
            }
          }
        }
      }
    }
    if (opt.progress) opt.progress(b1, S);
  }

  if (want_dW) {
    res.dW.resize(sz(J * D));
    res.dW_bound.resize(sz(J * D));
    res.dW_cond.resize(sz(J * D));
    for (std::int64_t jj = 0; jj < J; ++jj)
      dW_acc[sz(jj)].finish(D, static_cast<double>(S) + 1, res.dW.data() + jj * D,
                            res.dW_bound.data() + jj * D, res.dW_cond.data() + jj * D);
  }
  if (want_db) {
    res.db.resize(sz(J));
    res.db_bound.resize(sz(J));
    const double g2 = eft::gamma_n(static_cast<double>(S)) * eft::gamma_n(static_cast<double>(S));
    for (std::int64_t jj = 0; jj < J; ++jj) {
      const double v = db_acc[sz(jj)].value();
      res.db[sz(jj)] = v;
      res.db_bound[sz(jj)] = db_bnd[sz(jj)] + kU * std::fabs(v) + g2 * db_abs[sz(jj)];
    }
  }

  // Reduced loss: Sum2 over rows of g-weighted (none) or plain (sum/mean) losses.
  eft::CompensatedSum tot;
  double tot_b = 0.0, tot_abs = 0.0;
  std::int64_t valid_in_sample = 0;
  for (std::int64_t q = 0; q < S; ++q) {
    const std::int64_t i = res.token_rows[sz(q)];
    const bool valid = pb.targets[sz(i)] != sp.ignore_index;
    if (!valid) continue;
    ++valid_in_sample;
    const double w = sp.reduction == Reduction::none ? res.grad_scale[sz(q)] : 1.0;
    const double x = w * res.loss[sz(q)];
    tot.add(x);
    tot_b += std::fabs(w) * res.loss_bound[sz(q)] + (w != 1.0 ? kU * std::fabs(x) : 0.0);
    tot_abs += std::fabs(x);
  }
  double red = tot.value();
  const double g2S = eft::gamma_n(static_cast<double>(S)) * eft::gamma_n(static_cast<double>(S));
  double red_b = tot_b + kU * std::fabs(red) + g2S * tot_abs;
  if (sp.reduction == Reduction::mean) {
    const std::int64_t n = res.partial ? valid_in_sample : res.n_valid;
    if (n == 0) {
      red = sp.empty_mean == EmptyMean::nan ? kNaN : 0.0;
      red_b = 0.0;
    } else {
      red /= static_cast<double>(n);
      red_b = red_b / static_cast<double>(n) + kU * std::fabs(red);
    }
  }
  if (!std::isfinite(red)) red_b = 0.0;
  res.reduced_loss = red;
  res.reduced_loss_bound = red_b;
  return res;
}

}  // namespace xentlab

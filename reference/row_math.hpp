#pragma once
// The scalar arithmetic of one row of the certified reference, written once for the CPU tiers
// and the cuda tier's kernels (XL_HD). Each function performs its operations in the order the
// derivation in docs/reference.md ("One row") assumes; compile with no contraction of a*b+c
// (-ffp-contract=off on the host, -fmad=false for CUDA). Internal to reference/.
#include <cstdint>

#include "numerics/eft.hpp"
#include "numerics/hd.hpp"
#include "numerics/loss_spec.hpp"

namespace xentlab::detail {

inline constexpr double kRefU = 0x1p-53;  ///< unit roundoff of double
/// glibc's exp, log1p, tanh and cosh (and CUDA's, by its programming guide's table of maximum
/// ULP errors) are within 1–2 ULP; one ULP is at most 2u relative, so 2 ULP ≤ 4u. Every
/// elementary function is charged 4u relative.
inline constexpr double kRefLibm = 4 * kRefU;

/// Per-row scalars of the forward pass.
struct RowStats {
  double lse, lse_b, ce, ce_b, z_term, z_term_b, maxz, pt, entropy, sum_p_abs_z;
  double dzmax;  ///< max_j δz_j over finite logits (input error of this row's logits)
};

/// The reductions of one row that the forward needs, over j ≠ k (k the first index of the
/// maximum a) and finite z_j: s = Σ e_j and s_ex = Σ_{j≠t} e_j with e_j = exp(z_j − a) (Sum2),
/// err_s = Σ e_j(u(a − z_j) + 4u), ent = Σ e_j(a − z_j), pz = Σ e_j|z_j| (Sum2), and, with
/// label smoothing, zsum_gap = Σ_all j (a − z_j) (Sum2, +inf with a masked logit).
struct RowSums {
  double a, dzmax, s, s_ex, err_s, ent, pz, zsum_gap;
  std::int64_t k;
  double e_t, z_t, zb_t;  ///< at the target (unused for an ignored row)
};

XL_HD inline double ref_exp(double x) {
  return ::exp(x);
}
XL_HD inline double ref_log1p(double x) {
  return ::log1p(x);
}

/// Scale and softcap of one raw logit r (bound rb): the transformed z (bound zb), its derivative
/// dz/dr (chain) and the derivative's bound (chain_b).
XL_HD inline void transform_logit(const LossSpec& sp, double r, double rb, double& z, double& zb,
                                  double& chain, double& chain_b) {
  constexpr double kU = kRefU, kLibm = kRefLibm;
  if (r == -hd::inf()) {
    // A masked logit is exact: −inf, or −c under the softcap (tanh(−inf) = −1), whose derivative
    // with respect to the raw logit is exactly 0. (The general formulas below would give
    // 0·inf = NaN bounds here.)
    z = sp.softcap > 0.0 ? -sp.softcap : r;
    zb = 0.0;
    chain = sp.softcap > 0.0 ? 0.0 : sp.logit_scale;
    chain_b = 0.0;
    return;
  }
  double v = r, vb = rb, ch = 1.0, chb = 0.0;
  if (sp.logit_scale != 1.0) {
    v = sp.logit_scale * r;
    vb = sp.logit_scale * rb + kU * hd::fabs(v);
    ch = sp.logit_scale;
  }
  if (sp.softcap > 0.0) {
    const double c = sp.softcap;
    const double x = v / c;
    const double th = ::tanh(x);
    const double zc = c * th;
    const double co = ::cosh(x);
    const double sech2 = hd::isinf(co) ? 0.0 : 1.0 / (co * co);
    // δz' ≤ sech²·(δv + u|v|) + |z'|·(kLibm + u) ; d/dv of sech²(v/c) is −2·sech²·th/c.
    const double zcb = sech2 * (vb + kU * hd::fabs(v)) + hd::fabs(zc) * (kLibm + kU);
    chb = ch * sech2 * (2 * hd::fabs(th) * (vb + kU * hd::fabs(v)) / c + kLibm + 4 * kU);
    ch = ch * sech2;
    v = zc;
    vb = zcb;
  }
  z = v;
  zb = vb;
  chain = ch;
  chain_b = chb;
}

/// The forward of a row whose logits are all −inf (softmax undefined).
XL_HD inline RowStats undefined_row(const LossSpec& sp, bool valid, double a, double dzmax,
                                    double& one_plus_s, double& one_minus_pt) {
  const double inf = hd::inf(), nan = hd::nan();
  RowStats r{};
  r.maxz = a;
  r.dzmax = dzmax;
  r.lse = -inf;
  r.lse_b = 0;
  r.ce = valid ? inf : 0.0;
  r.ce_b = 0;
  r.z_term = valid && sp.z_loss > 0 ? inf : 0.0;
  r.z_term_b = 0;
  r.pt = valid ? 0.0 : nan;
  r.entropy = nan;
  r.sum_p_abs_z = nan;
  one_plus_s = 1.0;
  one_minus_pt = 1.0;
  return r;
}

/// The forward of a row (at least one finite logit) from its reductions; t = −1 for an ignored
/// row. Returns 1 + s and 1 − p_t (without cancellation) for the gradient.
XL_HD inline RowStats finish_row(const LossSpec& sp, std::int64_t V, std::int64_t t, bool valid,
                                 const RowSums& q, double& one_plus_s, double& one_minus_pt) {
  constexpr double kU = kRefU, kLibm = kRefLibm;
  const double nan = hd::nan();
  RowStats r{};
  r.maxz = q.a;
  r.dzmax = q.dzmax;
  const double a = q.a, dzmax = q.dzmax, sv = q.s;
  const double g2V = eft::gamma_n(static_cast<double>(V)) * eft::gamma_n(static_cast<double>(V));
  double err_s = q.err_s;
  err_s += 2 * kU * sv + g2V * sv;
  const double l1p = ref_log1p(sv);
  r.lse = a + l1p;
  // δlse: input error ≤ Σ p δz ≤ max δz; s error through log1p; log1p and the final addition.
  r.lse_b = dzmax + err_s / (1.0 + sv) + kLibm * l1p + kU * hd::fabs(r.lse);
  one_plus_s = 1.0 + sv;
  const double inv = 1.0 / one_plus_s;
  r.entropy = l1p + q.ent * inv;  // Σ p (lse − z) = log1p(s) + Σ e (a − z)/(1+s)
  r.sum_p_abs_z = (q.pz + hd::fabs(a)) * inv;
  if (t >= 0) {
    r.pt = q.e_t * inv;
    // 1 − p_t without cancellation.
    one_minus_pt = (t == q.k) ? sv * inv : (1.0 + q.s_ex) * inv;
  } else {
    r.pt = nan;
    one_minus_pt = nan;
  }
  if (!valid) {
    r.ce = r.ce_b = r.z_term = r.z_term_b = 0.0;
    return r;
  }
  const double eps = sp.label_smoothing;
  const double gap_t = a - q.z_t;  // +inf when the target is masked
  double ce = (1.0 - eps) * gap_t + l1p;
  double ce_b =
      (1.0 - eps) * (dzmax + q.zb_t + kU * hd::fabs(gap_t)) + err_s / (1.0 + sv) + kLibm * l1p;
  if (eps > 0.0) {
    // (ε/V)·Σ_j (a − z_j): mean gap, Sum2 over non-negative terms (+inf for masked logits).
    const double mg = q.zsum_gap / static_cast<double>(V);
    ce += eps * mg;
    ce_b += eps * (2 * dzmax + 3 * kU * hd::fabs(mg) + g2V * hd::fabs(mg));
  }
  ce_b += 3 * kU * hd::fabs(ce);
  r.ce = ce;
  r.ce_b = hd::isfinite(ce) ? ce_b : 0.0;
  if (sp.z_loss > 0.0) {
    r.z_term = sp.z_loss * r.lse * r.lse;
    r.z_term_b = sp.z_loss * 2 * hd::fabs(r.lse) * r.lse_b + 3 * kU * r.z_term;
  }
  return r;
}

/// Row constants of the gradient entries (grad_entry).
struct GradRow {
  double eps, lam, lse, lse_b, inv, prel, zl, zl_b, epsV, omp_t, gs;
  std::int64_t V, t;
  bool active;  ///< false: every entry is exactly 0 (ignored row, undefined softmax, gs = 0)
};

XL_HD inline GradRow grad_row(const LossSpec& sp, std::int64_t V, std::int64_t t, bool valid,
                              const RowStats& st, double gs, double one_plus_s,
                              double one_minus_pt) {
  constexpr double kU = kRefU, kLibm = kRefLibm;
  GradRow g{};
  g.eps = sp.label_smoothing;
  g.lam = sp.z_loss;
  const bool undefined = !hd::isfinite(st.lse);
  g.lse = st.lse;
  g.lse_b = st.lse_b;
  g.inv = 1.0 / one_plus_s;
  g.prel = 2 * st.dzmax + 8 * kU + kLibm;  // relative bound of each p_j
  g.zl = 1.0 + 2 * g.lam * (undefined ? 0.0 : st.lse);
  g.zl_b = 2 * g.lam * st.lse_b;
  g.epsV = g.eps / static_cast<double>(V);
  g.omp_t = one_minus_pt;
  g.gs = gs;
  g.V = V;
  g.t = t;
  g.active = valid && !undefined && gs != 0.0;
  return g;
}

/// Gradient entry j of the row with respect to its raw logit, times the gradient scale:
///   dz_j = gs · G_j · chain_j,  G_j = p_j(1 + 2λ·lse) − (1 − ε)[j = t] − ε/V,
/// the target entry formed as −(1 − p_t) + 2λ·lse·p_t + ε(1 − 1/V); e_j = exp(z_j − a).
/// |Δp_j| ≤ p_j·(2·max δz + δs-terms): input error enters p_j through z_j and lse.
XL_HD inline void grad_entry(const GradRow& r, std::int64_t j, double e_j, double ch, double chb,
                             double& g, double& gb) {
  constexpr double kU = kRefU;
  double gj = 0.0, gjb = 0.0;
  if (r.active) {
    const double pj = e_j * r.inv;
    const double pjb = pj * r.prel;
    if (j == r.t) {
      gj = -r.omp_t + 2 * r.lam * r.lse * pj + r.eps * (1.0 - 1.0 / static_cast<double>(r.V));
      gjb = r.omp_t * r.prel + 2 * r.lam * (hd::fabs(r.lse) * pjb + pj * r.lse_b) +
            4 * kU * (r.omp_t + hd::fabs(2 * r.lam * r.lse * pj) + r.eps);
    } else {
      gj = pj * r.zl - r.epsV;
      gjb = pjb * hd::fabs(r.zl) + pj * r.zl_b + 3 * kU * (pj * hd::fabs(r.zl) + r.epsV);
    }
    // Chain to raw logits, reduction scale: dz_raw = gs · G_j · chain_j.
    const double v = r.gs * gj * ch;
    gjb = hd::fabs(r.gs) * (gjb * hd::fabs(ch) + hd::fabs(gj) * chb) + 2 * kU * hd::fabs(v);
    gj = v;
  }
  g = gj;
  gb = gjb;
}

}  // namespace xentlab::detail

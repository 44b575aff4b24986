// The per-row arithmetic of the certified reference (row.hpp), shared by its tiers: the logit
// transformation, the forward and the gradient of one row, the per-token outputs, db's bound and
// the norms of the rows of H and W. docs/reference.md, "One row", derives every bound used here.
#include "reference/row.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "numerics/eft.hpp"

namespace xentlab::detail {
namespace {

constexpr double kU = kRefU;  // unit roundoff of double
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLibm = kRefLibm;

}  // namespace

void transform_logits(const LossSpec& sp, std::int64_t V, double* z, double* zb, double* chain,
                      double* chain_b) {
  for (std::int64_t j = 0; j < V; ++j)
    transform_logit(sp, z[j], zb[j], z[j], zb[j], chain[j], chain_b[j]);
}

RowStats row_forward(const LossSpec& sp, std::int64_t V, std::int64_t t, bool valid,
                     const double* z, const double* zb, double* e, double& one_plus_s,
                     double& one_minus_pt) {
  RowSums q{};
  q.k = -1;
  q.a = -kInf;
  for (std::int64_t j = 0; j < V; ++j) {
    if (z[j] > q.a) {
      q.a = z[j];
      q.k = j;
    }
    if (std::isfinite(z[j])) q.dzmax = std::max(q.dzmax, zb[j]);
  }
  if (q.k < 0) {  // every logit −inf: softmax undefined
    std::fill(e, e + V, 0.0);
    return undefined_row(sp, valid, q.a, q.dzmax, one_plus_s, one_minus_pt);
  }
  // s = Σ_{j≠k} e_j and s_ex = Σ_{j∉{k,t}} e_j (Sum2); err_s bounds the error of s from the
  // rounding of (z_j − a) (u|z_j − a| in the argument) and of exp (kLibm relative), per term.
  eft::CompensatedSum s, s_ex, ent, pz, zsum_gap;
  const double a = q.a;
  for (std::int64_t j = 0; j < V; ++j) {
    if (j == q.k) {
      e[j] = 1.0;
      continue;
    }
    if (z[j] == -kInf) {
      e[j] = 0.0;
      continue;
    }
    const double g = a - z[j];  // ≥ 0
    const double ej = ref_exp(-g);
    e[j] = ej;
    s.add(ej);
    if (j != t) s_ex.add(ej);
    q.err_s += ej * (kU * g + kLibm);
    ent.add(ej * g);
    pz.add(ej * std::fabs(z[j]));
  }
  q.s = s.value();
  q.s_ex = s_ex.value();
  q.ent = ent.value();
  q.pz = pz.value();
  if (t >= 0) {
    q.e_t = e[t];
    q.z_t = z[t];
    q.zb_t = zb[t];
  }
  if (valid && sp.label_smoothing > 0.0) {
    for (std::int64_t j = 0; j < V; ++j) zsum_gap.add(a - z[j]);
    q.zsum_gap = zsum_gap.value();
  }
  return finish_row(sp, V, t, valid, q, one_plus_s, one_minus_pt);
}

void row_gradient(const LossSpec& sp, std::int64_t V, std::int64_t t, bool valid,
                  const RowStats& st, double gs, const double* e, double ops, double omp_t,
                  const double* ch, const double* chb, double* g, double* gb) {
  const GradRow r = grad_row(sp, V, t, valid, st, gs, ops, omp_t);
  for (std::int64_t j = 0; j < V; ++j) grad_entry(r, j, e[j], ch[j], chb[j], g[j], gb[j]);
}

double row_grad_scale(const LossSpec& sp, std::int64_t n_valid, const std::vector<double>& upstream,
                      std::int64_t i, bool valid) {
  if (!valid) return 0.0;
  switch (sp.reduction) {
    case Reduction::mean: {
      const std::int64_t n = sp.mean_count(n_valid);
      return n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
    }
    case Reduction::sum:
      return 1.0;
    case Reduction::none:
      return upstream.empty() ? 1.0 : upstream[static_cast<std::size_t>(i)];
  }
  return 0.0;
}

void store_row_outputs(ReferenceResult& res, std::int64_t q, const RowStats& st, double gs) {
  const auto k = static_cast<std::size_t>(q);
  res.lse[k] = st.lse;
  res.lse_bound[k] = std::isfinite(st.lse) ? st.lse_b : 0.0;
  res.ce[k] = st.ce;
  res.z_term[k] = st.z_term;
  res.loss[k] = st.ce + st.z_term;
  res.loss_bound[k] = std::isfinite(res.loss[k]) ? st.ce_b + st.z_term_b + kU * res.loss[k] : 0.0;
  res.max_logit[k] = st.maxz;
  res.p_target[k] = st.pt;
  res.entropy[k] = st.entropy;
  res.sum_p_abs_z[k] = st.sum_p_abs_z;
  res.grad_scale[k] = gs;
}

void finish_db(const std::vector<eft::CompensatedSum>& acc, const std::vector<double>& propagated,
               const std::vector<double>& abs_sum, std::int64_t S, ReferenceResult& res) {
  const std::size_t J = acc.size();
  res.db.resize(J);
  res.db_bound.resize(J);
  const double g2 = eft::gamma_n(static_cast<double>(S)) * eft::gamma_n(static_cast<double>(S));
  for (std::size_t jj = 0; jj < J; ++jj) {
    const double v = acc[jj].value();
    res.db[jj] = v;
    res.db_bound[jj] = propagated[jj] + kU * std::fabs(v) + g2 * abs_sum[jj];
  }
}

void allocate_outputs(ReferenceResult& res, bool want_dz, bool want_dH) {
  const auto S = res.token_rows.size();
  const auto V = static_cast<std::size_t>(res.V), D = static_cast<std::size_t>(res.D);
  for (auto* v : {&res.loss, &res.loss_bound, &res.lse, &res.lse_bound, &res.ce, &res.z_term,
                  &res.max_logit, &res.p_target, &res.entropy, &res.sum_p_abs_z, &res.grad_scale})
    v->resize(S);
  if (want_dz) {
    res.dz.resize(S * V);
    res.dz_bound.resize(S * V);
  }
  if (want_dH) {
    res.dH.resize(S * D);
    res.dH_bound.resize(S * D);
    res.dH_cond.resize(S * D);
  }
}

double norm_margin(std::int64_t n) {
  // The sum of n squares is rounded n times and its square root once: 1 + γ_{n+2} covers both;
  // 2γ_{n+2}, and at least 1e-12, is taken.
  return 1.0 + std::max(1e-12, 2 * eft::gamma_n(static_cast<double>(n + 2)));
}

std::vector<double> row_norms_upper(const Tensor& T, std::int64_t rows, std::int64_t cols,
                                    int threads) {
  std::vector<double> out(static_cast<std::size_t>(rows));
  const double up = norm_margin(cols);
#pragma omp parallel num_threads(threads > 0 ? threads : omp_get_max_threads())
  {
    std::vector<double> w(static_cast<std::size_t>(cols));
#pragma omp for schedule(static)
    for (std::int64_t j = 0; j < rows; ++j) {
      T.read(j * cols, cols, w.data());
      double ss = 0;
      for (double x : w) ss += x * x;
      out[static_cast<std::size_t>(j)] = std::sqrt(ss) * up;
    }
  }
  return out;
}

}  // namespace xentlab::detail

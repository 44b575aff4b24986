// The per-row covariates of the a-priori bounds, exact and bounded (judge/covariates.hpp).
#include "judge/covariates.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "datasets/generators.hpp"
#include "numerics/loss_kernel.hpp"

namespace xentlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double transform(double r, const LossSpec& spec) {
  return kernel_logit(r, spec.logit_scale, spec.softcap);
}

inline std::size_t sz(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

// Loss-kernel logit from a raw logit (scale, then softcap), in double.
double kernel(const LossSpec& sp, double r) {
  return kernel_logit(r, sp.logit_scale, sp.softcap);
}

}  // namespace

double exact_row_covariates_bytes(std::int64_t S, std::int64_t V, std::int64_t D, DType w_dtype) {
  const double m = static_cast<double>(std::min(
      S, std::max<std::int64_t>(1, (std::int64_t{1} << 27) / std::max<std::int64_t>(1, V))));
  const double results = 8.0 * 4.0 * static_cast<double>(S);
  if (D <= 0) return results + 8.0 * m * static_cast<double>(V);
  return results + static_cast<double>(size_of(w_dtype)) * static_cast<double>(V) * D +
         2.0 * (HeadLogits::held_bytes(V, D) + 8.0 * m * static_cast<double>(V + D));
}

ExactRowCovariates exact_row_covariates(const Problem& pb, const LossSpec& spec,
                                        const std::vector<std::int64_t>& rows) {
  const std::int64_t S = static_cast<std::int64_t>(rows.size()), V = pb.V, D = pb.D;
  ExactRowCovariates c;
  c.target_logit.assign(static_cast<std::size_t>(S), 0.0);
  c.max_abs_logit.assign(static_cast<std::size_t>(S), 0.0);
  c.mean_abs_logit.assign(static_cast<std::size_t>(S), 0.0);
  if (pb.is_linear()) c.gemm_abs.assign(static_cast<std::size_t>(S), 0.0);
  // Linear problems: the logits and Σ_d |H_id||W_jd| as fp64 GEMMs (HeadLogits) of H and W, and
  // of |H| and |W|, in blocks of at most 2^27 logits (1 GiB).
  std::optional<Tensor> abs_w;
  std::optional<HeadLogits> z_of, abs_of;
  if (pb.is_linear()) {
    abs_w.emplace(pb.W.dtype(), pb.W.shape(), "|W|");
    // |x| clears the sign bit of the stored pattern (fp32, fp16, bf16): exact.
    const auto n = static_cast<std::int64_t>(pb.W.nbytes());
    const auto* from = static_cast<const unsigned char*>(pb.W.data());
    auto* to = static_cast<unsigned char*>(abs_w->data());
    const auto width =
        static_cast<std::int64_t>(pb.W.nbytes() / static_cast<std::size_t>(pb.W.numel()));
#pragma omp parallel for schedule(static)
    for (std::int64_t k = 0; k < n; ++k)
      to[k] = (k % width == width - 1) ? static_cast<unsigned char>(from[k] & 0x7F) : from[k];
    z_of.emplace(pb.W);
    abs_of.emplace(*abs_w);
  }
  const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t{1} << 27) / V);
  std::vector<double> raw, absd, X, AX;
  for (std::int64_t q0 = 0; q0 < S; q0 += block) {
    const std::int64_t m = std::min(block, S - q0);
    if (pb.is_linear()) {
      X.resize(static_cast<std::size_t>(m * D));
      AX.resize(X.size());
      for (std::int64_t r = 0; r < m; ++r)
        pb.H.read(rows[static_cast<std::size_t>(q0 + r)] * D, D, X.data() + r * D);
      for (std::size_t k = 0; k < X.size(); ++k) AX[k] = std::fabs(X[k]);
      z_of->compute(X.data(), m, raw);
      abs_of->compute(AX.data(), m, absd);
      if (pb.bias) {
#pragma omp parallel for schedule(static)
        for (std::int64_t j = 0; j < V; ++j) {
          const double b = pb.bias->get(j);
          for (std::int64_t r = 0; r < m; ++r) {
            const auto k = static_cast<std::size_t>(r * V + j);
            raw[k] = b == -kInf ? -kInf : raw[k] + b;
            absd[k] = absd[k] + (b == -kInf ? 0.0 : std::fabs(b));
          }
        }
      }
    } else {
      raw.resize(static_cast<std::size_t>(m * V));
      for (std::int64_t r = 0; r < m; ++r)
        pb.logits.read(rows[static_cast<std::size_t>(q0 + r)] * V, V, raw.data() + r * V);
    }
    // Σ|h||w| exists for a linear head only (absd is empty for given logits).
    const bool linear = pb.is_linear();
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < m; ++r) {
      const std::size_t q = static_cast<std::size_t>(q0 + r);
      const std::int64_t t = pb.targets[static_cast<std::size_t>(rows[q])];
      double mx = 0, sum = 0, ga = 0;
      for (std::int64_t j = 0; j < V; ++j) {
        const double rv = raw[static_cast<std::size_t>(r * V + j)];
        if (!std::isfinite(rv)) continue;
        const double x = std::fabs(transform(rv, spec));
        mx = std::max(mx, x);
        sum += x;
        if (linear) ga = std::max(ga, absd[static_cast<std::size_t>(r * V + j)]);
      }
      c.max_abs_logit[q] = mx;
      c.mean_abs_logit[q] = sum / static_cast<double>(V);
      if (pb.is_linear()) c.gemm_abs[q] = spec.logit_scale * ga;
      if (t != spec.ignore_index)
        c.target_logit[q] = transform(raw[static_cast<std::size_t>(r * V + t)], spec);
    }
  }
  return c;
}

BoundedRowCovariates bounded_row_covariates(const Problem& pb, const LossSpec& sp,
                                            const std::vector<std::int64_t>& token_rows,
                                            bool keep_raw) {
  const auto S = static_cast<std::int64_t>(token_rows.size());
  const std::int64_t V = pb.V, D = pb.D;
  const bool linear = pb.is_linear();
  std::vector<std::int64_t> valid(sz(S)), target(sz(S));
  BoundedRowCovariates c;
  std::vector<double>& max_raw = c.max_raw;
  std::vector<double>& max_abs = c.max_abs;
  std::vector<double>& mean_abs = c.mean_abs;
  std::vector<double>& xt = c.target_logit;
  std::vector<double>& gemm = c.gemm_abs;
  std::vector<double>& raw = c.raw_logits;
  std::vector<double>& w_t_abs = c.W_target_abs;
  std::vector<double>& w_colmax = c.W_colmax_abs;
  std::vector<double>& h_abs = c.H_abs;
  max_raw.assign(sz(S), 0.0);
  max_abs.assign(sz(S), 0.0);
  mean_abs.assign(sz(S), 0.0);
  xt.assign(sz(S), 0.0);
  gemm.assign(sz(S), 0.0);
  std::vector<double> row(sz(std::max(V, D))), wrow(sz(std::max<std::int64_t>(D, 1)));

  if (linear) {
    // ‖W_j‖₂ max and column maxima of |W|; bias magnitude.
    double wmax = 0.0, bmax = 0.0;
    w_colmax.assign(sz(D), 0.0);
    // In parallel over the vocabulary rows: each row's norm is summed in the same order as on one
    // thread, and maxima do not depend on the order in which they are taken.
#pragma omp parallel
    {
      std::vector<double> w(sz(D)), colmax(sz(D), 0.0);
      double wm = 0.0, bm = 0.0;
#pragma omp for schedule(static)
      for (std::int64_t j = 0; j < V; ++j) {
        pb.W.read(j * D, D, w.data());
        double n2 = 0.0;
        for (std::int64_t d = 0; d < D; ++d) {
          n2 += w[sz(d)] * w[sz(d)];
          colmax[sz(d)] = std::max(colmax[sz(d)], std::fabs(w[sz(d)]));
        }
        wm = std::max(wm, std::sqrt(n2));
        if (pb.bias) {
          const double b = pb.bias->get(j);
          if (std::isfinite(b)) bm = std::max(bm, std::fabs(b));
        }
      }
#pragma omp critical
      {
        for (std::int64_t d = 0; d < D; ++d)
          w_colmax[sz(d)] = std::max(w_colmax[sz(d)], colmax[sz(d)]);
        wmax = std::max(wmax, wm);
        bmax = std::max(bmax, bm);
      }
    }
    // Norms are rounded up by a relative 2^-40 margin (the double sums above are within D·2^-53).
    const double up = 1.0 + 0x1p-40;
    w_t_abs.assign(sz(S * D), 0.0);
    h_abs.assign(sz(S * D), 0.0);
    // Row by row, each writing its own entries only: the same bits on any number of threads.
#pragma omp parallel for schedule(static) firstprivate(row, wrow)
    for (std::int64_t q = 0; q < S; ++q) {
      const std::int64_t i = token_rows[sz(q)];
      pb.H.read(i * D, D, row.data());
      double n2 = 0.0;
      for (std::int64_t d = 0; d < D; ++d) {
        n2 += row[sz(d)] * row[sz(d)];
        h_abs[sz(q * D + d)] = std::fabs(row[sz(d)]);
      }
      // Σ_d |H_id||W_jd| ≤ min(‖H_i‖₂·max_j‖W_j‖₂ (Cauchy–Schwarz), Σ_d |H_id|·max_j|W_jd|).
      double hcol = 0.0;
      for (std::int64_t d = 0; d < D; ++d) hcol += h_abs[sz(q * D + d)] * w_colmax[sz(d)];
      gemm[sz(q)] = (std::min(std::sqrt(n2) * wmax, hcol) + bmax) * up;
      // The fp32 GEMM result can exceed the exact one by γ_{D+1}·Σ|h||w| < 2^-10 relative here.
      max_raw[sz(q)] = gemm[sz(q)] * (1.0 + 0x1p-10);
      double zmax = sp.logit_scale * gemm[sz(q)];
      if (sp.softcap > 0) zmax = std::min(zmax, sp.softcap);
      max_abs[sz(q)] = zmax;
      mean_abs[sz(q)] = zmax;
      const std::int64_t t = pb.targets[sz(i)];
      valid[sz(q)] = t != sp.ignore_index;
      target[sz(q)] = valid[sz(q)] ? t : -1;
      if (valid[sz(q)]) {
        pb.W.read(t * D, D, wrow.data());
        double zt = pb.bias ? pb.bias->get(t) : 0.0;
        for (std::int64_t d = 0; d < D; ++d) {
          zt += row[sz(d)] * wrow[sz(d)];
          w_t_abs[sz(q * D + d)] = std::fabs(wrow[sz(d)]);
        }
        xt[sz(q)] = kernel(sp, zt);
      }
    }
  } else {
    // Raw logits are kept (S×V) only when dz bounds are formed; otherwise one row at a time.
    const bool keep = keep_raw;
    if (keep) raw.assign(sz(S * V), 0.0);
    for (std::int64_t q = 0; q < S; ++q) {
      const std::int64_t i = token_rows[sz(q)];
      double* rr = keep ? raw.data() + q * V : row.data();
      pb.logits.read(i * V, V, rr);
      double mx = 0.0, sum = 0.0;
      for (std::int64_t j = 0; j < V; ++j) {
        const double x = kernel(sp, rr[j]);
        if (std::isfinite(rr[j])) max_raw[sz(q)] = std::max(max_raw[sz(q)], std::fabs(rr[j]));
        if (std::isfinite(x)) {
          mx = std::max(mx, std::fabs(x));
          sum += std::fabs(x);
        }
      }
      max_abs[sz(q)] = mx;
      mean_abs[sz(q)] = (sum / static_cast<double>(V)) * (1.0 + 0x1p-40);
      const std::int64_t t = pb.targets[sz(i)];
      valid[sz(q)] = t != sp.ignore_index;
      target[sz(q)] = valid[sz(q)] ? t : -1;
      if (valid[sz(q)]) xt[sz(q)] = kernel(sp, rr[t]);
    }
  }
  return c;
}

}  // namespace xentlab

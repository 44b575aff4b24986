#pragma once
// The kernels of the cuda tier (cuda.cu, its only includer): the row kernel (one token row a
// block: logits, their bounds, the Sum2 reductions, RowStats, dz and its bound), the column
// kernel (db, Σδdz per vocabulary row, sampled dz columns) and the bounds of a gradient matrix.
// Internal linkage, as cuda_support.cuh's.
#include <cuda_runtime.h>

#include <cstdint>
#include <new>

#include "numerics/eft.hpp"
#include "numerics/loss_spec.hpp"
#include "reference/row_math.hpp"
#include "reference/tiers/cuda_support.cuh"

namespace xentlab {
namespace {

struct RowParams {
  LossSpec sp;
  std::int64_t V, D;
  double g_logit;  // γ_{D+1}
  bool backward, want_dz;
};

struct RowOut {
  detail::RowStats st;
  double gs, row_gb, row_gb2;
};

constexpr int kRowThreads = 512;

// One token row per block: raw logits (R) → z and bounds → reductions → RowStats → dz (written
// over R), δdz (GB), |dz| (A), Σδdz and Σδdz² of the row.
__global__ void __launch_bounds__(kRowThreads)
    row_kernel(RowParams P, double* R, double* A, double* GB, const double* bias,
               const double* w_norm, const double* h_norm, const std::int64_t* targets,
               const double* gscale, RowOut* out) {
  using detail::kRefLibm;
  using detail::kRefU;
  const std::int64_t q = blockIdx.x;
  const std::int64_t V = P.V;
  double* r = R + q * V;
  const std::int64_t t_raw = targets[q];
  const bool valid = t_raw != P.sp.ignore_index;
  const std::int64_t t = valid ? t_raw : -1;
  const double hn = h_norm[q];
  auto logit = [&](std::int64_t j, double& z, double& zb, double& ch, double& chb) {
    const double b = bias ? bias[j] : 0.0;
    if (b == -hd::inf()) {  // a masked vocabulary entry, transformed as the CPU tiers do
      detail::transform_logit(P.sp, -hd::inf(), 0.0, z, zb, ch, chb);
      return;
    }
    const double raw = bias ? r[j] + b : r[j];
    detail::transform_logit(P.sp, raw, kRefU * ::fabs(raw) + P.g_logit * hn * w_norm[j], z, zb, ch,
                            chb);
  };
  __shared__ double sh_d[kRowThreads];
  __shared__ double sh_d2[kRowThreads];
  __shared__ std::int64_t sh_k[kRowThreads];
  // Raw storage: CompensatedSum has default member initialisers, which __shared__ does not take.
  __shared__ alignas(
      eft::CompensatedSum) unsigned char sh_c_raw[kRowThreads * sizeof(eft::CompensatedSum)];
  auto* sh_c = reinterpret_cast<eft::CompensatedSum*>(sh_c_raw);
  __shared__ detail::RowSums sums;
  __shared__ detail::GradRow grow;
  const int tid = threadIdx.x;

  // Pass 1: a = max z (first index), max δz over finite logits.
  double a = -hd::inf(), dzmax = 0.0;
  std::int64_t k = -1;
  for (std::int64_t j = tid; j < V; j += blockDim.x) {
    double z, zb, ch, chb;
    logit(j, z, zb, ch, chb);
    if (z > a) a = z, k = j;
    if (hd::isfinite(z)) dzmax = ::fmax(dzmax, zb);
  }
  sh_d[tid] = a, sh_d2[tid] = dzmax, sh_k[tid] = k;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) {
      const double a2 = sh_d[tid + s];
      const std::int64_t k2 = sh_k[tid + s];
      if (a2 > sh_d[tid] || (a2 == sh_d[tid] && k2 >= 0 && (sh_k[tid] < 0 || k2 < sh_k[tid])))
        sh_d[tid] = a2, sh_k[tid] = k2;
      sh_d2[tid] = ::fmax(sh_d2[tid], sh_d2[tid + s]);
    }
    __syncthreads();
  }
  if (tid == 0) {
    sums = detail::RowSums{};
    sums.a = sh_d[0], sums.k = sh_k[0], sums.dzmax = sh_d2[0];
  }
  __syncthreads();
  a = sums.a, k = sums.k;
  if (k < 0) {  // every logit −inf
    if (tid == 0) {
      double ops, omp_t;
      RowOut o{};
      o.st = detail::undefined_row(P.sp, valid, a, sums.dzmax, ops, omp_t);
      o.gs = gscale[q];
      out[q] = o;
    }
    for (std::int64_t j = tid; j < V; j += blockDim.x) {
      r[j] = 0.0;
      if (P.backward) A[q * V + j] = 0.0;
      if (P.backward || P.want_dz) GB[q * V + j] = 0.0;
    }
    return;
  }

  // Pass 2: the Sum2 reductions, one accumulator set per thread, merged by TwoSum below.
  eft::CompensatedSum s, s_ex, ent, pz, gap;
  double err_s = 0.0;
  const bool want_gap = valid && P.sp.label_smoothing > 0.0;
  for (std::int64_t j = tid; j < V; j += blockDim.x) {
    double z, zb, ch, chb;
    logit(j, z, zb, ch, chb);
    if (want_gap) gap.add(a - z);
    if (j == t)
      sums.z_t = z, sums.zb_t = zb,
      sums.e_t = (j == k) ? 1.0 : (z == -hd::inf() ? 0.0 : detail::ref_exp(-(a - z)));
    if (j == k || z == -hd::inf()) continue;
    const double g = a - z;
    const double ej = detail::ref_exp(-g);
    s.add(ej);
    if (j != t) s_ex.add(ej);
    err_s += ej * (kRefU * g + kRefLibm);
    ent.add(ej * g);
    pz.add(ej * ::fabs(z));
  }
  auto merge = [&](eft::CompensatedSum mine) -> double {
    __syncthreads();
    new (&sh_c[tid]) eft::CompensatedSum(mine);
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
      if (tid < st) sh_c[tid].add(sh_c[tid + st]);
      __syncthreads();
    }
    return sh_c[0].value();
  };
  auto merge_plain = [&](double mine) -> double {
    __syncthreads();
    sh_d[tid] = mine;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
      if (tid < st) sh_d[tid] += sh_d[tid + st];
      __syncthreads();
    }
    return sh_d[0];
  };
  const double sv = merge(s), sexv = merge(s_ex), entv = merge(ent), pzv = merge(pz);
  const double gapv = want_gap ? merge(gap) : 0.0;
  const double errv = merge_plain(err_s);
  if (tid == 0) {
    sums.s = sv, sums.s_ex = sexv, sums.ent = entv, sums.pz = pzv, sums.zsum_gap = gapv;
    sums.err_s = errv;
    double ops, omp_t;
    RowOut o{};
    o.st = detail::finish_row(P.sp, V, t, valid, sums, ops, omp_t);
    o.gs = gscale[q];
    grow = detail::grad_row(P.sp, V, t_raw, valid, o.st, o.gs, ops, omp_t);
    out[q] = o;
  }
  __syncthreads();

  // Pass 3: the gradient entries (over R), their bounds and |dz|; Σ δdz and Σ δdz² of the row.
  double s1 = 0.0, s2 = 0.0;
  for (std::int64_t j = tid; j < V; j += blockDim.x) {
    double z, zb, ch, chb;
    logit(j, z, zb, ch, chb);
    const double ej = (j == k) ? 1.0 : (z == -hd::inf() ? 0.0 : detail::ref_exp(-(a - z)));
    double g, gb;
    detail::grad_entry(grow, j, ej, ch, chb, g, gb);
    r[j] = g;
    if (P.backward || P.want_dz) GB[q * V + j] = gb;
    if (P.backward) A[q * V + j] = ::fabs(g);
    s1 += gb;
    s2 += gb * gb;
  }
  const double t1 = merge_plain(s1), t2 = merge_plain(s2);
  if (tid == 0) out[q].row_gb = t1, out[q].row_gb2 = t2;
}

// Columns of a token block: db by Sum2 in token order, Σδdz and Σδdz² per vocabulary row, and the
// sampled columns of dz and |dz| (DZJ, ADZJ: m×J) when dW is asked for a subset of rows.
__global__ void column_kernel(std::int64_t m, std::int64_t V, std::int64_t J,
                              const std::int64_t* vocab_rows, const double* R, const double* GB,
                              eft::CompensatedSum* db, double* db_bnd, double* db_abs,
                              double* col_gb, double* col_gb2, double* DZJ, double* ADZJ) {
  const std::int64_t jj = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (jj >= J) return;
  const std::int64_t j = vocab_rows ? vocab_rows[jj] : jj;
  eft::CompensatedSum acc = db ? db[jj] : eft::CompensatedSum{};
  double bnd = db ? db_bnd[jj] : 0.0, ab = db ? db_abs[jj] : 0.0;
  double c1 = col_gb[jj], c2 = col_gb2[jj];
  for (std::int64_t q = 0; q < m; ++q) {
    const double x = R[q * V + j], bx = GB[q * V + j];
    c1 += bx;
    c2 += bx * bx;
    acc.add(x);
    bnd += bx;
    ab += ::fabs(x);
    if (DZJ) DZJ[q * J + jj] = x, ADZJ[q * J + jj] = ::fabs(x);
  }
  col_gb[jj] = c1, col_gb2[jj] = c2;
  if (db) db[jj] = acc, db_bnd[jj] = bnd, db_abs[jj] = ab;
}

// Bounds of a gradient matrix (rows × D): cond ← cond·(1 + 2γ), bound = min(s1·colmax,
// √s2·colnorm) + γ·cond (docs/reference.md, "BLAS tier").
__global__ void grad_bound_kernel(std::int64_t rows, std::int64_t D, double g, const double* s1,
                                  const double* s2, double s_up, const double* colmax,
                                  const double* colnorm, double* cond, double* bound) {
  const std::int64_t n = rows * D;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t q = i / D, d = i % D;
    const double c = cond[i] * (1.0 + 2 * g);
    // The Cauchy–Schwarz form only where no square can have underflowed (blas_tier.cpp,
    // norm_from_squares); else the other form alone.
    const double sq = s2[q] * s_up;
    const double a1 = s1[q] * s_up,
                 a2 = sq >= 0x1p-900 ? ::sqrt(sq) * (1.0 + 2 * detail::kRefU) : hd::inf();
    cond[i] = c;
    bound[i] = ::fmin(a1 * colmax[d], a2 * colnorm[d]) + g * c;
  }
}

}  // namespace
}  // namespace xentlab

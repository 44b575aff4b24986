// The BLAS tier of the certified reference: the GEMM-shaped work in fp64 on the system BLAS,
// blocked over tokens (block_rows) and vocabulary (panel_rows) so that memory stays within the
// budget; the row work (lse, softmax, dz and their bounds) is the compensated tier's own
// (reference/row.hpp). docs/reference.md, "BLAS tier", derives every bound used here.
//
//   logits  R = H_b·Wᵀ            (fp64 GEMM; products of bf16/fp16/fp32 inputs are exact)
//   dH      dz_b·W,  |dz_b|·|W|    (value and condition quantity)
//   dW     += dz_bᵀ·H_b, |dz_b|ᵀ·|H_b| over the token blocks
// Any BLAS forms each entry as a sum of the n products in some order (blocked, FMA, parallel):
// |fl(xᵀy) − xᵀy| ≤ γ_n·|x|ᵀ|y| (Higham, Accuracy and Stability, 2nd ed., §3.1, (3.4)).
#include "numerics/blas.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "numerics/eft.hpp"
#include "numerics/error.hpp"
#include "reference/row.hpp"
#include "reference/tiers/plan.hpp"

extern "C" {
// OpenBLAS only (weak: another BLAS links too): its threading and the thread count of its pool.
__attribute__((weak)) int openblas_get_parallel();  // 0 sequential, 1 pthreads, 2 OpenMP
__attribute__((weak)) void openblas_set_num_threads(int);
__attribute__((weak)) int openblas_get_num_threads();
}

namespace xentlab::detail {
namespace {

constexpr double kU = kRefU;
constexpr double kInf = std::numeric_limits<double>::infinity();

auto sz(std::int64_t n) {
  return static_cast<std::size_t>(n);
}

// An upper bound of a sum of n non-negative doubles from its computed value (any order).
double sum_upper(double computed, double n) {
  return computed * (1.0 + 2 * eft::gamma_n(n + 2));
}

// ‖x‖₂ rounded up from a computed Σx² (itself rounded up), or +inf when the sum is so small that
// squares of tiny terms may have underflowed (below 2^-900 the terms lost to underflow, at most
// n·2^-1022 with n < 2^37, are no longer negligible against the slack): the caller's min() then
// takes its other form of the bound.
double norm_from_squares(double sum_sq) {
  return sum_sq >= 0x1p-900 ? std::sqrt(sum_sq) * (1.0 + 2 * kU) : kInf;
}

// Rows [j0, j0 + n) of W as doubles in P (n × D), and |W| in AP when asked for.
void load_panel(const Tensor& W, std::int64_t j0, std::int64_t n, std::int64_t D, double* P,
                double* AP, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t j = 0; j < n; ++j) {
    W.read((j0 + j) * D, D, P + j * D);
    if (AP)
      for (std::int64_t d = 0; d < D; ++d) AP[j * D + d] = std::fabs(P[j * D + d]);
  }
}

// The BLAS's threads follow opt.threads while this tier runs, and the caller's settings are put
// back: OpenBLAS's pthread build has its own pool (openblas_set_num_threads); its OpenMP build,
// like other OpenMP BLAS, uses OpenMP's thread count at each call (omp_set_num_threads, restored).
struct BlasThreads {
  int saved_blas = 0, saved_omp = 0;
  explicit BlasThreads(int threads) {
    if (openblas_get_parallel && openblas_get_parallel() == 1 && openblas_set_num_threads &&
        openblas_get_num_threads) {
      saved_blas = openblas_get_num_threads();
      openblas_set_num_threads(threads);
    } else if (omp_get_max_threads() != threads) {
      saved_omp = omp_get_max_threads();
      omp_set_num_threads(threads);
    }
  }
  ~BlasThreads() {
    if (saved_blas > 0) openblas_set_num_threads(saved_blas);
    if (saved_omp > 0) omp_set_num_threads(saved_omp);
  }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;
};

}  // namespace

ColumnStats column_stats(const Tensor& T, std::int64_t cols, const std::vector<std::int64_t>& rows,
                         std::int64_t n_rows, int threads) {
  ColumnStats cs;
  cs.max_abs.assign(sz(cols), 0.0);
  std::vector<double> sq(sz(cols), 0.0);
#pragma omp parallel num_threads(threads)
  {
    std::vector<double> mx(sz(cols), 0.0), s(sz(cols), 0.0), row(sz(cols));
#pragma omp for schedule(static)
    for (std::int64_t q = 0; q < n_rows; ++q) {
      const std::int64_t r = rows.empty() ? q : rows[sz(q)];
      T.read(r * cols, cols, row.data());
      for (std::int64_t d = 0; d < cols; ++d) {
        const double a = std::fabs(row[sz(d)]);
        mx[sz(d)] = std::max(mx[sz(d)], a);
        s[sz(d)] += a * a;
      }
    }
#pragma omp critical
    for (std::int64_t d = 0; d < cols; ++d) {
      cs.max_abs[sz(d)] = std::max(cs.max_abs[sz(d)], mx[sz(d)]);
      sq[sz(d)] += s[sz(d)];
    }
  }
  cs.norm.resize(sz(cols));
  for (std::int64_t d = 0; d < cols; ++d)
    cs.norm[sz(d)] =
        std::sqrt(sum_upper(sq[sz(d)], static_cast<double>(n_rows + threads))) * (1.0 + 2 * kU);
  return cs;
}

namespace {

// The blocking of a run: rows of W a panel, token rows a block.
struct BlasBlocking {
  std::int64_t panel = 0, block = 0;
};

// Outputs and accumulators, one W panel, then as many token rows as fit the budget; throws
// (check_memory) when even the least the tier can run with does not.
BlasBlocking plan_blocking(const TierPlan& tp, const ReferenceOptions& opt, std::int64_t budget,
                           bool budget_given) {
  const std::int64_t S = tp.S, V = tp.V, D = tp.D;
  const BlasPlanTerms terms = blas_plan_terms(S, V, D, tp.J, opt, tp.threads);
  const double fixed = terms.fixed, per_row = terms.per_row;
  const std::string& what = tp.what;
  // The least it can run with: one token row a block and panels of 64 rows of W (and |W|) as
  // doubles. The message names that figure, whatever the budget.
  check_memory(terms.minimum(), budget, budget_given, what);
  // Panels of at most 64 MiB, from what is left after one token row; then the largest block.
  const double spare = static_cast<double>(budget) - fixed - per_row;
  const double panel_budget = std::min<double>(64.0 * (1 << 20), spare / 2);
  const std::int64_t panel =
      opt.panel_rows > 0
          ? std::min(opt.panel_rows, V)
          : std::clamp<std::int64_t>(static_cast<std::int64_t>(panel_budget / (16.0 * D)),
                                     std::min<std::int64_t>(64, V), V);
  const double panel_bytes = 16.0 * static_cast<double>(panel) * D;
  const auto fit = std::max<std::int64_t>(
      1, static_cast<std::int64_t>((static_cast<double>(budget) - fixed - panel_bytes) / per_row));
  // At least eight blocks once there are rows enough (progress, and a bounded block buffer);
  // each block converts W to doubles twice, 2·V·D conversions against 10·m·V·D flops.
  const std::int64_t steps = std::max<std::int64_t>(128, (S + 7) / 8);
  const std::int64_t block = opt.block_rows > 0 ? std::min(opt.block_rows, S)
                                                : std::min<std::int64_t>({S, fit, steps, 4096});
  check_memory(fixed + panel_bytes + per_row * static_cast<double>(block), budget, budget_given,
               fmt::format("{} ({} token rows a block, panels of {} rows)", what, block, panel));
  return {panel, block};
}

// One run of the BLAS tier after its outputs are allocated: the accumulators, the norms and
// column statistics, the block buffers, and the steps of each token block.
class BlasTier {
 public:
  BlasTier(const Problem& pb, const LossSpec& sp, const ReferenceOptions& opt, ReferenceResult& res,
           const TierPlan& tp, BlasBlocking bk)
      : pb(pb),
        sp(sp),
        opt(opt),
        res(res),
        V(tp.V),
        D(tp.D),
        S(tp.S),
        J(tp.J),
        want_dH(tp.want_dH),
        want_dW(tp.want_dW),
        want_db(tp.want_db),
        backward(tp.backward),
        all_vocab(tp.all_vocab),
        threads(tp.threads),
        panel(bk.panel),
        block(bk.block),
        db_acc(want_db ? sz(J) : 0),
        db_bnd(want_db ? sz(J) : 0, 0.0),
        db_abs(want_db ? sz(J) : 0, 0.0),
        col_gb(sz(J), 0.0),
        col_gb2(sz(J), 0.0),
        w_norm(row_norms_upper(pb.W, V, D, threads)),
        w_cols(want_dH ? column_stats(pb.W, D, {}, V, threads) : ColumnStats{}),
        h_cols(want_dW ? column_stats(pb.H, D, res.token_rows, S, threads) : ColumnStats{}),
        g_logit(eft::gamma_n(static_cast<double>(D + 1))),
        Hb(sz(block * D)),
        AHb(want_dW ? sz(block * D) : 0),
        h_norm(sz(block)),
        R(sz(block * V)),
        A(backward ? sz(block * V) : 0),
        GB(backward ? sz(block * V) : 0),
        row_gb(sz(block)),
        row_gb2(sz(block)),
        DZJ(want_dW && !all_vocab ? sz(block * J) : 0),
        ADZJ(DZJ.size()),
        Wp(sz(panel * D)),
        AWp(want_dH ? sz(panel * D) : 0) {}

  // Token rows [b0, b0 + m): logits, the row work, then (backward) the gradients of the block.
  void token_block(std::int64_t b0, std::int64_t m) {
    load_h_block(b0, m);
    block_logits(m);
    row_work(b0, m);
    if (!backward) {
      if (opt.progress) opt.progress(b0 + m, S);
      return;
    }
    block_columns(m);
    block_gemms(b0, m);
    if (want_dH) dH_bounds(b0, m);
    if (opt.progress) opt.progress(b0 + m, S);
  }

  // After the last block: dW's bounds and db.
  void finish() {
    if (want_dW) dW_bounds();
    if (want_db) finish_db(db_acc, db_bnd, db_abs, S, res);
  }

 private:
  // The block's H rows as doubles, their norms (rounded up) and |H| for dW's condition.
  void load_h_block(std::int64_t b0, std::int64_t m) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::int64_t q = 0; q < m; ++q) {
      const std::int64_t i = res.token_rows[sz(b0 + q)];
      double* h = Hb.data() + q * D;
      pb.H.read(i * D, D, h);
      double ss = 0;
      for (std::int64_t d = 0; d < D; ++d) ss += h[d] * h[d];
      h_norm[sz(q)] = std::sqrt(sum_upper(ss, static_cast<double>(D))) * (1.0 + 2 * kU);
      if (want_dW)
        for (std::int64_t d = 0; d < D; ++d) AHb[sz(q * D + d)] = std::fabs(h[d]);
    }
  }

  // Raw logits R = H_b·Wᵀ, panel by panel of W.
  void block_logits(std::int64_t m) {
    for (std::int64_t j0 = 0; j0 < V; j0 += panel) {
      const std::int64_t nb = std::min(panel, V - j0);
      load_panel(pb.W, j0, nb, D, Wp.data(), nullptr, threads);
      dgemm_row_major(false, true, m, nb, D, 1.0, Hb.data(), D, Wp.data(), D, 0.0, R.data() + j0,
                      V);
    }
  }

  // The row work: bounds of the raw logits, then the compensated tier's row arithmetic.
  void row_work(std::int64_t b0, std::int64_t m) {
#pragma omp parallel num_threads(threads)
    {
      std::vector<double> zb(sz(V)), ch(sz(V)), chb(sz(V)), e(sz(V)), gbuf(backward ? 0 : sz(V));
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t q = 0; q < m; ++q) {
        const std::int64_t row = b0 + q;
        const std::int64_t i = res.token_rows[sz(row)];
        const std::int64_t t = pb.targets[sz(i)];
        const bool valid = t != sp.ignore_index;
        double* z = R.data() + q * V;
        const double hn = h_norm[sz(q)];
        for (std::int64_t j = 0; j < V; ++j) {
          const double b = pb.bias ? pb.bias->get(j) : 0.0;
          if (b == -kInf) {
            z[j] = -kInf;
            zb[sz(j)] = 0.0;
            continue;
          }
          const double r = pb.bias ? z[j] + b : z[j];
          z[j] = r;
          zb[sz(j)] = kU * std::fabs(r) + g_logit * hn * w_norm[sz(j)];
        }
        transform_logits(sp, V, z, zb.data(), ch.data(), chb.data());
        double ops = 1.0, omp_t = 0.0;
        const RowStats st =
            row_forward(sp, V, valid ? t : -1, valid, z, zb.data(), e.data(), ops, omp_t);
        const double gs = row_grad_scale(sp, res.n_valid, opt.upstream, i, valid);
        store_row_outputs(res, row, st, gs);
        double* gb = backward ? GB.data() + q * V : gbuf.data();
        row_gradient(sp, V, t, valid, st, gs, e.data(), ops, omp_t, ch.data(), chb.data(), z, gb);
        if (opt.want_dz) {
          std::copy(z, z + V, res.dz.begin() + row * V);
          std::copy(gb, gb + V, res.dz_bound.begin() + row * V);
        }
        if (backward) {
          double s1 = 0, s2 = 0;
          double* a = A.data() + q * V;
          for (std::int64_t j = 0; j < V; ++j) {
            a[j] = std::fabs(z[j]);
            s1 += gb[j];
            s2 += gb[j] * gb[j];
          }
          row_gb[sz(q)] = sum_upper(s1, static_cast<double>(V));
          row_gb2[sz(q)] = sum_upper(s2, static_cast<double>(V));
        }
      }
    }
  }

  // Columns of the block: db (Sum2 in token order), Σ δdz for the dW bound, sampled dz columns.
  void block_columns(std::int64_t m) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::int64_t jj = 0; jj < J; ++jj) {
      const std::int64_t j = res.vocab_rows[sz(jj)];
      for (std::int64_t q = 0; q < m; ++q) {
        const double x = R[sz(q * V + j)], bx = GB[sz(q * V + j)];
        col_gb[sz(jj)] += bx;
        col_gb2[sz(jj)] += bx * bx;
        if (want_db) {
          db_acc[sz(jj)].add(x);
          db_bnd[sz(jj)] += bx;
          db_abs[sz(jj)] += std::fabs(x);
        }
        if (!DZJ.empty()) {
          DZJ[sz(q * J + jj)] = x;
          ADZJ[sz(q * J + jj)] = std::fabs(x);
        }
      }
    }
  }

  // dH rows of the block: dz·W and |dz|·|W| over the vocabulary panels; dW panels of all rows.
  void block_gemms(std::int64_t b0, std::int64_t m) {
    double* dH = want_dH ? res.dH.data() + b0 * D : nullptr;
    double* dHc = want_dH ? res.dH_cond.data() + b0 * D : nullptr;
    if (want_dH || (want_dW && all_vocab)) {
      for (std::int64_t j0 = 0; j0 < V; j0 += panel) {
        const std::int64_t nb = std::min(panel, V - j0);
        if (want_dH) {
          load_panel(pb.W, j0, nb, D, Wp.data(), AWp.data(), threads);
          const double beta = j0 == 0 ? 0.0 : 1.0;
          dgemm_row_major(false, false, m, D, nb, 1.0, R.data() + j0, V, Wp.data(), D, beta, dH, D);
          dgemm_row_major(false, false, m, D, nb, 1.0, A.data() + j0, V, AWp.data(), D, beta, dHc,
                          D);
        }
        if (want_dW && all_vocab) {
          dgemm_row_major(true, false, nb, D, m, 1.0, R.data() + j0, V, Hb.data(), D, 1.0,
                          res.dW.data() + j0 * D, D);
          dgemm_row_major(true, false, nb, D, m, 1.0, A.data() + j0, V, AHb.data(), D, 1.0,
                          res.dW_cond.data() + j0 * D, D);
        }
      }
    }
    if (want_dW && !all_vocab) {
      dgemm_row_major(true, false, J, D, m, 1.0, DZJ.data(), J, Hb.data(), D, 1.0, res.dW.data(),
                      D);
      dgemm_row_major(true, false, J, D, m, 1.0, ADZJ.data(), J, AHb.data(), D, 1.0,
                      res.dW_cond.data(), D);
    }
  }

  // |δdH_id| ≤ Σ_j δdz_ij|W_jd| + γ_{V}·(|dz|·|W|)_id; the first sum is bounded by the smaller
  // of (Σ_j δdz_ij)·max_j|W_jd| and ‖δdz_i‖₂·‖W_:d‖₂.
  void dH_bounds(std::int64_t b0, std::int64_t m) {
    double* dHc = res.dH_cond.data() + b0 * D;
    const double g = eft::gamma_n(static_cast<double>(V + 2));
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::int64_t q = 0; q < m; ++q) {
      const double s1 = row_gb[sz(q)], s2 = norm_from_squares(row_gb2[sz(q)]);
      for (std::int64_t d = 0; d < D; ++d) {
        const std::size_t k = sz(q * D + d);
        const double cond = dHc[k] * (1.0 + 2 * g);
        const double prop = std::min(s1 * w_cols.max_abs[sz(d)], s2 * w_cols.norm[sz(d)]);
        dHc[k] = cond;
        res.dH_bound[sz(b0 * D) + k] = prop + g * cond;
      }
    }
  }

  // dW's condition and bound from the column sums of δdz over all the token rows.
  void dW_bounds() {
    const double g = eft::gamma_n(static_cast<double>(S + 2));
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::int64_t jj = 0; jj < J; ++jj) {
      const double s1 = sum_upper(col_gb[sz(jj)], static_cast<double>(S));
      const double s2 = norm_from_squares(sum_upper(col_gb2[sz(jj)], static_cast<double>(S)));
      for (std::int64_t d = 0; d < D; ++d) {
        const std::size_t k = sz(jj * D + d);
        const double cond = res.dW_cond[k] * (1.0 + 2 * g);
        const double prop = std::min(s1 * h_cols.max_abs[sz(d)], s2 * h_cols.norm[sz(d)]);
        res.dW_cond[k] = cond;
        res.dW_bound[k] = prop + g * cond;
      }
    }
  }

  const Problem& pb;
  const LossSpec& sp;
  const ReferenceOptions& opt;
  ReferenceResult& res;
  const std::int64_t V, D, S, J;
  const bool want_dH, want_dW, want_db, backward, all_vocab;
  const int threads;
  const std::int64_t panel, block;
  std::vector<eft::CompensatedSum> db_acc;
  std::vector<double> db_bnd, db_abs;
  std::vector<double> col_gb, col_gb2;  // Σ_i δdz_ij, Σ_i δdz_ij²
  const std::vector<double> w_norm;
  const ColumnStats w_cols, h_cols;
  // Raw logit r = fl(fl(Σ_d h·w) + b): |δr| ≤ u|r| + γ_{D+1}·‖H_i‖₂‖W_j‖₂ (Cauchy–Schwarz).
  const double g_logit;
  std::vector<double> Hb, AHb, h_norm;
  std::vector<double> R;  // raw logits, then z, then dz, row by row
  std::vector<double> A, GB;
  std::vector<double> row_gb, row_gb2;
  std::vector<double> DZJ;
  std::vector<double> ADZJ;
  std::vector<double> Wp, AWp;
};

}  // namespace

void blas_tier(const Problem& pb, const LossSpec& sp, const ReferenceOptions& opt,
               ReferenceResult& res, std::int64_t budget, bool budget_given) {
  const TierPlan tp = plan_tier(pb, opt, res, "BLAS");
  // ---- memory plan: outputs and accumulators, one W panel, then as many token rows as fit.
  const BlasBlocking bk = plan_blocking(tp, opt, budget, budget_given);

  const BlasThreads blas_threads(tp.threads);
  allocate_outputs(res, opt.want_dz, tp.want_dH);
  if (tp.want_dW) {
    res.dW.resize(sz(tp.J * tp.D));  // HostArrays: zero when freshly allocated
    res.dW_bound.resize(sz(tp.J * tp.D));
    res.dW_cond.resize(sz(tp.J * tp.D));
  }
  BlasTier run(pb, sp, opt, res, tp, bk);
  for (std::int64_t b0 = 0; b0 < tp.S; b0 += bk.block)
    run.token_block(b0, std::min(bk.block, tp.S - b0));
  run.finish();
}

}  // namespace xentlab::detail

namespace xentlab {

double measure_dgemm_rate(ReferenceTier tier) {
  if (tier == ReferenceTier::cuda) return detail::cuda_dgemm_rate();
  if (tier != ReferenceTier::blas)
    throw InputError("measure_dgemm_rate: only the blas and cuda tiers run GEMMs");
  const std::int64_t n = 2048;
  std::vector<double> a(static_cast<std::size_t>(n * n)), b(static_cast<std::size_t>(n * n)),
      c(static_cast<std::size_t>(n * n));
  for (std::int64_t k = 0; k < n * n; ++k) {
    a[static_cast<std::size_t>(k)] = 1.0 + static_cast<double>(k % 7) / 8.0;
    b[static_cast<std::size_t>(k)] = 0.5 - static_cast<double>(k % 5) / 16.0;
  }
  dgemm_row_major(false, false, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
  const int reps = 3;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r)
    dgemm_row_major(false, false, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * n * n * n * reps / secs;
}

}  // namespace xentlab

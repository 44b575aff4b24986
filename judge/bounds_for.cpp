// A-priori bounds from covariates (bounds_for_covariates) and from a ReferenceResult
// (bounds_for_reference, through judge/covariates.hpp), and the comparison of a run's outputs.
#include "judge/bounds_for.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "judge/covariates.hpp"
#include "numerics/error.hpp"

namespace xentlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
inline std::size_t sz(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

// Whether rows = 0, 1, …, n − 1.
bool identity(const std::vector<std::int64_t>& rows, std::int64_t n) {
  if (static_cast<std::int64_t>(rows.size()) != n) return false;
  for (std::int64_t q = 0; q < n; ++q)
    if (rows[sz(q)] != q) return false;
  return true;
}

// Rows `rows` (each `width` values) of a run's array of `n_rows` rows, in that order: the array
// itself where they are all its rows in order, else a copy into `copy`.
const double* rows_of(const HostArray<double>& a, const std::vector<std::int64_t>& rows,
                      std::int64_t n_rows, std::int64_t width, HostArray<double>& copy) {
  if (identity(rows, n_rows)) return a.data();
  const auto S = static_cast<std::int64_t>(rows.size());
  copy.resize(sz(S * width));
#pragma omp parallel for schedule(static)
  for (std::int64_t q = 0; q < S; ++q)
    std::copy_n(a.begin() + rows[sz(q)] * width, width, copy.begin() + q * width);
  return copy.data();
}

}  // namespace

Bounds bounds_for_covariates(const Problem& pb, const LossSpec& sp, const Recipe& recipe,
                             const DeclaredArithmetic& arith, const RowCovariates& cov,
                             std::int64_t n_chunks, std::int64_t run_tokens) {
  static const std::vector<std::int64_t> kNone;
  const std::vector<std::int64_t>& rows = cov.token_rows ? *cov.token_rows : kNone;
  const std::vector<std::int64_t>& vrows = cov.vocab_rows ? *cov.vocab_rows : kNone;
  const auto S = static_cast<std::int64_t>(rows.size());
  const auto J = static_cast<std::int64_t>(vrows.size());
  const std::int64_t V = pb.V, D = pb.D;
  const bool linear = pb.is_linear();
  BoundInputs in;
  in.recipe = recipe;
  in.arith = arith;
  in.spec = sp;
  in.stored_logits_dtype = pb.input_dtype();
  in.linear = linear;
  in.S = S;
  in.V = V;
  in.D = D;
  in.N = run_tokens > 0 ? run_tokens : pb.N;
  in.n_chunks = n_chunks;
  // Each row's target and its position among the vocabulary rows (−1: ignored, or not sampled).
  std::vector<std::int64_t> valid(sz(S)), target(sz(S)), tpos(sz(S), -1);
  for (std::int64_t q = 0; q < S; ++q) {
    const std::int64_t t = pb.targets[sz(rows[sz(q)])];
    valid[sz(q)] = t != sp.ignore_index;
    target[sz(q)] = valid[sz(q)] ? t : -1;
    if (!valid[sz(q)]) continue;
    const auto it = std::lower_bound(vrows.begin(), vrows.end(), t);
    if (it != vrows.end() && *it == t) tpos[sz(q)] = it - vrows.begin();
  }
  // The problem's magnitudes, where the caller has not formed them.
  std::vector<double> h_abs, w_t_abs, w_colmax, raw;
  const double *H_abs = cov.H_abs, *W_target_abs = cov.W_target_abs,
               *W_colmax_abs = cov.W_colmax_abs, *raw_logits = cov.raw_logits;
  if (linear) {
    if (!H_abs) {
      h_abs.resize(sz(S * D));
      for (std::int64_t q = 0; q < S; ++q) pb.H.read(rows[sz(q)] * D, D, h_abs.data() + q * D);
      for (double& v : h_abs) v = std::fabs(v);
      H_abs = h_abs.data();
    }
    if (!W_target_abs) {
      w_t_abs.assign(sz(S * D), 0.0);
      for (std::int64_t q = 0; q < S; ++q)
        if (valid[sz(q)]) pb.W.read(target[sz(q)] * D, D, w_t_abs.data() + q * D);
      for (double& v : w_t_abs) v = std::fabs(v);
      W_target_abs = w_t_abs.data();
    }
    if (!W_colmax_abs) {
      w_colmax.assign(sz(D), 0.0);
      std::vector<double> w(sz(D));
      for (std::int64_t j = 0; j < V; ++j) {
        pb.W.read(j * D, D, w.data());
        for (std::int64_t d = 0; d < D; ++d)
          w_colmax[sz(d)] = std::max(w_colmax[sz(d)], std::fabs(w[sz(d)]));
      }
      W_colmax_abs = w_colmax.data();
    }
  } else if (cov.dz && !raw_logits) {
    raw.resize(sz(S * V));
    for (std::int64_t q = 0; q < S; ++q) pb.logits.read(rows[sz(q)] * V, V, raw.data() + q * V);
    raw_logits = raw.data();
  }
  in.valid = valid.data();
  in.target = target.data();
  in.lse = cov.lse;
  in.loss = cov.loss;
  in.sum_p_abs_z = cov.sum_p_abs_z;
  in.max_logit = cov.max_logit;
  in.max_abs_logit = cov.max_abs_logit;
  in.max_abs_raw = cov.max_abs_raw;
  in.mean_abs_logit = cov.mean_abs_logit;
  in.target_logit = cov.target_logit;
  in.p_target = cov.p_target;
  in.grad_scale = cov.grad_scale;
  in.gemm_abs = cov.gemm_abs;
  in.reduced_loss_ref = cov.reduced_loss;
  if (!linear && cov.dz) {
    in.dz_ref = cov.dz;
    in.raw_logits = raw_logits;
  }
  if (linear && cov.dH) {
    in.dH_ref = cov.dH;
    in.dH_cond = cov.dH_cond;
    in.W_target_abs = W_target_abs;
    in.W_colmax_abs = W_colmax_abs;
  }
  if (linear) in.J = J;
  if (linear && cov.dW) {
    in.dW_ref = cov.dW;
    in.dW_cond = cov.dW_cond;
    in.H_abs = H_abs;
    in.target_vocab_pos = tpos.data();
  }
  if (linear && cov.db && cov.db_cond) {
    in.db_ref = cov.db;
    in.db_cond = cov.db_cond;
    in.target_vocab_pos = tpos.data();
  }
  return compute_bounds(in);
}

Bounds bounds_for_reference(const Problem& pb, const LossSpec& sp, const Recipe& recipe,
                            const DeclaredArithmetic& arith, const ReferenceResult& ref,
                            std::int64_t n_chunks, std::int64_t run_tokens) {
  const auto S = static_cast<std::int64_t>(ref.token_rows.size());
  const bool linear = pb.is_linear();
  const BoundedRowCovariates c = bounded_row_covariates(pb, sp, ref.token_rows, !ref.dz.empty());
  RowCovariates cov;
  set_reference_quantities(cov, ref);  // dH, dW: empty for a logits problem (D = 0)
  cov.max_abs_logit = c.max_abs.data();
  cov.max_abs_raw = c.max_raw.data();
  cov.mean_abs_logit = c.mean_abs.data();
  cov.target_logit = c.target_logit.data();
  cov.gemm_abs = linear ? c.gemm_abs.data() : nullptr;
  cov.reduced_loss = ref.reduced_loss;
  if (!linear && !ref.dz.empty()) {
    cov.dz = ref.dz.data();
    cov.raw_logits = c.raw_logits.data();
  }
  if (linear) {
    cov.H_abs = c.H_abs.data();
    cov.W_target_abs = c.W_target_abs.data();
    cov.W_colmax_abs = c.W_colmax_abs.data();
  }
  Bounds b =
      bounds_for_covariates(pb, sp, recipe, arith, cov,
                            n_chunks > 0 ? n_chunks : std::max<std::int64_t>(1, S), run_tokens);
  // A bound is NaN only where its formula met a non-finite covariate (an all −inf row: lse = −inf;
  // the mean of an all-ignored batch: NaN). Where the reference value itself is non-finite the
  // value is exact (NaN, ±inf must be reproduced as such): bound 0. Anywhere else no meaningful
  // bound exists: +inf (the policy decides whether that is acceptable).
  auto sanitize = [](auto& bound, const auto& value) {
    const auto n = static_cast<std::int64_t>(bound.size());
    const auto nv = static_cast<std::int64_t>(value.size());
#pragma omp parallel for schedule(static)
    for (std::int64_t k = 0; k < n; ++k)
      if (std::isnan(bound[sz(k)]))
        bound[sz(k)] = (k < nv && !std::isfinite(value[sz(k)]))
                           ? 0.0
                           : std::numeric_limits<double>::infinity();
  };
  sanitize(b.loss, ref.loss);
  sanitize(b.lse, ref.lse);
  sanitize(b.dz, ref.dz);
  sanitize(b.dH, ref.dH);
  sanitize(b.dW, ref.dW);
  sanitize(b.db, ref.db);
  if (std::isnan(b.reduced_loss))
    b.reduced_loss =
        std::isfinite(ref.reduced_loss) ? std::numeric_limits<double>::infinity() : 0.0;
  return b;
}

const ErrorProfile* RunAssessment::profile(const std::string& name) const {
  for (const auto& [n, p] : profiles)
    if (n == name) return &p;
  return nullptr;
}

RunAssessment assess_run(const Problem& pb, const LossSpec& spec, const Recipe& recipe,
                         const DeclaredArithmetic& arith, const StrategyOutputs& out,
                         const ReferenceResult& ref, const Policy& policy, std::int64_t n_chunks,
                         const StatsOptions& dz_stats, bool want_profiles) {
  const auto S = static_cast<std::int64_t>(ref.token_rows.size());
  const std::int64_t V = pb.V, D = pb.D;
  // Map the run's token rows onto the reference's.
  std::vector<std::int64_t> pos(sz(S));
  {
    const auto& orow = out.token_rows;
    for (std::int64_t q = 0; q < S; ++q) {
      auto it = std::lower_bound(orow.begin(), orow.end(), ref.token_rows[sz(q)]);
      if (it == orow.end() || *it != ref.token_rows[sz(q)])
        throw InputError(
            fmt::format("assess_run: reference row {} is not among the run's token rows",
                        ref.token_rows[sz(q)]));
      pos[sz(q)] = it - orow.begin();
    }
  }
  if (out.loss.size() != out.token_rows.size() || out.lse.size() != out.token_rows.size())
    throw InputError("assess_run: the run's loss/lse sizes differ from its token rows");
  RunAssessment ra;
  const auto t_bounds = std::chrono::steady_clock::now();
  ra.bounds = bounds_for_reference(pb, spec, recipe, arith, ref, n_chunks);
  ra.bounds_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_bounds).count();
  const Bounds& b = ra.bounds;
  std::vector<double> o(sz(S));
  for (std::int64_t q = 0; q < S; ++q) o[sz(q)] = out.loss[sz(pos[sz(q)])];
  ra.loss = compute_error_stats(o.data(), ref.loss.data(), S, out.loss_dtype, b.loss.data());
  const auto profile = [&ra, want_profiles](const char* name, const double* x, const double* r,
                                            std::int64_t n, DType t) {
    if (want_profiles) ra.profiles.emplace_back(name, error_profile(x, r, n, t));
  };
  profile("loss", o.data(), ref.loss.data(), S, out.loss_dtype);
  for (std::int64_t q = 0; q < S; ++q) o[sz(q)] = out.lse[sz(pos[sz(q)])];
  ra.lse = compute_error_stats(o.data(), ref.lse.data(), S, out.loss_dtype, b.lse.data());
  profile("lse", o.data(), ref.lse.data(), S, out.loss_dtype);
  ra.reduced_loss =
      compute_error_stats(&out.reduced_loss, &ref.reduced_loss, 1, out.loss_dtype, &b.reduced_loss);
  profile("reduced_loss", &out.reduced_loss, &ref.reduced_loss, 1, out.loss_dtype);
  std::vector<JudgedOutput> judged{
      {"loss", &ra.loss, true}, {"lse", &ra.lse, false}, {"reduced_loss", &ra.reduced_loss, false}};
  const auto n_out = static_cast<std::int64_t>(out.token_rows.size());
  if (!out.dz.empty() && !ref.dz.empty()) {
    HostArray<double> copy;
    const double* x = rows_of(out.dz, pos, n_out, V, copy);
    ra.dz = compute_error_stats(x, ref.dz.data(), S * V, out.grad_dtype,
                                b.dz.empty() ? nullptr : b.dz.data(), dz_stats);
    profile("dz", x, ref.dz.data(), S * V, out.grad_dtype);
    ra.has_dz = true;
    judged.push_back({"dz", &ra.dz, false});
  }
  if (!out.dH.empty() && !ref.dH.empty()) {
    HostArray<double> copy;
    const double* x = rows_of(out.dH, pos, n_out, D, copy);
    ra.dH = compute_error_stats(x, ref.dH.data(), S * D, out.grad_dtype,
                                b.dH.empty() ? nullptr : b.dH.data());
    profile("dH", x, ref.dH.data(), S * D, out.grad_dtype);
    ra.has_dH = true;
    judged.push_back({"dH", &ra.dH, false});
  }
  const auto J = static_cast<std::int64_t>(ref.vocab_rows.size());
  if (!out.dW.empty() && !ref.dW.empty()) {
    if (static_cast<std::int64_t>(out.dW.size()) != V * D)
      throw InputError(
          fmt::format("assess_run: dW has {} values, expected V·D = {}", out.dW.size(), V * D));
    HostArray<double> copy;
    const double* x = rows_of(out.dW, ref.vocab_rows, V, D, copy);
    ra.dW = compute_error_stats(x, ref.dW.data(), J * D, out.grad_dtype,
                                b.dW.empty() ? nullptr : b.dW.data());
    profile("dW", x, ref.dW.data(), J * D, out.grad_dtype);
    ra.has_dW = true;
    judged.push_back({"dW", &ra.dW, false});
  }
  if (!out.db.empty() && !ref.db.empty()) {
    std::vector<double> g(sz(J));
    for (std::int64_t q = 0; q < J; ++q) g[sz(q)] = out.db[sz(ref.vocab_rows[sz(q)])];
    ra.db = compute_error_stats(g.data(), ref.db.data(), J, out.grad_dtype, nullptr);
    profile("db", g.data(), ref.db.data(), J, out.grad_dtype);
    ra.has_db = true;
    judged.push_back({"db", &ra.db, false});
  }
  ra.verdict = judge(judged, policy);
  return ra;
}

}  // namespace xentlab

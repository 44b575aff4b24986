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
#include "numerics/no_device.hpp"
#include "reference/row.hpp"
#include "reference/tiers/plan.hpp"

namespace xentlab {
namespace {

using detail::RowStats;
double compensated_need(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                        const ReferenceOptions& opt, bool want_dH, bool want_dW, bool want_db);
constexpr double kU = detail::kRefU;  // unit roundoff of double
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
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
  void finish(std::int64_t D, double n_terms, double* value, double* bound,
              double* condition) const {
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

struct Context {
  const Problem& pb;
  const LossSpec& sp;
  std::int64_t N, V, D;
  std::vector<double> w_norm;  // ‖W_j‖₂ (upper bound), linear problems
  double dot_g2 = 0;           // γ²_{D+kLanes+1}
};

// Logits of one row, in z (after scale and softcap), with per-element error bound in zb and the
// chain factor d z / d raw in chain (and its error bound in chain_b).
void row_logits(const Context& cx, std::int64_t i, const double* h_row, double h_norm,
                std::vector<double>& wbuf, double* z, double* zb, double* chain, double* chain_b) {
  const std::int64_t V = cx.V, D = cx.D;
  if (!cx.pb.is_linear()) {
    cx.pb.logits.read(i * V, V, z);
    std::fill(zb, zb + V, 0.0);
  } else {
    for (std::int64_t j = 0; j < V; ++j) {
      cx.pb.W.read(j * D, D, wbuf.data());
      const double b = cx.pb.bias ? cx.pb.bias->get(j) : 0.0;
      if (b == -kInf) {
        z[j] = -kInf;
        zb[j] = 0.0;
      } else {
        const double r = dot_exact_products(h_row, wbuf.data(), D, b);
        z[j] = r;
        // Sum2 bound: u|r| + γ²·Σ|p|, Σ|p| ≤ ‖H_i‖‖W_j‖ + |b|.
        zb[j] = kU * std::fabs(r) +
                cx.dot_g2 * (h_norm * cx.w_norm[static_cast<std::size_t>(j)] + std::fabs(b));
      }
    }
  }
  detail::transform_logits(cx.sp, V, z, zb, chain, chain_b);
}

}  // namespace

void check_reference_fits(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                          const ReferenceOptions& opt) {
  if (S < 1 || V < 1 || D < 0 || J < 0) return;  // the problem's own validation names these
  std::string why;
  if (opt.tier == ReferenceTier::cuda && !cuda_reference_available(&why))
    throw NoDeviceError("the cuda reference tier is not available: " + why);
  const bool budget_given = opt.max_bytes > 0;
  const std::int64_t budget =
      budget_given
          ? opt.max_bytes
          : static_cast<std::int64_t>(0.9 * static_cast<double>(detail::available_memory_bytes()));
  const bool linear = D > 0;
  ReferenceTier tier = opt.tier;
  if (!linear)
    tier = ReferenceTier::compensated;
  else if (tier == ReferenceTier::automatic)
    tier = cuda_reference_available() ? ReferenceTier::cuda : ReferenceTier::blas;
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  if (tier == ReferenceTier::compensated)
    detail::check_memory(
        compensated_need(S, V, D, J, opt, linear && opt.want_dH, linear && opt.want_dW,
                         linear && opt.want_db),
        budget, budget_given,
        fmt::format("the compensated reference of {} rows × V={} × D={}", S, V, D));
  else if (tier == ReferenceTier::blas)
    detail::check_memory(detail::blas_plan_terms(S, V, D, J, opt, threads).minimum(), budget,
                         budget_given, detail::tier_what("BLAS", S, V, D, J, opt.want_dW));
}

double reference_memory_bytes(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                              const ReferenceOptions& opt) {
  const bool linear = D > 0;
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  if (!linear || opt.tier == ReferenceTier::compensated)
    return compensated_need(S, V, D, J, opt, linear && opt.want_dH, linear && opt.want_dW,
                            linear && opt.want_db);
  return detail::blas_plan_terms(S, V, D, J, opt, threads).minimum();
}

double reference_peak_bytes(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                            const ReferenceOptions& opt) {
  if (D <= 0 || opt.tier == ReferenceTier::compensated)
    return reference_memory_bytes(S, V, D, J, opt);
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  const detail::BlasPlanTerms t = detail::blas_plan_terms(S, V, D, J, opt, threads);
  // blas.cpp plan_blocking with an unlimited budget: the largest panel and block it takes.
  const std::int64_t panel = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(64.0 * (1 << 20) / (16.0 * static_cast<double>(D))),
      std::min<std::int64_t>(64, V), V);
  const std::int64_t block =
      std::min<std::int64_t>({S, std::max<std::int64_t>(128, (S + 7) / 8), std::int64_t{4096}});
  return t.fixed + 16.0 * static_cast<double>(panel) * static_cast<double>(D) +
         t.per_row * static_cast<double>(std::max<std::int64_t>(1, block));
}

std::string_view to_string(ReferenceTier tier) {
  switch (tier) {
    case ReferenceTier::automatic:
      return "auto";
    case ReferenceTier::compensated:
      return "compensated";
    case ReferenceTier::blas:
      return "blas";
    case ReferenceTier::cuda:
      return "cuda";
  }
  return "?";
}

ReferenceTier parse_reference_tier(std::string_view name) {
  for (ReferenceTier t : {ReferenceTier::automatic, ReferenceTier::compensated, ReferenceTier::blas,
                          ReferenceTier::cuda})
    if (name == to_string(t)) return t;
  throw InputError(
      fmt::format("unknown reference tier '{}': use auto, compensated, blas or cuda", name));
}

std::vector<double> random_upstream(std::int64_t N, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> g(static_cast<std::size_t>(std::max<std::int64_t>(N, 0)));
  // k = (rng() mod 25) − 8: the same values with every standard library (a distribution object's
  // algorithm is the library's own); the modulo bias is 2^64 mod 25 / 2^64 < 1e-18.
  for (auto& v : g) v = static_cast<double>(static_cast<std::int64_t>(rng() % 25) - 8) / 8.0;
  return g;
}

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

namespace {

// One thread's row buffers of the compensated tier (V logits and their bounds, chain factors,
// e^{z−a}, dz and its bound; a W and an H row).
struct RowBuffers {
  std::vector<double> z, zb, ch, chb, e, g, gb, wbuf, hbuf;
  Dot2Rows dh;
  RowBuffers(std::int64_t V, std::int64_t D, bool want_dH) {
    const auto n = static_cast<std::size_t>(V);
    const auto d = static_cast<std::size_t>(std::max<std::int64_t>(D, 1));
    z.resize(n);
    zb.resize(n);
    ch.resize(n);
    chb.resize(n);
    e.resize(n);
    g.resize(n);
    gb.resize(n);
    wbuf.resize(d);
    hbuf.resize(d);
    dh.reset(want_dH ? D : 0);
  }
};

// The dz (and its bounds) and H rows of a block of token rows, kept for the dW/db pass.
struct TokenBlock {
  std::int64_t b0 = 0;  // first row q of the block
  std::vector<double> dz, bdz, h;
};

// Token row q of the compensated tier: Sum2 logits, the row's forward outputs and dz into res
// (and into the block for dW/db), and dH = dz·W by Dot2.
void compensated_row(const Context& cx, const ReferenceOptions& opt, bool want_dH, std::int64_t q,
                     ReferenceResult& res, RowBuffers& rb, TokenBlock* blk) {
  auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  const Problem& pb = cx.pb;
  const LossSpec& sp = cx.sp;
  const std::int64_t V = cx.V, D = cx.D;
  const std::int64_t i = res.token_rows[sz(q)];
  const std::int64_t t = pb.targets[sz(i)];
  const bool valid = t != sp.ignore_index;
  double h_norm = 0.0;
  if (pb.is_linear()) {
    pb.H.read(i * D, D, rb.hbuf.data());
    double ss = 0;
    for (std::int64_t d = 0; d < D; ++d) ss += rb.hbuf[sz(d)] * rb.hbuf[sz(d)];
    h_norm = std::sqrt(ss) * detail::norm_margin(D);
    if (blk) std::copy(rb.hbuf.begin(), rb.hbuf.end(), blk->h.begin() + (q - blk->b0) * D);
  }
  row_logits(cx, i, rb.hbuf.data(), h_norm, rb.wbuf, rb.z.data(), rb.zb.data(), rb.ch.data(),
             rb.chb.data());
  double ops = 1.0, omp_t = 0.0;
  const RowStats st = detail::row_forward(sp, V, valid ? t : -1, valid, rb.z.data(), rb.zb.data(),
                                          rb.e.data(), ops, omp_t);
  const double gs = detail::row_grad_scale(sp, res.n_valid, opt.upstream, i, valid);
  detail::store_row_outputs(res, q, st, gs);

  detail::row_gradient(sp, V, t, valid, st, gs, rb.e.data(), ops, omp_t, rb.ch.data(),
                       rb.chb.data(), rb.g.data(), rb.gb.data());
  if (opt.want_dz) {
    std::copy(rb.g.begin(), rb.g.end(), res.dz.begin() + q * V);
    std::copy(rb.gb.begin(), rb.gb.end(), res.dz_bound.begin() + q * V);
  }
  if (blk) {
    std::copy(rb.g.begin(), rb.g.end(), blk->dz.begin() + (q - blk->b0) * V);
    std::copy(rb.gb.begin(), rb.gb.end(), blk->bdz.begin() + (q - blk->b0) * V);
  }
  if (want_dH) {
    rb.dh.reset(D);
    for (std::int64_t j = 0; j < V; ++j) {
      if (rb.g[sz(j)] == 0.0 && rb.gb[sz(j)] == 0.0) continue;  // exact zero: no contribution
      pb.W.read(j * D, D, rb.wbuf.data());
      rb.dh.add(rb.g[sz(j)], rb.gb[sz(j)], rb.wbuf.data(), D);
    }
    rb.dh.finish(D, static_cast<double>(V) + 1, res.dH.data() + q * D, res.dH_bound.data() + q * D,
                 res.dH_cond.data() + q * D);
  }
}

// dW and db of the compensated tier: Dot2 and Sum2 accumulators per vocabulary row, fed block by
// block of token rows.
struct VocabAccumulators {
  std::vector<Dot2Rows> dW;
  std::vector<eft::CompensatedSum> db;
  std::vector<double> db_bnd, db_abs;
};

// Vocabulary row jj (index j) takes the tokens rows b0..b1 of the block.
void accumulate_vocab_row(const TokenBlock& blk, std::int64_t b1, std::int64_t V, std::int64_t D,
                          std::int64_t jj, std::int64_t j, bool want_dW, bool want_db,
                          VocabAccumulators& acc) {
  auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  const std::int64_t b0 = blk.b0;
  for (std::int64_t q = b0; q < b1; ++q) {
    const double x = blk.dz[sz((q - b0) * V + j)];
    const double bx = blk.bdz[sz((q - b0) * V + j)];
    if (x == 0.0 && bx == 0.0) continue;
    if (want_dW) acc.dW[sz(jj)].add(x, bx, blk.h.data() + (q - b0) * D, D);
    if (want_db) {
      acc.db[sz(jj)].add(x);
      acc.db_bnd[sz(jj)] += bx;
      acc.db_abs[sz(jj)] += std::fabs(x);
    }
  }
}

// The compensated tier: Sum2 logits, Dot2 gradients (reference.hpp).
void compensated_tier(const Problem& pb, const LossSpec& sp, const ReferenceOptions& opt,
                      ReferenceResult& res) {
  const bool linear = pb.is_linear();
  const std::int64_t N = pb.N, V = pb.V, D = pb.D;
  const bool want_dH = linear && opt.want_dH;
  const bool want_dW = linear && opt.want_dW;
  const bool want_db = linear && opt.want_db;
  const auto S = static_cast<std::int64_t>(res.token_rows.size());
  const auto J = static_cast<std::int64_t>(res.vocab_rows.size());
  Context cx{pb, sp, N, V, D, {}, 0.0};
  if (linear) {
    const double gd = eft::gamma_n(static_cast<double>(D + kLanes + 1));
    cx.dot_g2 = gd * gd;
    cx.w_norm = detail::row_norms_upper(pb.W, V, D, opt.threads);
  }

  auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  detail::allocate_outputs(res, opt.want_dz, want_dH);
  VocabAccumulators acc;
  if (want_dW) acc.dW.assign(sz(J), Dot2Rows(D));
  if (want_db) {
    acc.db.assign(sz(J), {});
    acc.db_bnd.assign(sz(J), 0.0);
    acc.db_abs.assign(sz(J), 0.0);
  }

  // Token blocks: the dz of a block (and its bounds) is kept for the dW/db pass.
  const bool keep_block = want_dW || want_db;
  std::int64_t B = S;
  if (keep_block) {
    B = std::max<std::int64_t>(1, (std::int64_t{512} << 20) / std::max<std::int64_t>(1, V * 16));
    B = std::min(B, std::max<std::int64_t>(S, 1));
  }
  TokenBlock blk;
  if (keep_block) {
    blk.dz.resize(sz(B * V));
    blk.bdz.resize(sz(B * V));
    blk.h.resize(sz(B * std::max<std::int64_t>(D, 1)));
  }
  const int nthreads = opt.threads > 0 ? opt.threads : omp_get_max_threads();

  for (std::int64_t b0 = 0; b0 < S; b0 += B) {
    const std::int64_t b1 = std::min(S, b0 + B);
    blk.b0 = b0;
#pragma omp parallel num_threads(nthreads)
    {
      RowBuffers rb(V, D, want_dH);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t q = b0; q < b1; ++q)
        compensated_row(cx, opt, want_dH, q, res, rb, keep_block ? &blk : nullptr);
      // dW/db over this block of tokens, parallel over vocabulary rows.
      if (keep_block) {
#pragma omp for schedule(static)
        for (std::int64_t jj = 0; jj < J; ++jj)
          accumulate_vocab_row(blk, b1, V, D, jj, res.vocab_rows[sz(jj)], want_dW, want_db, acc);
      }
    }
    if (opt.progress) opt.progress(b1, S);
  }

  if (want_dW) {
    res.dW.resize(sz(J * D));
    res.dW_bound.resize(sz(J * D));
    res.dW_cond.resize(sz(J * D));
    for (std::int64_t jj = 0; jj < J; ++jj)
      acc.dW[sz(jj)].finish(D, static_cast<double>(S) + 1, res.dW.data() + jj * D,
                            res.dW_bound.data() + jj * D, res.dW_cond.data() + jj * D);
  }
  if (want_db) detail::finish_db(acc.db, acc.db_bnd, acc.db_abs, S, res);
}

// Dot2 accumulators (4 doubles per dW/dH element), outputs, the dz block (≤ 512 MiB), the
// per-thread rows.
double compensated_need(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                        const ReferenceOptions& opt, bool want_dH, bool want_dW, bool want_db) {
  const double threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  return 8.0 * (12.0 * S + (want_dW ? 7.0 * J * D : 0.0) + (want_db ? 4.0 * J : 0) +
                (opt.want_dz ? 2.0 * S * V : 0.0) + (want_dH ? 3.0 * S * D : 0.0) +
                threads * (9.0 * V + 6.0 * D)) +
         (want_dW || want_db ? std::min(16.0 * S * V, 512.0 * (1 << 20)) : 0.0);
}

// Reduced loss: Sum2 over rows of g-weighted (none) or plain (sum/mean) losses.
void finish_reduced_loss(const Problem& pb, const LossSpec& sp, ReferenceResult& res) {
  const auto S = static_cast<std::int64_t>(res.token_rows.size());
  auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
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
    // A sample's mean is over its own valid rows; a caller-given normaliser divides the sum of
    // any rows (then a sample's value is its rows' contribution to the whole loss).
    const std::int64_t n =
        sp.normalizer > 0 ? sp.normalizer : (res.partial ? valid_in_sample : res.n_valid);
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
}

// The problem, the spec and the options the reference cannot work with, refused naming the fault
// (before the rows are checked).
void check_problem(const Problem& pb, const LossSpec& sp, const ReferenceOptions& opt) {
  sp.validate();
  pb.validate(sp.ignore_index);
  if (opt.threads < 0 || opt.threads > 4096)
    throw InputError(
        fmt::format("threads must be in [0, 4096] (0 = OpenMP's default), got {}", opt.threads));
  if (pb.is_linear() && pb.H.dtype() == DType::fp64)
    throw InputError("H/W in fp64 are not supported: products of fp64 values are not exact");
}

// The upstream gradient (reduction none: N finite entries) and the memory and blocking options.
void check_run_options(const LossSpec& sp, const ReferenceOptions& opt, std::int64_t N) {
  if (!opt.upstream.empty()) {
    if (sp.reduction != Reduction::none)
      throw InputError("an upstream gradient is only taken with reduction none");
    if (static_cast<std::int64_t>(opt.upstream.size()) != N)
      throw InputError(
          fmt::format("upstream gradient has {} entries, expected N={}", opt.upstream.size(), N));
    for (std::size_t i = 0; i < opt.upstream.size(); ++i)
      if (!std::isfinite(opt.upstream[i]))
        throw InputError(
            fmt::format("upstream gradient [{}] = {} is not finite", i, opt.upstream[i]));
  }
  if (opt.max_bytes < 0)
    throw InputError(fmt::format(
        "memory budget must be >= 0 bytes (0 = the available memory), got {}", opt.max_bytes));
  if (opt.block_rows < 0 || opt.panel_rows < 0)
    throw InputError(
        fmt::format("block_rows and panel_rows must be >= 0 (0 = automatic), got {} and {}",
                    opt.block_rows, opt.panel_rows));
}

// The tier that runs: given logits always take the compensated tier (no GEMM: the row work is
// the whole computation); auto is cuda where a device is present, else blas.
ReferenceTier resolve_tier(const Problem& pb, ReferenceTier tier) {
  if (!pb.is_linear()) return ReferenceTier::compensated;
  if (tier == ReferenceTier::automatic)
    return cuda_reference_available() ? ReferenceTier::cuda : ReferenceTier::blas;
  if (tier == ReferenceTier::cuda) {
    std::string why;
    if (!cuda_reference_available(&why))
      throw NoDeviceError("the cuda reference tier is not available: " + why);
  }
  return tier;
}

}  // namespace

ReferenceResult compute_reference(const Problem& pb, const LossSpec& sp,
                                  const ReferenceOptions& opt) {
  check_problem(pb, sp, opt);
  const bool linear = pb.is_linear();
  const std::int64_t N = pb.N, V = pb.V, D = pb.D;

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
  check_run_options(sp, opt, N);
  const bool budget_given = opt.max_bytes > 0;
  // Without a budget: 90 % of the memory available now, a margin for what other processes
  // allocate while the reference runs.
  const std::int64_t budget =
      budget_given
          ? opt.max_bytes
          : static_cast<std::int64_t>(0.9 * static_cast<double>(detail::available_memory_bytes()));
  res.tier = resolve_tier(pb, opt.tier);

  if (res.tier == ReferenceTier::compensated) {
    detail::check_memory(
        compensated_need(S, V, D, J, opt, linear && opt.want_dH, linear && opt.want_dW,
                         linear && opt.want_db),
        budget, budget_given,
        fmt::format("the compensated reference of {} rows × V={} × D={}", S, V, D));
    compensated_tier(pb, sp, opt, res);
  } else if (res.tier == ReferenceTier::blas) {
    detail::blas_tier(pb, sp, opt, res, budget, budget_given);
  } else {
    detail::cuda_tier(pb, sp, opt, res, budget, budget_given);
  }
  finish_reduced_loss(pb, sp, res);
  return res;
}

std::shared_ptr<const TargetEngine> target_engine_for(ReferenceTier tier) {
  if (tier == ReferenceTier::cuda ||
      (tier == ReferenceTier::automatic && cuda_reference_available()))
    return make_cuda_target_engine();
  return nullptr;
}

}  // namespace xentlab

// The CPU emulation engine shared by the emulated strategies: the steps every strategy shares
// (common.hpp lists them); each strategy's reduction orders are in its own file. Section numbers
// refer to docs/arithmetic.md.
#include "gpu/emulation/common.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "numerics/emulate.hpp"
#include "numerics/error.hpp"

namespace xentlab::emulation {
namespace {

using Ctx = EngineContext;
using emu::rnd;
constexpr std::int64_t kPanel = 64;  // vocabulary rows per panel of the forward GEMM
inline std::size_t sz(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

// §1 for given logits: z[j] = rnd_logits(stored value) (exact when logits ⊇ the stored dtype).
void row_given_logits(const Ctx& c, std::int64_t i, float* z) {
  const std::int64_t V = c.V;
  double buf[256];
  for (std::int64_t j0 = 0; j0 < V; j0 += 256) {
    const std::int64_t n = std::min<std::int64_t>(256, V - j0);
    c.pb->logits.read(i * V + j0, n, buf);
    if (c.pb->logits.dtype() == DType::fp64) {
      for (std::int64_t l = 0; l < n; ++l) z[j0 + l] = emu::rnd_from_double(buf[l], c.rc.logits);
    } else {
      // fp32/fp16/bf16 values are exact in float, so one rounding of the float is the rounding.
      for (std::int64_t l = 0; l < n; ++l) z[j0 + l] = rnd(static_cast<float>(buf[l]), c.rc.logits);
    }
  }
}

// §1 under the tensor-core accumulation model: for the kPanel columns of wp (D × kPanel), the dot
// products with h accumulated as a tensor core does (Fasi, Higham, Mikaitis, Pranesh, PeerJ
// Comput. Sci. 7:e330, 2021; Blanchard et al., SIAM J. Sci. Comput. 42(3), 2020, the block FMA):
// B products at a time are added to the fp32 accumulator exactly and the sum is rounded toward
// zero into fp32. The products of 16-bit inputs are exact in double and a sum of B + 1 such terms
// is exact in double unless their exponents span more than ~29 bits (then it is rounded at
// 2^-53, far below the model's 2^-23).
void tensor_core_dot(const float* h, const float* wp, std::int64_t D, std::int64_t B, float* acc) {
  double s[kPanel];
  for (std::int64_t d0 = 0; d0 < D; d0 += B) {
    const std::int64_t d1 = std::min(D, d0 + B);
    for (int l = 0; l < kPanel; ++l) s[l] = acc[l];
    for (std::int64_t d = d0; d < d1; ++d) {
      const double hd = h[d];
      const float* w = wp + d * kPanel;
      for (int l = 0; l < kPanel; ++l) s[l] += hd * static_cast<double>(w[l]);
    }
    for (int l = 0; l < kPanel; ++l) acc[l] = emu::rnd_toward_zero(s[l]);
  }
}

// §1 for a linear problem, a block of R token rows at once: Z[r][j] = rnd_logits(fp32 GEMM over
// D (+ bias)). One fp32 accumulator per (r, j) adds the products in increasing d with one rounding
// each (fmaf: exact product, one rounding; for bf16/fp16 inputs the fp32 product is exact anyway).
// W is read in panels of 64 vocabulary rows (converted exactly to float) and shared by the block's
// rows; panels are distributed over threads. Hs: (R, D) rows of H as float; Z: (R, V).
void block_linear_logits(const Ctx& c, const float* Hs, std::int64_t R, float* Z, bool par) {
  const std::int64_t V = c.V, D = c.D;
  const std::int64_t panels = (V + kPanel - 1) / kPanel;
#pragma omp parallel if (par)
  {
    std::vector<double> wrow(static_cast<std::size_t>(D));
    std::vector<float> wp(static_cast<std::size_t>(D * kPanel));
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t p = 0; p < panels; ++p) {
      const std::int64_t j0 = p * kPanel, n = std::min(kPanel, V - j0);
      std::fill(wp.begin(), wp.end(), 0.0f);
      for (std::int64_t l = 0; l < n; ++l) {
        c.pb->W.read((j0 + l) * D, D, wrow.data());
        for (std::int64_t d = 0; d < D; ++d)
          wp[static_cast<std::size_t>(d * kPanel + l)] =
              static_cast<float>(wrow[static_cast<std::size_t>(d)]);
      }
      for (std::int64_t r = 0; r < R; ++r) {
        const float* h = Hs + r * D;
        float acc[kPanel] = {};
        if (c.logits_block > 0) {
          tensor_core_dot(h, wp.data(), D, c.logits_block, acc);
        } else {
          for (std::int64_t d = 0; d < D; ++d) {
            const float hd = h[d];
            const float* w = wp.data() + d * kPanel;
            for (int l = 0; l < kPanel; ++l) acc[l] = std::fma(hd, w[l], acc[l]);
          }
        }
        for (std::int64_t l = 0; l < n; ++l) {
          float v = acc[l];
          if (!c.bias.empty())
            v = v + c.bias[static_cast<std::size_t>(j0 + l)];  // §1: bias in fp32
          Z[r * V + j0 + l] = rnd(v, c.rc.logits);
        }
      }
    }
  }
}

// §8's vocabulary entries of one rank (one rank over [0, V) when the run is not sharded):
// [begin, end), one fp32 sum over them.
struct DHShard {
  std::int64_t begin = 0, end = 0;
};

// An (R, k0..k1) block of fp32 sums: element (r, k) at p[r·ld + k − off].
struct SumBlock {
  float* p = nullptr;
  std::int64_t ld = 0, off = 0;
  float& at(std::int64_t r, std::int64_t k) const { return p[r * ld + k - off]; }
};

// §8 dH = dz·W for a block of R rows: fp32 with exact products, per (r, k) sequential over j over
// each rank's entries (one fp32 sum). Without `rank_sums` the one rank's sums go straight
// into acc; with it (run_sharded) each rank's sum is a fresh fp32 partial, and the partials are
// added into acc in the order of `plan` (dH_plan: rank order, or the reverse with
// DHRankOrder::decreasing; the first one copied: with one rank acc is that rank's sum, bit for
// bit the unsharded one). The hidden dimension is split over threads; each reads its slice of
// every W row.
void block_dH(const Ctx& c, const float* dz, std::int64_t R, float* acc, bool par,
              const std::vector<DHShard>& plan, bool rank_sums) {
  const std::int64_t V = c.V, D = c.D;
  std::fill(acc, acc + R * D, 0.0f);
  // Slices of at least 64 columns: narrower ones cost a read of every W row per slice and put
  // several threads' sums in one cache line (at D = 64, 64 slices of one column made the block
  // twice as slow on 2 threads as on 1). The sums of each element are the same for any slicing.
  constexpr std::int64_t kMinWidth = 64;
  const std::int64_t slices = par ? std::clamp<std::int64_t>(D / kMinWidth, 1, 64) : 1;
  const std::int64_t width = (D + slices - 1) / slices;
#pragma omp parallel if (par)
  {
    std::vector<double> wbuf(static_cast<std::size_t>(width));
    std::vector<float> w(static_cast<std::size_t>(width));
    std::vector<float> rank(rank_sums ? static_cast<std::size_t>(R * width) : 0);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t sl = 0; sl < slices; ++sl) {
      const std::int64_t k0 = sl * width, k1 = std::min(D, k0 + width);
      if (k0 >= k1) continue;
      const auto each = [&](auto&& fn) {
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int64_t k = k0; k < k1; ++k) fn(r, k);
      };
      // Σ_{j0 ≤ j < j1} dz_rj·W_j into b, one fma per term in increasing j.
      const auto sum_into = [&](std::int64_t j0, std::int64_t j1, const SumBlock& b) {
        for (std::int64_t j = j0; j < j1; ++j) {
          bool any = false;
          for (std::int64_t r = 0; r < R && !any; ++r) any = dz[r * V + j] != 0.0f;
          if (!any) continue;  // adding exact zeros leaves fp32 sums unchanged
          c.pb->W.read(j * D + k0, k1 - k0, wbuf.data());
          for (std::int64_t k = 0; k < k1 - k0; ++k)
            w[static_cast<std::size_t>(k)] = static_cast<float>(wbuf[static_cast<std::size_t>(k)]);
          for (std::int64_t r = 0; r < R; ++r) {
            const float dzj = dz[r * V + j];
            if (dzj == 0.0f) continue;
            for (std::int64_t k = k0; k < k1; ++k)
              b.at(r, k) = std::fma(dzj, w[static_cast<std::size_t>(k - k0)], b.at(r, k));
          }
        }
      };
      const SumBlock out{acc, D, 0}, rb{rank.data(), width, k0};
      for (std::size_t g = 0; g < plan.size(); ++g) {
        const DHShard& sh = plan[g];
        const SumBlock& sum = rank_sums ? rb : out;
        if (rank_sums) each([&](std::int64_t r, std::int64_t k) { sum.at(r, k) = 0.0f; });
        sum_into(sh.begin, sh.end, sum);
        if (rank_sums)
          each([&](std::int64_t r, std::int64_t k) {
            out.at(r, k) = g == 0 ? sum.at(r, k) : out.at(r, k) + sum.at(r, k);
          });
      }
    }
  }
}

// §2: loss-kernel logits x = scale·z, softcap c·tanhf(x/c), in fp32, not stored.
inline float kernel_logit(const Ctx& c, float z) {
  float x = c.scale != 1.0f ? c.scale * z : z;
  if (c.cap > 0.0f) x = c.cap * std::tanh(x / c.cap);
  return x;
}

struct RowOut {
  float lse = 0.0f;
  float loss = 0.0f;
};

// §3–5: lse and loss of one row from its kernel logits x (V floats) and the strategy's vocabulary
// sums of them.
RowOut row_forward(const Ctx& c, const float* x, const VocabSums& vs, std::int64_t t, bool valid) {
  const DType A = c.rc.accum;
  RowOut o;
  const float m = vs.m, s = vs.s;
  // §5: lse = rnd_accum(m + logf(sum)); an all-masked row has sum 0 and lse = −Inf.
  o.lse = m == -INFINITY ? -INFINITY : rnd(m + std::log(s), A);
  if (!valid) return o;
  const float xt = x[t];
  float loss;
  if (c.eps > 0.0f) {
    // Σ_j x_j in the accum dtype, in the strategy's order (as its sum-exp).
    loss = rnd(o.lse - c.one_minus_eps * xt - c.eps_over_V * vs.sx, A);
  } else {
    loss = rnd(o.lse - xt, A);
  }
  if (c.lam > 0.0f) loss = rnd(loss + c.lam * (o.lse * o.lse), A);
  o.loss = loss;
  return o;
}

// §7: one entry of dz (before rounding to the logits dtype): p_j = expf(x_j − lse),
// dz_j = g·(p_j·(1 + 2λ·lse) − (1−ε)[j=t] − ε/V)·chain_j, the target entry in the cancelling
// p_t − 1 form; chain_j = scale·(1 − th²) with softcap (th = tanhf(scale·z_j/c), as the forward),
// scale without. All fp32.
inline float dz_entry(const Ctx& c, float z, float x, float lse, float zfac, bool is_target,
                      float g) {
  float q = std::exp(x - lse);
  if (c.lam > 0.0f) q = q * zfac;
  if (is_target) q = q - c.one_minus_eps;
  if (c.eps > 0.0f) q = q - c.eps_over_V;
  if (c.cap > 0.0f) {
    const float a = c.scale != 1.0f ? c.scale * z : z;
    const float th = std::tanh(a / c.cap);
    q = q * (c.scale * (1.0f - th * th));
  } else if (c.scale != 1.0f) {
    q = q * c.scale;
  }
  return rnd(g * q, c.rc.logits);
}

void row_dz(const Ctx& c, const float* z, const float* x, float lse, std::int64_t t, float g,
            float* dz) {
  const float zfac = c.lam > 0.0f ? 1.0f + 2.0f * c.lam * lse : 1.0f;
  for (std::int64_t j = 0; j < c.V; ++j) dz[j] = dz_entry(c, z[j], x[j], lse, zfac, j == t, g);
}

// Loss-kernel logits of a row: x_j from stored logits z_j.
void row_kernel_logits(const Ctx& c, const float* z, float* x) {
  for (std::int64_t j = 0; j < c.V; ++j) x[j] = kernel_logit(c, z[j]);
}

}  // namespace

Status EmulatedStrategy::can_implement(const Problem& p, const LossSpec& s, const Recipe& r) const {
  return emulation_can_implement(name(), p, s, r);
}

Status emulation_can_implement(const std::string& name, const Problem& p, const LossSpec& s,
                               const Recipe& r) {
  for (DType t : {r.input, r.logits, r.accum, r.grad})
    if (t == DType::fp64)
      return Status::NotSupported(
          fmt::format("{} (cpu-emulation): recipe {} has an fp64 place; the emulation models "
                      "fp32/fp16/bf16 hardware only",
                      name, r.name()));
  if (p.input_dtype() != r.input)
    return Status::NotSupported(
        fmt::format("{} (cpu-emulation): the problem is stored in {} but recipe {} reads {} inputs "
                    "(convert the problem; the emulation never re-rounds inputs silently)",
                    name, to_string(p.input_dtype()), r.name(), to_string(r.input)));
  try {
    s.validate();
  } catch (const InputError& e) {
    return Status::NotSupported(std::string("invalid loss spec: ") + e.what());
  }
  return Status::Ok();
}

VocabSums blocked_vocab_sums(const EngineContext& c, const float* x, std::int64_t n, bool need_sx,
                             float* scratch) {
  const DType A = c.rc.accum;
  VocabSums v;
  v.s = emu::sum_exp(x, n, A, c.ar, scratch, &v.m);
  if (need_sx) v.sx = emu::sum_ordered(x, n, A, c.ar);
  return v;
}

DeclaredArithmetic blocked_arithmetic(const std::string& name, const Recipe& r) {
  DeclaredArithmetic a;
  a.token_order = ReductionOrder::pairwise;
  a.gemm_k_split = 1;
  a.vocab_order = ReductionOrder::blocked;
  a.block_threads = kBlockThreads;
  a.note = fmt::format("cpu-emulation {}: block reduce T={}, groups of 8, accum {}", name,
                       kBlockThreads, to_string(r.accum));
  return a;
}

std::int64_t host_block_rows(std::int64_t V) {
  return std::max<std::int64_t>(1, (std::int64_t{64} << 20) / (4 * std::max<std::int64_t>(V, 1)));
}

std::int64_t chunk_rows(const RunRequest& req, std::int64_t V, std::int64_t S) {
  if (req.chunk_tokens > 0) return req.chunk_tokens;
  if (req.memory_budget > 0)
    return std::max<std::int64_t>(1, req.memory_budget / std::max<std::int64_t>(1, V * 8));
  return std::min(S > 0 ? S : 1, kDefaultChunkTokens);
}

void for_each_vocab_row(
    const BlockGrads& b,
    const std::function<void(std::int64_t k, std::int64_t j, float* part)>& fn) {
#pragma omp parallel if (b.parallel)
  {
    std::vector<float> part(sz(b.D));
#pragma omp for schedule(static)
    for (std::int64_t k = 0; k < b.J; ++k)
      fn(k, b.vocab_rows->empty() ? k : (*b.vocab_rows)[sz(k)], part.data());
  }
}

std::int64_t EmulatedStrategy::workspace_size(const RunRequest& req) const {
  return sharded_workspace_size(req, 0);
}

std::int64_t EmulatedStrategy::sharded_workspace_size(const RunRequest& req,
                                                      std::int64_t ranks) const {
  const Problem& p = *req.problem;
  const std::int64_t S =
      req.token_rows.empty() ? p.N : static_cast<std::int64_t>(req.token_rows.size());
  const std::int64_t threads = omp_get_max_threads();
  // A rank's shard holds at most ⌈V/P⌉ entries (its memory budget is per rank).
  const std::int64_t width = ranks > 1 ? (p.V + ranks - 1) / ranks : p.V;
  std::int64_t block = block_rows(req, width, S);
  block = std::max<std::int64_t>(1, std::min(block, std::max<std::int64_t>(S, 1)));
  std::int64_t bytes =
      threads * 2 * p.V * 4 + block * p.V * 4;  // per-thread rows, block of logits/dz
  if (p.is_linear()) bytes += S * p.D * 4 + (p.bias ? p.V * 4 : 0);
  if (req.want_grads && p.is_linear())
    bytes += p.V * p.D * 4 + block * p.D * 4 + (p.bias ? p.V * 4 : 0);
  return bytes;
}

namespace {

// The engine's context of a run (everything but the bias, which float_inputs fills).
Ctx make_context(const RunRequest& req, const DeclaredArithmetic& ar) {
  const Problem& pb = *req.problem;
  Ctx c;
  c.req = &req;
  c.pb = &pb;
  c.sp = req.spec;
  c.rc = req.recipe;
  c.ar = ar;
  c.N = pb.N;
  c.V = pb.V;
  c.D = pb.D;
  c.linear = pb.is_linear();
  c.scale = static_cast<float>(req.spec.logit_scale);
  c.cap = static_cast<float>(req.spec.softcap);
  c.eps = static_cast<float>(req.spec.label_smoothing);
  c.lam = static_cast<float>(req.spec.z_loss);
  c.one_minus_eps = 1.0f - c.eps;
  c.eps_over_V = c.eps / static_cast<float>(c.V);
  return c;
}

// The token rows of the request (all when it names none); InputError when they are out of
// range or not sorted and unique.
std::vector<std::int64_t> token_rows_of(const RunRequest& req, std::int64_t N,
                                        const std::string& name) {
  std::vector<std::int64_t> rows = req.token_rows;
  for (std::size_t q = 0; q < rows.size(); ++q)
    if (rows[q] < 0 || rows[q] >= N || (q > 0 && rows[q] <= rows[q - 1]))
      throw InputError(fmt::format(
          "{} (cpu-emulation): token_rows[{}] = {} is out of [0, {}) or not sorted/unique", name, q,
          rows[q], N));
  if (rows.empty()) {
    rows.resize(sz(N));
    for (std::int64_t i = 0; i < N; ++i) rows[sz(i)] = i;
  }
  return rows;
}

// InputError unless the upstream gradient (reduction none, when given) has N finite entries.
void check_upstream(const RunRequest& req, std::int64_t N, const std::string& name) {
  if (req.spec.reduction == Reduction::none && !req.upstream.empty()) {
    if (static_cast<std::int64_t>(req.upstream.size()) != N)
      throw InputError(fmt::format("{} (cpu-emulation): upstream has {} entries, expected N = {}",
                                   name, req.upstream.size(), N));
    for (std::size_t i = 0; i < req.upstream.size(); ++i)
      if (!std::isfinite(req.upstream[i]))
        throw InputError(fmt::format("{} (cpu-emulation): upstream[{}] = {} is not finite", name, i,
                                     req.upstream[i]));
  }
}

// InputError unless the request's vocabulary rows are in [0, V), sorted and unique.
void check_vocab_rows(const RunRequest& req, std::int64_t V, const std::string& name) {
  for (std::size_t k = 0; k < req.vocab_rows.size(); ++k)
    if (req.vocab_rows[k] < 0 || req.vocab_rows[k] >= V ||
        (k > 0 && req.vocab_rows[k] <= req.vocab_rows[k - 1]))
      throw InputError(fmt::format(
          "{} (cpu-emulation): vocab_rows[{}] = {} is out of [0, {}) or not sorted/unique", name, k,
          req.vocab_rows[k], V));
}

// Inputs as float (exact: every stored value of fp32/fp16/bf16 is a float): the token rows of H
// into Hs (S, D) and the bias into c.bias. W is read on demand. Returns their bytes.
std::int64_t float_inputs(Ctx& c, const std::vector<std::int64_t>& rows, std::vector<float>& Hs) {
  const Problem& pb = *c.pb;
  const std::int64_t V = c.V, D = c.D;
  const auto S = static_cast<std::int64_t>(rows.size());
  std::int64_t extra = 0;
  if (c.linear) {
    std::vector<double> buf(sz(D));
    Hs.resize(sz(S * D));
    for (std::int64_t q = 0; q < S; ++q) {
      pb.H.read(rows[sz(q)] * D, D, buf.data());
      for (std::int64_t d = 0; d < D; ++d) Hs[sz(q * D + d)] = static_cast<float>(buf[sz(d)]);
    }
    if (pb.bias) {
      c.bias.resize(sz(V));
      for (std::int64_t j = 0; j < V; ++j) c.bias[sz(j)] = static_cast<float>(pb.bias->get(j));
    }
    extra += static_cast<std::int64_t>((Hs.size() + c.bias.size()) * 4);
  }
  return extra;
}

}  // namespace

// Per token row of a run: the forward's loss and lse (fp32 values in the accum dtype), the
// gradient scale g (§7: rounded once to fp32, 0 for an ignored row) and validity.
struct EmulatedStrategy::TokenRows {
  std::vector<std::int64_t> rows;
  std::vector<float> loss_f, lse_f, g_f;
  std::vector<char> valid;

  TokenRows(const RunRequest& req, std::vector<std::int64_t> token_rows, std::int64_t n_valid)
      : rows(std::move(token_rows)) {
    const Problem& pb = *req.problem;
    const auto S = static_cast<std::int64_t>(rows.size());
    loss_f.assign(sz(S), 0.0f);
    lse_f.assign(sz(S), 0.0f);
    g_f.assign(sz(S), 0.0f);
    valid.assign(sz(S), 0);
    for (std::int64_t q = 0; q < S; ++q) {
      const std::int64_t i = rows[sz(q)];
      valid[sz(q)] = pb.targets[sz(i)] != req.spec.ignore_index;
      double g = 0.0;
      switch (req.spec.reduction) {
        case Reduction::mean: {
          const std::int64_t n = req.spec.mean_count(n_valid);
          g = n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
          break;
        }
        case Reduction::sum:
          g = 1.0;
          break;
        case Reduction::none:
          g = req.upstream.empty() ? 1.0 : req.upstream[sz(i)];
          break;
      }
      g_f[sz(q)] = valid[sz(q)] ? static_cast<float>(g) : 0.0f;  // §7: g rounded once to fp32
    }
  }

  // §6: token reduction, pairwise over token index in the accum dtype. Ignored rows add exact 0.
  float reduced_loss(const RunRequest& req, std::int64_t N, std::int64_t n_valid, DType A) const {
    const auto S = static_cast<std::int64_t>(rows.size());
    std::vector<float> terms(sz(S));
    std::int64_t valid_in_sample = 0;
    for (std::int64_t q = 0; q < S; ++q) {
      valid_in_sample += valid[sz(q)];
      float v = valid[sz(q)] ? loss_f[sz(q)] : 0.0f;
      if (req.spec.reduction == Reduction::none) v = rnd(g_f[sz(q)] * v, A);
      terms[sz(q)] = v;
    }
    float red = emu::sum_pairwise(terms.data(), S, A);
    if (req.spec.reduction == Reduction::mean) {
      // As the reference: a sample's mean is over its own valid rows, unless a normaliser is
      // given.
      const std::int64_t n =
          req.spec.normalizer > 0 ? req.spec.normalizer : (S < N ? valid_in_sample : n_valid);
      if (n == 0)
        red =
            req.spec.empty_mean == EmptyMean::nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      else
        red = rnd(red / static_cast<float>(n), A);
    }
    return red;
  }
};

void EmulatedStrategy::forward_block(const EngineContext& c, TokenRows& tr, std::int64_t q0,
                                     std::int64_t q1, float* zbuf, bool par,
                                     StrategyOutputs& out) const {
  const Problem& pb = *c.pb;
  const std::int64_t V = c.V;
  const bool grads = c.req->want_grads;
  const DType G = c.rc.grad;
#pragma omp parallel if (par)
  {
    std::vector<float> x(sz(V)), scratch(sz(V));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t q = q0; q < q1; ++q) {
      const std::int64_t i = tr.rows[sz(q)];
      const std::int64_t t = pb.targets[sz(i)];
      const bool v = tr.valid[sz(q)] != 0;
      float* z = zbuf + (q - q0) * V;
      if (!c.linear) row_given_logits(c, i, z);
      row_kernel_logits(c, z, x.data());
      const VocabSums vs = row_vocab_sums(c, x.data(), v && c.eps > 0.0f, scratch.data());
      const RowOut ro = row_forward(c, x.data(), vs, t, v);
      tr.lse_f[sz(q)] = ro.lse;
      tr.loss_f[sz(q)] = ro.loss;
      if (!grads) continue;
      // A strategy that recomputes z in its backward (checkpointed: from H and W in the forward's
      // precision; fused: each tile) gets values bit-identical to these by construction.
      if (v)
        row_dz(c, z, x.data(), ro.lse, t, tr.g_f[sz(q)], z);
      else
        std::fill(z, z + V, 0.0f);
      if (!c.linear)
        for (std::int64_t j = 0; j < V; ++j) out.dz[sz(q * V + j)] = rnd(z[j], G);
    }
  }
}

StrategyOutputs EmulatedStrategy::run(const RunRequest& req) const {
  return run_engine(req, run_arithmetic(req), 0, name());
}

namespace {

// §8's ranks of a run: one over [0, V), or the shards of c.shards in the order their dH partials
// are added (c.dH_order).
std::vector<DHShard> dH_plan(const Ctx& c) {
  std::vector<DHShard> plan;
  const std::vector<VocabShard> whole{{0, c.V}};
  for (const VocabShard& sh : c.shards.empty() ? whole : c.shards)
    plan.push_back({sh.begin, sh.end});
  if (c.dH_order == DHRankOrder::decreasing) std::reverse(plan.begin(), plan.end());
  return plan;
}

}  // namespace

StrategyOutputs EmulatedStrategy::run_engine(const RunRequest& req, const DeclaredArithmetic& ar,
                                             std::int64_t shards, const std::string& as,
                                             DHRankOrder dH_order) const {
  const auto t0 = std::chrono::steady_clock::now();
  if (!req.problem) throw InputError(as + " (cpu-emulation): RunRequest without a problem");
  const Problem& pb = *req.problem;
  req.spec.validate();
  pb.validate(req.spec.ignore_index);
  const Status st = can_implement(pb, req.spec, req.recipe);
  if (!st.ok()) throw InputError(st.message);

  Ctx c = make_context(req, ar);
  c.logits_block = logits_gemm_block();
  c.dH_order = dH_order;
  const std::int64_t N = c.N, V = c.V, D = c.D;
  if (shards > 0) {
    try {
      c.shards = vocab_shards(V, shards);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{} (cpu-emulation): {}", as, e.what()));
    }
  }
  std::vector<std::int64_t> rows = token_rows_of(req, N, as);
  const auto S = static_cast<std::int64_t>(rows.size());
  check_upstream(req, N, as);
  const std::int64_t n_valid = pb.count_valid(req.spec.ignore_index);

  std::vector<float> Hs;  // (S, D)
  std::int64_t extra = float_inputs(c, rows, Hs);

  const DType A = c.rc.accum, G = c.rc.grad;
  StrategyOutputs out;
  out.token_rows = rows;
  out.loss.assign(sz(S), 0.0);
  out.lse.assign(sz(S), 0.0);
  out.loss_dtype = A;
  out.grad_dtype = G;
  TokenRows tr(req, std::move(rows), n_valid);

  const bool grads = req.want_grads;
  const std::vector<DHShard> dH_ranges = dH_plan(c);
  const std::int64_t threads = omp_get_max_threads();
  // Rows are processed in blocks of the strategy's size (block_rows; a rank's, over its shard of
  // at most ⌈V/P⌉ entries, when sharded); each block's dW and db are added into the accumulators
  // by the strategy (add_block_grads).
  std::int64_t block = block_rows(req, c.shards.empty() ? V : c.shards.front().size(), S);
  block = std::max<std::int64_t>(1, std::min(block, S));
  const bool par = S * V * (D + 4) >= (std::int64_t{1} << 18);
  // Vocabulary rows of dW/db (all, or RunRequest::vocab_rows); J of them are computed.
  check_vocab_rows(req, V, as);
  const std::int64_t J =
      req.vocab_rows.empty() ? V : static_cast<std::int64_t>(req.vocab_rows.size());
  if (grads) {
    if (c.linear) {
      // Fresh HostArrays: resize gives zeros, written in parallel at allocation.
      out.dH.resize(sz(S * D));
      out.dW.resize(sz(J * D));
      if (pb.bias || req.want_db) out.db.assign(sz(J), 0.0);
    } else {
      out.dz.resize(sz(S * V));
    }
  }
  // dW, db: the strategy's accumulators across blocks; values held as float.
  std::vector<float> dW_acc(grads && c.linear ? sz(J * D) : 0, 0.0f);
  std::vector<float> db_acc(grads && c.linear && (pb.bias || req.want_db) ? sz(J) : 0, 0.0f);
  std::vector<float> zbuf(sz(block * V));  // (block, V): logits, then dz in place (logits dtype)
  std::vector<float> dHacc(grads && c.linear ? sz(block * D) : 0);
  extra +=
      static_cast<std::int64_t>((dW_acc.size() + db_acc.size() + zbuf.size() + dHacc.size()) * 4);
  extra += threads * 2 * V * 4;

  for (std::int64_t q0 = 0; q0 < S; q0 += block) {
    const std::int64_t q1 = std::min(S, q0 + block), R = q1 - q0;
    if (c.linear) block_linear_logits(c, Hs.data() + q0 * D, R, zbuf.data(), par);
    // Forward (§2–5) and dz (§7) per row; dz overwrites the row's logits.
    forward_block(c, tr, q0, q1, zbuf.data(), par, out);
    if (!grads || !c.linear) continue;
    const float* dz = zbuf.data();
    block_dH(c, dz, R, dHacc.data(), par, dH_ranges, !c.shards.empty());
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t d = 0; d < D; ++d)
        out.dH[sz((q0 + r) * D + d)] = rnd(dHacc[sz(r * D + d)], G);
    BlockGrads bg;
    bg.dz = dz;
    bg.H = Hs.data() + q0 * D;
    bg.R = R;
    bg.V = V;
    bg.D = D;
    bg.vocab_rows = &req.vocab_rows;
    bg.J = J;
    bg.dW = dW_acc.data();
    bg.db = db_acc.empty() ? nullptr : db_acc.data();
    bg.parallel = par;
    bg.accum = A;
    add_block_grads(bg);
  }
  if (grads && c.linear) {
    for (std::int64_t k = 0; k < J * D; ++k) out.dW[sz(k)] = rnd(dW_acc[sz(k)], G);
    for (std::size_t j = 0; j < db_acc.size(); ++j) out.db[j] = rnd(db_acc[j], G);
  }

  for (std::int64_t q = 0; q < S; ++q) {
    out.loss[sz(q)] = tr.loss_f[sz(q)];
    out.lse[sz(q)] = tr.lse_f[sz(q)];
  }
  out.reduced_loss = tr.reduced_loss(req, N, n_valid, A);
  out.peak_extra_bytes = extra;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace xentlab::emulation

#include "datasets/generators.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "numerics/blas.hpp"
#include "numerics/error.hpp"
#include "numerics/loss_kernel.hpp"

namespace xentlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// HeadLogits: vocabulary rows a dgemm call (the unit split over the threads), the most W may take
// as doubles to be held whole, and a panel's size otherwise.
constexpr std::int64_t kTileRows = 256;
constexpr std::int64_t kWholeWBytes = std::int64_t{1} << 30;
constexpr std::int64_t kPanelBytes = std::int64_t{256} << 20;
// Checked before the parallel loops (dgemm_row_major would throw inside them).
constexpr std::int64_t kBlasIntMax = std::numeric_limits<int>::max();
// make_head's blocks of rows: their logits and rows of H take at most 1 GiB, and at most 1024
// rows (larger blocks gain nothing in the GEMM and would make the progress coarse).
constexpr std::int64_t kBlockBytes = std::int64_t{1} << 30;
constexpr std::int64_t kBlockRowsMax = 1024;
// Purposes of the per-row streams (row_stream's tag).
enum Tag : std::uint64_t {
  kTagH = 1,
  kTagW,
  kTagLogits,
  kTagTarget,
  kTagConfident,
  kTagIgnore,
  kTagMask
};

void check_sizes(const char* what, std::int64_t N, std::int64_t V, std::int64_t D, double sigma) {
  if (N < 1 || V < 1 || D < 1)
    throw InputError(fmt::format("{}: N, V, D must be >= 1, got N={} V={} D={}", what, N, V, D));
  if (!(sigma > 0) || !std::isfinite(sigma))
    throw InputError(fmt::format("{}: sigma must be finite and > 0, got {}", what, sigma));
}

// The spec's transformation of a raw logit (LossSpec: scale, then softcap).
double transform(double r, const LossSpec& spec) {
  return kernel_logit(r, spec.logit_scale, spec.softcap);
}

// t ~ softmax(transform(raw)) of one row (−inf entries have probability 0).
std::int64_t sample_target(const double* raw, std::int64_t V, const LossSpec& spec, NormalStream& s,
                           std::vector<double>& w) {
  w.resize(static_cast<std::size_t>(V));
  double mx = -kInf;
  for (std::int64_t j = 0; j < V; ++j) mx = std::max(mx, w[j] = transform(raw[j], spec));
  if (mx == -kInf) return s.uniform_int(V);  // fully masked row: no distribution; callers ignore it
  double sum = 0;
  for (std::int64_t j = 0; j < V; ++j) sum += (w[j] = std::exp(w[j] - mx));
  const double u = s.uniform() * sum;
  double c = 0;
  std::int64_t last = 0;
  for (std::int64_t j = 0; j < V; ++j) {
    if (w[j] == 0) continue;
    last = j;
    c += w[j];
    if (u < c) return j;
  }
  return last;
}

// Gaussian rows: T(r, d) = scale·n for rows [0, rows), one stream per row.
void fill_gaussian(Tensor& T, std::int64_t rows, std::int64_t cols, double scale,
                   std::uint64_t seed, std::uint64_t tag) {
#pragma omp parallel
  {
    std::vector<double> row(static_cast<std::size_t>(cols));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      NormalStream s = row_stream(seed, tag, r);
      for (std::int64_t c = 0; c < cols; ++c) row[static_cast<std::size_t>(c)] = scale * s.next();
      store_rounded(T, r * cols, row.data(), cols);
    }
  }
}

// Rows a block of make_head's calibrated targets: a function of the shape only (so the GEMM's
// shapes, and with them every logit's bits, do not depend on the thread count).
std::int64_t head_block_rows(std::int64_t N, std::int64_t V, std::int64_t D) {
  const std::int64_t fit = kBlockBytes / (8 * (V + D));
  return std::max<std::int64_t>(1, std::min({N, fit, kBlockRowsMax}));
}

void sample_targets_rows(std::int64_t i0, std::int64_t m, std::int64_t V,
                         const std::vector<double>& Z, const LossSpec& spec, std::uint64_t seed,
                         std::vector<std::int64_t>& t) {
#pragma omp parallel
  {
    std::vector<double> w;
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < m; ++r) {
      NormalStream s = row_stream(seed, kTagTarget, i0 + r);
      t[static_cast<std::size_t>(i0 + r)] = sample_target(Z.data() + r * V, V, spec, s, w);
    }
  }
}

std::vector<std::int64_t> targets_for_logits(const Tensor& Z, TargetMode mode, const LossSpec& spec,
                                             std::uint64_t seed) {
  const std::int64_t N = Z.dim(0), V = Z.dim(1);
  std::vector<std::int64_t> t(static_cast<std::size_t>(N));
#pragma omp parallel
  {
    std::vector<double> row(static_cast<std::size_t>(V)), w;
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < N; ++i) {
      NormalStream s = row_stream(seed, kTagTarget, i);
      if (mode == TargetMode::uniform) {
        t[static_cast<std::size_t>(i)] = s.uniform_int(V);
      } else {
        Z.read(i * V, V, row.data());
        t[static_cast<std::size_t>(i)] = sample_target(row.data(), V, spec, s, w);
      }
    }
  }
  return t;
}

}  // namespace

void store_rounded(Tensor& t, std::int64_t first, const double* v, std::int64_t n) {
  if (t.dtype() == DType::fp32) {
    float* p = static_cast<float*>(t.data()) + first;
    for (std::int64_t k = 0; k < n; ++k) p[k] = static_cast<float>(v[k]);  // IEEE RNE conversion
    return;
  }
  if (t.dtype() != DType::bf16) {
    for (std::int64_t k = 0; k < n; ++k) t.set(first + k, v[k]);
    return;
  }
  auto* p = static_cast<std::uint16_t*>(t.data()) + first;
  for (std::int64_t k = 0; k < n; ++k) {
    // bf16 keeps 7 of the double's 52 fraction bits: add half an ULP minus one, plus the kept
    // LSB (ties to even), and truncate. Exact for |x| in the normal bf16 range [2^-126, 2^127·(2 −
    // 2^-8)), where the carry can at most raise the exponent by one inside the range; everything
    // else (zero, subnormal, overflow, non-finite) takes the defining slow path.
    const double x = v[k];
    const double a = std::fabs(x);
    if (!(a >= 0x1p-126 && a < 0x1.FFp127)) {
      t.set(first + k, x);
      continue;
    }
    std::uint64_t b;
    std::memcpy(&b, &x, 8);
    const std::uint64_t lsb = (b >> 45) & 1;
    b += (std::uint64_t{1} << 44) - 1 + lsb;
    b &= ~((std::uint64_t{1} << 45) - 1);
    double y;
    std::memcpy(&y, &b, 8);
    const float f = static_cast<float>(y);  // exact: y has 8 significant bits, fp32 range
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    p[k] = static_cast<std::uint16_t>(u >> 16);
  }
}

NormalStream row_stream(std::uint64_t seed, std::uint64_t tag, std::int64_t row) {
  // splitmix64 finaliser of a combination of the three; NormalStream seeds its state from it.
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull ^ (tag << 56) ^ static_cast<std::uint64_t>(row);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return NormalStream(z ^ (z >> 31) ^ seed);
}

HeadLogits::HeadLogits(const Tensor& W, std::int64_t panel_rows) : W_(W) {
  if (W.rank() != 2)
    throw InputError(
        fmt::format("head logits: W must be a V × D matrix, got {} dimensions", W.rank()));
  if (panel_rows < 0)
    throw InputError(fmt::format("head logits: panel_rows must be >= 0, got {}", panel_rows));
  V_ = W.dim(0);
  D_ = W.dim(1);
  if (V_ > kBlasIntMax || D_ > kBlasIntMax)
    throw InputError(
        fmt::format("head logits: V = {} and D = {} must be at most {} (the system "
                    "BLAS's 32-bit integers)",
                    V_, D_, kBlasIntMax));
  const auto tiles = [](std::int64_t rows) {
    return std::max<std::int64_t>(1, (rows + kTileRows - 1) / kTileRows) * kTileRows;
  };
  if (panel_rows == 0 && 8 * V_ * D_ <= kWholeWBytes) {
    panel_ = V_;
    whole_.resize(static_cast<std::size_t>(V_ * D_));
#pragma omp parallel for schedule(static)
    for (std::int64_t j = 0; j < V_; ++j) W_.read(j * D_, D_, whole_.data() + j * D_);
    return;
  }
  panel_ = std::min(V_, tiles(panel_rows > 0 ? panel_rows : kPanelBytes / (8 * D_)));
}

double HeadLogits::held_bytes(std::int64_t V, std::int64_t D, std::int64_t panel_rows) {
  if (panel_rows == 0 && 8 * V * D <= kWholeWBytes) return 8.0 * static_cast<double>(V * D);
  const std::int64_t rows = panel_rows > 0 ? panel_rows : kPanelBytes / (8 * D);
  const std::int64_t tiled =
      std::max<std::int64_t>(1, (rows + kTileRows - 1) / kTileRows) * kTileRows;
  return 8.0 * static_cast<double>(std::min(V, tiled)) * static_cast<double>(D);
}

double head_generation_bytes(std::int64_t N, std::int64_t V, std::int64_t D) {
  const std::int64_t m = head_block_rows(N, V, D);
  return HeadLogits::held_bytes(V, D) + 8.0 * static_cast<double>(m) * static_cast<double>(V + D);
}

void HeadLogits::compute(const double* X, std::int64_t m, std::vector<double>& Z) const {
  if (m < 0 || m > kBlasIntMax)
    throw InputError(
        fmt::format("head logits: {} rows in a block: must be in [0, {}] (the system "
                    "BLAS's 32-bit integers)",
                    m, kBlasIntMax));
  Z.resize(static_cast<std::size_t>(m * V_));
  if (m == 0) return;
  const BlasOneThreadPerCall one_thread;
  for (std::int64_t p0 = 0; p0 < V_; p0 += panel_) {
    const std::int64_t rows = std::min(panel_, V_ - p0);
    const double* P = panel_buf_.data();
    if (!whole_.empty()) {
      P = whole_.data() + p0 * D_;
    } else {
      panel_buf_.resize(static_cast<std::size_t>(rows * D_));
      P = panel_buf_.data();
#pragma omp parallel for schedule(static)
      for (std::int64_t j = 0; j < rows; ++j)
        W_.read((p0 + j) * D_, D_, panel_buf_.data() + j * D_);
    }
    // Tiles start at multiples of kTileRows from 0 (panels are multiples of it), so a logit's
    // dgemm is the same call whatever the panels.
    const std::int64_t n_tiles = (rows + kTileRows - 1) / kTileRows;
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t k = 0; k < n_tiles; ++k) {
      const std::int64_t j0 = k * kTileRows, nb = std::min(kTileRows, rows - j0);
      dgemm_row_major(false, true, m, nb, D_, 1.0, X, D_, P + j0 * D_, D_, 0.0, Z.data() + p0 + j0,
                      V_);
    }
  }
}

Problem make_head(std::int64_t N, std::int64_t V, std::int64_t D, DType dtype, double sigma,
                  std::uint64_t seed, TargetMode mode, const LossSpec& spec,
                  const std::string& name, const GenerationProgress& progress,
                  const TargetEngine* engine) {
  check_sizes(name.c_str(), N, V, D, sigma);
  Tensor H(dtype, {N, D}, "H"), W(dtype, {V, D}, "W");
  fill_gaussian(H, N, D, 1.0, seed, kTagH);
  fill_gaussian(W, V, D, sigma / std::sqrt(static_cast<double>(D)), seed, kTagW);
  std::vector<std::int64_t> t(static_cast<std::size_t>(N));
  if (mode == TargetMode::uniform) {
    for (std::int64_t i = 0; i < N; ++i)
      t[static_cast<std::size_t>(i)] = row_stream(seed, kTagTarget, i).uniform_int(V);
  } else if (engine != nullptr) {
    std::vector<double> u(static_cast<std::size_t>(N));
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < N; ++i)
      u[static_cast<std::size_t>(i)] = row_stream(seed, kTagTarget, i).uniform();
    engine->sample(H, W, spec, u, t, progress);
    if (static_cast<std::int64_t>(t.size()) != N)
      throw std::logic_error(
          fmt::format("{}: the target engine returned {} targets for {} rows", name, t.size(), N));
    for (const std::int64_t v : t)
      if (v < 0 || v >= V)
        throw std::logic_error(
            fmt::format("{}: the target engine ({}) returned target {} "
                        "outside [0, {})",
                        name, engine->describe(), v, V));
  } else {
    const HeadLogits logits(W);
    const std::int64_t block = head_block_rows(N, V, D);
    std::vector<double> X, Z;
    for (std::int64_t i0 = 0; i0 < N; i0 += block) {
      const std::int64_t m = std::min(block, N - i0);
      X.resize(static_cast<std::size_t>(m * D));
      H.read(i0 * D, m * D, X.data());
      logits.compute(X.data(), m, Z);
      sample_targets_rows(i0, m, V, Z, spec, seed, t);
      if (progress) progress(i0 + m, N);
    }
  }
  Problem p = Problem::linear(std::move(H), std::move(W), std::nullopt, std::move(t),
                              spec.ignore_index, name);
  if (mode != TargetMode::uniform)
    p.targets_drawn_by = engine ? engine->describe() : fmt::format("cpu: {}", blas_description());
  return p;
}

Problem make_confident_head(std::int64_t N, std::int64_t V, std::int64_t D, DType dtype,
                            double sigma, std::uint64_t seed, const LossSpec& spec, double p_lo,
                            double p_hi, const GenerationProgress& progress) {
  if (!(p_lo > 0 && p_lo <= p_hi && p_hi < 1))
    throw InputError(fmt::format("confident: need 0 < p_lo ≤ p_hi < 1, got {} and {}", p_lo, p_hi));
  Problem p = make_head(N, V, D, dtype, sigma, seed, TargetMode::uniform, spec, "confident");
  const HeadLogits logits(p.W);
  std::vector<double> X, G, Z;
  const std::int64_t block =
      std::max<std::int64_t>(1, std::min<std::int64_t>(64, (std::int64_t{1} << 25) / V));
  for (std::int64_t i0 = 0; i0 < N; i0 += block) {
    const std::int64_t m = std::min(block, N - i0);
    X.resize(static_cast<std::size_t>(m * D));
    p.H.read(i0 * D, m * D, X.data());
    logits.compute(X.data(), m, Z);  // z0 = H_i·W_j
    std::vector<double> WT(static_cast<std::size_t>(m * D));
    for (std::int64_t r = 0; r < m; ++r)
      p.W.read(p.targets[static_cast<std::size_t>(i0 + r)] * D, D, WT.data() + r * D);
    logits.compute(WT.data(), m, G);  // g_j = W_t·W_j: dz_j/dc
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < m; ++r) {
      const std::int64_t i = i0 + r, t = p.targets[static_cast<std::size_t>(i)];
      NormalStream s = row_stream(seed, kTagConfident, i);
      // 1 − p* log-uniform in [1 − p_hi, 1 − p_lo].
      const double lq =
          std::log(1 - p_hi) + s.uniform() * (std::log(1 - p_lo) - std::log(1 - p_hi));
      const double want = 1 - std::exp(lq);
      const double* z0 = Z.data() + r * V;
      const double* g = G.data() + r * V;
      auto p_t = [&](double c) {  // softmax at t of transform(z0 + c·g), stable form
        double mx = -kInf;
        for (std::int64_t j = 0; j < V; ++j) mx = std::max(mx, transform(z0[j] + c * g[j], spec));
        double sum = 0;
        for (std::int64_t j = 0; j < V; ++j)
          sum += std::exp(transform(z0[j] + c * g[j], spec) - mx);
        return std::exp(transform(z0[t] + c * g[t], spec) - mx) / sum;
      };
      const double gt = std::max(g[t], 1e-300);
      double lo = 0, hi = 1 / gt;
      for (int k = 0; k < 60 && p_t(hi) < want; ++k) hi *= 2;
      for (int k = 0; k < 40; ++k) {
        const double mid = 0.5 * (lo + hi);
        (p_t(mid) < want ? lo : hi) = mid;
      }
      for (std::int64_t d = 0; d < D; ++d)
        p.H.set(i * D + d, X[static_cast<std::size_t>(r * D + d)] +
                               hi * WT[static_cast<std::size_t>(r * D + d)]);
    }
    if (progress) progress(i0 + m, N);
  }
  p.validate(spec.ignore_index);
  return p;
}

Problem make_heavy_logits(std::int64_t N, std::int64_t V, DType dtype, double sigma, double alpha,
                          std::uint64_t seed, TargetMode mode, const LossSpec& spec) {
  check_sizes("heavy", N, V, 1, sigma);
  if (!(alpha > 0)) throw InputError(fmt::format("heavy: alpha must be > 0, got {}", alpha));
  const double cap = max_finite(DType::fp16);
  Tensor Z(dtype, {N, V}, "logits");
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < N; ++i) {
    NormalStream s = row_stream(seed, kTagLogits, i);
    for (std::int64_t j = 0; j < V; ++j) {
      double u = s.uniform();
      while (u <= 0) u = s.uniform();
      const double z = sigma * s.next() / std::pow(u, 1 / alpha);
      Z.set(i * V + j, std::clamp(z, -cap, cap));
    }
  }
  auto t = targets_for_logits(Z, mode, spec, seed);
  return Problem::from_logits(std::move(Z), std::move(t), spec.ignore_index, "heavy");
}

Problem make_offset_logits(std::int64_t N, std::int64_t V, DType dtype, double sigma, double offset,
                           std::uint64_t seed, const LossSpec& spec) {
  check_sizes("offset", N, V, 1, sigma);
  if (!std::isfinite(offset))
    throw InputError(fmt::format("offset: must be finite, got {}", offset));
  Tensor Z(dtype, {N, V}, "logits");
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < N; ++i) {
    NormalStream s = row_stream(seed, kTagLogits, i);
    for (std::int64_t j = 0; j < V; ++j) Z.set(i * V + j, offset + sigma * s.next());
  }
  auto t = targets_for_logits(Z, TargetMode::calibrated, spec, seed);
  return Problem::from_logits(std::move(Z), std::move(t), spec.ignore_index, "offset");
}

Problem make_masked_logits(std::int64_t N, std::int64_t V, DType dtype, double sigma,
                           double fraction, std::uint64_t seed, const LossSpec& spec) {
  check_sizes("masked", N, V, 1, sigma);
  if (!(fraction >= 0 && fraction <= 1))
    throw InputError(fmt::format("masked: fraction must be in [0, 1], got {}", fraction));
  Tensor Z(dtype, {N, V}, "logits");
  std::vector<std::int64_t> t(static_cast<std::size_t>(N));
#pragma omp parallel
  {
    std::vector<double> row(static_cast<std::size_t>(V)), w;
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < N; ++i) {
      NormalStream s = row_stream(seed, kTagLogits, i), m = row_stream(seed, kTagMask, i);
      for (std::int64_t j = 0; j < V; ++j) row[static_cast<std::size_t>(j)] = sigma * s.next();
      NormalStream ts = row_stream(seed, kTagTarget, i);
      const std::int64_t ti = sample_target(row.data(), V, spec, ts, w);
      for (std::int64_t j = 0; j < V; ++j) {
        const bool masked = i == 0 || (i == 1 && j != ti) || (j != ti && m.uniform() < fraction);
        Z.set(i * V + j, masked ? -kInf : row[static_cast<std::size_t>(j)]);
      }
      t[static_cast<std::size_t>(i)] = i == 0 ? spec.ignore_index : ti;
    }
  }
  return Problem::from_logits(std::move(Z), std::move(t), spec.ignore_index, "masked");
}

Problem make_tied_logits(std::int64_t N, std::int64_t V, DType dtype, int levels,
                         std::uint64_t seed, const LossSpec& spec) {
  check_sizes("ties", N, V, 1, 1.0);
  if (levels < 1) throw InputError(fmt::format("ties: levels must be >= 1, got {}", levels));
  Tensor Z(dtype, {N, V}, "logits");
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < N; ++i) {
    NormalStream s = row_stream(seed, kTagLogits, i);
    for (std::int64_t j = 0; j < V; ++j)
      Z.set(i * V + j, static_cast<double>(s.uniform_int(levels)));
  }
  auto t = targets_for_logits(Z, TargetMode::calibrated, spec, seed);
  return Problem::from_logits(std::move(Z), std::move(t), spec.ignore_index, "ties");
}

void ignore_rows(Problem& p, double fraction, std::uint64_t seed, std::int64_t ignore_index) {
  if (!(fraction >= 0))
    throw InputError(fmt::format("ignore fraction must be >= 0, got {}", fraction));
  for (std::int64_t i = 0; i < p.N; ++i)
    if (fraction >= 1 || row_stream(seed, kTagIgnore, i).uniform() < fraction)
      p.targets[static_cast<std::size_t>(i)] = ignore_index;
}

}  // namespace xentlab

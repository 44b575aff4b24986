// Forward pass of the llama2.c legacy checkpoint format (the "run.c" model), in double.
#include "datasets/stories260k.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "datasets/io/sha256.hpp"
#include "datasets/synthetic.hpp"
#include "numerics/error.hpp"

// Both come from datasets/CMakeLists.txt: the repository's data folder and the digest of its
// datasets/data/stories260K/stories260K.bin.sha256.
#if !defined(XENTLAB_DATA_DIR) || !defined(XENTLAB_STORIES260K_SHA256)
#error "XENTLAB_DATA_DIR and XENTLAB_STORIES260K_SHA256 are defined by datasets/CMakeLists.txt"
#endif

namespace xentlab {
namespace {
enum Arr { kEmb, kRmsAtt, kWq, kWk, kWv, kWo, kRmsFfn, kW1, kW2, kW3, kRmsFinal, kEnd };

// RMSNorm of llama2.c: out = x·w / sqrt(mean(x²) + 1e-5).
void rmsnorm(double* out, const double* x, const float* w, int n) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const double r = 1.0 / std::sqrt(ss / n + 1e-5);
  for (int i = 0; i < n; ++i) out[i] = x[i] * r * static_cast<double>(w[i]);
}

// out (d) = W (d × n) · x (n)
void matvec(double* out, const float* W, const double* x, int d, int n) {
  for (int i = 0; i < d; ++i) {
    double s = 0;
    const float* row = W + static_cast<std::size_t>(i) * n;
    for (int j = 0; j < n; ++j) s += static_cast<double>(row[j]) * x[j];
    out[i] = s;
  }
}
}  // namespace

std::string stories260k_path() {
  const std::string rel = "stories260K/stories260K.bin";
  std::error_code ec;
  std::string path;
  if (const char* e = std::getenv("XENTLAB_DATA_DIR"); e && *e) {
    path = (std::filesystem::path(e) / rel).string();
    if (!std::filesystem::is_regular_file(path, ec))
      throw InputError(fmt::format(
          "stories260K checkpoint not found: no file {} (XENTLAB_DATA_DIR={}; unset it to use the "
          "repository's copy in {})",
          path, e, XENTLAB_DATA_DIR));
  } else {
    path = (std::filesystem::path(XENTLAB_DATA_DIR) / rel).string();
    if (!std::filesystem::is_regular_file(path, ec))
      throw InputError(
          fmt::format("stories260K checkpoint not found: no file {} (the repository's copy; set "
                      "XENTLAB_DATA_DIR to a folder that holds stories260K/stories260K.bin)",
                      path));
  }
  verify_stories260k(path);
  return path;
}

void verify_stories260k(const std::string& path) {
  const std::string expected = XENTLAB_STORIES260K_SHA256;
  const std::string actual = sha256_file_hex(path);
  if (actual == expected) return;
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  throw InputError(fmt::format(
      "{}: SHA-256 mismatch: expected {} (datasets/data/stories260K/stories260K.bin.sha256), got "
      "{}{} — truncated, damaged or not the stories260K checkpoint",
      path, expected, actual, ec ? "" : fmt::format(" (the file has {} bytes)", bytes)));
}

Stories260K Stories260K::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(fmt::format("{}: cannot open", path));
  std::int32_t h[7];
  if (!in.read(reinterpret_cast<char*>(h), sizeof h))
    throw FormatError(fmt::format("{}: shorter than the 28-byte llama2.c header", path));
  Stories260K m;
  m.dim = h[0];
  m.hidden_dim = h[1];
  m.n_layers = h[2];
  m.n_heads = h[3];
  m.n_kv_heads = h[4];
  m.vocab = h[5];
  m.seq_len = h[6];
  if (m.vocab <= 0)
    throw FormatError(
        fmt::format("{}: vocab_size {} ≤ 0 (untied classifier) is not supported", path, m.vocab));
  if (m.dim <= 0 || m.hidden_dim <= 0 || m.n_layers <= 0 || m.n_heads <= 0 || m.n_kv_heads <= 0 ||
      m.seq_len <= 0 || m.dim % m.n_heads != 0 || m.n_heads % m.n_kv_heads != 0 ||
      (m.dim / m.n_heads) % 2 != 0 || m.vocab < 2 || m.dim > 65536 || m.hidden_dim > 262144 ||
      m.n_layers > 1024 || m.vocab > (1 << 22) || m.seq_len > (1 << 20))
    throw FormatError(fmt::format(
        "{}: implausible header dim={} hidden_dim={} n_layers={} n_heads={} n_kv_heads={} "
        "vocab_size={} seq_len={}",
        path, m.dim, m.hidden_dim, m.n_layers, m.n_heads, m.n_kv_heads, m.vocab, m.seq_len));
  const std::size_t D = m.dim, Hd = m.hidden_dim, L = m.n_layers, V = m.vocab;
  const std::size_t hs = D / m.n_heads, kv = D * m.n_kv_heads / m.n_heads;
  const std::size_t sizes[kEnd] = {V * D, L * D,      L * D * D,  L * D * kv, L * D * kv, L * D * D,
                                   L * D, L * Hd * D, L * D * Hd, L * Hd * D, D};
  std::size_t total = 0;
  for (int k = 0; k < kEnd; ++k) {
    m.off_[k] = total;
    total += sizes[k];
  }
  m.off_[kEnd] = total;
  const std::size_t freq = 2 * static_cast<std::size_t>(m.seq_len) * (hs / 2);
  const auto fsize = std::filesystem::file_size(path);
  const std::size_t expect = 28 + 4 * (total + freq);
  if (fsize != expect)
    throw FormatError(
        fmt::format("{}: {} bytes, but its header implies {} (truncated or not a "
                    "llama2.c legacy checkpoint)",
                    path, fsize, expect));
  m.w_.resize(total);
  if (!in.read(reinterpret_cast<char*>(m.w_.data()), static_cast<std::streamsize>(4 * total)))
    throw FormatError(fmt::format("{}: read failed", path));
  return m;
}

Stories260K::Forward Stories260K::generate(int T, bool greedy, std::uint64_t seed) const {
  if (T < 1 || T > seq_len)
    throw InputError(fmt::format("stories260K: positions must be in [1, {}], got {}", seq_len, T));
  const int D = dim, Hd = hidden_dim, hs = dim / n_heads, kvd = dim * n_kv_heads / n_heads;
  const int kv_mul = n_heads / n_kv_heads;
  const float* W = w_.data();
  std::vector<double> x(D), xb(D), xb2(D), q(D), hb(Hd), hb2(Hd), att(seq_len);
  std::vector<double> kc(static_cast<std::size_t>(n_layers) * seq_len * kvd);
  std::vector<double> vc(kc.size());
  NormalStream rng(seed);
  Forward f;
  f.tokens.push_back(1);  // BOS
  f.residual.resize(static_cast<std::size_t>(T) * D);
  f.hidden.resize(static_cast<std::size_t>(T) * D);
  f.logits.resize(static_cast<std::size_t>(T) * vocab);
  for (int pos = 0; pos < T; ++pos) {
    const int tok = f.tokens.back();
    for (int i = 0; i < D; ++i) x[i] = W[off_[kEmb] + static_cast<std::size_t>(tok) * D + i];
    for (int l = 0; l < n_layers; ++l) {
      rmsnorm(xb.data(), x.data(), W + off_[kRmsAtt] + l * D, D);
      double* kl = kc.data() + (static_cast<std::size_t>(l) * seq_len + pos) * kvd;
      double* vl = vc.data() + (static_cast<std::size_t>(l) * seq_len + pos) * kvd;
      matvec(q.data(), W + off_[kWq] + static_cast<std::size_t>(l) * D * D, xb.data(), D, D);
      matvec(kl, W + off_[kWk] + static_cast<std::size_t>(l) * D * kvd, xb.data(), kvd, D);
      matvec(vl, W + off_[kWv] + static_cast<std::size_t>(l) * D * kvd, xb.data(), kvd, D);
      // Rotary embedding: pair (j, j+1) rotated by pos·10000^(−m/hs), m = j mod hs.
      for (int j = 0; j < D; j += 2) {
        const double ang = pos * std::pow(10000.0, -static_cast<double>(j % hs) / hs);
        const double c = std::cos(ang), s = std::sin(ang);
        auto rot = [&](double* v) {
          const double a = v[j], b = v[j + 1];
          v[j] = a * c - b * s;
          v[j + 1] = a * s + b * c;
        };
        rot(q.data());
        if (j < kvd) rot(kl);
      }
      for (int h = 0; h < n_heads; ++h) {
        const double* qh = q.data() + h * hs;
        const int kvh = h / kv_mul;
        double mx = -HUGE_VAL;
        for (int t = 0; t <= pos; ++t) {
          const double* kt =
              kc.data() + (static_cast<std::size_t>(l) * seq_len + t) * kvd + kvh * hs;
          double s = 0;
          for (int i = 0; i < hs; ++i) s += qh[i] * kt[i];
          att[t] = s / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, att[t]);
        }
        double sum = 0;
        for (int t = 0; t <= pos; ++t) sum += (att[t] = std::exp(att[t] - mx));
        double* out = xb.data() + h * hs;
        for (int i = 0; i < hs; ++i) out[i] = 0;
        for (int t = 0; t <= pos; ++t) {
          const double* vt =
              vc.data() + (static_cast<std::size_t>(l) * seq_len + t) * kvd + kvh * hs;
          for (int i = 0; i < hs; ++i) out[i] += att[t] / sum * vt[i];
        }
      }
      matvec(xb2.data(), W + off_[kWo] + static_cast<std::size_t>(l) * D * D, xb.data(), D, D);
      for (int i = 0; i < D; ++i) x[i] += xb2[i];
      rmsnorm(xb.data(), x.data(), W + off_[kRmsFfn] + l * D, D);
      matvec(hb.data(), W + off_[kW1] + static_cast<std::size_t>(l) * Hd * D, xb.data(), Hd, D);
      matvec(hb2.data(), W + off_[kW3] + static_cast<std::size_t>(l) * Hd * D, xb.data(), Hd, D);
      for (int i = 0; i < Hd; ++i) hb[i] = hb[i] / (1.0 + std::exp(-hb[i])) * hb2[i];  // SwiGLU
      matvec(xb.data(), W + off_[kW2] + static_cast<std::size_t>(l) * D * Hd, hb.data(), D, Hd);
      for (int i = 0; i < D; ++i) x[i] += xb[i];
    }
    double* res = f.residual.data() + static_cast<std::size_t>(pos) * D;
    double* hid = f.hidden.data() + static_cast<std::size_t>(pos) * D;
    std::copy(x.begin(), x.end(), res);
    rmsnorm(hid, x.data(), W + off_[kRmsFinal], D);
    double* z = f.logits.data() + static_cast<std::size_t>(pos) * vocab;
    for (int v = 0; v < vocab; ++v) {
      double s = 0;
      for (int i = 0; i < D; ++i)
        s += static_cast<double>(W[off_[kEmb] + static_cast<std::size_t>(v) * D + i]) * hid[i];
      z[v] = s;
    }
    int next = 0;
    if (greedy) {
      for (int v = 1; v < vocab; ++v)
        if (z[v] > z[next]) next = v;
    } else {
      double mx = z[0];
      for (int v = 1; v < vocab; ++v) mx = std::max(mx, z[v]);
      double sum = 0;
      for (int v = 0; v < vocab; ++v) sum += std::exp(z[v] - mx);
      const double u = rng.uniform() * sum;
      double c = 0;
      next = vocab - 1;
      for (int v = 0; v < vocab; ++v) {
        c += std::exp(z[v] - mx);
        if (u < c) {
          next = v;
          break;
        }
      }
    }
    f.tokens.push_back(next);
  }
  return f;
}

Problem make_stories260k(std::int64_t N, std::uint64_t seed, bool greedy, const std::string& path) {
  if (N < 1) throw InputError(fmt::format("stories260k: N must be >= 1, got {}", N));
  std::string file = path;
  if (file.empty())
    file = stories260k_path();
  else
    verify_stories260k(file);
  const Stories260K m = Stories260K::load(file);
  Tensor H(DType::fp32, {N, m.dim}, "H"), W(DType::fp32, {m.vocab, m.dim}, "W");
  std::memcpy(W.data(), m.embedding(), W.nbytes());
  std::vector<std::int64_t> t(static_cast<std::size_t>(N));
  std::int64_t row = 0;
  for (std::uint64_t s = 0; row < N; ++s) {
    // One sequence per seed of the stream (seed, seed+1, …), each from BOS, up to seq_len rows.
    const int T = static_cast<int>(std::min<std::int64_t>(N - row, m.seq_len));
    const Stories260K::Forward f = m.generate(T, greedy, seed + s);
    for (int p = 0; p < T; ++p, ++row) {
      for (int d = 0; d < m.dim; ++d)
        H.set(row * m.dim + d, f.hidden[static_cast<std::size_t>(p) * m.dim + d]);  // one RNE
      t[static_cast<std::size_t>(row)] = f.tokens[static_cast<std::size_t>(p) + 1];
    }
  }
  return Problem::linear(std::move(H), std::move(W), std::nullopt, std::move(t), -100,
                         "stories260k");
}

}  // namespace xentlab

// The selftest's model implementation (harness/selftest/model.hpp): blocks of token rows, each
// through logits → per-row softmax, loss and dL/dlogits → dH and the chunk's dW, in T = double
// (GEMMs of the host's BLAS or a GPU's cuBLAS) or T = float (every sum sequential, in index
// order).
#include "harness/selftest/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "harness/selftest/model_gemms.hpp"
#include "numerics/blas.hpp"
#include "numerics/error.hpp"

namespace xentlab::selftest {
namespace {

// The model's three products of one block of token rows through a Gemms engine: in fp32 the
// sequential sums below, in fp64 the host's BLAS or a GPU's cuBLAS (model_gemms.hpp).
// logits (B, V) = H_blk (B, D) · Wᵀ (V, D)ᵀ, sequential fp32 dot products
void logits_of(const float* H, const float* W, std::int64_t B, std::int64_t V, std::int64_t D,
               float* Z) {
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t i = 0; i < B; ++i)
    for (std::int64_t j = 0; j < V; ++j) {
      float acc = 0;  // sequential fp32 dot product over d
      for (std::int64_t d = 0; d < D; ++d) acc += H[i * D + d] * W[j * D + d];
      Z[i * V + j] = acc;
    }
}
// dH_blk (B, D) = dZ (B, V) · W (V, D)
void dH_of(const float* dZ, const float* W, std::int64_t B, std::int64_t V, std::int64_t D,
           float* dH) {
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t i = 0; i < B; ++i)
    for (std::int64_t d = 0; d < D; ++d) {
      float acc = 0;  // sequential over the vocabulary
      for (std::int64_t j = 0; j < V; ++j) acc += dZ[i * V + j] * W[j * D + d];
      dH[i * D + d] = acc;
    }
}
// dW (V, D) += dZ (B, V)ᵀ · H_blk (B, D)
void add_dW(const float* dZ, const float* H, std::int64_t B, std::int64_t V, std::int64_t D,
            float* dW) {
#pragma omp parallel for schedule(static)
  for (std::int64_t j = 0; j < V; ++j)  // each element summed over the tokens in order
    for (std::int64_t i = 0; i < B; ++i)
      for (std::int64_t d = 0; d < D; ++d) dW[j * D + d] += dZ[i * V + j] * H[i * D + d];
}

// The host engines: fp32 sequential sums, or fp64 BLAS GEMMs; the chunk's dW on the host.
template <class T>
class HostGemms final : public Gemms<T> {
 public:
  HostGemms(const T* W, std::int64_t V, std::int64_t D)
      : W_(W), V_(V), D_(D), dW_(static_cast<std::size_t>(V * D), T(0)) {}
  std::int64_t block_rows() const override { return 64; }  // logits of a block: 64·V values
  void logits(const T* Hb, std::int64_t B, T* Z) override {
    if constexpr (std::is_same_v<T, double>)
      dgemm_row_major(false, true, B, V_, D_, 1.0, Hb, D_, W_, D_, 0.0, Z, V_);
    else
      logits_of(Hb, W_, B, V_, D_, Z);
  }
  void backward(const T* dZ, const T* Hb, std::int64_t B, T* dHb) override {
    if constexpr (std::is_same_v<T, double>) {
      dgemm_row_major(false, false, B, D_, V_, 1.0, dZ, V_, W_, D_, 0.0, dHb, D_);
      dgemm_row_major(true, false, V_, D_, B, 1.0, dZ, V_, Hb, D_, 1.0, dW_.data(), D_);
    } else {
      dH_of(dZ, W_, B, V_, D_, dHb);
      add_dW(dZ, Hb, B, V_, D_, dW_.data());
    }
  }
  void take_dW(T* dW) override {
    std::copy(dW_.begin(), dW_.end(), dW);
    std::fill(dW_.begin(), dW_.end(), T(0));
  }

 private:
  const T* W_;
  std::int64_t V_, D_;
  std::vector<T> dW_;
};

// One token row: raw logits r (V, overwritten by z) → lse, loss, and dz = w·dL_i/dr (V).
// numerics/loss_spec.hpp's definition; every sum over the vocabulary sequential in T.
template <class T>
void row(const LossSpec& s, bool lse_minus_target, T* r, std::int64_t V, std::int64_t t, bool valid,
         T w, T* dz, T& lse, T& loss) {
  const T scale = static_cast<T>(s.logit_scale), cap = static_cast<T>(s.softcap);
  T m = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = 0; j < V; ++j) {
    T z = scale * r[j];
    if (cap > 0) z = cap * std::tanh(z / cap);
    r[j] = z;
    m = std::max(m, z);
  }
  T sum = 0, sum_z = 0;
  for (std::int64_t j = 0; j < V; ++j) sum += std::exp(r[j] - m);
  const T eps = static_cast<T>(s.label_smoothing), lam = static_cast<T>(s.z_loss);
  if (eps > 0)
    for (std::int64_t j = 0; j < V; ++j) sum_z += r[j];
  lse = m + std::log(sum);
  if (!valid) {
    loss = 0;
    std::fill(dz, dz + V, T(0));
    return;
  }
  const T eps_v = eps / static_cast<T>(V);
  const T target_terms = (1 - eps) * r[t] + eps_v * sum_z;
  loss = (lse_minus_target ? lse - target_terms : (m - target_terms) + std::log(sum)) +
         lam * lse * lse;
  for (std::int64_t j = 0; j < V; ++j) {
    const T p = std::exp(r[j] - m) / sum;
    T g = p * (1 + 2 * lam * lse) - eps_v - (j == t ? 1 - eps : T(0));
    const T dzdr = cap > 0 ? scale * (1 - (r[j] / cap) * (r[j] / cap)) : scale;
    dz[j] = w * g * dzdr;
  }
}

// The rows' targets as the model uses them, whether each is valid, and the weight dL/dloss_i.
struct RowPlan {
  std::vector<std::int64_t> target;
  std::vector<char> valid;
  std::vector<double> weight;
  double reduce_divisor = 1;  // mean: the count (NaN/0 handling below); else 1
  bool empty_mean_nan = false;
};

RowPlan plan_rows(const Golden& g, const ModelKnobs& k) {
  const LossSpec& s = g.spec;
  const std::int64_t N = g.N, V = g.V;
  RowPlan p;
  p.target.resize(N);
  p.valid.resize(N);
  p.weight.assign(N, 1.0);
  std::int64_t n_valid = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    std::int64_t t = g.problem.targets[i];
    bool ok = t != s.ignore_index;
    if (!ok && k.disregard_ignore_index) t = ((t % V) + V) % V, ok = true;
    p.target[i] = ok ? t : 0;
    p.valid[i] = ok;
    n_valid += ok;
  }
  if (s.reduction == Reduction::none && !g.upstream.empty() && !k.disregard_upstream)
    p.weight = g.upstream;
  if (s.reduction == Reduction::mean) {
    const std::int64_t count = s.normalizer > 0 && !k.disregard_normalizer ? s.normalizer : n_valid;
    p.reduce_divisor = static_cast<double>(count);
    p.empty_mean_nan = count == 0 && s.empty_mean == EmptyMean::nan;
    std::fill(p.weight.begin(), p.weight.end(), count > 0 ? 1.0 / static_cast<double>(count) : 0.0);
  }
  return p;
}

template <class T>
std::vector<T> values_of(const Tensor& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  t.read(0, t.numel(), v.data());
  return std::vector<T>(v.begin(), v.end());
}

template <class T>
ModelOutputs run_in(const Golden& g, const ModelKnobs& k, ModelDevice device) {
  const std::int64_t N = g.N, V = g.V, D = g.D;
  const RowPlan plan = plan_rows(g, k);
  const std::vector<T> H = values_of<T>(g.problem.H), W = values_of<T>(g.problem.W);
  const std::vector<T> b = g.problem.bias ? values_of<T>(*g.problem.bias) : std::vector<T>{};
  std::unique_ptr<Gemms<T>> gemms;
  if constexpr (std::is_same_v<T, double>)
    if (device == ModelDevice::cuda) gemms = cuda_gemms(W.data(), V, D);
  if (!gemms) gemms = std::make_unique<HostGemms<T>>(W.data(), V, D);
  ModelOutputs o;
  o.loss.resize(N);
  o.lse.resize(N);
  o.dH.resize(static_cast<std::size_t>(N * D));
  o.dW.assign(static_cast<std::size_t>(V * D), 0.0);
  if (!b.empty()) o.db.assign(static_cast<std::size_t>(V), 0.0);
  const std::int64_t C = k.chunk_tokens > 0 ? k.chunk_tokens : N, R = gemms->block_rows();
  std::vector<T> Z(static_cast<std::size_t>(R * V)), dZ(Z.size());
  std::vector<T> dHb(static_cast<std::size_t>(R * D)), dWc(o.dW.size()), dbc(o.db.size());
  for (std::int64_t c0 = 0; c0 < N; c0 += C) {
    std::fill(dbc.begin(), dbc.end(), T(0));
    T loss_c = 0;  // the chunk's Σ_i w'_i·loss_i (w' = g_i for reduction none, else 1)
    for (std::int64_t i0 = c0; i0 < std::min(N, c0 + C); i0 += R) {
      const std::int64_t B = std::min({R, N - i0, c0 + C - i0});
      const T* Hb = H.data() + i0 * D;
      gemms->logits(Hb, B, Z.data());
#pragma omp parallel for schedule(static)
      for (std::int64_t r = 0; r < B; ++r) {
        const std::int64_t i = i0 + r;
        T* z = Z.data() + r * V;
        for (std::int64_t j = 0; j < V && !b.empty(); ++j) z[j] += b[j];
        if (i >= k.bf16_rows_begin && i < k.bf16_rows_end)
          for (std::int64_t j = 0; j < V; ++j) z[j] = static_cast<T>(round_to(z[j], DType::bf16));
        T lse = 0, loss = 0;
        row<T>(g.spec, k.loss_as_lse_minus_target, z, V, plan.target[i], plan.valid[i] != 0,
               static_cast<T>(plan.weight[i]), dZ.data() + r * V, lse, loss);
        o.lse[i] = lse;
        o.loss[i] = loss;
      }
      for (std::int64_t r = 0; r < B; ++r)  // sequential, in token order
        loss_c += (g.spec.reduction == Reduction::none ? static_cast<T>(plan.weight[i0 + r]) : 1) *
                  static_cast<T>(o.loss[i0 + r]);
      gemms->backward(dZ.data(), Hb, B, dHb.data());
      std::copy(dHb.begin(), dHb.begin() + B * D, o.dH.begin() + i0 * D);
      for (std::int64_t r = 0; r < B && !dbc.empty(); ++r)
        for (std::int64_t j = 0; j < V; ++j) dbc[j] += dZ[r * V + j];
    }
    gemms->take_dW(dWc.data());
    const DType dt = k.dW_chunk_sum;
    const auto n_dW = static_cast<std::int64_t>(dWc.size());
#pragma omp parallel for schedule(static)
    for (std::int64_t x = 0; x < n_dW; ++x) {
      const auto u = static_cast<std::size_t>(x);
      o.dW[u] = round_to(o.dW[u] + round_to(dWc[u], dt), dt);
    }
    for (std::size_t x = 0; x < dbc.size(); ++x)
      o.db[x] = round_to(o.db[x] + round_to(dbc[x], dt), dt);
    const DType lt = k.loss_chunk_sum;
    o.reduced_loss = round_to(o.reduced_loss + round_to(loss_c, lt), lt);
  }
  if (g.spec.reduction == Reduction::mean)
    o.reduced_loss = plan.empty_mean_nan ? std::nan("")
                     : plan.reduce_divisor > 0
                         ? static_cast<double>(static_cast<T>(o.reduced_loss) /
                                               static_cast<T>(plan.reduce_divisor))
                         : 0.0;
  return o;
}

}  // namespace

ModelOutputs run_model(const Golden& g, const ModelKnobs& knobs, ModelDevice device) {
  if (!g.problem.is_linear())
    throw InputError(fmt::format(
        "{}: a problem of given logits; the selftest's model implements the linear head (H, W) "
        "only: use a linear dataset (calibrated, llama3-8b, …)",
        g.path));
  if (knobs.fp32_sequential) {
    const double work = static_cast<double>(g.N) * static_cast<double>(g.V) * g.D;
    if (work > kSequentialWork)
      throw InputError(fmt::format(
          "the fp32 sequential model at N·V·D = {:.3g} (> 2^36) would take too long on the CPU",
          work));
    return run_in<float>(g, knobs, ModelDevice::cpu);
  }
  return run_in<double>(g, knobs, device);
}

}  // namespace xentlab::selftest

// Reduced-precision reductions, emulated exactly (see emulate.hpp).
#include "numerics/emulate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "numerics/error.hpp"

namespace xentlab::emu {

float sum_sequential(const float* x, std::int64_t n, DType t) {
  float s = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) s = rnd(s + x[j], t);
  return s;
}

float sum_pairwise(const float* x, std::int64_t n, DType t) {
  if (n <= 0) return 0.0f;
  if (n == 1) return x[0];
  const std::int64_t h = n / 2;
  return rnd(sum_pairwise(x, h, t) + sum_pairwise(x + h, n - h, t), t);
}

float sum_blocked(const float* x, std::int64_t n, DType t, std::int64_t T, std::int64_t group) {
  if (T < 1 || (T & (T - 1)) != 0)
    throw InputError(fmt::format("sum_blocked: block_threads = {} is not a power of two", T));
  if (group < 1) throw InputError(fmt::format("sum_blocked: group = {} < 1", group));
  float partial_small[1024];
  std::vector<float> partial_big;
  float* partial = partial_small;
  if (T > 1024) {
    partial_big.assign(static_cast<std::size_t>(T), 0.0f);
    partial = partial_big.data();
  } else {
    std::fill(partial, partial + T, 0.0f);
  }
  // Thread k owns groups k, k+T, k+2T, …; visiting groups in increasing order visits each
  // thread's elements in increasing j, so the per-thread sequential order is preserved.
  const std::int64_t groups = (n + group - 1) / group;
  for (std::int64_t g = 0; g < groups; ++g) {
    float& p = partial[g % T];
    const std::int64_t end = std::min(n, (g + 1) * group);
    for (std::int64_t j = g * group; j < end; ++j) p = rnd(p + x[j], t);
  }
  for (std::int64_t s = T / 2; s >= 1; s /= 2)
    for (std::int64_t k = 0; k < s; ++k) partial[k] = rnd(partial[k] + partial[k + s], t);
  return partial[0];
}

float sum_ordered(const float* x, std::int64_t n, DType t, const DeclaredArithmetic& a) {
  switch (a.vocab_order) {
    case ReductionOrder::sequential:
      return sum_sequential(x, n, t);
    case ReductionOrder::pairwise:
      return sum_pairwise(x, n, t);
    case ReductionOrder::blocked:
      return sum_blocked(x, n, t, a.block_threads, 8);
    case ReductionOrder::online_tree:
      throw InputError(
          "sum_ordered: online_tree is the fused kernel's own tree; its emulation "
          "(gpu/emulation/common.cpp) follows it, there is no generic form");
    case ReductionOrder::online_tiles: {
      if (a.tile < 1) throw InputError(fmt::format("sum_ordered: online tile = {} < 1", a.tile));
      float s = 0.0f;
      for (std::int64_t j0 = 0; j0 < n; j0 += a.tile)
        s = rnd(s + sum_sequential(x + j0, std::min(a.tile, n - j0), t), t);
      return s;
    }
  }
  return 0.0f;
}

void online_merge_tile(OnlineState& st, const float* x, std::int64_t n, DType t) {
  float tm = -INFINITY;
  for (std::int64_t j = 0; j < n; ++j) tm = std::max(tm, x[j]);
  if (tm == -INFINITY) return;  // fully masked tile
  const float m_new = std::max(st.m, tm);
  float ts = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) ts = rnd(ts + rnd(std::exp(x[j] - m_new), t), t);
  // Rescale the running sum to the new max (factor 1 when the max did not change; the old state
  // may be empty, m = −Inf, s = 0, where the factor would be 0·Inf: skip it).
  const float scaled = st.m == -INFINITY ? 0.0f : st.s * std::exp(st.m - m_new);
  st.s = rnd(scaled + ts, t);
  st.m = m_new;
}

float sum_exp(const float* x, std::int64_t n, DType t, const DeclaredArithmetic& a, float* scratch,
              float* m_out) {
  if (a.vocab_order == ReductionOrder::online_tree)
    throw InputError(
        "sum_exp: online_tree is the fused kernel's own tree; its emulation "
        "(gpu/emulation/common.cpp) follows it, there is no generic form");
  if (a.vocab_order == ReductionOrder::online_tiles) {
    if (a.tile < 1) throw InputError(fmt::format("sum_exp: online tile = {} < 1", a.tile));
    OnlineState st;
    for (std::int64_t j0 = 0; j0 < n; j0 += a.tile)
      online_merge_tile(st, x + j0, std::min(a.tile, n - j0), t);
    *m_out = st.m;
    return st.s;
  }
  float m = -INFINITY;
  for (std::int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  *m_out = m;
  if (m == -INFINITY) return 0.0f;
  for (std::int64_t j = 0; j < n; ++j) scratch[j] = rnd(std::exp(x[j] - m), t);
  return sum_ordered(scratch, n, t, a);
}

}  // namespace xentlab::emu

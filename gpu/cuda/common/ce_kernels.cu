// Softmax/cross-entropy kernels; the arithmetic is specified in ce_kernels.cuh and
// docs/arithmetic.md. Template instantiations are kept few (CI compiles this on 2 cores):
// ce_rows 3 logit dtypes × 3 accumulators, dz_rows 3 × 3, the rest dispatch the accumulator at
// run time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "gpu/cuda/common/ce_kernels.cuh"
#include "gpu/cuda/common/ce_math.cuh"
#include "gpu/cuda/common/cuda_check.hpp"

namespace xentlab::gpu {
namespace {
using namespace cemath;

constexpr int kThreads = 256;  // T of docs/arithmetic.md §4
constexpr int kGroup = 8;      // elements per 16-byte load of a 16-bit dtype

// ---- 8-element loads/stores with the contract's ownership --------------------------------------
template <class T>
__device__ __forceinline__ void load8(const T* row, std::int64_t j0, std::int64_t V, bool aligned,
                                      float (&v)[kGroup]) {
  if (aligned && j0 + kGroup <= V) {
    if constexpr (sizeof(T) == 2) {
      const uint4 q = *reinterpret_cast<const uint4*>(row + j0);
      const T* e = reinterpret_cast<const T*>(&q);
#pragma unroll
      for (int k = 0; k < kGroup; ++k) v[k] = to_f(e[k]);
    } else {
      const float4 a = *reinterpret_cast<const float4*>(row + j0);
      const float4 b = *reinterpret_cast<const float4*>(row + j0 + 4);
      v[0] = a.x;
      v[1] = a.y;
      v[2] = a.z;
      v[3] = a.w;
      v[4] = b.x;
      v[5] = b.y;
      v[6] = b.z;
      v[7] = b.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kGroup; ++k) v[k] = j0 + k < V ? to_f(row[j0 + k]) : -INFINITY;
  }
}

template <class T>
__device__ __forceinline__ void store8(T* row, std::int64_t j0, std::int64_t V, bool aligned,
                                       const float (&v)[kGroup]) {
  if (aligned && j0 + kGroup <= V) {
    if constexpr (sizeof(T) == 2) {
      uint4 q;
      T* e = reinterpret_cast<T*>(&q);
#pragma unroll
      for (int k = 0; k < kGroup; ++k) e[k] = from_f<T>(v[k]);
      *reinterpret_cast<uint4*>(row + j0) = q;
    } else {
      *reinterpret_cast<float4*>(row + j0) = make_float4(v[0], v[1], v[2], v[3]);
      *reinterpret_cast<float4*>(row + j0 + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kGroup; ++k)
      if (j0 + k < V) row[j0 + k] = from_f<T>(v[k]);
  }
}

/// The block's maximum, every thread gets it. fmaxf is exact and order-free (a NaN is skipped, as
/// fmaxf does in any order), so the warps reduce by shuffles and one barrier joins their 8 maxima.
__device__ __forceinline__ float block_max(float v, float* red) {
  static_assert(kThreads == 256, "the warp and tree steps below are written for 256 threads");
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = red[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) r = fmaxf(r, red[w]);
  __syncthreads();
  return r;
}

/// The contract's tree over the 256 partials, each add rounded to A: at step s = 128, 64, …, 1,
/// partial t < s becomes rnd_A(partial t + partial t + s). Steps 128, 64 and 32 pair partials of
/// different warps through shared memory; steps 16 … 1 pair lanes of warp 0, whose lane t then
/// holds partial t, by shuffles (__shfl_down_sync(v, s) is lane t + s's partial): the pairs and
/// additions of a shared-memory tree, with 4 barriers instead of 9.
template <class A>
__device__ __forceinline__ float block_tree_sum(float v, float* red /* kThreads + 1 */) {
  static_assert(kThreads == 256, "the steps below are written for 256 threads");
  const int t = threadIdx.x;
  red[t] = v;
  __syncthreads();
  // Partial t < s reads slot t + s (≥ s) and rewrites slot t (< s): no slot is both.
  if (t < 128) red[t] = v = rnd<A>(__fadd_rn(v, red[t + 128]));
  __syncthreads();
  if (t < 64) red[t] = v = rnd<A>(__fadd_rn(v, red[t + 64]));
  __syncthreads();
  if (t < 32) {
    v = rnd<A>(__fadd_rn(v, red[t + 32]));
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) {
      const float other = __shfl_down_sync(0xffffffffu, v, s);
      if (t < s) v = rnd<A>(__fadd_rn(v, other));
    }
    if (t == 0) red[kThreads] = v;  // the slot past the partials
  }
  __syncthreads();
  const float r = red[kThreads];
  __syncthreads();
  return r;
}

// ---- kernels ---------------------------------------------------------------------------------
// One 16-byte group per thread in flight (4 loaded before use was measured slower: 5.4 vs 2.8 ms).
// Also measured slower on an H100 and taken out: vocab_chunked's split rows held in registers
// (2 or 4 groups a thread loaded before the maximum), dz by a thread per 16-byte group across
// rows instead of a block per row, the split's statistics and dz on a grid of the device's
// resident blocks with each block's next row prefetched into L2, and the split's statistics with
// thread 0's target read before the maximum and the maximum on a shared array of its own (the lab
// notebook has the measurements).
constexpr std::int64_t kStride = std::int64_t(kThreads) * kGroup;  // a thread's next group

/// The per-element transform of the contract, or the identity when Plain (scale 1, no softcap:
/// __fmul_rn(1, z) = z exactly, so both give the same bits).
template <bool Plain>
__device__ __forceinline__ float xform(float z, const RowLossParams& p, float& th) {
  if constexpr (Plain) {
    th = 0.0f;
    return z;
  } else {
    return transform(z, p, th);
  }
}

/// Whether the row kernels may take their plain path (the same bits with fewer instructions):
/// scale 1, no softcap, label smoothing or z-loss, and tests have not asked for the general one.
__device__ __forceinline__ bool plain_params(const RowLossParams& p) {
  return !p.general_path && p.scale == 1.0f && !(p.softcap > 0.0f) && !p.smoothing && !p.zloss;
}

/// One row of ce_rows_kernel. Plain (scale 1, no softcap, no label smoothing, no z-loss) drops
/// the operations that are exact identities there (×scale, ×chain = ×1, the unused branches), so
/// it gives the general path's bits with fewer instructions; full 16-byte groups skip the
/// per-element bounds checks (the tail group keeps them). The kernel is issue-bound, not
/// bandwidth-bound (docs/benchmarks.md), hence the care.
template <bool Plain, class L, class A>
__device__ __forceinline__ void ce_row(L* zr, std::int64_t row, const std::int64_t* targets,
                                       float* loss, float* lse_out, const RowLossParams& p,
                                       bool write_dz, const RowGradScale& g, float* red) {
  const std::int64_t V = p.V;
  const int tid = threadIdx.x;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(zr) & 15) == 0;
  const std::int64_t t = targets[row];
  const bool valid = t != p.ignore_index && t >= 0 && t < V;
  const bool bad_target = t != p.ignore_index && !valid;

  // Pass 1: row max (exact in any order).
  float m = -INFINITY;
  for (std::int64_t j0 = std::int64_t(tid) * kGroup; j0 < V; j0 += kStride) {
    float v[kGroup];
    load8(zr, j0, V, aligned, v);
    float th;
    if (j0 + kGroup <= V) {
#pragma unroll
      for (int k = 0; k < kGroup; ++k) m = fmaxf(m, xform<Plain>(v[k], p, th));
    } else {
#pragma unroll
      for (int k = 0; k < kGroup; ++k)
        if (j0 + k < V) m = fmaxf(m, xform<Plain>(v[k], p, th));
    }
  }
  m = block_max(m, red);

  // Pass 2: sum-exp (and Σx for label smoothing) in the accumulator dtype, contract order.
  float s = 0.0f, sx = 0.0f;
  if (m != -INFINITY && p.sequential_sums) {
    if (tid == 0)
      for (std::int64_t j = 0; j < V; ++j) {
        float th;
        const float x = xform<Plain>(to_f(zr[j]), p, th);
        s = rnd<A>(__fadd_rn(s, rnd<A>(expf(__fsub_rn(x, m)))));
        if (!Plain && p.smoothing) sx = rnd<A>(__fadd_rn(sx, rnd<A>(x)));
      }
  } else if (m != -INFINITY) {
    for (std::int64_t j0 = std::int64_t(tid) * kGroup; j0 < V; j0 += kStride) {
      float v[kGroup];
      load8(zr, j0, V, aligned, v);
      const auto add = [&](float z) {
        float th;
        const float x = xform<Plain>(z, p, th);
        s = rnd<A>(__fadd_rn(s, rnd<A>(expf(__fsub_rn(x, m)))));
        if (!Plain && p.smoothing) sx = rnd<A>(__fadd_rn(sx, rnd<A>(x)));
      };
      // A full group without a test per element, the tail group tested (as shard_sums_of_row).
      if (j0 + kGroup <= V) {
#pragma unroll
        for (int k = 0; k < kGroup; ++k) add(v[k]);
      } else {
        const int n = static_cast<int>(V - j0);
#pragma unroll
        for (int k = 0; k < kGroup; ++k)
          if (k < n) add(v[k]);
      }
    }
  }
  // The target logit, read by every thread before any in-place dz write (barriers follow).
  float th_t = 0.0f;
  const float x_t = valid ? xform<Plain>(to_f(zr[t]), p, th_t) : 0.0f;
  s = block_tree_sum<A>(s, red);
  if (!Plain && p.smoothing) sx = block_tree_sum<A>(sx, red);

  const float lse = row_lse(m, s, RoundTo<A>{});
  if (tid == 0) {
    const float l = row_loss(lse, x_t, sx, valid, bad_target, p, RoundTo<A>{});
    loss[row] = l;
    lse_out[row] = lse;
  }
  if (!write_dz) return;

  // Pass 3: dz in place of the logits.
  const float gi = g.g_rows != nullptr ? g.g_rows[row] : g.g_scalar;
  for (std::int64_t j0 = std::int64_t(tid) * kGroup; j0 < V; j0 += kStride) {
    float v[kGroup];
    if (!valid) {
#pragma unroll
      for (int k = 0; k < kGroup; ++k) v[k] = bad_target ? NAN : 0.0f;
    } else {
      load8(zr, j0, V, aligned, v);
      const std::int64_t kt = t - j0;  // the target's place in this group, if it is in it
#pragma unroll
      for (int k = 0; k < kGroup; ++k) {
        if constexpr (Plain) {
          // dz_value with scale 1 and no options: ((p_j − [j=t]·(1−ε))·1)·g, ×1 dropped.
          float pj = expf(__fsub_rn(v[k], lse));
          if (k == kt) pj = __fsub_rn(pj, p.one_minus_eps);
          v[k] = __fmul_rn(pj, gi);
        } else {
          float th;
          const float x = transform(v[k], p, th);
          v[k] = dz_value(x, th, k == kt, lse, gi, p);
        }
      }
    }
    store8(zr, j0, V, aligned, v);
  }
}

/// Grid-stride over rows: block b handles rows b, b + gridDim.x, … (a smaller grid keeps fewer
/// rows in flight, so the second and third passes over a row can hit L2). Each pass reads a
/// thread's 16-byte groups in increasing j (the contract's order). general_path forces the
/// general per-element arithmetic (tests compare the two paths bit for bit).
template <class L, class A>
__global__ void __launch_bounds__(kThreads, 8)
    ce_rows_kernel(L* z /* (rows, V) */, std::int64_t rows, const std::int64_t* targets,
                   float* loss, float* lse_out, RowLossParams p, bool write_dz, RowGradScale g) {
  __shared__ float red[kThreads + 1];
  const bool plain = plain_params(p);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    L* zr = z + row * p.V;
    if (plain)
      ce_row<true, L, A>(zr, row, targets, loss, lse_out, p, write_dz, g, red);
    else
      ce_row<false, L, A>(zr, row, targets, loss, lse_out, p, write_dz, g, red);
  }
}

/// One row of dz_rows_kernel. Plain (plain_params) forms dz_value's operations that are not exact
/// identities there (×1 dropped), as ce_row's third pass does: the general path's bits.
/// RoundLogits: dz is rounded to the logits dtype before the store rounds it to O. Without it the
/// store's rounding alone is taken, which the kernel chooses only where it gives the same bits:
/// logits in fp32 (the rounding is the identity) or logits in O's own 16-bit dtype (rounding to
/// nearest twice to one format is rounding once). An invalid target's row is written without
/// reading it, and the target's place is tested once a group, not per element (as ce_row).
template <bool Plain, bool RoundLogits, class Z, class O>
__device__ __forceinline__ void dz_row(const Z* zr, O* dr, std::int64_t t, float lse, float gi,
                                       const RowLossParams& p, int logits_code, std::int64_t col0,
                                       std::int64_t cols) {
  const bool aligned =
      ((reinterpret_cast<std::uintptr_t>(zr) | reinterpret_cast<std::uintptr_t>(dr)) & 15) == 0;
  const bool valid = t != p.ignore_index && t >= 0 && t < p.V;
  if (!valid) {
    float v[kGroup];
    const bool bad_target = t != p.ignore_index;
#pragma unroll
    for (int k = 0; k < kGroup; ++k) v[k] = bad_target ? NAN : 0.0f;
    for (std::int64_t j0 = std::int64_t(threadIdx.x) * kGroup; j0 < cols; j0 += kStride)
      store8(dr, j0, cols, aligned, v);
    return;
  }
  const std::int64_t t_local = t - col0;  // the target's column in these buffers, if it is one
  for (std::int64_t j0 = std::int64_t(threadIdx.x) * kGroup; j0 < cols; j0 += kStride) {
    float v[kGroup];
    load8(zr, j0, cols, aligned, v);
    // The target's place in this group, or −1 (k == kt then compares 32-bit values).
    const std::int64_t kt64 = t_local - j0;
    const int kt = (kt64 >= 0 && kt64 < kGroup) ? static_cast<int>(kt64) : -1;
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      float d;
      if constexpr (Plain) {
        float pj = expf(__fsub_rn(v[k], lse));
        if (k == kt) pj = __fsub_rn(pj, p.one_minus_eps);
        d = __fmul_rn(pj, gi);
      } else {
        float th;
        const float x = transform(v[k], p, th);
        d = dz_value(x, th, k == kt, lse, gi, p);
      }
      // rnd_logits (dz is held in the logits dtype, docs/arithmetic.md §7), then the store rounds
      // to O; without RoundLogits the store's rounding is the only one (the same bits, above).
      v[k] = RoundLogits ? rnd_rt(d, logits_code) : d;
    }
    store8(dr, j0, cols, aligned, v);
  }
}

/// acc_code's value for the dtype O (0 for fp32).
template <class O>
constexpr int code_of() {
  return std::is_same_v<O, __half> ? 1 : std::is_same_v<O, __nv_bfloat16> ? 2 : 0;
}

/// dz of rows whose columns [col0, col0 + cols) the buffers hold (col0 = 0, cols = p.V: whole
/// rows); the target is a full-row index.
template <class Z, class O>
__global__ void __launch_bounds__(kThreads)
    dz_rows_kernel(const Z* z /* (rows, cols) */, O* dz /* (rows, cols) */,
                   const std::int64_t* targets, const float* lse_in, RowLossParams p,
                   RowGradScale g, int logits_code, std::int64_t col0, std::int64_t cols) {
  const std::int64_t row = blockIdx.x;
  const Z* zr = z + row * cols;
  O* dr = dz + row * cols;
  const std::int64_t t = targets[row];
  const float lse = lse_in[row];
  const float gi = g.g_rows != nullptr ? g.g_rows[row] : g.g_scalar;
  const bool round_logits = logits_code != 0 && logits_code != code_of<O>();
  if (plain_params(p)) {
    if (round_logits)
      dz_row<true, true>(zr, dr, t, lse, gi, p, logits_code, col0, cols);
    else
      dz_row<true, false>(zr, dr, t, lse, gi, p, logits_code, col0, cols);
  } else {
    if (round_logits)
      dz_row<false, true>(zr, dr, t, lse, gi, p, logits_code, col0, cols);
    else
      dz_row<false, false>(zr, dr, t, lse, gi, p, logits_code, col0, cols);
  }
}

/// A block's row of a vocabulary shard: the shard's maximum (the first pass of ce_row over the
/// shard's columns), reduced over the block (every thread gets it).
template <bool Plain, class L>
__device__ __forceinline__ float shard_max_of_row(const L* zr, std::int64_t cols, bool aligned,
                                                  const RowLossParams& p, float* red) {
  // The bounds check per group, per element only in a row's tail group (as ce_row's first pass):
  // split_row_stats_kernel, which uses this, is issue-bound (Nsight Compute on an H100: issue slots
  // 88 % busy with a check per element, 83.5 % with this and the sums' change below, at 0.578 ms
  // instead of 0.725), and the compiled per-element check is a 64-bit add and compare for each
  // element of a full group. shard_row_max_kernel (vocab_parallel) takes the same loop. The bits
  // do not change: a full group's checks all hold.
  float m = -INFINITY;
  for (std::int64_t j0 = std::int64_t(threadIdx.x) * kGroup; j0 < cols; j0 += kStride) {
    float v[kGroup];
    load8(zr, j0, cols, aligned, v);
    float th;
    if (j0 + kGroup <= cols) {
#pragma unroll
      for (int k = 0; k < kGroup; ++k) m = fmaxf(m, xform<Plain>(v[k], p, th));
    } else {
#pragma unroll
      for (int k = 0; k < kGroup; ++k)
        if (j0 + k < cols) m = fmaxf(m, xform<Plain>(v[k], p, th));
    }
  }
  return block_max(m, red);
}

/// Thread 0: the row's target logit when the row is valid and the shard holds its target, else 0.
template <class L>
__device__ __forceinline__ float shard_target_logit(const L* zr, std::int64_t row,
                                                    std::int64_t col0, std::int64_t cols,
                                                    const std::int64_t* targets,
                                                    const RowLossParams& p) {
  const std::int64_t t = targets[row];
  const bool valid = t != p.ignore_index && t >= 0 && t < p.V;
  if (!valid || t < col0 || t >= col0 + cols) return 0.0f;
  float th;
  return transform(to_f(zr[t - col0]), p, th);
}

/// A block's row of a vocabulary shard: sum-exp (and Σx) with the maximum m, in ce_row's order
/// over the shard's columns (its second pass), tree-reduced; thread 0 stores them as A values.
template <bool Plain, class L, class A>
__device__ __forceinline__ void shard_sums_of_row(const L* zr, std::int64_t row, std::int64_t rows,
                                                  std::int64_t cols, bool aligned, float m,
                                                  const RowLossParams& p, A* sums, float* red) {
  float s = 0.0f, sx = 0.0f;
  if (m != -INFINITY) {
    for (std::int64_t j0 = std::int64_t(threadIdx.x) * kGroup; j0 < cols; j0 += kStride) {
      float v[kGroup];
      load8(zr, j0, cols, aligned, v);
      const auto add = [&](float z) {
        float th;
        const float x = xform<Plain>(z, p, th);
        s = rnd<A>(__fadd_rn(s, rnd<A>(expf(__fsub_rn(x, m)))));
        if (!Plain && p.smoothing) sx = rnd<A>(__fadd_rn(sx, rnd<A>(x)));
      };
      // A full group without a test per element (the compiled test was a branch around each
      // element's exp); the tail group tests each. The same additions in the same order.
      if (j0 + kGroup <= cols) {
#pragma unroll
        for (int k = 0; k < kGroup; ++k) add(v[k]);
      } else {
        const int n = static_cast<int>(cols - j0);
#pragma unroll
        for (int k = 0; k < kGroup; ++k)
          if (k < n) add(v[k]);
      }
    }
  } else if (!Plain && p.smoothing) {
    // Every x_j is −inf: s stays 0, and Σx is still the shard's sum (−inf), in the same order
    // (vocab_chunked's split of −∞ logits within a row that has finite ones: its Σx makes the
    // smoothed loss +inf, as naive's and the reference's).
    for (std::int64_t j0 = std::int64_t(threadIdx.x) * kGroup; j0 < cols; j0 += kStride) {
      float v[kGroup];
      load8(zr, j0, cols, aligned, v);
      const int n = j0 + kGroup <= cols ? kGroup : static_cast<int>(cols - j0);
#pragma unroll
      for (int k = 0; k < kGroup; ++k) {
        if (n == kGroup || k < n) {
          float th;
          sx = rnd<A>(__fadd_rn(sx, rnd<A>(transform(v[k], p, th))));
        }
      }
    }
  }
  s = block_tree_sum<A>(s, red);
  if (p.smoothing) sx = block_tree_sum<A>(sx, red);
  if (threadIdx.x == 0) {
    sums[row] = from_f<A>(s);
    sums[rows + row] = from_f<A>(p.smoothing ? sx : 0.0f);
  }
}

/// One block per row of a vocabulary shard: the shard's maximum and the owned target logit.
template <class L>
__global__ void __launch_bounds__(kThreads)
    shard_row_max_kernel(const L* z, std::int64_t rows, std::int64_t col0, std::int64_t cols,
                         const std::int64_t* targets, RowLossParams p, float* m_out,
                         float* xt_out) {
  __shared__ float red[kThreads + 1];
  const bool plain = plain_params(p);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const L* zr = z + row * cols;
    const bool aligned = (reinterpret_cast<std::uintptr_t>(zr) & 15) == 0;
    const float m = plain ? shard_max_of_row<true>(zr, cols, aligned, p, red)
                          : shard_max_of_row<false>(zr, cols, aligned, p, red);
    if (threadIdx.x == 0) {
      m_out[row] = m;
      xt_out[row] = shard_target_logit(zr, row, col0, cols, targets, p);
    }
  }
}

/// One block per row of a vocabulary shard: sum-exp (and Σx) with the row's maximum m_in.
template <class L, class A>
__global__ void __launch_bounds__(kThreads)
    shard_row_sums_kernel(const L* z, std::int64_t rows, std::int64_t cols, const float* m_in,
                          RowLossParams p, A* sums) {
  __shared__ float red[kThreads + 1];
  const bool plain = plain_params(p);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const L* zr = z + row * cols;
    const bool aligned = (reinterpret_cast<std::uintptr_t>(zr) & 15) == 0;
    if (plain)
      shard_sums_of_row<true>(zr, row, rows, cols, aligned, m_in[row], p, sums, red);
    else
      shard_sums_of_row<false>(zr, row, rows, cols, aligned, m_in[row], p, sums, red);
  }
}

/// vocab_chunked's split: both kernels above in one, the sums taken with the split's own maximum;
/// the block's second pass over its row reads it from cache (one pass over the slab from memory
/// instead of two). The same per-thread orders and trees: the two kernels' bits. Bounded to 8
/// blocks an SM (32 registers): without the bound it takes 39 registers, 6 blocks an SM.
template <class L, class A>
__global__ void __launch_bounds__(kThreads, 8)
    split_row_stats_kernel(const L* z, std::int64_t rows, std::int64_t col0, std::int64_t cols,
                           const std::int64_t* targets, RowLossParams p, float* m_out,
                           float* xt_out, A* sums) {
  __shared__ float red[kThreads + 1];
  const bool plain = plain_params(p);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const L* zr = z + row * cols;
    const bool aligned = (reinterpret_cast<std::uintptr_t>(zr) & 15) == 0;
    const float m = plain ? shard_max_of_row<true>(zr, cols, aligned, p, red)
                          : shard_max_of_row<false>(zr, cols, aligned, p, red);
    if (threadIdx.x == 0) {
      m_out[row] = m;
      xt_out[row] = shard_target_logit(zr, row, col0, cols, targets, p);
    }
    if (plain)
      shard_sums_of_row<true>(zr, row, rows, cols, aligned, m, p, sums, red);
    else
      shard_sums_of_row<false>(zr, row, rows, cols, aligned, m, p, sums, red);
  }
}

/// Grid-stride over rows, a thread per row: lse and loss from the all-reduced statistics.
template <class A>
__global__ void shard_row_loss_kernel(std::int64_t rows, const std::int64_t* targets,
                                      const float* m_in, const A* sums, const float* xt_in,
                                      RowLossParams p, float* loss, float* lse_out) {
  for (std::int64_t row = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = targets[row];
    const bool valid = t != p.ignore_index && t >= 0 && t < p.V;
    const bool bad_target = t != p.ignore_index && !valid;
    const float s = to_f(sums[row]), sx = to_f(sums[rows + row]);
    const float lse = row_lse(m_in[row], s, RoundTo<A>{});
    loss[row] = row_loss(lse, xt_in[row], sx, valid, bad_target, p, RoundTo<A>{});
    lse_out[row] = lse;
  }
}

/// Grid-stride over rows, a thread per row: the splits' states merged in split order
/// (launch_merge_split_states).
template <class A>
__global__ void merge_split_states_kernel(std::int64_t splits, std::int64_t rows,
                                          const float* split_m, const float* split_xt,
                                          const A* split_sums, float* m_out, float* xt_out,
                                          A* sums) {
  for (std::int64_t row = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += std::int64_t(gridDim.x) * blockDim.x) {
    float m = -INFINITY;
    for (std::int64_t r = 0; r < splits; ++r) m = fmaxf(m, split_m[r * rows + row]);
    float s = 0.0f, sx = 0.0f, xt = 0.0f;
    for (std::int64_t r = 0; r < splits; ++r) {
      const float m_r = split_m[r * rows + row];
      const float s_r = to_f(split_sums[r * 2 * rows + row]);
      const float sx_r = to_f(split_sums[r * 2 * rows + rows + row]);
      // The split holding the maximum keeps its sum (expf(0) = 1); an empty split adds 0.
      const float term = m_r == m           ? s_r
                         : m_r == -INFINITY ? 0.0f
                                            : rnd<A>(__fmul_rn(s_r, expf(__fsub_rn(m_r, m))));
      s = r == 0 ? term : rnd<A>(__fadd_rn(s, term));
      sx = r == 0 ? sx_r : rnd<A>(__fadd_rn(sx, sx_r));
      xt = __fadd_rn(xt, split_xt[r * rows + row]);
    }
    m_out[row] = m;
    xt_out[row] = xt;
    sums[row] = from_f<A>(s);
    sums[rows + row] = from_f<A>(sx);
  }
}

template <class O>
__global__ void round_rows_kernel(const float* src, const float* bias, std::int64_t rows,
                                  std::int64_t cols, O* dst) {
  const std::int64_t n = rows * cols;
  for (std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += std::int64_t(gridDim.x) * blockDim.x) {
    float v = src[k];
    if (bias != nullptr) v = __fadd_rn(v, bias[k % cols]);
    dst[k] = from_f<O>(v);
  }
}

template <class S, class D>
__global__ void convert_kernel(const S* src, D* dst, std::int64_t n) {
  for (std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += std::int64_t(gridDim.x) * blockDim.x)
    dst[k] = from_f<D>(to_f(src[k]));
}

template <class Z>
__global__ void db_accumulate_kernel(const Z* dz, std::int64_t rows, std::int64_t V, int acc,
                                     float* out) {
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= V) return;
  float a = out[j];
  for (std::int64_t i = 0; i < rows; ++i) a = rnd_rt(__fadd_rn(a, to_f(dz[i * V + j])), acc);
  out[j] = a;
}

__global__ void accumulate_kernel(float* acc, const float* add, std::int64_t n, int accum) {
  for (std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += std::int64_t(gridDim.x) * blockDim.x)
    acc[k] = rnd_rt(__fadd_rn(acc[k], add[k]), accum);
}

// ---- dispatch ----------------------------------------------------------------------------------
unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 65536 ? (blocks < 1 ? 1 : blocks) : 65536);
}

void check_rows(std::int64_t rows, const char* what) {
  if (rows > 0x7fffffffLL)
    throw InputError(std::string(what) + ": " + std::to_string(rows) +
                     " rows in one launch exceed the grid limit 2^31−1");
}

template <class F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::fp32:
      f(float{});
      return;
    case DType::fp16:
      f(__half{});
      return;
    case DType::bf16:
      f(__nv_bfloat16{});
      return;
    default:
      throw InputError(std::string("gpu kernels: unsupported dtype ") + std::string(to_string(t)));
  }
}

}  // namespace

std::int64_t default_ce_grid(std::int64_t rows, std::int64_t row_bytes) {
  (void)row_bytes;
  return rows;  // one block per row
}

void launch_ce_rows(DType z_dtype, void* z, std::int64_t rows, const std::int64_t* targets,
                    float* loss, float* lse, const RowLossParams& p, bool write_dz, RowGradScale g,
                    cudaStream_t stream, std::int64_t grid_rows) {
  if (rows <= 0) return;
  if (grid_rows <= 0) grid_rows = default_ce_grid(rows, p.V * size_of(z_dtype));
  grid_rows = std::min<std::int64_t>(std::min<std::int64_t>(grid_rows, rows), 0x7fffffffLL);
  with_type(z_dtype, [&](auto zt) {
    using L = decltype(zt);
    with_type(p.accum, [&](auto at) {
      using A = decltype(at);
      ce_rows_kernel<L, A><<<static_cast<unsigned>(grid_rows), kThreads, 0, stream>>>(
          static_cast<L*>(z), rows, targets, loss, lse, p, write_dz, g);
      XL_CUDA_CHECK_LAUNCH();
    });
  });
}

void launch_dz_rows(DType z_dtype, const void* z, DType logits_dtype, DType dz_dtype, void* dz,
                    std::int64_t rows, const std::int64_t* targets, const float* lse,
                    const RowLossParams& p, RowGradScale g, cudaStream_t stream) {
  if (rows <= 0) return;
  check_rows(rows, "dz_rows");
  with_type(z_dtype, [&](auto zt) {
    using Z = decltype(zt);
    with_type(dz_dtype, [&](auto ot) {
      using O = decltype(ot);
      dz_rows_kernel<Z, O><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          static_cast<const Z*>(z), static_cast<O*>(dz), targets, lse, p, g, acc_code(logits_dtype),
          0, p.V);
      XL_CUDA_CHECK_LAUNCH();
    });
  });
}

void launch_shard_row_max(DType z_dtype, const void* z, std::int64_t rows, ShardColumns sh,
                          const std::int64_t* targets, const RowLossParams& p, float* m, float* x_t,
                          cudaStream_t stream) {
  if (rows <= 0) return;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(rows, 0x7fffffffLL));
  with_type(z_dtype, [&](auto zt) {
    using L = decltype(zt);
    shard_row_max_kernel<L><<<grid, kThreads, 0, stream>>>(static_cast<const L*>(z), rows, sh.col0,
                                                           sh.cols, targets, p, m, x_t);
    XL_CUDA_CHECK_LAUNCH();
  });
}

void launch_shard_row_sums(DType z_dtype, const void* z, std::int64_t rows, ShardColumns sh,
                           const float* m, const RowLossParams& p, void* sums,
                           cudaStream_t stream) {
  if (rows <= 0) return;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(rows, 0x7fffffffLL));
  with_type(z_dtype, [&](auto zt) {
    using L = decltype(zt);
    with_type(p.accum, [&](auto at) {
      using A = decltype(at);
      shard_row_sums_kernel<L, A><<<grid, kThreads, 0, stream>>>(
          static_cast<const L*>(z), rows, sh.cols, m, p, static_cast<A*>(sums));
      XL_CUDA_CHECK_LAUNCH();
    });
  });
}

void launch_split_row_stats(DType z_dtype, const void* z, std::int64_t rows, ShardColumns sh,
                            const std::int64_t* targets, const RowLossParams& p, float* m,
                            float* x_t, void* sums, cudaStream_t stream) {
  if (rows <= 0) return;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(rows, 0x7fffffffLL));
  with_type(z_dtype, [&](auto zt) {
    using L = decltype(zt);
    with_type(p.accum, [&](auto at) {
      using A = decltype(at);
      split_row_stats_kernel<L, A><<<grid, kThreads, 0, stream>>>(static_cast<const L*>(z), rows,
                                                                  sh.col0, sh.cols, targets, p, m,
                                                                  x_t, static_cast<A*>(sums));
      XL_CUDA_CHECK_LAUNCH();
    });
  });
}

void launch_shard_row_loss(std::int64_t rows, const std::int64_t* targets, const float* m,
                           const void* sums, const float* x_t, const RowLossParams& p, float* loss,
                           float* lse, cudaStream_t stream) {
  if (rows <= 0) return;
  with_type(p.accum, [&](auto at) {
    using A = decltype(at);
    shard_row_loss_kernel<A><<<grid_for(rows), 256, 0, stream>>>(
        rows, targets, m, static_cast<const A*>(sums), x_t, p, loss, lse);
    XL_CUDA_CHECK_LAUNCH();
  });
}

void launch_merge_split_states(std::int64_t splits, std::int64_t rows, const float* split_m,
                               const float* split_xt, const void* split_sums, DType accum, float* m,
                               float* x_t, void* sums, cudaStream_t stream) {
  if (rows <= 0 || splits <= 0) return;
  with_type(accum, [&](auto at) {
    using A = decltype(at);
    merge_split_states_kernel<A><<<grid_for(rows), 256, 0, stream>>>(
        splits, rows, split_m, split_xt, static_cast<const A*>(split_sums), m, x_t,
        static_cast<A*>(sums));
    XL_CUDA_CHECK_LAUNCH();
  });
}

void launch_shard_dz_rows(DType z_dtype, const void* z, DType logits_dtype, DType dz_dtype,
                          void* dz, std::int64_t rows, ShardColumns sh, const std::int64_t* targets,
                          const float* lse, const RowLossParams& p, RowGradScale g,
                          cudaStream_t stream) {
  if (rows <= 0 || sh.cols <= 0) return;
  check_rows(rows, "shard dz_rows");
  with_type(z_dtype, [&](auto zt) {
    using Z = decltype(zt);
    with_type(dz_dtype, [&](auto ot) {
      using O = decltype(ot);
      dz_rows_kernel<Z, O><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          static_cast<const Z*>(z), static_cast<O*>(dz), targets, lse, p, g, acc_code(logits_dtype),
          sh.col0, sh.cols);
      XL_CUDA_CHECK_LAUNCH();
    });
  });
}

void launch_round_rows(const float* src, const float* bias, std::int64_t rows, std::int64_t cols,
                       DType dst_dtype, void* dst, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  with_type(dst_dtype, [&](auto ot) {
    using O = decltype(ot);
    round_rows_kernel<O>
        <<<grid_for(rows * cols), 256, 0, stream>>>(src, bias, rows, cols, static_cast<O*>(dst));
    XL_CUDA_CHECK_LAUNCH();
  });
}

void launch_convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n,
                    cudaStream_t stream) {
  if (n <= 0) return;
  with_type(src_dtype, [&](auto st) {
    using S = decltype(st);
    with_type(dst_dtype, [&](auto dt) {
      using D = decltype(dt);
      convert_kernel<S, D>
          <<<grid_for(n), 256, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), n);
      XL_CUDA_CHECK_LAUNCH();
    });
  });
}

void launch_db_accumulate(DType dz_dtype, const void* dz, std::int64_t rows, std::int64_t V,
                          DType accum, float* acc, cudaStream_t stream) {
  if (rows <= 0 || V <= 0) return;
  with_type(dz_dtype, [&](auto zt) {
    using Z = decltype(zt);
    db_accumulate_kernel<Z><<<static_cast<unsigned>((V + 255) / 256), 256, 0, stream>>>(
        static_cast<const Z*>(dz), rows, V, acc_code(accum), acc);
    XL_CUDA_CHECK_LAUNCH();
  });
}

void launch_accumulate(float* acc, const float* add, std::int64_t n, DType accum,
                       cudaStream_t stream) {
  if (n <= 0) return;
  accumulate_kernel<<<grid_for(n), 256, 0, stream>>>(acc, add, n, acc_code(accum));
  XL_CUDA_CHECK_LAUNCH();
}

}  // namespace xentlab::gpu

#pragma once
// Per-element and per-row arithmetic shared by the CUDA loss kernels (ce_kernels.cu, the row
// kernels of naive/chunked/checkpointed; fused/, the GEMM epilogues of the fused strategy), so
// that every strategy forms the kernel logits, the loss and dz with the very same operations
// (docs/arithmetic.md §2, §5, §7; the orders are spelled out in ce_kernels.cuh). Every fp32
// operation is an explicit __f*_rn intrinsic: nothing is contracted into an FMA.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpu/cuda/common/ce_kernels.cuh"
#include "numerics/dtype.hpp"

namespace xentlab::gpu::cemath {

// ---- storage conversions -------------------------------------------------------------------
__device__ __forceinline__ float to_f(float v) {
  return v;
}
__device__ __forceinline__ float to_f(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_f(__half v) {
  return __half2float(v);
}

template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}

/// Rounds an fp32 value to the accumulator type A and back (exact for A = float).
template <class A>
__device__ __forceinline__ float rnd(float v) {
  return to_f(from_f<A>(v));
}

/// Run-time dtype codes of the rounding helpers: 0 fp32, 1 fp16, 2 bf16.
__device__ __forceinline__ float rnd_rt(float v, int code) {
  if (code == 1) return __half2float(__float2half_rn(v));
  if (code == 2) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
}
inline int acc_code(DType a) {
  return a == DType::fp16 ? 1 : a == DType::bf16 ? 2 : 0;
}

/// Rounding to the accumulator dtype, chosen at compile time (A) or at run time (code).
template <class A>
struct RoundTo {
  __device__ __forceinline__ float operator()(float v) const { return rnd<A>(v); }
};
struct RoundRt {
  int code = 0;
  __device__ __forceinline__ float operator()(float v) const { return rnd_rt(v, code); }
};

// ---- per-element arithmetic ------------------------------------------------------------------
/// §2: x = scale·z, then softcap x = c·tanhf(x/c); th receives tanhf(x/c) (0 without softcap).
__device__ __forceinline__ float transform(float z, const RowLossParams& p, float& th) {
  float x = __fmul_rn(p.scale, z);
  th = 0.0f;
  if (p.softcap > 0.0f) {
    th = tanhf(__fdiv_rn(x, p.softcap));
    x = __fmul_rn(p.softcap, th);
  }
  return x;
}

/// §7: dz_j before rounding to the logits dtype: ((p_j·(1 + 2λ·lse) − [j=t](1−ε) − ε/V)·chain)·g.
__device__ __forceinline__ float dz_value(float x, float th, bool is_target, float lse, float g,
                                          const RowLossParams& p) {
  const float pj = expf(__fsub_rn(x, lse));
  float v = pj;
  if (p.zloss) v = __fmul_rn(v, __fadd_rn(1.0f, __fmul_rn(p.two_lambda, lse)));
  if (is_target) v = __fsub_rn(v, p.one_minus_eps);
  if (p.smoothing) v = __fsub_rn(v, p.eps_over_V);
  const float chain =
      p.softcap > 0.0f ? __fmul_rn(p.scale, __fsub_rn(1.0f, __fmul_rn(th, th))) : p.scale;
  v = __fmul_rn(v, chain);
  return __fmul_rn(v, g);
}

/// §5: lse = rnd_A(m + logf(s)), −inf for an all-masked row (m = −inf).
template <class Round>
__device__ __forceinline__ float row_lse(float m, float s, Round rnd_a) {
  return m == -INFINITY ? -INFINITY : rnd_a(__fadd_rn(m, logf(s)));
}

/// §5: the loss of a row from its lse, target logit x_t and (label smoothing) Σx. Ignored rows 0,
/// a row flagged as having an invalid target NaN, a valid row with x_t = −inf +inf.
template <class Round>
__device__ __forceinline__ float row_loss(float lse, float x_t, float sx, bool valid,
                                          bool bad_target, const RowLossParams& p, Round rnd_a) {
  if (bad_target) return NAN;
  if (!valid) return 0.0f;
  if (x_t == -INFINITY) return INFINITY;
  float l = p.smoothing ? __fsub_rn(__fsub_rn(lse, __fmul_rn(p.one_minus_eps, x_t)),
                                    __fmul_rn(p.eps_over_V, sx))
                        : __fsub_rn(lse, x_t);
  l = rnd_a(l);
  if (p.zloss) l = rnd_a(__fadd_rn(l, __fmul_rn(p.lambda, __fmul_rn(lse, lse))));
  return l;
}

}  // namespace xentlab::gpu::cemath

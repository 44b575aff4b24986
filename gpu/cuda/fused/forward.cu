// The fused strategy's forward (launch.cuh): 1. the forward kernels — wgmma with TMA (sm_90a) and
// mma.sync (every device) — which fold each row's logits into partial online states per
// vocabulary range, and 2. finalize, which merges a row's partials into lse and loss.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/fused/common.cuh"

namespace xentlab::gpu::fused {
namespace {

// ---- 1. forward ------------------------------------------------------------------------------
// Tiles and thread layout: common.cuh (kFBN).
constexpr int kFwdMmaSmem = kStages * (kBM + kFBN) * kLds * 2;  // 92160 B

/// Online states of a thread's two rows (h = 0, 1): max, sum-exp relative to it, Σx (smoothing).
struct FoldRows {
  float m[2] = {-INFINITY, -INFINITY}, s[2] = {0.0f, 0.0f}, sx[2] = {0.0f, 0.0f};
};

/// Folds this thread's share of one forward tile (layout above; d holds the fp32 GEMM results
/// and is overwritten with the logits x) into its rows' states: x = transform(rnd_logits(acc +
/// bias)), −inf past V; the thread holding the target column writes x_t; Σx of the 64 columns
/// from 0 then added; the tile max, the tile's sum-exp from 0 in column order, then
/// s ← s·e^{m−m'} + tile sum (docs/arithmetic.md §9), every operation rounded to the
/// accumulator dtype. kPlain (the host checks: no bias, scale 1, no softcap, no smoothing, fp32
/// accumulator) drops the operations that are then exact identities (×1, rounding to fp32), as
/// ce_kernels.cu's plain path does; T is the logits dtype (= the input dtype).
template <bool kPlain, class T>
__device__ __forceinline__ void fold_tile(float (&d)[128], std::int64_t row0, int q,
                                          std::int64_t n0, const FusedArgs& a,
                                          const std::int64_t (&tgt)[2], FoldRows& f) {
  const RowLossParams& p = a.p;
  // Column n0 + 2q + o for o = 8j + e: in V while o < lim. Offsets are small ints (registers).
  const std::int64_t rem = a.V - n0 - 2 * q;
  const int lim = rem > kFBN ? kFBN : static_cast<int>(rem);
  const float* bias = a.bias != nullptr ? a.bias + n0 + 2 * q : nullptr;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::int64_t tr = tgt[h] - n0 - 2 * q;  // the target's offset, if in this tile
    const int toff = target_valid(tgt[h], p) && tr >= 0 && tr < kFBN ? static_cast<int>(tr) : -1;
    float tm = -INFINITY;
#pragma unroll
    for (int o8 = 0; o8 < kFBN; o8 += 8)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int o = o8 + e, k = o8 / 2 + 2 * h + e;  // d[4j + 2h + e], j = o8 / 8
        float v = -INFINITY;
        if (o < lim) {
          if constexpr (kPlain) {
            v = to_f(from_f<T>(d[k]));
          } else {
            float r = d[k];
            if (bias != nullptr) r = __fadd_rn(r, bias[o]);
            float th;
            v = transform(rnd_rt(r, a.logits_code), p, th);
          }
        }
        d[k] = v;
        tm = fmaxf(tm, v);
        if (o == toff) a.x_target[row0 + 8 * h] = v;
      }
    if (!kPlain && p.smoothing) {
      float ts = 0.0f;
#pragma unroll
      for (int o8 = 0; o8 < kFBN; o8 += 8)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (o8 + e < lim)
            ts = rnd_rt(__fadd_rn(ts, rnd_rt(d[o8 / 2 + 2 * h + e], a.acc_code)), a.acc_code);
      f.sx[h] = rnd_rt(__fadd_rn(f.sx[h], ts), a.acc_code);
    }
    if (tm == -INFINITY) continue;  // all masked or past V: nothing to add
    const float mn = fmaxf(f.m[h], tm);
    float ts = 0.0f;
#pragma unroll
    for (int o8 = 0; o8 < kFBN; o8 += 8)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float ex = expf(__fsub_rn(d[o8 / 2 + 2 * h + e], mn));
        ts = kPlain ? __fadd_rn(ts, ex) : rnd_rt(__fadd_rn(ts, rnd_rt(ex, a.acc_code)), a.acc_code);
      }
    const float scaled =
        f.m[h] == -INFINITY ? 0.0f : __fmul_rn(f.s[h], expf(__fsub_rn(f.m[h], mn)));
    f.s[h] = kPlain ? __fadd_rn(scaled, ts) : rnd_rt(__fadd_rn(scaled, ts), a.acc_code);
    f.m[h] = mn;
  }
}

/// Merges the quad's four states of each row (lane q with q^1, then with q^2, lower lane first,
/// so both lanes hold the same result) and writes the (row, range) partial.
__device__ __forceinline__ void finish_fold(FoldRows& f, std::int64_t row0, int q,
                                            std::int64_t split, const FusedArgs& a) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, f.m[h], o);
      const float s2 = __shfl_xor_sync(0xffffffffu, f.s[h], o);
      const float x2 = __shfl_xor_sync(0xffffffffu, f.sx[h], o);
      const bool lower = (q & o) == 0;
      float ma = lower ? f.m[h] : m2, sa = lower ? f.s[h] : s2;
      merge_state(ma, sa, lower ? m2 : f.m[h], lower ? s2 : f.s[h], a.acc_code);
      f.m[h] = ma;
      f.s[h] = sa;
      f.sx[h] = rnd_rt(lower ? __fadd_rn(f.sx[h], x2) : __fadd_rn(x2, f.sx[h]), a.acc_code);
    }
    const std::int64_t row = row0 + 8 * h;
    if (q == 0 && row < a.N) {
      a.part_m[split * a.N + row] = f.m[h];
      a.part_s[split * a.N + row] = f.s[h];
      if (a.part_sx != nullptr) a.part_sx[split * a.N + row] = f.sx[h];
    }
  }
}

/// The forward's logits GEMM on mma.sync: d = H[m0:m0+128, :] · W[n0:n0+256, :]ᵀ, fp32 over D
/// in steps of 32 (16 per mma), increasing k, through the same cp.async pipeline. Warp w
/// computes rows 16w … 16w + 15 × all 256 columns (the layout above). Leaves smem free.
template <class T, bool kVec>
__device__ __forceinline__ void logits_tile_rows(float (&d)[128], std::uint16_t* smem,
                                                 const std::uint16_t* H, const std::uint16_t* W,
                                                 std::int64_t m0, std::int64_t N, std::int64_t n0,
                                                 std::int64_t V, std::int64_t D) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  mma_logits_pipeline<kVec, kFBN>(
      smem, H, W, m0, N, n0, V, D, [&](const std::uint16_t* As, const std::uint16_t* Bs) {
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          std::uint32_t af[4];
          ldsm_x4(af, As + (warp * 16 + lane % 16) * kLds + kk * 16 + (lane / 16) * 8);
#pragma unroll
          for (int jj = 0; jj < kFBN / 16; ++jj) {
            std::uint32_t b[4];
            ldsm_x4(b, Bs + (jj * 16 + lane % 8 + (lane / 16) * 8) * kLds + kk * 16 +
                           ((lane / 8) % 2) * 8);
            mma<T>(*reinterpret_cast<float(*)[4]>(d + 8 * jj), af, b[0], b[1]);
            mma<T>(*reinterpret_cast<float(*)[4]>(d + 8 * jj + 4), af, b[2], b[3]);
          }
        }
      });
}

/// Vocabulary tiles [t0, t1) of the range `split` of token block mb (CTA blockIdx.x = mb·splits +
/// split: consecutive CTAs share the H block and stream different W tiles).
struct FwdRange {
  std::int64_t split, m0, t0, t1;
};
__device__ __forceinline__ FwdRange forward_range(const FusedArgs& a) {
  FwdRange r;
  r.split = blockIdx.x % a.splits;
  r.m0 = (blockIdx.x / a.splits) * kBM;
  const std::int64_t VT = (a.V + kFBN - 1) / kFBN;
  r.t0 = r.split * a.tiles_per_split;
  r.t1 = std::min<std::int64_t>(VT, r.t0 + a.tiles_per_split);
  return r;
}

/// The forward on mma.sync: 8 warps of 16 rows × 256 columns (any sm_80+ device, any shape).
/// Registers capped at 240 (ptxas takes 234–240, no spills but 8 bytes of stack in the vector
/// variant). The cap was set while diagnosing a launch failure that was the wgmma kernel's (see
/// kWgThreads); the uncapped 255-register build also ran on the H200.
constexpr int kFwdMmaRegs = 240;
template <class T, bool kVec>
__global__ void __maxnreg__(kFwdMmaRegs) fused_forward_mma_kernel(FusedArgs a) {
  extern __shared__ __align__(16) std::uint16_t smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, q = lane % 4;
  const FwdRange rg = forward_range(a);
  const std::int64_t row0 = rg.m0 + 16 * warp + lane / 4;
  std::int64_t tgt[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    tgt[h] = row0 + 8 * h < a.N ? a.targets[row0 + 8 * h] : a.p.ignore_index;
  FoldRows f;
  float d[128];
  for (std::int64_t vt = rg.t0; vt < rg.t1; ++vt) {
    logits_tile_rows<T, kVec>(d, smem, a.H, a.W, rg.m0, a.N, vt * kFBN, a.V, a.D);
    fold_tile<false, T>(d, row0, q, vt * kFBN, a, tgt, f);
  }
  finish_fold(f, row0, q, rg.split, a);
}

/// The forward on wgmma (sm_90a): warpgroup 2 is the producer — one thread streams (tile, K
/// block) pairs of H (128 × 64) and W (256 × 64) boxes by TMA into a 4-stage ring of
/// 128-byte-swizzled buffers; warpgroups 0 and 1 each compute 64 rows × 256 columns with
/// wgmma.mma_async m64n256k16 (4 per K block, increasing k, fp32 accumulators; one group kept in
/// flight, a stage released one K block after its wgmmas were issued), then fold the tile.
/// Boxes past N, V or D are zero-filled by the TMA unit. Measured first as
/// lab/probes/wgmma_probe.
template <class T, bool kPlain>
__global__ void __launch_bounds__(kWgThreads, 1)
    fused_forward_wgmma_kernel(const __grid_constant__ CUtensorMap tm_h,
                               const __grid_constant__ CUtensorMap tm_w, FusedArgs a) {
  using namespace hopper;
  extern __shared__ std::uint8_t wg_smem_raw[];
  __shared__ __align__(8) std::uint64_t full[Ring::kStages], empty[Ring::kStages];
  const Ring ring{align_1024(wg_smem_raw), full, empty};
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const FwdRange rg = forward_range(a);
  const int kblocks = static_cast<int>((a.D + Ring::kBK - 1) / Ring::kBK);
  if (threadIdx.x == 0) ring.init(kWgConsumers);
  __syncthreads();
  if (wg == kWgConsumers) {  // producer warpgroup
    setmaxnreg_dec<40>();
    if (t == 0) produce_tiles(ring, &tm_h, &tm_w, rg.m0, rg.t0, rg.t1, kblocks);
    return;
  }
  setmaxnreg_inc<232>();
  const int c = wg, lane = t % 32, q = lane % 4;
  const std::int64_t row0 = rg.m0 + 64 * c + 16 * (t / 32) + lane / 4;
  std::int64_t tgt[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    tgt[h] = row0 + 8 * h < a.N ? a.targets[row0 + 8 * h] : a.p.ignore_index;
  FoldRows f;
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  int it = 0;
  for (std::int64_t tile = rg.t0; tile < rg.t1; ++tile) {
    ring.consume_tile<T>(d, it, kblocks, c, t);
    fold_tile<kPlain, T>(d, row0, q, tile * kFBN, a, tgt, f);
  }
  finish_fold(f, row0, q, rg.split, a);
}

// ---- 2. finalize -----------------------------------------------------------------------------
__global__ void fused_finalize_kernel(FusedArgs a, float* loss, float* lse) {
  const std::int64_t row = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= a.N) return;
  // Pairwise over the vocabulary ranges (a binary-counter stack: merge depth ⌈log2 splits⌉), so
  // a dominant running sum is not re-rounded once per range: a sequential fold over 250 ranges
  // lost ~1e-5 of a sum-exp ≈ 1 on case C09 (docs/fused.md).
  float st_m[32], st_s[32], st_x[32];
  int st_n[32], top = 0;
  for (int k = 0; k < a.splits; ++k) {
    float m = a.part_m[k * a.N + row], s = a.part_s[k * a.N + row];
    float x = a.part_sx != nullptr ? a.part_sx[k * a.N + row] : 0.0f;
    int n = 1;
    while (top > 0 && st_n[top - 1] == n) {
      --top;
      float ml = st_m[top], sl = st_s[top];
      merge_state(ml, sl, m, s, a.acc_code);
      m = ml;
      s = sl;
      x = rnd_rt(__fadd_rn(st_x[top], x), a.acc_code);
      n *= 2;
    }
    st_m[top] = m;
    st_s[top] = s;
    st_x[top] = x;
    st_n[top] = n;
    ++top;
  }
  float m = -INFINITY, s = 0.0f, sx = 0.0f;
  if (top > 0) {
    m = st_m[top - 1];
    s = st_s[top - 1];
    sx = st_x[top - 1];
    for (int t = top - 2; t >= 0; --t) {
      float ml = st_m[t], sl = st_s[t];
      merge_state(ml, sl, m, s, a.acc_code);
      m = ml;
      s = sl;
      sx = rnd_rt(__fadd_rn(st_x[t], sx), a.acc_code);
    }
  }
  const RoundRt rnd_a{a.acc_code};
  const float l = row_lse(m, s, rnd_a);
  const std::int64_t t = a.targets[row];
  const bool valid = target_valid(t, a.p);
  const bool bad = t != a.p.ignore_index && !valid;
  lse[row] = l;
  loss[row] = row_loss(l, valid ? a.x_target[row] : 0.0f, sx, valid, bad, a.p, rnd_a);
}

template <class T>
void launch_forward(bool vec, bool wgmma, const FusedArgs& a, cudaStream_t stream) {
  const std::int64_t MB = (a.N + kBM - 1) / kBM;
  const auto grid = static_cast<unsigned>(MB * a.splits);
  if (wgmma) {
    const OperandMaps m = operand_maps<T>(a);
    // The plain fold where its dropped operations are identities (fold_tile).
    const bool plain = a.bias == nullptr && a.p.scale == 1.0f && !(a.p.softcap > 0.0f) &&
                       !a.p.smoothing && a.acc_code == 0;
    auto k = plain ? fused_forward_wgmma_kernel<T, true> : fused_forward_wgmma_kernel<T, false>;
    XL_CUDA_CHECK(
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Ring::kSmemBytes));
    k<<<grid, kWgThreads, Ring::kSmemBytes, stream>>>(m.h, m.w, a);
  } else {
    auto k = vec ? fused_forward_mma_kernel<T, true> : fused_forward_mma_kernel<T, false>;
    XL_CUDA_CHECK(
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kFwdMmaSmem));
    k<<<grid, kThreads, kFwdMmaSmem, stream>>>(a);
  }
  XL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_fused_forward(DType input, bool vec, bool wgmma, const FusedArgs& a,
                          cudaStream_t stream) {
  input == DType::bf16 ? launch_forward<__nv_bfloat16>(vec, wgmma, a, stream)
                       : launch_forward<__half>(vec, wgmma, a, stream);
}

void launch_fused_finalize(const FusedArgs& a, float* loss, float* lse, cudaStream_t stream) {
  fused_finalize_kernel<<<static_cast<unsigned>((a.N + 255) / 256), 256, 0, stream>>>(a, loss, lse);
  XL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace xentlab::gpu::fused

// fused: linear + cross-entropy with no logits in device memory (docs/arithmetic.md §9; the
// kernel design and its measurements: docs/fused.md).
//
// Three kernels, each a tensor-core GEMM of H (N×D) against W (V×D) with bf16 or fp16 operands and
// fp32 accumulation over D in increasing k, whose epilogue never stores a logit:
//   1. forward: a CTA walks a range of vocabulary tiles (128 tokens × 256 entries) for its 128
//      rows and folds each tile into per-thread running (max, sum-exp) states in the accumulator
//      dtype (and Σx for label smoothing), 4 threads per row with 64 columns each; the thread that
//      holds the target column records x_t; the quad's states are merged into one partial per
//      (row, range). Two kernels with the same tree: wgmma m64n256k16 (HGMMA) fed by TMA on
//      sm_90a, and mma.sync m16n8k16 (HMMA) through cp.async elsewhere (gpu/cuda/fused.cuh);
//   2. finalize: per row, the partials of the vocabulary ranges are merged pairwise → lse, loss;
//   3. backward: per (token block, vocabulary block) tile the logits are recomputed (the same fp32
//      dot products over D in the same k order, rounded alike: z equals the forward's), dz is
//      formed in registers from the stored lse and the upstream gradient, rounded to the logits
//      dtype (= the operand dtype, see below) and kept in shared memory; then dH[rows, :] +=
//      dz·W[cols, :] and dW[cols, :] += dzᵀ·H[rows, :] are two more tensor-core GEMMs over D in
//      slices of 64, added into fp32 accumulators with atomics (red.global.add), and db with fp32
//      atomics. dz is never written to global memory. Two kernels: wgmma (sm_90a, where the
//      forward is wgmma: tiles 128 × 256, the forward's TMA mainloop for the recompute, wgmma
//      m64n64k16 for the gradient GEMMs) and mma.sync (tiles 128 × 128, cp.async; elsewhere).
// Gradients therefore accumulate in fp32 in an order that depends on scheduling: repeat runs agree
// within the a-priori bound, not bit for bit (loss and lse are deterministic: no atomics there).
//
// Recipes: operands bf16 or fp16 (the problem's input dtype); logits dtype = input dtype (dz is
// held in the logits dtype and must be an exact tensor-core operand; an fp32 dz would need an fp32
// GEMM, which this strategy does not have); any accumulator dtype (fp32/bf16/fp16: the online
// state is rounded to it after every operation) and grad dtype. Others are refused by
// can_implement. Linear problems only (a logits problem has its logits in memory already).
// Extra device memory: the fp32 dH and dW accumulators (none when the grad dtype is fp32: the
// outputs accumulate), the fp32 db accumulator, and < 64 MiB of per-row partial states.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "gpu/cuda/ce_math.cuh"
#include "gpu/cuda/cuda_check.hpp"
#include "gpu/cuda/cuda_strategy.cuh"
#include "gpu/cuda/fused.cuh"
#include "gpu/cuda/hopper.cuh"
#include "gpu/fused_plan.hpp"

namespace xentlab::gpu {
namespace {
using namespace cemath;

// ---- tile configuration --------------------------------------------------------------------
constexpr int kBM = 128;       // tokens per tile (kFusedBlockTokens)
constexpr int kBN = 128;       // vocabulary entries per backward tile
constexpr int kBK = 32;        // K (hidden) step of the logits GEMM
constexpr int kStages = 3;     // cp.async pipeline depth of the logits GEMM
constexpr int kThreads = 256;  // 8 warps
constexpr int kLds = kBK + 8;  // padded smem row (halves): conflict-free ldmatrix
constexpr int kDS = 64;        // hidden slice of the gradient GEMMs
constexpr int kLdg = kDS + 8;  // padded smem row of a gradient slice
constexpr int kLdz = kBN + 8;  // padded smem row of the dz tile
constexpr int kMainHalves = kStages * (kBM + kBN) * kLds;  // 30720 halves
constexpr int kGradHalves = 2 * (kBM + kBN) * kLdg;        // 36864 halves
constexpr int kRegionHalves = kMainHalves > kGradHalves ? kMainHalves : kGradHalves;
constexpr int kBwdSmem = (kRegionHalves + kBM * kLdz) * 2;  // 108544 B
// Token blocks per raster group of the backward (L2 reuse; docs/fused.md): the mma.sync kernel's
// 16 was measured against 64 (2026-11-30, docs/benchmarks.md); the wgmma kernel's 8 against 16 and
// 32 (2026-11-30 20:25 UTC: 119.9, 125.8, 137.2 ms at N = 8192; 1947.6, 2071.6, 2261.0 ms at N =
// 131072).
#ifndef XL_FUSED_GROUP_N
constexpr int kGroupN = 16;
constexpr int kWbGroupN = 8;
#else
constexpr int kGroupN = XL_FUSED_GROUP_N;  // experiments (tools/bench/fused_variants)
constexpr int kWbGroupN = XL_FUSED_GROUP_N;
#endif

static_assert(kBM == kFusedBlockTokens,
              "the CPU emulation models this decomposition "
              "(gpu/fused_plan.hpp)");

// ---- PTX wrappers --------------------------------------------------------------------------
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // 0 source bytes: the 16 destination bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldsm_x4(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
/// c += a·b, m16n8k16, fp32 accumulation; T = __nv_bfloat16 or __half operands.
template <class T>
__device__ __forceinline__ void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                    std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// ---- tile loads ----------------------------------------------------------------------------
/// Loads ROWS × COLS halves of a row-major matrix X (nrows × ld, 16-bit) starting at (r0, c0)
/// into smem (row stride LD halves); entries outside (nrows, ncols) are zero. kVec: ld % 8 == 0
/// and 16-byte aligned rows, so cp.async of 8 halves (a chunk is wholly inside or outside);
/// otherwise plain loads (a slow path for unaligned shapes such as D = 123).
template <bool kVec, int ROWS, int COLS, int LD>
__device__ __forceinline__ void load_tile(std::uint16_t* s, const std::uint16_t* X, std::int64_t r0,
                                          std::int64_t nrows, std::int64_t c0, std::int64_t ncols,
                                          std::int64_t ld) {
  if constexpr (kVec) {
    constexpr int kChunks = ROWS * COLS / 8;
    static_assert(kChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll
    for (int q = 0; q < kChunks / kThreads; ++q) {
      const int idx = threadIdx.x + q * kThreads;
      const int r = idx / (COLS / 8), cc = (idx % (COLS / 8)) * 8;
      const std::int64_t gr = r0 + r, gc = c0 + cc;
      const bool ok = gr < nrows && gc < ncols;
      cp_async16(s + r * LD + cc, ok ? X + gr * ld + gc : X, ok);
    }
  } else {
    for (int idx = threadIdx.x; idx < ROWS * COLS; idx += kThreads) {
      const int r = idx / COLS, cc = idx % COLS;
      const std::int64_t gr = r0 + r, gc = c0 + cc;
      s[r * LD + cc] = gr < nrows && gc < ncols ? X[gr * ld + gc] : std::uint16_t{0};
    }
  }
}

/// The cp.async pipeline of the mma.sync logits GEMMs: over D in K steps of 32, increasing k,
/// kStages deep, stage kt holding H[m0:m0+128, kt·32:+32] and then W[n0:n0+BROWS, kt·32:+32]
/// (rows past N or V and columns past D zero); step(As, Bs) computes one K step from them.
/// Leaves smem free (all groups waited, barrier).
template <bool kVec, int BROWS, class Step>
__device__ __forceinline__ void mma_logits_pipeline(std::uint16_t* smem, const std::uint16_t* H,
                                                    const std::uint16_t* W, std::int64_t m0,
                                                    std::int64_t N, std::int64_t n0, std::int64_t V,
                                                    std::int64_t D, Step&& step) {
  const std::int64_t KT = (D + kBK - 1) / kBK;
  auto stage_a = [&](std::int64_t st) { return smem + st * (kBM + BROWS) * kLds; };
  auto load_stage = [&](std::int64_t kt) {
    std::uint16_t* a = stage_a(kt % kStages);
    load_tile<kVec, kBM, kBK, kLds>(a, H, m0, N, kt * kBK, D, D);
    load_tile<kVec, BROWS, kBK, kLds>(a + kBM * kLds, W, n0, V, kt * kBK, D, D);
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < KT) load_stage(st);
    cp_async_commit();
  }
  for (std::int64_t kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (kt + kStages - 1 < KT) load_stage(kt + kStages - 1);
    cp_async_commit();
    const std::uint16_t* As = stage_a(kt % kStages);
    step(As, As + kBM * kLds);
  }
  cp_async_wait<0>();
  __syncthreads();
}

/// The logits GEMM of one tile: acc = H[m0:m0+128, :] · W[n0:n0+128, :]ᵀ, fp32 accumulation over
/// D in steps of 32 (16 per mma), increasing k. Warps 2 (M) × 4 (N), warp tile 64 × 32;
/// acc[i][j][e] is row wm·64 + 16i + g + 8(e/2), column wn·32 + 8j + 2c + (e%2), with g = lane/4,
/// c = lane%4 (the mma accumulator layout). Leaves smem free (all groups waited, barrier).
template <class T, bool kVec>
__device__ __forceinline__ void logits_tile(float (&acc)[4][4][4], std::uint16_t* smem,
                                            const std::uint16_t* H, const std::uint16_t* W,
                                            std::int64_t m0, std::int64_t N, std::int64_t n0,
                                            std::int64_t V, std::int64_t D) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp / 4, wn = warp % 4;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  mma_logits_pipeline<kVec, kBN>(
      smem, H, W, m0, N, n0, V, D, [&](const std::uint16_t* As, const std::uint16_t* Bs) {
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          std::uint32_t a[4][4], b[2][4];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            ldsm_x4(a[i], As + (wm * 64 + i * 16 + lane % 16) * kLds + kk * 16 + (lane / 16) * 8);
#pragma unroll
          for (int jj = 0; jj < 2; ++jj)
            ldsm_x4(b[jj], Bs + (wn * 32 + jj * 16 + lane % 8 + (lane / 16) * 8) * kLds + kk * 16 +
                               ((lane / 8) % 2) * 8);
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
              mma<T>(acc[i][j], a[i], b[j / 2][(j % 2) * 2], b[j / 2][(j % 2) * 2 + 1]);
        }
      });
}

/// Epilogue value: z = rnd_logits(acc + bias) (§1), x = transform(z) (§2); −inf outside V.
__device__ __forceinline__ float logit_of(float acc, std::int64_t col, std::int64_t V,
                                          const float* bias, int logits_code,
                                          const RowLossParams& p, float& th) {
  th = 0.0f;
  if (col >= V) return -INFINITY;
  float r = acc;
  if (bias != nullptr) r = __fadd_rn(r, bias[col]);
  return transform(rnd_rt(r, logits_code), p, th);
}

struct FusedArgs {
  const std::uint16_t* H = nullptr;  // (N, D)
  const std::uint16_t* W = nullptr;  // (V, D)
  const float* bias = nullptr;       // (V) or null
  const std::int64_t* targets = nullptr;
  std::int64_t N = 0, V = 0, D = 0;
  RowLossParams p;
  int logits_code = 0, acc_code = 0;
  // forward
  int splits = 1;  // vocabulary ranges per token block
  std::int64_t tiles_per_split = 0;
  float* part_m = nullptr;    // (splits, N)
  float* part_s = nullptr;    // (splits, N)
  float* part_sx = nullptr;   // (splits, N), label smoothing only
  float* x_target = nullptr;  // (N)
  // backward
  const float* lse = nullptr;  // (N)
  RowGradScale g;
  float* dH = nullptr;  // (N, D) fp32 accumulator
  float* dW = nullptr;  // (V, D) fp32 accumulator
  float* db = nullptr;  // (V) fp32 accumulator or null
};

__device__ __forceinline__ bool target_valid(std::int64_t t, const RowLossParams& p) {
  return t != p.ignore_index && t >= 0 && t < p.V;
}

/// Merges online state (m2, s2) into (m, s): m' = max, s = rnd_A(s·e^{m−m'} + s2·e^{m2−m'}).
__device__ __forceinline__ void merge_state(float& m, float& s, float m2, float s2, int acc) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;  // both empty
  const float a = m == -INFINITY ? 0.0f : __fmul_rn(s, expf(__fsub_rn(m, mn)));
  const float b = m2 == -INFINITY ? 0.0f : __fmul_rn(s2, expf(__fsub_rn(m2, mn)));
  s = rnd_rt(__fadd_rn(a, b), acc);
  m = mn;
}

// ---- 1. forward ------------------------------------------------------------------------------
// Forward tiles are 128 tokens × kFBN = 256 vocabulary entries. Both forward kernels hold a tile
// in the layout of wgmma's m64n256 accumulator fragment: the thread with lane l of warp w (w over
// the CTA's 8 row groups of 16) has d[4j + 2h + e] = logit(row m0 + 16w + l/4 + 8h, column
// n0 + 8j + 2(l % 4) + e), j < 32. So each row of a tile is folded by the 4 threads of a quad, 64
// columns each, and both kernels fold the same tree (gpu/fused_plan.hpp, the CPU emulation).
constexpr int kFBN = 256;
constexpr int kFwdMmaSmem = kStages * (kBM + kFBN) * kLds * 2;  // 92160 B
// wgmma kernel: 2 consumer warpgroups of 64 rows + 1 producer warpgroup (one thread issues the
// TMA copies); K blocks of 64. The producer gives registers up (setmaxnreg) so that the
// consumers may hold the 128 accumulators and the fold (ptxas: 168 registers, no spills). A
// first version with a producer warp instead of a warpgroup (288 threads, 180 registers) was
// refused at every launch on the H200 with cudaErrorLaunchOutOfResources (2026-11-30; the cause
// was not established): this kernel is launched in whole warpgroups.
constexpr int kWgConsumers = 2;
constexpr int kWgThreads = 128 * (kWgConsumers + 1);
using Ring = hopper::WgmmaRing;  // 128 × 256 tiles, K blocks of 64, 4 stages (hopper.cuh)
static_assert(kBM == 64 * kWgConsumers && kFBN == 256, "the ring's tile is the forward's");
static_assert(kFBN == kFusedVocabTile && kFusedRowWarps == 1 && kFusedThreadColumns == 64,
              "the forward's fold: 4 threads per row of a 256-column tile, 64 columns each — the "
              "layout the CPU emulation folds (gpu/fused_plan.hpp)");

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
/// kWgThreads); the uncapped 255-register build also ran on the H200 (2026-11-30).
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
/// Boxes past N, V or D are zero-filled by the TMA unit. Measured first as tools/bench/wgmma_probe.
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
    if (t == 0) {
      int it = 0;
      for (std::int64_t tile = rg.t0; tile < rg.t1; ++tile)
        for (int kb = 0; kb < kblocks; ++kb, ++it)
          ring.produce(it, &tm_h, &tm_w, kb * Ring::kBK, static_cast<int>(rg.m0),
                       static_cast<int>(tile * kFBN));
    }
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

// ---- 3. backward -----------------------------------------------------------------------------
template <class T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  const T a = from_f<T>(lo), b = from_f<T>(hi);
  std::uint16_t ua, ub;
  memcpy(&ua, &a, 2);
  memcpy(&ub, &b, 2);
  return std::uint32_t(ua) | (std::uint32_t(ub) << 16);
}

/// Adds a warp's fp32 fragment of 16 rows × 8·J columns into dst (rows × D) with fp32 reductions:
/// acc[4j + 2h + e] is row r0 + g + 8h, column c0 + 8j + 2c + e (g = lane/4, c = lane%4: the
/// accumulator layout of mma m16n8 tiles side by side and of wgmma m64nN per warp). Vector path
/// (sm_90, D % 8 == 0): partner lanes (c, c^1) swap one pair so that each lane adds one float4 of
/// 4 consecutive columns per j — even lanes row g, odd lanes row g + 8.
template <bool kVec, int J>
__device__ __forceinline__ void flush_frag(float* dst, const float* acc, std::int64_t r0,
                                           std::int64_t rows, std::int64_t c0, std::int64_t D,
                                           int g, int c) {
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const float* f = acc + 4 * j;
    const std::int64_t ra = r0 + g, col = c0 + j * 8 + 2 * c;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr bool kVec4 = kVec;  // float4 reductions exist from sm_90
#else
    constexpr bool kVec4 = false;
#endif
    if constexpr (kVec4) {
      const bool even = (c & 1) == 0;
      const float s0 = even ? f[2] : f[0];
      const float s1 = even ? f[3] : f[1];
      const float q0 = __shfl_xor_sync(0xffffffffu, s0, 1);
      const float q1 = __shfl_xor_sync(0xffffffffu, s1, 1);
      const std::int64_t row = even ? ra : ra + 8, cc = even ? col : col - 2;
      if (row < rows && cc < D) {
        const float4 v = even ? make_float4(f[0], f[1], q0, q1) : make_float4(q0, q1, f[2], f[3]);
        atomicAdd(reinterpret_cast<float4*>(dst + row * D + cc), v);
      }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t row = ra + 8 * h;
        if (row >= rows) continue;
        if (col < D) atomicAdd(dst + row * D + col, f[2 * h]);
        if (col + 1 < D) atomicAdd(dst + row * D + col + 1, f[2 * h + 1]);
      }
    }
  }
}

/// A warp's 32×32 result of the mma.sync backward (acc[i][j][e]: row r0 + 16i + g + 8(e/2),
/// column c0 + 8j + 2c + e%2) into dst: two 16-row fragments.
template <bool kVec>
__device__ __forceinline__ void flush_tile(float* dst, const float (&acc)[2][4][4], std::int64_t r0,
                                           std::int64_t rows, std::int64_t c0, std::int64_t D,
                                           int g, int c) {
#pragma unroll
  for (int i = 0; i < 2; ++i)
    flush_frag<kVec, 4>(dst, &acc[i][0][0], r0 + 16 * i, rows, c0, D, g, c);
}

/// The backward's tile of CTA blockIdx.x for tiles of kBM tokens × BN vocabulary entries: raster
/// groups of GROUP token blocks, token block fastest within a group (L2 reuse of both the H rows
/// and the W rows that the CTAs in flight read, and of the gradient lines they add into); the last
/// group may be smaller. A bijection of [0, MB·VB) for any GROUP ≥ 1.
struct BwdTile {
  std::int64_t mb, vb, m0, n0;
};
template <int BN, int GROUP>
__device__ __forceinline__ BwdTile backward_tile(const FusedArgs& a) {
  const std::int64_t MB = (a.N + kBM - 1) / kBM, VB = (a.V + BN - 1) / BN;
  const std::int64_t b = blockIdx.x, per_group = std::int64_t(GROUP) * VB;
  const std::int64_t grp = b / per_group, local = b % per_group;
  const std::int64_t gn = std::min<std::int64_t>(GROUP, MB - grp * GROUP);
  BwdTile t;
  t.mb = grp * GROUP + local % gn;
  t.vb = local / gn;
  t.m0 = t.mb * kBM;
  t.n0 = t.vb * BN;
  return t;
}

/// Whether any row of the token block at m0 has a valid target (a block without one has dz = 0
/// and is skipped). Every thread of the CTA must call it (a barrier); threads < kBM read a row.
__device__ __forceinline__ bool block_has_targets(const FusedArgs& a, std::int64_t m0) {
  bool any = false;
  if (threadIdx.x < kBM) {
    const std::int64_t row = m0 + threadIdx.x;
    any = row < a.N && target_valid(a.targets[row], a.p);
  }
  return __syncthreads_or(any) != 0;
}

/// What dz of one row needs: target, lse, upstream gradient, and whether the row has a valid
/// target (rows past N and ignored rows get dz = 0).
struct DzRow {
  std::int64_t t;
  float lse, gi;
  bool valid;
};
__device__ __forceinline__ DzRow dz_row(const FusedArgs& a, std::int64_t row) {
  DzRow r{a.p.ignore_index, 0.0f, 0.0f, false};
  if (row < a.N) {
    r.t = a.targets[row];
    r.lse = a.lse[row];
    r.gi = a.g.g_rows != nullptr ? a.g.g_rows[row] : a.g.g_scalar;
    r.valid = target_valid(r.t, a.p);
  }
  return r;
}
/// dz of (row, col) from the recomputed fp32 dot product acc (§7; the forward's z: logit_of),
/// rounded to the logits dtype; 0 past V and on rows without a valid target.
__device__ __forceinline__ float dz_of(float acc, std::int64_t col, const DzRow& r,
                                       const FusedArgs& a) {
  float th;
  const float x = logit_of(acc, col, a.V, a.bias, a.logits_code, a.p, th);
  return r.valid && col < a.V ? rnd_rt(dz_value(x, th, col == r.t, r.lse, r.gi, a.p), a.logits_code)
                              : 0.0f;
}

template <class T, bool kVec>
__global__ void __launch_bounds__(kThreads, 2) fused_backward_kernel(FusedArgs a) {
  extern __shared__ __align__(16) std::uint16_t smem[];
  std::uint16_t* dzs = smem + kRegionHalves;  // (kBM, kLdz) dz tile in the operand dtype
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const BwdTile tl = backward_tile<kBN, kGroupN>(a);
  const std::int64_t mb = tl.mb, vb = tl.vb, m0 = tl.m0, n0 = tl.n0;
  if (!block_has_targets(a, m0)) return;

  {
    const int wm = warp / 4, wn = warp % 4;
    float acc[4][4][4];
    logits_tile<T, kVec>(acc, smem, a.H, a.W, m0, a.N, n0, a.V, a.D);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm * 64 + i * 16 + g + 8 * h;
        const DzRow dr = dz_row(a, m0 + r);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const std::int64_t col = n0 + wn * 32 + j * 8 + 2 * c;
          *reinterpret_cast<std::uint32_t*>(dzs + r * kLdz + wn * 32 + j * 8 + 2 * c) = pack2<T>(
              dz_of(acc[i][j][2 * h], col, dr, a), dz_of(acc[i][j][2 * h + 1], col + 1, dr, a));
        }
      }
  }
  __syncthreads();
#ifdef XL_FUSED_EXP_NO_GRAD  // experiment: recompute and dz only (docs/fused.md)
  if (dzs[threadIdx.x] == 12345) a.dH[0] = 1.0f;
  return;
#endif
  // db: column sums of the tile (fp32, increasing row), added atomically.
  if (a.db != nullptr && threadIdx.x < kBN && n0 + threadIdx.x < a.V) {
    float sum = 0.0f;
    for (int r = 0; r < kBM; ++r) {
      T v;
      memcpy(&v, dzs + r * kLdz + threadIdx.x, 2);
      sum = __fadd_rn(sum, to_f(v));
    }
    atomicAdd(a.db + n0 + threadIdx.x, sum);
  }

  // Gradient GEMMs over D in slices of kDS, double-buffered; warps 4 (M) × 2 (N), warp tile
  // 32 × 32 for both dH (rows × hidden, K = vocabulary) and dW (vocabulary × hidden, K = rows).
  const int wm = warp / 2, wn = warp % 2;
  const std::int64_t slices = (a.D + kDS - 1) / kDS;
  const std::int64_t first = (mb + vb) % slices;  // rotate so concurrent CTAs add elsewhere
  auto stage = [&](int st) { return smem + st * (kBM + kBN) * kLdg; };
  auto load_slice = [&](std::int64_t k, int st) {
    const std::int64_t d0 = ((first + k) % slices) * kDS;
    std::uint16_t* Ws = stage(st);
    load_tile<kVec, kBN, kDS, kLdg>(Ws, a.W, n0, a.V, d0, a.D, a.D);
    load_tile<kVec, kBM, kDS, kLdg>(Ws + kBN * kLdg, a.H, m0, a.N, d0, a.D, a.D);
  };
  load_slice(0, 0);
  cp_async_commit();
  for (std::int64_t k = 0; k < slices; ++k) {
    cp_async_wait<0>();
    __syncthreads();
    if (k + 1 < slices) load_slice(k + 1, int((k + 1) % 2));
    cp_async_commit();
    const std::uint16_t* Ws = stage(int(k % 2));
    const std::uint16_t* Hs = Ws + kBN * kLdg;
    float accH[2][4][4] = {}, accW[2][4][4] = {};
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {  // kBN == kBM: one loop serves both K extents
      std::uint32_t ah[2][4], aw[2][4], bw[2][4], bh[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        // dH: A = dz[rows][vocab] (K = vocab), row-major.
        ldsm_x4(ah[i], dzs + (wm * 32 + i * 16 + lane % 16) * kLdz + kk * 16 + (lane / 16) * 8);
        // dW: A = dzᵀ[vocab][rows] (K = rows), transposed from the same tile.
        ldsm_x4_t(aw[i], dzs + (kk * 16 + lane % 8 + (lane / 16) * 8) * kLdz + wm * 32 + i * 16 +
                             ((lane / 8) % 2) * 8);
      }
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        const int row = kk * 16 + lane % 8 + ((lane / 8) % 2) * 8;
        const int col = wn * 32 + jj * 16 + (lane / 16) * 8;
        ldsm_x4_t(bw[jj], Ws + row * kLdg + col);  // B = W[vocab][hidden], K = vocab
        ldsm_x4_t(bh[jj], Hs + row * kLdg + col);  // B = H[rows][hidden], K = rows
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          mma<T>(accH[i][j], ah[i], bw[j / 2][(j % 2) * 2], bw[j / 2][(j % 2) * 2 + 1]);
          mma<T>(accW[i][j], aw[i], bh[j / 2][(j % 2) * 2], bh[j / 2][(j % 2) * 2 + 1]);
        }
    }
#ifndef XL_FUSED_EXP_NO_ATOMICS
    const std::int64_t d0 = ((first + k) % slices) * kDS;
    flush_tile<kVec>(a.dH, accH, m0 + wm * 32, a.N, d0 + wn * 32, a.D, g, c);
    flush_tile<kVec>(a.dW, accW, n0 + wm * 32, a.V, d0 + wn * 32, a.D, g, c);
#else
    if (accH[0][0][0] == 12345.0f && accW[0][0][0] == 12345.0f) a.dH[0] = 1.0f;  // keep the GEMMs
#endif
  }
}

// ---- 3b. backward on wgmma (sm_90a) -------------------------------------------------------------
// Tiles of 128 tokens × 256 vocabulary entries (kWbBN), one CTA each, 2 consumer warpgroups + 1
// producer warpgroup as the forward. The producer streams the H (128 × 64) and W (256 × 64) boxes
// of the tile twice through a 3-stage ring: first in increasing k for the recompute (the forward's
// mainloop, so z is the forward's bit for bit), then the D slices of the gradient GEMMs from a
// rotated start. The dz tile (bf16/fp16, 64 KiB) lives in four 128-byte-swizzled blocks of 64
// vocabulary entries, which makes it both the K-major A operand of dH = dz·W and the MN-major A
// operand of dW = dzᵀ·H; the W and H boxes are the MN-major B operands (hopper.cuh smem_desc_mn).
// Per D slice of 64 each consumer warpgroup computes dH[64 rows × 64] (K = 256, 16 wgmma
// m64n64k16) and dW[128 vocabulary rows × 64] (K = 128, 2 × 8), then adds them into the fp32
// accumulators with float4 reductions. The 256-entry tile halves the dW reductions of the
// mma.sync backward's 128 × 128 tile (docs/fused.md: the reductions are half of its time).
constexpr int kWbBN = 256;
using BwdRing = hopper::WgmmaRingT<3>;
constexpr int kDzBlockBytes = kBM * 128;  // 128 rows × 64 entries × 2 bytes
constexpr int kWbSmem = BwdRing::kStages * BwdRing::kStageBytes + 4 * kDzBlockBytes + 1024;
static_assert(kWbBN == kFusedBackwardVocabTile,
              "the CPU emulation's dH partials (gpu/fused_plan.hpp)");
static_assert(kWbBN == 4 * 64 && BwdRing::kBK == 64,
              "four dz blocks of 64 entries; D slices of 64");
static_assert(kWbSmem <= 227 * 1024, "one CTA per SM within the H100/H200's 227 KiB");

/// Byte offset of dz(r, v) in the wgmma backward's dz tile: block v / 64, row r of 128 bytes,
/// 16-byte chunk (v % 64) / 8 stored at chunk ^ (r % 8) (the 128-byte swizzle of TMA and wgmma).
__device__ __forceinline__ int dz_byte(int r, int v) {
  return (v >> 6) * kDzBlockBytes + r * 128 + ((((v >> 3) & 7) ^ (r & 7)) << 4) + (v & 7) * 2;
}

/// The wgmma backward. kPlain (the host checks: no bias, scale 1, no softcap, no label smoothing,
/// no z-loss) forms dz without the operations that are then identities (adding no bias, ×1, a
/// tanh-free chain, subtracting 0), as the forward's plain fold does; T is the logits dtype.
template <class T, bool kPlain>
__global__ void __launch_bounds__(kWgThreads, 1)
    fused_backward_wgmma_kernel(const __grid_constant__ CUtensorMap tm_h,
                                const __grid_constant__ CUtensorMap tm_w, FusedArgs a) {
  using namespace hopper;
  extern __shared__ std::uint8_t wg_smem_raw[];
  __shared__ __align__(8) std::uint64_t full[BwdRing::kStages], empty[BwdRing::kStages];
  std::uint8_t* base = align_1024(wg_smem_raw);
  const BwdRing ring{base, full, empty};
  std::uint8_t* dzs = base + BwdRing::kStages * BwdRing::kStageBytes;
  const BwdTile tl = backward_tile<kWbBN, kWbGroupN>(a);
  if (!block_has_targets(a, tl.m0)) return;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const int kblocks = static_cast<int>((a.D + BwdRing::kBK - 1) / BwdRing::kBK);
  const int first = static_cast<int>((tl.mb + tl.vb) % kblocks);  // concurrent CTAs add elsewhere
  if (threadIdx.x == 0) ring.init(kWgConsumers);
  __syncthreads();
  if (wg == kWgConsumers) {  // producer warpgroup
    setmaxnreg_dec<40>();
    if (t == 0) {
      const int m0 = static_cast<int>(tl.m0), n0 = static_cast<int>(tl.n0);
      for (int kb = 0; kb < kblocks; ++kb)
        ring.produce(kb, &tm_h, &tm_w, kb * BwdRing::kBK, m0, n0);
#ifndef XL_FUSED_EXP_NO_GRAD  // (that experiment's consumers stop after dz: nothing to feed)
      for (int i = 0; i < kblocks; ++i)
        ring.produce(kblocks + i, &tm_h, &tm_w, ((first + i) % kblocks) * BwdRing::kBK, m0, n0);
#endif
    }
    return;
  }
  setmaxnreg_inc<232>();
  const int c = wg, w = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  int it = 0;
  {
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    ring.consume_tile<T>(d, it, kblocks, c, t);
    // Columns n0 + o for o < lim are in V; offsets are small ints (registers), as in fold_tile.
    const std::int64_t rem = a.V - tl.n0;
    const int lim = rem > kWbBN ? kWbBN : static_cast<int>(rem);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 64 * c + 16 * w + g + 8 * h;
      const DzRow dr = dz_row(a, tl.m0 + r);
      const std::int64_t tr = dr.t - tl.n0;  // the target's offset, if in this tile
      const int toff = dr.valid && tr >= 0 && tr < kWbBN ? static_cast<int>(tr) : -1;
      // dz of offset o from its fp32 dot product y.
      auto dz = [&](float y, int o) {
        if constexpr (kPlain) {
          if (!dr.valid || o >= lim) return 0.0f;
          float e = expf(__fsub_rn(to_f(from_f<T>(y)), dr.lse));  // x = rnd_logits(y)
          if (o == toff) e = __fsub_rn(e, a.p.one_minus_eps);
          return to_f(from_f<T>(__fmul_rn(e, dr.gi)));
        } else {
          return dz_of(y, tl.n0 + o, dr, a);
        }
      };
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int v = 8 * j + 2 * q;
        *reinterpret_cast<std::uint32_t*>(dzs + dz_byte(r, v)) =
            pack2<T>(dz(d[4 * j + 2 * h], v), dz(d[4 * j + 2 * h + 1], v + 1));
      }
    }
  }
  fence_proxy_async_shared();  // dz: written here, read by wgmma
  named_barrier(1, 128 * kWgConsumers);
#ifdef XL_FUSED_EXP_NO_GRAD  // experiment: recompute and dz only (docs/fused.md)
  if (dzs[threadIdx.x] == 123) a.dH[0] = 1.0f;
  return;
#endif
  // db: column sums of the tile (fp32, increasing row), added atomically; one column per thread.
  if (a.db != nullptr && tl.n0 + threadIdx.x < a.V) {
    const int v = static_cast<int>(threadIdx.x);
    float sum = 0.0f;
    for (int r = 0; r < kBM; ++r) {
      T x;
      memcpy(&x, dzs + dz_byte(r, v), 2);
      sum = __fadd_rn(sum, to_f(x));
    }
    atomicAdd(a.db + tl.n0 + v, sum);
  }
  // Per D slice: both GEMMs, then their reductions. (Issuing each GEMM's reductions while the
  // other runs, and dH's A operand from registers, were measured slower: docs/fused.md.)
  float accH[32], accW[2][32];
#pragma unroll
  for (int i = 0; i < 32; ++i) accH[i] = accW[0][i] = accW[1][i] = 0.0f;
  for (int i = 0; i < kblocks; ++i, ++it) {
    const std::uint8_t* hs = ring.wait_full(it);     // H[m0 : m0+128, slice]
    const std::uint8_t* ws = hs + BwdRing::kABytes;  // W[n0 : n0+256, slice]
    wgmma_fence();
    // dH[rows 64c…, slice] = dz[rows, 0:256] · W[0:256, slice]: A K-major, B MN-major.
#pragma unroll
    for (int kk = 0; kk < kWbBN / 16; ++kk)
      wgmma_m64n64k16<T, 0, 1>(accH,
                               smem_desc(dzs + (kk / 4) * kDzBlockBytes + c * 8192 + (kk % 4) * 32),
                               smem_desc_mn(ws + kk * 2048), kk > 0 ? 1 : 0);
      // dW[vocabulary 128c + 64i2…, slice] = dzᵀ[…, rows 0:128] · H[0:128, slice]: both MN-major.
#pragma unroll
    for (int i2 = 0; i2 < 2; ++i2)
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk)
        wgmma_m64n64k16<T, 1, 1>(accW[i2],
                                 smem_desc_mn(dzs + (2 * c + i2) * kDzBlockBytes + kk * 2048),
                                 smem_desc_mn(hs + kk * 2048), kk > 0 ? 1 : 0);
    wgmma_commit();
    wgmma_wait<0>();
    if (t == 0) ring.release(it);
#ifndef XL_FUSED_EXP_NO_ATOMICS
    const std::int64_t d0 = std::int64_t((first + i) % kblocks) * BwdRing::kBK;
    flush_frag<true, 8>(a.dH, accH, tl.m0 + 64 * c + 16 * w, a.N, d0, a.D, g, q);
#pragma unroll
    for (int i2 = 0; i2 < 2; ++i2)
      flush_frag<true, 8>(a.dW, accW[i2], tl.n0 + 64 * (2 * c + i2) + 16 * w, a.V, d0, a.D, g, q);
#else
    if (accH[0] == 12345.0f && accW[0][0] == 12345.0f && accW[1][0] == 1.0f) a.dH[0] = 1.0f;
#endif
  }
}

// ---- host side -------------------------------------------------------------------------------
/// TMA maps of H (boxes of 64 × 128) and W (64 × 256) for the wgmma kernels.
struct OperandMaps {
  CUtensorMap h, w;
};
template <class T>
OperandMaps operand_maps(const FusedArgs& a) {
  constexpr bool fp16 = std::is_same_v<T, __half>;
  return {hopper::make_tensor_map_2d(a.H, fp16, a.N, a.D, Ring::kBK, kBM),
          hopper::make_tensor_map_2d(a.W, fp16, a.V, a.D, Ring::kBK, kFBN)};
}

template <class T>
void launch_backward(bool vec, bool wgmma, const FusedArgs& a, cudaStream_t stream) {
  const std::int64_t MB = (a.N + kBM - 1) / kBM;
  if (wgmma) {
    const OperandMaps m = operand_maps<T>(a);
    const std::int64_t VB = (a.V + kWbBN - 1) / kWbBN;
    // The plain dz where its dropped operations are identities (fused_backward_wgmma_kernel).
    const bool plain = a.bias == nullptr && a.p.scale == 1.0f && !(a.p.softcap > 0.0f) &&
                       !a.p.smoothing && !a.p.zloss;
    auto k = plain ? fused_backward_wgmma_kernel<T, true> : fused_backward_wgmma_kernel<T, false>;
    XL_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kWbSmem));
    k<<<static_cast<unsigned>(MB * VB), kWgThreads, kWbSmem, stream>>>(m.h, m.w, a);
  } else {
    const std::int64_t VB = (a.V + kBN - 1) / kBN;
    auto k = vec ? fused_backward_kernel<T, true> : fused_backward_kernel<T, false>;
    XL_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kBwdSmem));
    k<<<static_cast<unsigned>(MB * VB), kThreads, kBwdSmem, stream>>>(a);
  }
  XL_CUDA_CHECK(cudaGetLastError());
  note_fused_backward_kernel(wgmma);
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
  note_fused_forward_kernel(wgmma);
}

class FusedStrategy final : public CudaStrategy {
 public:
  std::string name() const override { return "fused"; }

  DeclaredArithmetic arithmetic(const Recipe& r) const override {
    // The kernel's own tree (gpu/fused_plan.hpp; numerics/bounds.hpp online_tree), declared
    // alike by its CPU emulation.
    DeclaredArithmetic d = fused_declared_arithmetic();
    d.note =
        "cuda fused: forward wgmma m64n256k16 (HGMMA, sm_90a) or mma.sync m16n8k16 (HMMA) "
        "tiles 128x256, fp32 accumulation over D; online (max,sum) per thread over 64 "
        "columns of each tile in " +
        std::string(to_string(r.accum)) +
        ", merged by quad and vocabulary range (pairwise); backward recomputes tiles 128x256 "
        "(wgmma, sm_90a) or 128x128 (mma.sync), dH/dW/db fp32 atomics";
    return d;
  }

  WorkspacePlan plan(const WorkspaceQuery& q, std::int64_t, std::int64_t) const override {
    WorkspacePlan w;
    w.rows = q.N;
    w.n_chunks = 1;
    w.cublas = 0;
    const int splits = fused_vocab_ranges(q.N, q.V, sms());
    // (m, s, Σx) per row and vocabulary range, and x_t per row.
    w.row_states = (std::int64_t{3} * splits + 1) * q.N * 4;
    if (q.want_grads) {
      if (q.recipe.grad != DType::fp32) {
        w.dH_f32 = q.N * q.D * 4;
        w.dW_acc = q.V * q.D * 4;
      }
      if (q.has_bias) w.db_acc = q.V * 4;
    }
    return w;
  }

  void forward_backward(const DeviceRun& r, const DeviceContext& c) const override {
    const DeviceProblem& P = r.prob;
    if (!P.linear()) throw InputError("fused: needs a linear problem (H, W)");
    const WorkspaceQuery q{P.N, P.V, P.D, P.input, P.bias != nullptr, r.recipe, r.want_grads};
    const WorkspacePlan wp = plan(q, r.memory_budget, r.chunk_tokens);
    if (r.memory_budget > 0 && wp.total() > r.memory_budget)
      throw InputError("fused needs " + std::to_string(wp.total()) +
                       " bytes of extra device memory (fp32 gradient accumulators and row "
                       "states), over the memory budget of " +
                       std::to_string(r.memory_budget) + " bytes");
    const std::int64_t MB = (P.N + kBM - 1) / kBM, VB = (P.V + kBN - 1) / kBN;
    if (MB * VB > 0x7fffffffLL)
      throw InputError("fused: " + std::to_string(MB) + "×" + std::to_string(VB) +
                       " tiles exceed one kernel grid (2^31−1)");
    Workspace ws(c.mem, wp);
    const int splits = fused_vocab_ranges(P.N, P.V, sms());
    FusedArgs a;
    a.H = static_cast<const std::uint16_t*>(P.H);
    a.W = static_cast<const std::uint16_t*>(P.W);
    a.bias = P.bias;
    a.targets = P.targets;
    a.N = P.N;
    a.V = P.V;
    a.D = P.D;
    a.p = make_row_params(r.spec, P.V, r.recipe.accum);
    a.logits_code = acc_code(r.recipe.logits);
    a.acc_code = acc_code(r.recipe.accum);
    a.splits = splits;
    const std::int64_t VT = (P.V + kFBN - 1) / kFBN;  // forward tiles
    a.tiles_per_split = (VT + splits - 1) / splits;
    float* st = ws.row_states.as<float>();
    a.part_m = st;
    a.part_s = st + std::int64_t(splits) * P.N;
    a.part_sx = a.p.smoothing ? st + 2 * std::int64_t(splits) * P.N : nullptr;
    a.x_target = st + 3 * std::int64_t(splits) * P.N;
    const bool vec =
        P.D % 8 == 0 &&
        ((reinterpret_cast<std::uintptr_t>(P.H) | reinterpret_cast<std::uintptr_t>(P.W)) & 15) == 0;
    // The wgmma forward where its TMA boxes apply (16-byte rows and bases; at least one box of
    // each operand), else mma.sync: the same tree either way (gpu/cuda/fused.cuh).
    const bool wgmma = vec && fused_kernel_path() == FusedKernelPath::automatic && P.N >= kBM &&
                       P.V >= kFBN && P.D >= Ring::kBK && hopper::hopper_forward_available();
    P.input == DType::bf16 ? launch_forward<__nv_bfloat16>(vec, wgmma, a, c.stream)
                           : launch_forward<__half>(vec, wgmma, a, c.stream);
    fused_finalize_kernel<<<static_cast<unsigned>((P.N + 255) / 256), 256, 0, c.stream>>>(
        a, r.out.loss, r.out.lse);
    XL_CUDA_CHECK(cudaGetLastError());
    if (!r.want_grads) return;

    const DType grad = r.recipe.grad;
    float* dH = grad == DType::fp32 ? static_cast<float*>(r.out.dH) : ws.dH_f32.as<float>();
    float* dW = grad == DType::fp32 ? static_cast<float*>(r.out.dW) : ws.dW_acc.as<float>();
    XL_CUDA_CHECK(cudaMemsetAsync(dH, 0, static_cast<std::size_t>(P.N * P.D * 4), c.stream));
    XL_CUDA_CHECK(cudaMemsetAsync(dW, 0, static_cast<std::size_t>(P.V * P.D * 4), c.stream));
    if (P.bias != nullptr)
      XL_CUDA_CHECK(
          cudaMemsetAsync(ws.db_acc.get(), 0, static_cast<std::size_t>(P.V * 4), c.stream));
    a.lse = r.out.lse;
    a.g = r.g;
    a.dH = dH;
    a.dW = dW;
    a.db = P.bias != nullptr ? ws.db_acc.as<float>() : nullptr;
    P.input == DType::bf16 ? launch_backward<__nv_bfloat16>(vec, wgmma, a, c.stream)
                           : launch_backward<__half>(vec, wgmma, a, c.stream);
    if (grad != DType::fp32) {
      launch_round_rows(dH, nullptr, P.N, P.D, grad, r.out.dH, c.stream);
      launch_round_rows(dW, nullptr, P.V, P.D, grad, r.out.dW, c.stream);
    }
    if (P.bias != nullptr && r.out.db != nullptr)
      launch_round_rows(ws.db_acc.as<float>(), nullptr, 1, P.V, grad, r.out.db, c.stream);
  }

 protected:
  Status check_specific(const Problem& p, const LossSpec&, const Recipe& r) const override {
    if (!p.is_linear())
      return Status::NotSupported(
          "fused (cuda): a logits problem already has its logits in memory; fused needs H and W");
    if (r.input != DType::bf16 && r.input != DType::fp16)
      return Status::NotSupported("fused (cuda): recipe " + r.name() + " has " +
                                  std::string(to_string(r.input)) +
                                  " inputs; the tensor-core GEMM takes bf16 or fp16 operands "
                                  "(fp32 would need TF32, which is not the recipe)");
    if (r.logits != r.input)
      return Status::NotSupported(
          "fused (cuda): recipe " + r.name() + " holds logits (and so dz) in " +
          std::string(to_string(r.logits)) + ", not in the operand dtype " +
          std::string(to_string(r.input)) +
          "; the backward GEMMs take dz as a tensor-core operand exactly, so logits must equal "
          "the input dtype");
    return Status::Ok();
  }

 private:
  static int sms() {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 132;
    }
    return n;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_cuda_fused() {
  return std::make_unique<FusedStrategy>();
}

}  // namespace xentlab::gpu

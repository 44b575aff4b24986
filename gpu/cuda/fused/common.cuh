#pragma once
// What the fused strategy's forward (forward.cu) and backward (backward.cuh) kernels share: the
// tile configuration, PTX wrappers, tile loads, the cp.async pipeline of the mma.sync logits
// GEMMs, the epilogue value of a logit, the merge of two online states, the configuration of the
// wgmma kernels and their TMA maps. Overview: launch.cuh.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gpu/cuda/common/hopper.cuh"
#include "gpu/cuda/fused/launch.cuh"
#include "gpu/plans/fused_plan.hpp"

namespace xentlab::gpu::fused {

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

static_assert(kBM == kFusedBlockTokens,
              "the CPU emulation models this decomposition "
              "(gpu/plans/fused_plan.hpp)");

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

// ---- wgmma kernels (sm_90a) ----------------------------------------------------------------
// Forward tiles are 128 tokens × kFBN = 256 vocabulary entries. Both forward kernels hold a tile
// in the layout of wgmma's m64n256 accumulator fragment: the thread with lane l of warp w (w over
// the CTA's 8 row groups of 16) has d[4j + 2h + e] = logit(row m0 + 16w + l/4 + 8h, column
// n0 + 8j + 2(l % 4) + e), j < 32. So each row of a tile is folded by the 4 threads of a quad, 64
// columns each, and both kernels fold the same tree (gpu/plans/fused_plan.hpp, the CPU emulation).
constexpr int kFBN = 256;
// wgmma kernel: 2 consumer warpgroups of 64 rows + 1 producer warpgroup (one thread issues the
// TMA copies); K blocks of 64. The producer gives registers up (setmaxnreg) so that the
// consumers may hold the 128 accumulators and the fold (ptxas: 168 registers, no spills). A
// first version with a producer warp instead of a warpgroup (288 threads, 180 registers) was
// refused at every launch on the H200 with cudaErrorLaunchOutOfResources (the cause was not
// established): this kernel is launched in whole warpgroups.
constexpr int kWgConsumers = 2;
constexpr int kWgThreads = 128 * (kWgConsumers + 1);
using Ring = hopper::WgmmaRing;  // 128 × 256 tiles, K blocks of 64, 4 stages (hopper.cuh)
static_assert(kBM == 64 * kWgConsumers && kFBN == 256, "the ring's tile is the forward's");
static_assert(kFBN == kFusedVocabTile && kFusedRowWarps == 1 && kFusedThreadColumns == 64,
              "the forward's fold: 4 threads per row of a 256-column tile, 64 columns each — the "
              "layout the CPU emulation folds (gpu/plans/fused_plan.hpp)");

/// The producer thread of a wgmma kernel (forward, staged dz): the H and W boxes of every K block
/// of the vocabulary tiles [t0, t1) of the token block at m0, tile after tile — the order in
/// which the consumers' consume_tile takes them.
__device__ __forceinline__ void produce_tiles(const Ring& ring, const CUtensorMap* tm_h,
                                              const CUtensorMap* tm_w, std::int64_t m0,
                                              std::int64_t t0, std::int64_t t1, int kblocks) {
  int it = 0;
  for (std::int64_t tile = t0; tile < t1; ++tile)
    for (int kb = 0; kb < kblocks; ++kb, ++it)
      ring.produce(it, tm_h, tm_w, kb * Ring::kBK, static_cast<int>(m0),
                   static_cast<int>(tile * kFBN));
}

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

}  // namespace xentlab::gpu::fused

#pragma once
// The fused strategy's backwards (launch.cuh, 3.; fused.hpp FusedBackward). On-chip (sections 3
// to 3b): per (token block, vocabulary block) tile the logits recomputed, dz formed in shared
// memory, then dH += dz·W and dW += dzᵀ·H on tensor cores with fp32 additions in a fixed order,
// and db; launched by launch_fused_backward. Staged, the registry's (section 3c): per token group
// the logits recomputed and dz written into a stage, whose gradient GEMMs are cuBLAS's
// (strategy.cu); launched by launch_fused_dz. Each has two kernels, mma.sync (every device) and
// wgmma with TMA (sm_90a); both launches are in backward.cu. One configuration: the timing-only
// variants of the on-chip backward are a lab copy (lab/probes/fused_variants/, timed by
// lab/probes/fused_breakdown.cu; docs/fused.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/fused/common.cuh"
#include "gpu/plans/fused_raster.hpp"

namespace xentlab::gpu::fused {

// ---- 3. backward ------------------------------------------------------------------------------

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

template <class T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  const T a = from_f<T>(lo), b = from_f<T>(hi);
  std::uint16_t ua, ub;
  memcpy(&ua, &a, 2);
  memcpy(&ub, &b, 2);
  return std::uint32_t(ua) | (std::uint32_t(ub) << 16);
}

// ---- ordered additions ---------------------------------------------------------------------
// Every fp32 addition into dH, dW and db is made by the one CTA (or consumer warpgroup) whose turn
// it is, as a load from L2, an add and a store, so that each output element is the same sum in the
// same order on every run, on any schedule:
//   dH[token block t, half, D slice s]   vocabulary tiles in increasing order (turn = next tile);
//   dW[vocabulary block v, half, slice]  token blocks in increasing order (turn = next block);
//   db[vocabulary block v, half]         token blocks in increasing order.
// That is the CPU emulation's order (gpu/emulation/fused.cpp). A tile's turn comes after those of
// tiles with a smaller raster index only (backward_tile, gpu/plans/fused_raster.hpp), and
// CTAs take their tiles from a counter in increasing order (claim_tile), so each waits only on
// tiles already running or done: the smallest unfinished tile never waits, and the whole grid
// finishes (no assumption about the order in which the hardware starts CTAs). A tile whose token
// block has no valid target adds nothing but passes its dW and db turns on (pass_skipped_turns).
// The wait: one thread spins on an acquire load of the flag, then a barrier of the threads that
// add; the hand-over: a barrier, then one thread's acq_rel fence and relaxed store (cumulative
// over the other threads' stores, ordered before it by the barrier). The adding threads read and
// write through L2 (ld.global.cg / st.global.cg), never a stale L1 line. For the wgmma kernel's
// gradient slices that thread is a helper warp's (hand_over_turns: off the consumers' path, 5 %
// faster on the H200); for its db and in the mma.sync kernel, the adding threads' (add_in_turn).
struct BwdOrder {
  int* h;  // (MB, 2, S) vocabulary tiles added into dH[t, half, s]
  int* w;  // (VB128, 2, S) token blocks added into dW[v, half, s]
  int* b;  // (VB128, 2) token blocks added into db[v, half]
  std::int64_t S;
  __device__ int* turn_h(std::int64_t mb, int half, std::int64_t s) const {
    return h + (2 * mb + half) * S + s;
  }
  __device__ int* turn_w(std::int64_t vb, int half, std::int64_t s) const {
    return w + (2 * vb + half) * S + s;
  }
  __device__ int* turn_b(std::int64_t vb, int half) const { return b + 2 * vb + half; }
};
/// The flags of a.order (launch.cuh fused_order_ints: the counter first).
__device__ __forceinline__ BwdOrder bwd_order(const FusedArgs& a) {
  const std::int64_t MB = (a.N + 127) / 128, VB = (a.V + 127) / 128, S = (a.D + 63) / 64;
  BwdOrder o;
  o.h = a.order + 1;
  o.w = o.h + MB * 2 * S;
  o.b = o.w + VB * 2 * S;
  o.S = S;
  return o;
}
__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
/// Spins until *p == turn (one thread; a barrier of the adding threads follows).
__device__ __forceinline__ void wait_turn(const int* p, int turn) {
  while (load_acquire(p) != turn) {
  }
}
/// Hands the turns on: *p = turn, *q = turn_q (one thread, after a barrier of the adding threads).
__device__ __forceinline__ void pass_turns(int* p, int turn, int* q = nullptr, int turn_q = 0) {
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  asm volatile("st.relaxed.gpu.global.s32 [%0], %1;\n" ::"l"(p), "r"(turn) : "memory");
  if (q != nullptr)
    asm volatile("st.relaxed.gpu.global.s32 [%0], %1;\n" ::"l"(q), "r"(turn_q) : "memory");
}
/// add() in its turn: `leader` waits until *p == tp (and *q == tq where q is not null), sync() (a
/// barrier of the threads that add), add(), sync(), then `leader` hands the turns on (tp + 1,
/// tq + 1).
template <class Sync, class Add>
__device__ __forceinline__ void add_in_turn(bool leader, int* p, int tp, int* q, int tq, Sync sync,
                                            Add add) {
  if (leader) {
    wait_turn(p, tp);
    if (q != nullptr) wait_turn(q, tq);
  }
  sync();
  add();
  sync();
  if (leader) pass_turns(p, tp + 1, q, tq + 1);
}
/// This CTA's tile index: the next from the counter a.order[0] (every thread; a barrier).
__device__ __forceinline__ std::int64_t claim_tile(const FusedArgs& a) {
  __shared__ int claimed;
  if (threadIdx.x == 0) claimed = atomicAdd(a.order, 1);
  __syncthreads();
  return claimed;
}
/// dst[0] += x: an L2 load, fp32 add and store, for a caller that holds the turn.
__device__ __forceinline__ void add_into(float* dst, float x) {
  __stcg(dst, __fadd_rn(__ldcg(dst), x));
}

/// Adds a warp's fp32 fragment of 16 rows × 8·J columns into dst (rows × D): acc[4j + 2h + e] is
/// row r0 + g + 8h, column c0 + 8j + 2c + e (g = lane/4, c = lane%4: the accumulator layout of
/// mma m16n8 tiles side by side and of wgmma m64nN per warp): a load from L2, an fp32 add (round
/// to nearest) and a store, for a caller that holds the turn of these lines (below). Vector path
/// (kVec: D % 8 == 0): partner lanes (c, c^1) swap one pair so that each lane adds one float4 of 4
/// consecutive columns per j — even lanes row g, odd lanes row g + 8.
template <bool kVec, int J>
__device__ __forceinline__ void flush_frag(float* dst, const float* acc, std::int64_t r0,
                                           std::int64_t rows, std::int64_t c0, std::int64_t D,
                                           int g, int c) {
  if constexpr (kVec) {
    // Each lane's float4 per j; all J loads issued before any add and store, so that their L2
    // round trips overlap.
    const bool even = (c & 1) == 0;
    float4 v[J];
    float4* p[J];
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float* f = acc + 4 * j;
      const float s0 = even ? f[2] : f[0];
      const float s1 = even ? f[3] : f[1];
      const float q0 = __shfl_xor_sync(0xffffffffu, s0, 1);
      const float q1 = __shfl_xor_sync(0xffffffffu, s1, 1);
      const std::int64_t row = r0 + g + (even ? 0 : 8), cc = c0 + j * 8 + 2 * c - (even ? 0 : 2);
      v[j] = even ? make_float4(f[0], f[1], q0, q1) : make_float4(q0, q1, f[2], f[3]);
      p[j] = row < rows && cc < D ? reinterpret_cast<float4*>(dst + row * D + cc) : nullptr;
    }
    float4 o[J];
#pragma unroll
    for (int j = 0; j < J; ++j)
      if (p[j] != nullptr) o[j] = __ldcg(p[j]);
#pragma unroll
    for (int j = 0; j < J; ++j)
      if (p[j] != nullptr)
        __stcg(p[j], make_float4(__fadd_rn(o[j].x, v[j].x), __fadd_rn(o[j].y, v[j].y),
                                 __fadd_rn(o[j].z, v[j].z), __fadd_rn(o[j].w, v[j].w)));
  } else {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float* f = acc + 4 * j;
      const std::int64_t col = c0 + j * 8 + 2 * c;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t row = r0 + g + 8 * h;
        if (row >= rows) continue;
        if (col < D) add_into(dst + row * D + col, f[2 * h]);
        if (col + 1 < D) add_into(dst + row * D + col + 1, f[2 * h + 1]);
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

/// Token blocks per raster group (L2 reuse; docs/fused.md): the mma.sync kernel's 16 was measured
/// against 64 (docs/benchmarks.md), the wgmma kernel's 8 against 16 and 32 (docs/fused.md).
constexpr int kMmaRasterGroup = 16, kWgmmaRasterGroup = 8;

/// The backward's tile of raster index b for tiles of kBM tokens × BN vocabulary entries
/// (gpu/plans/fused_raster.hpp): raster groups of GROUP token blocks (L2 reuse of both the H rows
/// and the W rows that the CTAs in flight read, and of the gradient lines they add into; the last
/// group may be smaller), token block fastest within a group. A bijection of [0, MB·VB) in which
/// the tiles of the previous token block and of the previous vocabulary block have smaller indexes
/// (the order of the additions relies on it).
struct BwdTile {
  std::int64_t mb, vb, m0, n0;
};
template <int BN, int GROUP>
__device__ __forceinline__ BwdTile backward_tile(const FusedArgs& a, std::int64_t b) {
  const std::int64_t MB = (a.N + kBM - 1) / kBM, VB = (a.V + BN - 1) / BN;
  const FusedTile f = fused_backward_tile(b, MB, VB, GROUP, FusedRaster::token_fastest);
  BwdTile t;
  t.mb = f.mb;
  t.vb = f.vb;
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

/// A tile whose token block has no valid target adds nothing, but the tile of the next token block
/// and the same vocabulary block waits for its db turn (before its gradient slices) and its dW
/// turns (each of `halves` halves, slice by slice in increasing order): it waits for each and
/// passes it on, in that order. One thread.
__device__ __forceinline__ void pass_skipped_turns(const FusedArgs& a, const BwdTile& tl,
                                                   int halves) {
  const BwdOrder o = bwd_order(a);
  const int mine = static_cast<int>(tl.mb);
  if (a.db != nullptr)
    for (int h = 0; h < halves; ++h) {
      int* f = o.turn_b(tl.vb, h);
      wait_turn(f, mine);
      pass_turns(f, mine + 1);
    }
  for (std::int64_t s = 0; s < o.S; ++s)
    for (int h = 0; h < halves; ++h) {
      int* f = o.turn_w(tl.vb, h, s);
      wait_turn(f, mine);
      pass_turns(f, mine + 1);
    }
}

/// The D slice (of S) a tile's gradient phase starts at, then walks the slices cyclically (step i:
/// slice (kFirstSlice + i) mod S): 0 for every tile, so that the tiles whose turns come before this
/// one's (previous token block, previous vocabulary block: started earlier) reach each slice at
/// the same step as this one, and this tile waits at most for their hand-over. (A start that
/// differs between tiles wraps around: a tile's first slice becomes its predecessors' last, and
/// the tiles run one after another; docs/fused.md.) Tiles that add at the same time still add into
/// different lines: those that share lines take turns.
constexpr int kFirstSlice = 0;

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

/// The offset of the row's target in the tile of `width` entries at n0, or −1 (none there, or no
/// valid target).
__device__ __forceinline__ int target_offset(const DzRow& r, std::int64_t n0, int width) {
  const std::int64_t tr = r.t - n0;
  return r.valid && tr >= 0 && tr < width ? static_cast<int>(tr) : -1;
}
/// dz at offset o of the tile at n0 (o < lim: in V; toff: target_offset) from its fp32 dot product
/// y. kPlain (no bias, scale 1, no softcap, no label smoothing, no z-loss: checked by the host)
/// drops the operations that are then identities (x = rnd_logits(y), e^{x − lse}, minus 1 at the
/// target, × the upstream gradient, one rounding to the logits dtype T); otherwise dz_of.
template <bool kPlain, class T>
__device__ __forceinline__ float dz_at(float y, int o, int lim, int toff, std::int64_t n0,
                                       const DzRow& dr, const FusedArgs& a) {
  if constexpr (kPlain) {
    if (!dr.valid || o >= lim) return 0.0f;
    float e = expf(__fsub_rn(to_f(from_f<T>(y)), dr.lse));  // x = rnd_logits(y)
    if (o == toff) e = __fsub_rn(e, a.p.one_minus_eps);
    return to_f(from_f<T>(__fmul_rn(e, dr.gi)));
  } else {
    return dz_of(y, n0 + o, dr, a);
  }
}

template <class T, bool kVec>
__global__ void __launch_bounds__(kThreads, 2) fused_backward_kernel(FusedArgs a) {
  extern __shared__ __align__(16) std::uint16_t smem[];
  std::uint16_t* dzs = smem + kRegionHalves;  // (kBM, kLdz) dz tile in the operand dtype
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const BwdTile tl = backward_tile<kBN, kMmaRasterGroup>(a, claim_tile(a));
  const std::int64_t mb = tl.mb, vb = tl.vb, m0 = tl.m0, n0 = tl.n0;
  if (!block_has_targets(a, m0)) {
    if (threadIdx.x == 0) pass_skipped_turns(a, tl, 1);
    return;
  }
  const BwdOrder order = bwd_order(a);
  const int mb_turn = static_cast<int>(mb), vb_turn = static_cast<int>(vb);

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
  // db: column sums of the tile (fp32, increasing row), added in db's turn.
  const auto sync_cta = [] { __syncthreads(); };
  if (a.db != nullptr)
    add_in_turn(threadIdx.x == 0, order.turn_b(vb, 0), mb_turn, nullptr, 0, sync_cta, [&] {
      if (threadIdx.x < kBN && n0 + threadIdx.x < a.V) {
        float sum = 0.0f;
        for (int r = 0; r < kBM; ++r) {
          T v;
          memcpy(&v, dzs + r * kLdz + threadIdx.x, 2);
          sum = __fadd_rn(sum, to_f(v));
        }
        add_into(a.db + n0 + threadIdx.x, sum);
      }
    });

  // Gradient GEMMs over D in slices of kDS, double-buffered; warps 4 (M) × 2 (N), warp tile
  // 32 × 32 for both dH (rows × hidden, K = vocabulary) and dW (vocabulary × hidden, K = rows).
  const int wm = warp / 2, wn = warp % 2;
  const std::int64_t slices = (a.D + kDS - 1) / kDS;
  auto stage = [&](int st) { return smem + st * (kBM + kBN) * kLdg; };
  auto load_slice = [&](std::int64_t k, int st) {
    const std::int64_t d0 = ((kFirstSlice + k) % slices) * kDS;
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
    const std::int64_t s = (kFirstSlice + k) % slices, d0 = s * kDS;
    // dH's turn of this token block, dW's of this vocabulary block.
    add_in_turn(threadIdx.x == 0, order.turn_h(mb, 0, s), vb_turn, order.turn_w(vb, 0, s), mb_turn,
                sync_cta, [&] {
                  flush_tile<kVec>(a.dH, accH, m0 + wm * 32, a.N, d0 + wn * 32, a.D, g, c);
                  flush_tile<kVec>(a.dW, accW, n0 + wm * 32, a.V, d0 + wn * 32, a.D, g, c);
                });
  }
}

// ---- 3b. backward on wgmma (sm_90a) -------------------------------------------------------------
// Tiles of 128 tokens × 256 vocabulary entries (kWbBN), one CTA each, 2 consumer warpgroups + 1
// producer warpgroup as the forward. The producer streams the H (128 × 64) and W (256 × 64) boxes
// of the tile twice through a 3-stage ring: first in increasing k for the recompute (the forward's
// mainloop, so z is the forward's bit for bit), then the D slices of the gradient GEMMs
// (from kFirstSlice, above). The dz tile (bf16/fp16, 64 KiB) lives in four 128-byte-swizzled blocks
// of 64 vocabulary entries, which makes it both the K-major A operand of dH = dz·W and the MN-major
// A operand of dW = dzᵀ·H; the W and H boxes are the MN-major B operands (hopper.cuh smem_desc_mn).
// Per D slice of 64 each consumer warpgroup computes dH[64 rows × 64] (K = 256, 16 wgmma
// m64n64k16) and dW[128 vocabulary rows × 64] (K = 128, 2 × 8), then adds them into the fp32
// accumulators with float4 loads and stores in its turn (ordered additions, above), which a warp of
// the producer warpgroup waits for and hands on (hand_over_turns). The 256-entry
// vocabulary tile halves the dH additions of the mma.sync backward's 128 × 128 tile (dW's stay
// one per 128-token block; docs/fused.md: the additions were half of its time as atomics).
constexpr int kWbBN = 256;
using BwdRing = hopper::WgmmaRingT<3>;
constexpr int kDzBlockBytes = kBM * 128;  // 128 rows × 64 entries × 2 bytes
constexpr int kWbSmem = BwdRing::kStages * BwdRing::kStageBytes + 4 * kDzBlockBytes + 1024;
static_assert(kWbBN == kFusedBackwardVocabTile,
              "the CPU emulation's dH partials (gpu/plans/fused_plan.hpp)");
static_assert(kWbBN == 4 * 64 && BwdRing::kBK == 64,
              "four dz blocks of 64 entries; D slices of 64");
static_assert(kWbSmem <= 227 * 1024, "one CTA per SM within the H100/H200's 227 KiB");

/// Byte offset of dz(r, v) in the wgmma backward's dz tile: block v / 64, row r of 128 bytes,
/// 16-byte chunk (v % 64) / 8 stored at chunk ^ (r % 8) (the 128-byte swizzle of TMA and wgmma).
__device__ __forceinline__ int dz_byte(int r, int v) {
  return (v >> 6) * kDzBlockBytes + r * 128 + ((((v >> 3) & 7) ^ (r & 7)) << 4) + (v & 7) * 2;
}

/// Named barriers of the wgmma backward's hand-over by helper warps, per consumer warpgroup c:
/// kBarReady + c (the helper arrives once the turns of the next D slice are held, the consumers
/// sync before adding) and kBarDone + c (the consumers arrive after adding, the helper syncs before
/// handing the turns on); each counts the warpgroup's 128 threads and the helper's 32.
/// (0: __syncthreads, 1: both consumer warpgroups, 2 + c: one consumer warpgroup.)
constexpr int kBarReady = 4, kBarDone = 6, kHandOverThreads = 128 + 32;
static_assert(1 + kWgConsumers <= 4, "the producer warpgroup's streaming and helper warps");

/// The helper warp of consumer warpgroup c: per D slice, in the consumers' order, lane 0 waits
/// for dH's turn of the tile's 64 rows of half c and dW's of its 128 vocabulary rows of half c,
/// the warp arrives at kBarReady + c (the consumers' sync then orders their loads after the
/// acquire), syncs on kBarDone + c (after the consumers' stores) and lane 0 hands both turns on
/// (fence, relaxed stores: cumulative over the consumers' stores, which the barrier orders before
/// it). The two barriers alternate, so neither side runs more than one barrier phase ahead.
__device__ __forceinline__ void hand_over_turns(const BwdOrder& o, const BwdTile& tl, int c,
                                                int slices, bool lane0) {
  const int mb_turn = static_cast<int>(tl.mb), vb_turn = static_cast<int>(tl.vb);
  for (int i = 0; i < slices; ++i) {
    const int s = (kFirstSlice + i) % slices;
    int* ph = o.turn_h(tl.mb, c, s);
    int* pw = o.turn_w(tl.vb, c, s);
    if (lane0) {
      wait_turn(ph, vb_turn);
      wait_turn(pw, mb_turn);
    }
    __syncwarp();
    hopper::named_barrier_arrive(kBarReady + c, kHandOverThreads);
    hopper::named_barrier(kBarDone + c, kHandOverThreads);
    if (lane0) pass_turns(ph, vb_turn + 1, pw, mb_turn + 1);
  }
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
  const BwdTile tl = backward_tile<kWbBN, kWgmmaRasterGroup>(a, claim_tile(a));
  if (!block_has_targets(a, tl.m0)) {
    if (threadIdx.x == 0) pass_skipped_turns(a, tl, kWgConsumers);
    return;
  }
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const int kblocks = static_cast<int>((a.D + BwdRing::kBK - 1) / BwdRing::kBK);
  if (threadIdx.x == 0) ring.init(kWgConsumers);
  __syncthreads();
  if (wg == kWgConsumers) {  // producer warpgroup: warp 0 streams, warps 1 + c hand turns on
    setmaxnreg_dec<40>();
    const int pw = t / 32;
    if (pw >= 1 && pw <= kWgConsumers)
      hand_over_turns(bwd_order(a), tl, pw - 1, kblocks, t % 32 == 0);
    if (t == 0) {
      const int m0 = static_cast<int>(tl.m0), n0 = static_cast<int>(tl.n0);
      for (int kb = 0; kb < kblocks; ++kb)
        ring.produce(kb, &tm_h, &tm_w, kb * BwdRing::kBK, m0, n0);
      for (int i = 0; i < kblocks; ++i)
        ring.produce(kblocks + i, &tm_h, &tm_w, ((kFirstSlice + i) % kblocks) * BwdRing::kBK, m0,
                     n0);
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
      const int toff = target_offset(dr, tl.n0, kWbBN);
      auto dz = [&](float y, int o) { return dz_at<kPlain, T>(y, o, lim, toff, tl.n0, dr, a); };
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
  // The additions of consumer warpgroup c (dH rows 64c…, dW and db vocabulary rows 128c…) take
  // their own turns (BwdOrder half c): db's with a barrier of its 128 threads (add_in_turn), the
  // gradient slices' through its helper warp (hand_over_turns).
  const BwdOrder order = bwd_order(a);
  const int mb_turn = static_cast<int>(tl.mb);
  const int bar = 2 + c;  // 0: __syncthreads, 1: both consumer warpgroups
  // db: column sums of the tile (fp32, increasing row), added in db's turn; one column per thread.
  const auto sync_wg = [bar] { named_barrier(bar, 128); };
  if (a.db != nullptr)
    add_in_turn(t == 0, order.turn_b(tl.vb, c), mb_turn, nullptr, 0, sync_wg, [&] {
      if (tl.n0 + threadIdx.x < a.V) {
        const int v = static_cast<int>(threadIdx.x);
        float sum = 0.0f;
        for (int r = 0; r < kBM; ++r) {
          T x;
          memcpy(&x, dzs + dz_byte(r, v), 2);
          sum = __fadd_rn(sum, to_f(x));
        }
        add_into(a.db + tl.n0 + v, sum);
      }
    });
  // Per D slice: both GEMMs, then their additions in the helper warp's turn (the variants that
  // overlap them: lab/probes/fused_breakdown.cu, docs/fused.md).
  float accH[32], accW[2][32];
#pragma unroll
  for (int i = 0; i < 32; ++i) accH[i] = accW[0][i] = accW[1][i] = 0.0f;
  // dH[rows 64c…, slice] = dz[rows, 0:256] · W[0:256, slice]: A K-major, B MN-major.
  const auto gemm_dH = [&](const std::uint8_t* ws) {
#pragma unroll
    for (int kk = 0; kk < kWbBN / 16; ++kk)
      wgmma_m64n64k16<T, 0, 1>(accH,
                               smem_desc(dzs + (kk / 4) * kDzBlockBytes + c * 8192 + (kk % 4) * 32),
                               smem_desc_mn(ws + kk * 2048), kk > 0 ? 1 : 0);
  };
  // dW[vocabulary 128c + 64i2…, slice] = dzᵀ[…, rows 0:128] · H[0:128, slice]: both MN-major.
  const auto gemm_dW = [&](const std::uint8_t* hs) {
#pragma unroll
    for (int i2 = 0; i2 < 2; ++i2)
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk)
        wgmma_m64n64k16<T, 1, 1>(accW[i2],
                                 smem_desc_mn(dzs + (2 * c + i2) * kDzBlockBytes + kk * 2048),
                                 smem_desc_mn(hs + kk * 2048), kk > 0 ? 1 : 0);
  };
  const auto add_dH = [&](std::int64_t d0) {
    flush_frag<true, 8>(a.dH, accH, tl.m0 + 64 * c + 16 * w, a.N, d0, a.D, g, q);
  };
  const auto add_dW = [&](std::int64_t d0) {
#pragma unroll
    for (int i2 = 0; i2 < 2; ++i2)
      flush_frag<true, 8>(a.dW, accW[i2], tl.n0 + 64 * (2 * c + i2) + 16 * w, a.V, d0, a.D, g, q);
  };
  // An addition whose turns the helper warp holds (hand_over_turns).
  const auto in_helpers_turn = [&](auto add) {
    named_barrier(kBarReady + c, kHandOverThreads);
    add();
    named_barrier_arrive(kBarDone + c, kHandOverThreads);
  };
  for (int i = 0; i < kblocks; ++i, ++it) {
    const std::uint8_t* hs = ring.wait_full(it);     // H[m0 : m0+128, slice]
    const std::uint8_t* ws = hs + BwdRing::kABytes;  // W[n0 : n0+256, slice]
    const int s = (kFirstSlice + i) % kblocks;
    const std::int64_t d0 = std::int64_t(s) * BwdRing::kBK;
    wgmma_fence();
    gemm_dH(ws);
    gemm_dW(hs);
    wgmma_commit();
    wgmma_wait<0>();
    if (t == 0) ring.release(it);
    // dH's turn of these 64 rows, dW's of these 128 vocabulary rows: held by the helper warp
    // (hand_over_turns).
    in_helpers_turn([&] {
      add_dH(d0);
      add_dW(d0);
    });
  }
}

// ---- 3c. the staged backward's dz kernels ------------------------------------------------------
// Per token group (a.stage_r0, a.stage_rows): the logits recomputed as the forward computes them
// (z is its bits) and dz written into the stage (a.stage: stage_rows × V, logits dtype T), 0 on
// rows without a valid target and past V; the gradient GEMMs that read it are cuBLAS's
// (strategy.cu). No ordering, no atomics: every stage element is written by one thread.

/// Writes dz of columns o, o + 1 of a stage row (`row`: the stage row's first entry + n0; lim: the
/// entries left in V): one 32-bit store where both are in V and V is even (then the pair is 4-byte
/// aligned: the stage is, and n0 + o is even), else 16-bit stores.
template <class T>
__device__ __forceinline__ void store_dz_pair(std::uint16_t* row, int o, int lim, bool even_v,
                                              float lo, float hi) {
  if (even_v && o + 1 < lim) {
    *reinterpret_cast<std::uint32_t*>(row + o) = pack2<T>(lo, hi);
    return;
  }
  const T l = from_f<T>(lo), h = from_f<T>(hi);
  if (o < lim) memcpy(row + o, &l, 2);
  if (o + 1 < lim) memcpy(row + o + 1, &h, 2);
}

/// mma.sync: one CTA per tile of 128 tokens × 128 entries, token block fastest (the group's H
/// rows stay in L2 while W streams); the logits as the on-chip backward recomputes them.
template <class T, bool kVec>
__global__ void __launch_bounds__(kThreads, 2) fused_dz_kernel(FusedArgs a) {
  extern __shared__ __align__(16) std::uint16_t smem[];
  const std::int64_t MBg = (a.stage_rows + kBM - 1) / kBM;
  const std::int64_t mb = blockIdx.x % MBg, vb = blockIdx.x / MBg;
  const std::int64_t m0 = a.stage_r0 + mb * kBM, n0 = vb * kBN;
  const std::int64_t rend = a.stage_r0 + a.stage_rows;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4, wm = warp / 4, wn = warp % 4;
  float acc[4][4][4];
  logits_tile<T, kVec>(acc, smem, a.H, a.W, m0, a.N, n0, a.V, a.D);
  const std::int64_t rem = a.V - n0;
  const int lim = rem > kBN ? kBN : static_cast<int>(rem);
  const bool even_v = a.V % 2 == 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t row = m0 + wm * 64 + i * 16 + g + 8 * h;
      if (row >= rend) continue;
      const DzRow dr = dz_row(a, row);
      std::uint16_t* out = static_cast<std::uint16_t*>(a.stage) + (row - a.stage_r0) * a.V + n0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int o = wn * 32 + j * 8 + 2 * c;
        store_dz_pair<T>(out, o, lim, even_v, dz_of(acc[i][j][2 * h], n0 + o, dr, a),
                         dz_of(acc[i][j][2 * h + 1], n0 + o + 1, dr, a));
      }
    }
}

/// wgmma (sm_90a): the forward's TMA ring and mainloop (tiles of 128 tokens × 256 entries,
/// increasing k: z is the forward's bit for bit); one CTA per (token block, vocabulary range) of
/// the group, walking its range's tiles, so the producer streams the next tile's boxes while the
/// consumers write this one's dz straight from their accumulators (each quad 16 contiguous bytes
/// per 8 columns). Ranges: a.splits, a.tiles_per_split (set for this launch by launch_dz).
template <class T, bool kPlain>
__global__ void __launch_bounds__(kWgThreads, 1)
    fused_dz_wgmma_kernel(const __grid_constant__ CUtensorMap tm_h,
                          const __grid_constant__ CUtensorMap tm_w, FusedArgs a) {
  using namespace hopper;
  extern __shared__ std::uint8_t wg_smem_raw[];
  __shared__ __align__(8) std::uint64_t full[Ring::kStages], empty[Ring::kStages];
  const Ring ring{align_1024(wg_smem_raw), full, empty};
  const std::int64_t MBg = (a.stage_rows + kBM - 1) / kBM;
  const std::int64_t VT = (a.V + kFBN - 1) / kFBN;
  const std::int64_t mb = blockIdx.x % MBg, range = blockIdx.x / MBg;
  const std::int64_t m0 = a.stage_r0 + mb * kBM;
  const std::int64_t t0 = range * a.tiles_per_split;
  const std::int64_t t1 = t0 + a.tiles_per_split < VT ? t0 + a.tiles_per_split : VT;
  if (t0 >= t1) return;  // the whole CTA
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const int kblocks = static_cast<int>((a.D + Ring::kBK - 1) / Ring::kBK);
  if (threadIdx.x == 0) ring.init(kWgConsumers);
  __syncthreads();
  if (wg == kWgConsumers) {  // producer warpgroup
    setmaxnreg_dec<40>();
    if (t == 0) produce_tiles(ring, &tm_h, &tm_w, m0, t0, t1, kblocks);
    return;
  }
  setmaxnreg_inc<232>();
  const int c = wg, w = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  const std::int64_t rend = a.stage_r0 + a.stage_rows;
  const bool even_v = a.V % 2 == 0;
  DzRow dr[2];
  bool in_group[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::int64_t row = m0 + 64 * c + 16 * w + g + 8 * h;
    in_group[h] = row < rend;
    dr[h] = dz_row(a, in_group[h] ? row : a.N);  // past the group: no valid target, no reads
  }
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  int it = 0;
  for (std::int64_t tile = t0; tile < t1; ++tile) {
    ring.consume_tile<T>(d, it, kblocks, c, t);
    const std::int64_t n0 = tile * kFBN, rem = a.V - n0;
    const int lim = rem > kFBN ? kFBN : static_cast<int>(rem);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!in_group[h]) continue;
      const std::int64_t row = m0 + 64 * c + 16 * w + g + 8 * h;
      const int toff = target_offset(dr[h], n0, kFBN);
      std::uint16_t* out = static_cast<std::uint16_t*>(a.stage) + (row - a.stage_r0) * a.V + n0;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int o = 8 * j + 2 * q;
        store_dz_pair<T>(out, o, lim, even_v,
                         dz_at<kPlain, T>(d[4 * j + 2 * h], o, lim, toff, n0, dr[h], a),
                         dz_at<kPlain, T>(d[4 * j + 2 * h + 1], o + 1, lim, toff, n0, dr[h], a));
      }
    }
  }
}

// ---- host side -------------------------------------------------------------------------------
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
}

/// The staged backward's dz launch (launch_fused_dz): the wgmma kernel over one wave of CTAs
/// (token blocks of the group × vocabulary ranges, ⌈SMs / blocks⌉ ranges of whole tiles), else
/// mma.sync over the group's 128 × 128 tiles.
template <class T>
void launch_dz(bool vec, bool wgmma, const FusedArgs& a_in, cudaStream_t stream) {
  FusedArgs a = a_in;
  const std::int64_t MBg = (a.stage_rows + kBM - 1) / kBM;
  if (wgmma) {
    int dev = 0, sms = 132;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      sms = 132;
    }
    const std::int64_t VT = (a.V + kFBN - 1) / kFBN;
    const std::int64_t ranges =
        std::min<std::int64_t>(VT, std::max<std::int64_t>(1, (sms + MBg - 1) / MBg));
    a.tiles_per_split = (VT + ranges - 1) / ranges;
    a.splits = static_cast<int>((VT + a.tiles_per_split - 1) / a.tiles_per_split);
    const OperandMaps m = operand_maps<T>(a);
    const bool plain = a.bias == nullptr && a.p.scale == 1.0f && !(a.p.softcap > 0.0f) &&
                       !a.p.smoothing && !a.p.zloss;
    auto k = plain ? fused_dz_wgmma_kernel<T, true> : fused_dz_wgmma_kernel<T, false>;
    XL_CUDA_CHECK(
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Ring::kSmemBytes));
    k<<<static_cast<unsigned>(MBg * a.splits), kWgThreads, Ring::kSmemBytes, stream>>>(m.h, m.w, a);
  } else {
    const std::int64_t VB = (a.V + kBN - 1) / kBN;
    constexpr int smem = kMainHalves * 2;
    auto k = vec ? fused_dz_kernel<T, true> : fused_dz_kernel<T, false>;
    XL_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    k<<<static_cast<unsigned>(MBg * VB), kThreads, smem, stream>>>(a);
  }
  XL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace xentlab::gpu::fused

// wgmma_probe: the first Hopper GEMM of this project — TMA loads into 128-byte-swizzled shared
// memory, an mbarrier pipeline, wgmma.mma_async m64n256k16 (bf16 operands, fp32 accumulators) —
// for the logits GEMM of the fused strategy (its mma.sync phases run at ≈ 30 % of the
// cuBLAS rate, docs/fused.md), and the fused forward built on it. An experiment, built only with
// -DXENTLAB_BUILD_LAB=ON.
// STATUS (2026-11-30): the GEMM with wait_group 0 after every K block ran on an H200 at 16:16Z —
// bit-identical to cuBLAS on the validation shape, 520 TFLOP/s against cuBLAS's 646 at 8192 ×
// 128256 × 4096 (docs/fused.md). The wait_group 1 pipeline and the fold ran at 17:55Z: fold
// validated (max |lse − ref| 1.69e-7), GEMM 485, fold 511, cuBLAS 643 TFLOP/s in interleaved
// rounds. The fold is now the fused strategy's forward (gpu/cuda/fused/forward.cu, with every
// option).
//
//   build-gpu/lab/wgmma_probe [M=8192] [N=128256] [K=4096]
//
// C (M×N, bf16, row-major) = A (M×K) · Bᵀ, B (N×K): both operands K-major (the H and W of the
// LM head). CTA tile 128 × 256, K steps of 64 (one 128-byte swizzle row per operand row), 4
// stages; warpgroup 0 is the producer (one thread issues the TMA copies), warpgroups 1 and 2
// each compute 64 × 256 with wgmma. Requires M % 128 == 0, N % 256 == 0, K % 64 == 0 (V = 128256
// = 501·256).
// The fold (kFold): no C; each CTA walks a range of vocabulary tiles for its 128 rows and folds
// every tile into a per-thread online (max, sum-exp) of its two rows (64 columns per row per
// tile, bf16-rounded logits, fp32 state, plain recipe), merges the four threads of a row (quad
// shuffles) and writes one partial per (row, range) plus the target logit; the host merges the
// ranges. This is the forward of the fused strategy on wgmma, without its options, accumulator
// dtypes or finalize kernel; its tree (64 columns per thread, 4 threads per row, no cross-warp
// merge) is the one gpu/cuda/fused/forward.cu, the CPU emulation and fused_declared_arithmetic use
// (since 2026-11-30, docs/fused.md).
// Output: GEMM max |C − C_cuBLAS| / max |C_cuBLAS| and the count of entries more than 2 bf16
// spacings apart (1024 × 2048 × K); fold max |lse − ref| and |loss − ref| against lse and loss
// computed in double from cuBLAS's logits of the same data (256 × 2048 × K, ranges of 3 tiles),
// and the rows off by more than 1e-4 or not finite; then GEMM, fold and cuBLAS at the full shape,
// timed in interleaved rounds.
#include <cublas_v2.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/common/hopper.cuh"
#include "harness/bench/timing.hpp"

namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4;
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kSmem = xentlab::gpu::hopper::WgmmaRing::kSmemBytes;  // the ring of hopper.cuh
static_assert(BK == xentlab::gpu::hopper::WgmmaRing::kBK &&
                  STAGES == xentlab::gpu::hopper::WgmmaRing::kStages,
              "the ring's geometry");

// The PTX wrappers (mbarrier, TMA, wgmma descriptor and m64n256k16) and the tensor maps are
// gpu/cuda/common/hopper.cuh's, shared with the fused strategy's forward.
using namespace xentlab::gpu::hopper;

/// Per-(row, vocabulary range) partial of the fold epilogue, and the rows' target logits.
struct FoldOut {
  float* m;                     // (M, ranges) running max of the range
  float* s;                     // (M, ranges) sum-exp relative to m
  float* xt;                    // (M) target logit (bf16-rounded), written by its range
  const std::int64_t* targets;  // (M)
  int ranges, tiles_per_range;
};

/// C tile (kFold = false) or the online-softmax fold of the fused forward (kFold = true).
/// grid (ranges, M / BM) with kFold — CTA (r, mb) walks vocabulary tiles [r·tpr, (r+1)·tpr) ∩
/// [0, N/BN) — or (N / BN, M / BM) without. The producer streams (tile, K block) pairs through the
/// STAGES-deep ring; a consumer keeps one wgmma group in flight (wait_group 1) and releases a
/// stage one K block after its wgmmas were issued.
template <bool kFold>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap tm_a,
                      const __grid_constant__ CUtensorMap tm_b, __nv_bfloat16* C, int M, int N,
                      int K, FoldOut fo) {
  extern __shared__ std::uint8_t smem_raw[];
  __shared__ __align__(8) std::uint64_t full[STAGES], empty[STAGES];
  const WgmmaRing ring{align_1024(smem_raw), full, empty};
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const int m0 = blockIdx.y * BM;
  const int n_tiles = N / BN;
  const int tile0 = kFold ? blockIdx.x * fo.tiles_per_range : blockIdx.x;
  const int tile1 = kFold ? min(n_tiles, tile0 + fo.tiles_per_range) : tile0 + 1;
  const int kblocks = K / BK;
  if (threadIdx.x == 0) ring.init(kConsumers);
  __syncthreads();

  if (wg == 0) {  // producer
    setmaxnreg_dec<40>();
    if (t == 0) {
      int it = 0;
      for (int tile = tile0; tile < tile1; ++tile)
        for (int kb = 0; kb < kblocks; ++kb, ++it)
          ring.produce(it, &tm_a, &tm_b, kb * BK, m0, tile * BN);
    }
    return;
  }
  setmaxnreg_inc<232>();
  const int c = wg - 1;  // consumer: rows 64c … 64c + 63 of the tile
  // Accumulator layout of m64nNk16 (as mma.sync's m16n8 per 8 columns): warp w of the
  // warpgroup holds rows 16w + lane/4 (+ 8), columns 8j + 2·(lane % 4) (+ 1).
  const int w = t / 32, lane = t % 32;
  const int r = m0 + 64 * c + 16 * w + lane / 4;  // and r + 8
  // Fold state of rows r and r + 8 (fp32 accumulator; plain recipe: scale 1, no options).
  float fm[2] = {-INFINITY, -INFINITY}, fs[2] = {0.0f, 0.0f}, fxt[2] = {0.0f, 0.0f};
  bool found[2] = {false, false};
  std::int64_t tgt[2] = {-1, -1};
  if constexpr (kFold) {
    tgt[0] = fo.targets[r];
    tgt[1] = fo.targets[r + 8];
  }
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  int it = 0;
  for (int tile = tile0; tile < tile1; ++tile) {
    ring.consume_tile<__nv_bfloat16>(d, it, kblocks, c, t);
    const int n0 = tile * BN;
    if constexpr (!kFold) {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int col = n0 + 8 * j + 2 * (lane % 4);
        *reinterpret_cast<__nv_bfloat162*>(C + std::int64_t(r) * N + col) =
            __floats2bfloat162_rn(d[4 * j], d[4 * j + 1]);
        *reinterpret_cast<__nv_bfloat162*>(C + std::int64_t(r + 8) * N + col) =
            __floats2bfloat162_rn(d[4 * j + 2], d[4 * j + 3]);
      }
    } else {
      // Online fold of this thread's 64 columns of each of its two rows (docs/fused.md): the
      // logits rounded to bf16, the tile max, the tile's sum-exp in increasing column order, then
      // one rescale of the running sum and the add.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float tm = -INFINITY;
#pragma unroll
        for (int j = 0; j < 32; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float z = __bfloat162float(__float2bfloat16_rn(d[4 * j + 2 * h + e]));
            d[4 * j + 2 * h + e] = z;
            tm = fmaxf(tm, z);
            const std::int64_t col = n0 + 8 * j + 2 * (lane % 4) + e;
            if (col == tgt[h]) {
              fxt[h] = z;
              found[h] = true;
            }
          }
        const float mn = fmaxf(fm[h], tm);
        if (mn == -INFINITY) continue;  // nothing but −inf so far: the state stays empty
        // docs/arithmetic.md §9 (numerics' online_merge_tile, gpu/cuda/fused/forward.cu): the
        // tile's own sum from 0 in column order, then s ← s·e^{m−m'} + tile sum.
        float ts = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) ts = __fadd_rn(ts, expf(__fsub_rn(d[4 * j + 2 * h + e], mn)));
        const float scaled =
            fm[h] == -INFINITY ? 0.0f : __fmul_rn(fs[h], expf(__fsub_rn(fm[h], mn)));
        fm[h] = mn;
        fs[h] = __fadd_rn(scaled, ts);
      }
    }
  }
  if constexpr (kFold) {
    // Merge the quad's four states of each row (lanes 4g … 4g + 3), then one write per row.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int x = 1; x <= 2; x <<= 1) {
        const float om = __shfl_xor_sync(0xffffffffu, fm[h], x);
        const float os = __shfl_xor_sync(0xffffffffu, fs[h], x);
        const float mn = fmaxf(fm[h], om);
        if (mn != -INFINITY)  // an empty state (m = −inf) adds nothing
          fs[h] =
              __fadd_rn(fm[h] == -INFINITY ? 0.0f : __fmul_rn(fs[h], expf(__fsub_rn(fm[h], mn))),
                        om == -INFINITY ? 0.0f : __fmul_rn(os, expf(__fsub_rn(om, mn))));
        fm[h] = mn;
      }
      const int row = r + 8 * h;
      if (lane % 4 == 0) {
        fo.m[std::int64_t(row) * fo.ranges + blockIdx.x] = fm[h];
        fo.s[std::int64_t(row) * fo.ranges + blockIdx.x] = fs[h];
      }
      if (found[h]) fo.xt[row] = fxt[h];
    }
  }
}

/// A 2-D tensor map of a row-major (rows × K) bf16 matrix, boxes of BK × box_rows, 128B swizzle.
CUtensorMap make_map(const void* base, int rows, int K, int box_rows) {
  return make_tensor_map_2d(base, false, rows, K, BK, box_rows);
}

void run_ours(const CUtensorMap& ma, const CUtensorMap& mb, __nv_bfloat16* C, int M, int N, int K) {
  dim3 grid(N / BN, M / BM);
  wgmma_gemm_kernel<false><<<grid, kThreads, kSmem>>>(ma, mb, C, M, N, K, FoldOut{});
  XL_CUDA_CHECK(cudaGetLastError());
}

/// The fold (fused forward) over vocabulary ranges of tiles_per_range tiles each.
void run_fold(const CUtensorMap& ma, const CUtensorMap& mb, int M, int N, int K,
              const FoldOut& fo) {
  dim3 grid(fo.ranges, M / BM);
  wgmma_gemm_kernel<true><<<grid, kThreads, kSmem>>>(ma, mb, nullptr, M, N, K, fo);
  XL_CUDA_CHECK(cudaGetLastError());
}

/// Ranges of the fold: enough CTAs for about 16 waves of one per SM.
int fold_tiles_per_range(int M, int N, int sms) {
  const int tiles = N / BN, blocks = M / BM;
  const int want_ranges = std::max(1, std::min(tiles, (16 * sms + blocks - 1) / blocks));
  return (tiles + want_ranges - 1) / want_ranges;
}

/// lse per row from the fold's partials, merged in double on the host.
std::vector<double> lse_from_partials(const std::vector<float>& m, const std::vector<float>& s,
                                      int rows, int ranges) {
  std::vector<double> out(rows);
  for (int i = 0; i < rows; ++i) {
    double mx = -INFINITY;
    for (int k = 0; k < ranges; ++k) mx = std::max(mx, double(m[std::size_t(i) * ranges + k]));
    double sum = 0;
    for (int k = 0; k < ranges; ++k) {
      const double mk = m[std::size_t(i) * ranges + k];
      if (mk != -INFINITY) sum += double(s[std::size_t(i) * ranges + k]) * std::exp(mk - mx);
    }
    out[i] = mx == -INFINITY ? -INFINITY : mx + std::log(sum);
  }
  return out;
}

void run_cublas(cublasHandle_t h, const void* A, const void* B, void* C, int M, int N, int K) {
  // C (M×N row-major) = column-major Cᵀ (N×M) = B (N×K row-major, i.e. col-major K×N)ᵀ · A.
  const float one = 1.0f, zero = 0.0f;
  XL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16BF, K, A,
                               CUDA_R_16BF, K, &zero, C, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

/// Host copy of a device bf16 buffer as floats.
std::vector<float> to_host(const void* p, std::size_t n) {
  std::vector<__nv_bfloat16> h(n);
  XL_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (std::size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

struct DeviceArrays {
  void *A = nullptr, *B = nullptr, *C = nullptr, *R = nullptr;
  float *pm = nullptr, *ps = nullptr, *xt = nullptr;
  std::int64_t* tg = nullptr;
  ~DeviceArrays() {
    for (void* q : {A, B, C, R, static_cast<void*>(pm), static_cast<void*>(ps),
                    static_cast<void*>(xt), static_cast<void*>(tg)})
      cudaFree(q);
  }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace xentlab;
  const int M = argc > 1 ? std::atoi(argv[1]) : 8192;
  const int N = argc > 2 ? std::atoi(argv[2]) : 128256;
  const int K = argc > 3 ? std::atoi(argv[3]) : 4096;
  if (M <= 0 || N <= 0 || K <= 0 || M % BM || N % BN || K % BK) {
    std::fprintf(stderr, "wgmma_probe: need M %% %d, N %% %d, K %% %d == 0\n", BM, BN, BK);
    return 2;
  }
  try {
    XL_CUDA_CHECK(cudaFuncSetAttribute(wgmma_gemm_kernel<false>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    XL_CUDA_CHECK(cudaFuncSetAttribute(wgmma_gemm_kernel<true>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    int sms = 0;
    XL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cublasHandle_t h;
    XL_CUBLAS_CHECK(cublasCreate(&h));
    // Pass 0: GEMM validation against cuBLAS. Pass 1: fold validation against a double
    // reference on the host. Pass 2: the full shape, timed in interleaved rounds.
    for (int pass = 0; pass < 3; ++pass) {
      const int m = pass == 0 ? 1024 : pass == 1 ? 256 : M;
      const int n = pass == 0 ? 2048 : pass == 1 ? 2048 : N;
      const int k = K;
      DeviceArrays da;
      XL_CUDA_CHECK(cudaMalloc(&da.A, std::size_t(m) * k * 2));
      XL_CUDA_CHECK(cudaMalloc(&da.B, std::size_t(n) * k * 2));
      XL_CUDA_CHECK(cudaMalloc(&da.C, std::size_t(m) * n * 2));
      XL_CUDA_CHECK(cudaMalloc(&da.R, std::size_t(m) * n * 2));
      bench::fill_normal(DType::bf16, da.A, std::int64_t(m) * k, 1.0, 1);
      bench::fill_normal(DType::bf16, da.B, std::int64_t(n) * k, 2.0 / 64.0, 2);
      const CUtensorMap ma = make_map(da.A, m, k, BM), mb = make_map(da.B, n, k, BN);
      FoldOut fo{};
      // Pass 1 forces ranges of 3 tiles (3, 3, 2 of 8) so that tiles follow each other in a CTA
      // (the pipeline across tiles, the accumulator reset, the rescale) and one range is short.
      fo.tiles_per_range = pass == 1 ? 3 : fold_tiles_per_range(m, n, sms);
      fo.ranges = (n / BN + fo.tiles_per_range - 1) / fo.tiles_per_range;
      XL_CUDA_CHECK(cudaMalloc(&da.pm, std::size_t(m) * fo.ranges * 4));
      XL_CUDA_CHECK(cudaMalloc(&da.ps, std::size_t(m) * fo.ranges * 4));
      XL_CUDA_CHECK(cudaMalloc(&da.xt, std::size_t(m) * 4));
      XL_CUDA_CHECK(cudaMemset(da.xt, 0xFF, std::size_t(m) * 4));  // NaN until the fold writes it
      XL_CUDA_CHECK(cudaMalloc(&da.tg, std::size_t(m) * 8));
      bench::fill_targets(da.tg, m, n, 3);
      fo.m = da.pm;
      fo.s = da.ps;
      fo.xt = da.xt;
      fo.targets = da.tg;
      auto* C = static_cast<__nv_bfloat16*>(da.C);
      if (pass == 0) {
        run_ours(ma, mb, C, m, n, k);
        run_cublas(h, da.A, da.B, da.R, m, n, k);
        XL_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> c = to_host(da.C, std::size_t(m) * n),
                                 r = to_host(da.R, std::size_t(m) * n);
        double maxdiff = 0, maxref = 0;
        std::int64_t far = 0;
        for (std::size_t i = 0; i < c.size(); ++i) {
          const double x = c[i], y = r[i];
          maxdiff = std::max(maxdiff, std::fabs(x - y));
          maxref = std::max(maxref, std::fabs(y));
          const double spacing = std::ldexp(1.0, std::ilogb(std::max(std::fabs(y), 1e-30)) - 7);
          if (!(std::fabs(x - y) <= 2 * spacing)) ++far;
        }
        std::printf(
            "validation %dx%dx%d: max|C - cuBLAS| / max|cuBLAS| = %.3g, %lld of %zu "
            "entries more than 2 bf16 spacings apart\n",
            m, n, k, maxdiff / maxref, static_cast<long long>(far), c.size());
      } else if (pass == 1) {
        // Reference: the logits from cuBLAS on the same data (fp32 accumulation rounded to bf16,
        // which the GEMM above matched bit for bit), lse and loss from them in double. The fold
        // differs only by its fp32 rounding (~1e-6); a lost tile, a bad rescale or a wrong lane
        // shows as ≥ 1e-3. A row counts as bad when |Δ| > 1e-4 or either value is not finite.
        run_fold(ma, mb, m, n, k, fo);
        run_cublas(h, da.A, da.B, da.R, m, n, k);
        XL_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> z = to_host(da.R, std::size_t(m) * n);
        std::vector<float> pm(std::size_t(m) * fo.ranges), ps(pm.size()), xt(m);
        std::vector<std::int64_t> tg(m);
        XL_CUDA_CHECK(cudaMemcpy(pm.data(), da.pm, pm.size() * 4, cudaMemcpyDeviceToHost));
        XL_CUDA_CHECK(cudaMemcpy(ps.data(), da.ps, ps.size() * 4, cudaMemcpyDeviceToHost));
        XL_CUDA_CHECK(cudaMemcpy(xt.data(), da.xt, xt.size() * 4, cudaMemcpyDeviceToHost));
        XL_CUDA_CHECK(cudaMemcpy(tg.data(), da.tg, tg.size() * 8, cudaMemcpyDeviceToHost));
        const std::vector<double> lse = lse_from_partials(pm, ps, m, fo.ranges);
        double max_dlse = 0, max_dloss = 0;
        int bad = 0;
        for (int i = 0; i < m; ++i) {
          const float* zi = &z[std::size_t(i) * n];
          double mx = -INFINITY;
          for (int j = 0; j < n; ++j) mx = std::max(mx, double(zi[j]));
          double sum = 0;
          for (int j = 0; j < n; ++j) sum += std::exp(double(zi[j]) - mx);
          const double ref = mx + std::log(sum);
          const double dl = std::fabs(lse[i] - ref),
                       dlo = std::fabs((lse[i] - xt[i]) - (ref - zi[tg[i]]));
          if (!(dl <= 1e-4) || !(dlo <= 1e-4)) ++bad;  // NaN counts as bad
          if (std::isfinite(dl)) max_dlse = std::max(max_dlse, dl);
          if (std::isfinite(dlo)) max_dloss = std::max(max_dloss, dlo);
        }
        std::printf(
            "fold validation %dx%dx%d (%d ranges of %d tiles): max|lse - ref| = %.3g, "
            "max|loss - ref| = %.3g, %d of %d rows off by more than 1e-4 or not finite\n",
            m, n, k, fo.ranges, fo.tiles_per_range, max_dlse, max_dloss, bad, m);
      } else {
        const double flop = 2.0 * m * double(n) * k;
        std::vector<std::function<void()>> calls = {
            [&] { run_ours(ma, mb, C, m, n, k); }, [&] { run_fold(ma, mb, m, n, k, fo); },
            [&] { run_cublas(h, da.A, da.B, da.R, m, n, k); }};
        const char* names[] = {"wgmma GEMM (bf16 C)", "wgmma fold (fused forward, no C)",
                               "cuBLAS default (bf16 C)"};
        // Interleaved rounds (the card runs at its power cap: order matters), one warm-up round.
        std::vector<std::vector<double>> t(calls.size());
        for (int round = 0; round < 6; ++round)
          for (std::size_t q = 0; q < calls.size(); ++q) {
            const double ms = bench::time_calls({}, calls[q], 0, 1).front();
            if (round > 0) t[q].push_back(ms);
          }
        for (std::size_t q = 0; q < calls.size(); ++q) {
          const double med = bench::summarize_times(t[q]).median;
          std::printf("%dx%dx%d: %-34s %.3f ms (%.1f TFLOP/s), median of 5 interleaved rounds\n", m,
                      n, k, names[q], med, flop / med / 1e9);
        }
        std::printf("fold ranges: %d of %d tiles, %d CTAs\n", fo.ranges, fo.tiles_per_range,
                    fo.ranges * (m / BM));
      }
    }
    cublasDestroy(h);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wgmma_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}

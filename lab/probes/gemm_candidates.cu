// gemm_candidates: the three cuBLAS GEMMs of one chunk of the chunked strategy, timed with
// cublasGemmEx's default algorithm and with every candidate of cuBLASLt's heuristic (its tile,
// stages, split-K), plus the CE kernel on the same chunk. It is the measurement behind the
// preferred tiles of gpu/cuda/common/gemm.cuh (docs/benchmarks.md). Timing only: no result is
// checked.
//
//   build:  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DXENTLAB_BUILD_LAB=ON
//           cmake --build build-gpu --target gemm_candidates -j16
//   run:    build-gpu/lab/gemm_candidates [rows=8192] [V=128256] [D=4096]
//
// Operands: bf16, fp32 compute; logits (rows, V) = H·Wᵀ in bf16; dH (rows, D) = dz·W in bf16;
// dW (V, D) += dzᵀ·H in fp32 with beta = 1, issued exactly as gpu/cuda/common/gemm.cu issues them
// (column-major transposes). dH and dW take the CE kernel's dz as their operand. Each time is the
// median of 5 rounds after a warm-up round; a round calls every candidate of a GEMM once, so that
// the card's power and thermal state (it runs at its power cap) is shared evenly among them.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "gpu/cuda/common/ce_kernels.cuh"
#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/steps.cuh"
#include "harness/bench/timing.hpp"

using namespace xentlab;
using namespace xentlab::gpu;

namespace {

/// Median of `reps` back-to-back calls after one warm-up (bench::time_calls).
float median_ms(const std::function<void()>& f, int reps) {
  return static_cast<float>(bench::summarize_times(bench::time_calls({}, f, 1, reps)).median);
}

/// Interleaved timing rounds per candidate.
constexpr int kRounds = 5;

struct Gemm {
  const char* name;
  cublasOperation_t ta, tb;
  std::int64_t m, n, k;
  const void* A;
  std::int64_t lda;
  const void* B;
  std::int64_t ldb;
  float beta;
  void* C;
  std::int64_t ldc;
  cudaDataType_t ctype;
};

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t rows = argc > 1 ? std::atoll(argv[1]) : 8192;
  const std::int64_t V = argc > 2 ? std::atoll(argv[2]) : 128256;
  const std::int64_t D = argc > 3 ? std::atoll(argv[3]) : 4096;
  if (rows <= 0 || V <= 0 || D <= 0) {
    std::fprintf(stderr, "gemm_candidates: rows, V and D must be positive\n");
    return 2;
  }
  try {
    DeviceMemoryTracker mem;
    DeviceBuffer H(mem, rows * D * 2, MemKind::io, "H"), W(mem, V * D * 2, MemKind::io, "W"),
        Z(mem, rows * V * 2, MemKind::io, "logits"), dH(mem, rows * D * 2, MemKind::io, "dH"),
        dW(mem, V * D * 4, MemKind::io, "dW"), T(mem, rows * 8, MemKind::io, "targets"),
        loss(mem, rows * 4, MemKind::io, "loss"), lse(mem, rows * 4, MemKind::io, "lse");
    const std::size_t ws_bytes = static_cast<std::size_t>(kCublasWorkspaceBytes);
    DeviceBuffer ws(mem, kCublasWorkspaceBytes, MemKind::extra, "workspace");
    bench::fill_normal(DType::bf16, H.get(), rows * D, 1.0, 1);
    bench::fill_normal(DType::bf16, W.get(), V * D, 2.0 / 64.0, 2);
    bench::fill_normal(DType::bf16, Z.get(), rows * V, 1.0, 3);
    bench::fill_targets(T.as<std::int64_t>(), rows, V, 4);
    XL_CUDA_CHECK(cudaMemset(dW.get(), 0, V * D * 4));
    cublasHandle_t h;
    cublasLtHandle_t lt;
    XL_CUBLAS_CHECK(cublasCreate(&h));
    XL_CUBLAS_CHECK(cublasSetWorkspace(h, ws.get(), ws_bytes));
    XL_CUBLAS_CHECK(cublasLtCreate(&lt));
    std::printf("chunk of %lld tokens, V = %lld, D = %lld, bf16 operands, fp32 compute\n",
                (long long)rows, (long long)V, (long long)D);
    const Gemm gs[3] = {{"logits", CUBLAS_OP_T, CUBLAS_OP_N, V, rows, D, W.get(), D, H.get(), D,
                         0.0f, Z.get(), V, CUDA_R_16BF},
                        {"dH", CUBLAS_OP_N, CUBLAS_OP_N, D, rows, V, W.get(), D, Z.get(), V, 0.0f,
                         dH.get(), D, CUDA_R_16BF},
                        {"dW (fp32, beta 1)", CUBLAS_OP_N, CUBLAS_OP_T, D, V, rows, H.get(), D,
                         Z.get(), V, 1.0f, dW.get(), D, CUDA_R_32F}};
    const RowLossParams p = make_row_params(LossSpec{}, V, DType::fp32);
    auto ce = [&] {
      launch_ce_rows(DType::bf16, Z.get(), rows, T.as<std::int64_t>(), loss.as<float>(),
                     lse.as<float>(), p, true, RowGradScale{nullptr, 1.0f / rows}, nullptr);
    };
    for (const Gemm& g : gs) {
      if (&g == &gs[1]) {
        // Z now holds logits; the CE kernel turns them into dz in place (the backward GEMMs'
        // real operand) and is timed on the way.
        std::printf("CE kernel (dz in place): %.3f ms\n", median_ms(ce, 5));
      }
      const float alpha = 1.0f;
      const double flop = 2.0 * g.m * g.n * g.k;
      std::vector<std::function<void()>> calls;
      std::vector<std::string> names;
      calls.push_back([&] {
        XL_CUBLAS_CHECK(cublasGemmEx_64(h, g.ta, g.tb, g.m, g.n, g.k, &alpha, g.A, CUDA_R_16BF,
                                        g.lda, g.B, CUDA_R_16BF, g.ldb, &g.beta, g.C, g.ctype,
                                        g.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      });
      names.push_back("cublasGemmEx default");
      cublasLtMatmulDesc_t md;
      XL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&md, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      XL_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSA, &g.ta, sizeof g.ta));
      XL_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSB, &g.tb, sizeof g.tb));
      const bool an = g.ta == CUBLAS_OP_N, bn = g.tb == CUBLAS_OP_N;
      cublasLtMatrixLayout_t la, lb, lc;
      XL_CUBLAS_CHECK(
          cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, an ? g.m : g.k, an ? g.k : g.m, g.lda));
      XL_CUBLAS_CHECK(
          cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, bn ? g.k : g.n, bn ? g.n : g.k, g.ldb));
      XL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, g.ctype, g.m, g.n, g.ldc));
      cublasLtMatmulPreference_t pr;
      XL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pr));
      XL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          pr, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
      cublasLtMatmulHeuristicResult_t res[16];
      int n = 0;
      XL_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, md, la, lb, lc, lc, pr, 16, res, &n));
      for (int i = 0; i < n; ++i) {
        int tile = 0, stages = 0, splitk = 0;
        std::size_t w = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                             sizeof tile, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                             sizeof stages, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof splitk, &w);
        char buf[96];
        std::snprintf(buf, sizeof buf,
                      "cuBLASLt candidate %2d: tile id %3d, stages id %2d, split-K %d", i, tile,
                      stages, splitk);
        names.push_back(buf);
        calls.push_back([&, i] {
          XL_CUBLAS_CHECK(cublasLtMatmul(lt, md, &alpha, g.A, la, g.B, lb, &g.beta, g.C, lc, g.C,
                                         lc, &res[i].algo, ws.get(), ws_bytes, nullptr));
        });
      }
      // Rounds: every call once per round, so that the card's power and thermal state (it runs
      // at its power cap) is shared evenly; one warm-up round first.
      std::vector<std::vector<double>> t(calls.size());
      for (int round = 0; round < kRounds + 1; ++round)
        for (std::size_t c = 0; c < calls.size(); ++c) {
          const std::vector<double> one = bench::time_calls({}, calls[c], 0, 1);
          if (round > 0) t[c].push_back(one.front());
        }
      std::printf("%s (%d interleaved rounds):\n", g.name, kRounds);
      for (std::size_t c = 0; c < calls.size(); ++c) {
        const double med = bench::summarize_times(t[c]).median;
        std::printf("   %-58s %.3f ms, %.1f TFLOP/s\n", names[c].c_str(), med, flop / med / 1e9);
      }
      cublasLtMatmulPreferenceDestroy(pr);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatmulDescDestroy(md);
    }
    cublasLtDestroy(lt);
    cublasDestroy(h);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_candidates: %s\n", e.what());
    return 1;
  }
  return 0;
}

// gemm_candidates: cuBLAS GEMMs of a strategy timed with cublasGemmEx's default algorithm, with
// every candidate of cuBLASLt's heuristic (its tile, stages, split-K) and, in split mode, with the
// product's own call (gpu/cuda/common/gemm.cuh: its preferred tile where cuBLASLt offers it, else
// the default; the line says which). It is the measurement behind the preferred tiles of
// gpu/cuda/common/gemm.cuh (docs/benchmarks.md). Timing only: no result is checked. Two modes:
//   chunk: the three GEMMs of one chunk of the chunked strategy, plus the CE kernel on the chunk;
//   split: the GEMMs of one vocabulary split of vocab_chunked over all `rows` tokens (logits,
//          dH += dz·W with beta 1 into fp32, dW of the split written once in fp32), for each
//          split width given, plus its row kernels on the slab (split statistics, dz in place)
//          against a device-to-device copy of the slab (the memory rate).
//
//   build:  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DXENTLAB_BUILD_LAB=ON
//           cmake --build build-gpu --target gemm_candidates -j16
//   run:    build-gpu/lab/gemm_candidates [rows=8192] [V=128256] [D=4096]
//           build-gpu/lab/gemm_candidates split [rows=131072] [D=4096] [width ...=4008]
//
// Operands: bf16, fp32 compute, issued exactly as gpu/cuda/common/gemm.cu issues them (column-major
// transposes). chunk: logits (rows, V) = H·Wᵀ in bf16; dH (rows, D) = dz·W in bf16; dW (V, D) +=
// dzᵀ·H in fp32 with beta = 1; dH and dW take the CE kernel's dz as their operand. Each time is the
// median of 5 rounds (split mode: 11) after a warm-up round; a round calls every candidate of a
// GEMM once, so that the card's power and thermal state (it runs at its power cap) is shared
// evenly among them. The same algorithm timed twice in one round can differ by several per cent
// (the product's call and the candidate it runs): differences of that size are not resolved.
// split mode: dz for dH and dW is formed from the split's own lse (its statistics as a whole
// vocabulary), a softmax of the logits less the target, scaled by 1/rows.
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

/// Interleaved timing rounds per candidate: chunk mode, split mode.
constexpr int kRounds = 5;
constexpr int kSplitRounds = 11;

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

struct Handles {
  cublasHandle_t h;
  cublasLtHandle_t lt;
  void* ws;
};

/// Times g by cublasGemmEx's default, by `product` (the product's own call, when given) and by
/// every cuBLASLt heuristic candidate, in `rounds` interleaved rounds; prints a line each. The
/// product's call asks for `preferred` (gemm.cu's tile for this GEMM, a cublasLtMatmulTile_t) and
/// runs cuBLAS's default where the heuristic does not offer it: the line says which.
void time_gemm(const Handles& hs, const Gemm& g, const std::function<void()>& product,
               int preferred = -1, int rounds = kRounds) {
  const std::size_t ws_bytes = static_cast<std::size_t>(kCublasWorkspaceBytes);
  const float alpha = 1.0f;
  const double flop = 2.0 * g.m * g.n * g.k;
  std::vector<std::function<void()>> calls;
  std::vector<std::string> names;
  calls.push_back([&] {
    XL_CUBLAS_CHECK(cublasGemmEx_64(hs.h, g.ta, g.tb, g.m, g.n, g.k, &alpha, g.A, CUDA_R_16BF,
                                    g.lda, g.B, CUDA_R_16BF, g.ldb, &g.beta, g.C, g.ctype, g.ldc,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  names.push_back("cublasGemmEx default");
  std::size_t product_line = 0;
  if (product) {
    calls.push_back(product);
    names.push_back("the product's call (gemm.cuh)");
    product_line = names.size() - 1;
  }
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
  XL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pr, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &ws_bytes, sizeof ws_bytes));
  cublasLtMatmulHeuristicResult_t res[16];
  int n = 0;
  XL_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(hs.lt, md, la, lb, lc, lc, pr, 16, res, &n));
  bool offered = false;
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
    std::snprintf(buf, sizeof buf, "cuBLASLt candidate %2d: tile id %3d, stages id %2d, split-K %d",
                  i, tile, stages, splitk);
    names.push_back(buf);
    if (product && !offered && preferred >= 0 && res[i].state == CUBLAS_STATUS_SUCCESS &&
        tile == preferred && splitk <= 1) {
      offered = true;
      std::snprintf(buf, sizeof buf, "the product's call: tile id %d, candidate %d's algorithm",
                    preferred, i);
      names[product_line] = buf;
    }
    calls.push_back([&, i] {
      XL_CUBLAS_CHECK(cublasLtMatmul(hs.lt, md, &alpha, g.A, la, g.B, lb, &g.beta, g.C, lc, g.C, lc,
                                     &res[i].algo, hs.ws, ws_bytes, nullptr));
    });
  }
  if (product && !offered)
    names[product_line] = preferred >= 0
                              ? "the product's call: tile id " + std::to_string(preferred) +
                                    " not offered, so cublasGemmEx's default"
                              : "the product's call: cublasGemmEx's default (not sm_90)";
  // Rounds: every call once per round, so that the card's power and thermal state (it runs at its
  // power cap) is shared evenly; one warm-up round first.
  std::vector<std::vector<double>> t(calls.size());
  for (int round = 0; round < rounds + 1; ++round)
    for (std::size_t c = 0; c < calls.size(); ++c) {
      const std::vector<double> one = bench::time_calls({}, calls[c], 0, 1);
      if (round > 0) t[c].push_back(one.front());
    }
  std::printf("%s, m %lld n %lld k %lld (%d interleaved rounds):\n", g.name, (long long)g.m,
              (long long)g.n, (long long)g.k, rounds);
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const double med = bench::summarize_times(t[c]).median;
    std::printf("   %-58s %.3f ms, %.1f TFLOP/s\n", names[c].c_str(), med, flop / med / 1e9);
  }
  std::fflush(stdout);
  cublasLtMatmulPreferenceDestroy(pr);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(md);
}

/// The chunked strategy's three GEMMs of one chunk of `rows` tokens, and its CE kernel.
void chunk_mode(std::int64_t rows, std::int64_t V, std::int64_t D) {
  DeviceMemoryTracker mem;
  DeviceBuffer H(mem, rows * D * 2, MemKind::io, "H"), W(mem, V * D * 2, MemKind::io, "W"),
      Z(mem, rows * V * 2, MemKind::io, "logits"), dH(mem, rows * D * 2, MemKind::io, "dH"),
      dW(mem, V * D * 4, MemKind::io, "dW"), T(mem, rows * 8, MemKind::io, "targets"),
      loss(mem, rows * 4, MemKind::io, "loss"), lse(mem, rows * 4, MemKind::io, "lse");
  DeviceBuffer ws(mem, kCublasWorkspaceBytes, MemKind::extra, "workspace");
  bench::fill_normal(DType::bf16, H.get(), rows * D, 1.0, 1);
  bench::fill_normal(DType::bf16, W.get(), V * D, 2.0 / 64.0, 2);
  bench::fill_normal(DType::bf16, Z.get(), rows * V, 1.0, 3);
  bench::fill_targets(T.as<std::int64_t>(), rows, V, 4);
  XL_CUDA_CHECK(cudaMemset(dW.get(), 0, V * D * 4));
  Handles hs{};
  XL_CUBLAS_CHECK(cublasCreate(&hs.h));
  XL_CUBLAS_CHECK(
      cublasSetWorkspace(hs.h, ws.get(), static_cast<std::size_t>(kCublasWorkspaceBytes)));
  XL_CUBLAS_CHECK(cublasLtCreate(&hs.lt));
  hs.ws = ws.get();
  std::printf("chunk of %lld tokens, V = %lld, D = %lld, bf16 operands, fp32 compute\n",
              (long long)rows, (long long)V, (long long)D);
  const Gemm gs[3] = {{"logits", CUBLAS_OP_T, CUBLAS_OP_N, V, rows, D, W.get(), D, H.get(), D, 0.0f,
                       Z.get(), V, CUDA_R_16BF},
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
      // Z now holds logits; the CE kernel turns them into dz in place (the backward GEMMs' real
      // operand) and is timed on the way.
      std::printf("CE kernel (dz in place): %.3f ms\n", median_ms(ce, 5));
    }
    time_gemm(hs, g, {});
  }
  cublasLtDestroy(hs.lt);
  cublasDestroy(hs.h);
}

/// vocab_chunked's GEMMs and row kernels for one split of `width` vocabulary rows over all `rows`
/// tokens (gpu/cuda/vocab_chunked.cu), each GEMM also by the product's call (gemm_logits,
/// gemm_dH with beta 1, gemm_dW).
void split_mode(std::int64_t rows, std::int64_t D, std::int64_t width) {
  DeviceMemoryTracker mem;
  DeviceBuffer H(mem, rows * D * 2, MemKind::io, "H"), W(mem, width * D * 2, MemKind::io, "W"),
      Z(mem, rows * width * 2, MemKind::io, "slab"), Z2(mem, rows * width * 2, MemKind::io, "copy"),
      dH(mem, rows * D * 4, MemKind::io, "dH"), dW(mem, width * D * 4, MemKind::io, "dW"),
      T(mem, rows * 8, MemKind::io, "targets"), m(mem, rows * 4, MemKind::io, "m"),
      xt(mem, rows * 4, MemKind::io, "x_t"), sums(mem, rows * 8, MemKind::io, "sums"),
      loss(mem, rows * 4, MemKind::io, "loss"), lse(mem, rows * 4, MemKind::io, "lse");
  const Blas blas(mem, nullptr);
  bench::fill_normal(DType::bf16, H.get(), rows * D, 1.0, 1);
  bench::fill_normal(DType::bf16, W.get(), width * D, 2.0 / 64.0, 2);
  bench::fill_targets(T.as<std::int64_t>(), rows, width, 4);
  XL_CUDA_CHECK(cudaMemset(dH.get(), 0, rows * D * 4));
  Handles hs{blas.handle(), blas.lt_handle(), blas.workspace()};
  const bool sm90 = blas.sm90();  // gemm.cu asks for its preferred tiles only there
  std::printf("vocabulary split of %lld rows, %lld tokens, D = %lld, bf16 operands, fp32 compute\n",
              (long long)width, (long long)rows, (long long)D);
  const Gemm logits{"logits", CUBLAS_OP_T, CUBLAS_OP_N, width, rows,    D,     W.get(),
                    D,        H.get(),     D,           0.0f,  Z.get(), width, CUDA_R_16BF};
  // The tiles the product's calls ask for on sm_90 (gemm.cuh preferred_tile), for the labels.
  time_gemm(
      hs, logits,
      [&] {
        gemm_logits(blas, DType::bf16, H.get(), W.get(), rows, width, D, DType::bf16, Z.get());
      },
      sm90 ? preferred_tile(GemmOp::logits) : -1, kSplitRounds);
  // The row kernels on the slab of logits.
  const RowLossParams p = make_row_params(LossSpec{}, width, DType::fp32);
  const ShardColumns sh{0, width};
  const auto stats = [&] {
    launch_split_row_stats(DType::bf16, Z.get(), rows, sh, T.as<std::int64_t>(), p, m.as<float>(),
                           xt.as<float>(), sums.get(), nullptr);
  };
  const auto two = [&] {
    launch_shard_row_max(DType::bf16, Z.get(), rows, sh, T.as<std::int64_t>(), p, m.as<float>(),
                         xt.as<float>(), nullptr);
    launch_shard_row_sums(DType::bf16, Z.get(), rows, sh, m.as<float>(), p, sums.get(), nullptr);
  };
  const auto copy = [&] {
    XL_CUDA_CHECK(
        cudaMemcpyAsync(Z2.get(), Z.get(), rows * width * 2, cudaMemcpyDeviceToDevice, nullptr));
  };
  // The split's statistics and its lse (the split taken as the whole vocabulary), so that dz is
  // a softmax of these logits: realistic operands for the gradient GEMMs.
  stats();
  launch_shard_row_loss(rows, T.as<std::int64_t>(), m.as<float>(), sums.get(), xt.as<float>(), p,
                        loss.as<float>(), lse.as<float>(), nullptr);
  const auto dz_in_place = [&](void* slab) {
    launch_shard_dz_rows(DType::bf16, slab, DType::bf16, DType::bf16, slab, rows, sh,
                         T.as<std::int64_t>(), lse.as<float>(), p,
                         RowGradScale{nullptr, 1.0f / rows}, nullptr);
  };
  // Timed on the copy, so that Z keeps its logits for the rounds.
  const auto dz = [&] { dz_in_place(Z2.get()); };
  std::vector<double> ts, tt, tc, td;
  for (int round = 0; round < kSplitRounds + 1; ++round) {
    const double a = bench::time_calls({}, stats, 0, 1).front();
    const double b = bench::time_calls({}, two, 0, 1).front();
    const double c = bench::time_calls({}, copy, 0, 1).front();
    const double d = bench::time_calls({}, dz, 0, 1).front();
    if (round == 0) continue;
    ts.push_back(a);
    tt.push_back(b);
    tc.push_back(c);
    td.push_back(d);
  }
  const double bytes = 2.0 * rows * width;
  const auto line = [&](const char* what, const std::vector<double>& t, double moved) {
    const double med = bench::summarize_times(t).median;
    std::printf("   %-58s %.3f ms, %.0f GB/s\n", what, med, moved / med / 1e6);
  };
  std::printf("row kernels on the slab (%d interleaved rounds):\n", kSplitRounds);
  line("split statistics (launch_split_row_stats, one read)", ts, bytes);
  line("shard max, then shard sums (two kernels, two reads)", tt, 2 * bytes);
  line("dz in place (launch_shard_dz_rows, read and write)", td, 2 * bytes);
  line("device-to-device copy of the slab (read and write)", tc, 2 * bytes);
  // Z → dz for the backward GEMMs' operand.
  dz_in_place(Z.get());
  const Gemm dh{"dH += dz·W (fp32, beta 1)",
                CUBLAS_OP_N,
                CUBLAS_OP_N,
                D,
                rows,
                width,
                W.get(),
                D,
                Z.get(),
                width,
                1.0f,
                dH.get(),
                D,
                CUDA_R_32F};
  time_gemm(
      hs, dh,
      [&] {
        gemm_dH(blas, DType::bf16, Z.get(), W.get(), rows, width, D, DType::fp32, dH.get(), 1.0f);
      },
      sm90 ? preferred_tile(GemmOp::dH) : -1, kSplitRounds);
  const Gemm dw{"dW of the split (fp32, beta 0)",
                CUBLAS_OP_N,
                CUBLAS_OP_T,
                D,
                width,
                rows,
                H.get(),
                D,
                Z.get(),
                width,
                0.0f,
                dW.get(),
                D,
                CUDA_R_32F};
  time_gemm(
      hs, dw,
      [&] {
        gemm_dW(blas, DType::bf16, Z.get(), H.get(), rows, width, D, DType::fp32, dW.get(), 0.0f);
      },
      sm90 ? preferred_tile(GemmOp::dW) : -1, kSplitRounds);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "split") {
      const std::int64_t rows = argc > 2 ? std::atoll(argv[2]) : 131072;
      const std::int64_t D = argc > 3 ? std::atoll(argv[3]) : 4096;
      std::vector<std::int64_t> widths;
      for (int a = 4; a < argc; ++a) widths.push_back(std::atoll(argv[a]));
      if (widths.empty()) widths.push_back(4008);
      if (rows <= 0 || D <= 0 ||
          std::any_of(widths.begin(), widths.end(), [](std::int64_t w) { return w <= 0; })) {
        std::fprintf(stderr, "gemm_candidates split: rows, D and the widths must be positive\n");
        return 2;
      }
      for (const std::int64_t w : widths) split_mode(rows, D, w);
      return 0;
    }
    const std::int64_t rows = argc > 1 ? std::atoll(argv[1]) : 8192;
    const std::int64_t V = argc > 2 ? std::atoll(argv[2]) : 128256;
    const std::int64_t D = argc > 3 ? std::atoll(argv[3]) : 4096;
    if (rows <= 0 || V <= 0 || D <= 0) {
      std::fprintf(stderr, "gemm_candidates: rows, V and D must be positive\n");
      return 2;
    }
    chunk_mode(rows, V, D);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_candidates: %s\n", e.what());
    return 1;
  }
  return 0;
}

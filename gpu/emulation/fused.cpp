// CPU emulation of the fused strategy: no logits tensor; the forward's online (max, sum) tree over
// vocabulary tiles of 256, and the staged backward's token groups (gpu/plans/fused_plan.hpp: the
// launch decomposition shared with gpu/cuda/fused/). Its reduction orders (docs/arithmetic.md,
// §9; docs/fused.md):
//   vocabulary  the kernel's online states: kFusedThreadColumns columns per thread and tile, the
//               quad, the warps, then the vocabulary ranges pairwise (the ranges depend on the SM
//               count, RunRequest::emulated_sms); declared online_tree, as the CUDA kernel;
//   dH, dW, db  chunked's (gpu/emulation/chunked.cpp), with token groups of fused_group_rows rows
//               for its chunks: the staged backward hands each group's dz to chunked's GEMMs.
//               With a memory budget the kernel sizes its groups from its whole plan; this
//               emulation from the budget less the cuBLAS workspace and the row states, so its
//               groups can differ (the bits of dW and db, not their bound).
// The steps every strategy shares are the engine's (gpu/emulation/common.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "gpu/emulation/chunked.hpp"
#include "gpu/emulation/common.hpp"
#include "gpu/plans/fused_plan.hpp"

namespace xentlab::emulation {
namespace {

using emu::rnd;

// §9 as the fused kernel launches it (gpu/cuda/fused/ forward and finalize): a running
// (max, sum-exp, Σx) state in the accumulator dtype.
struct FusedState {
  emu::OnlineState st;  // (m, s)
  float sx = 0.0f;
};

// the fused kernels' merge_state (s ← rnd_A(s·e^{m−m'} + s2·e^{m2−m'}), m ← m' = max; nothing when
// both are empty) and its Σx merge rnd_A(sx + sx2).
void fused_merge(FusedState& a, const FusedState& b, DType A) {
  const float mn = std::max(a.st.m, b.st.m);
  if (mn != -INFINITY) {
    const float x = a.st.m == -INFINITY ? 0.0f : a.st.s * std::exp(a.st.m - mn);
    const float y = b.st.m == -INFINITY ? 0.0f : b.st.s * std::exp(b.st.m - mn);
    a.st.s = rnd(x + y, A);
    a.st.m = mn;
  }
  a.sx = rnd(a.sx + b.sx, A);
}

// The row's state through the kernel's decomposition (gpu/plans/fused_plan.hpp): per vocabulary
// range, kFusedRowThreads threads per row each fold their kFusedThreadColumns columns of every tile
// of the range (column n0 + (T/W)·w + 8·j + 2·q + e for warp w < W = kFusedRowWarps, lane-in-quad
// q, j < T/(8W), e < 2, in that order; today 4 threads of 64 columns) into an online state; the
// quad merges (q ⊕ q^1, then ⊕ q^2, lower lane first), then the W warps in order; the ranges'
// states are merged pairwise (binary-counter stack, older first), as the finalize kernel does.
// Columns past V are −inf (nothing added). V = n: the row, or a rank's shard of it (vocab_parallel
// launches the kernel per rank over its shard).
FusedState fused_row_state(const EngineContext& c, const float* x, std::int64_t n, bool smoothing) {
  const DType A = c.rc.accum;
  constexpr std::int64_t T = gpu::kFusedVocabTile, W = gpu::kFusedRowWarps,
                         TC = gpu::kFusedThreadColumns;
  const std::int64_t V = n;
  const int sms = c.req->emulated_sms > 0 ? c.req->emulated_sms : gpu::kFusedModelSms;
  const int ranges = gpu::fused_vocab_ranges(c.N, V, sms);
  const std::int64_t VT = (V + T - 1) / T, tpr = (VT + ranges - 1) / ranges;
  std::vector<FusedState> stack;
  std::vector<std::int64_t> weight;
  for (int k = 0; k < ranges; ++k) {
    FusedState th[W][4];  // [warp][lane in quad]
    const std::int64_t t0 = k * tpr, t1 = std::min(VT, t0 + tpr);
    for (std::int64_t vt = t0; vt < t1; ++vt)
      for (int w = 0; w < W; ++w)
        for (int q = 0; q < 4; ++q) {
          FusedState& st = th[w][q];
          const std::int64_t c0 = vt * T + (T / W) * w + 2 * q;
          float v[TC];
          for (int e = 0; e < TC; ++e) {
            const std::int64_t col = c0 + (e / 2) * 8 + e % 2;
            v[e] = col < V ? x[col] : -INFINITY;
          }
          if (smoothing) {
            float ts = 0.0f;
            for (int e = 0; e < TC; ++e)
              if (c0 + (e / 2) * 8 + e % 2 < V) ts = rnd(ts + rnd(v[e], A), A);
            st.sx = rnd(st.sx + ts, A);
          }
          // The thread's fold of its columns is §9's tile merge (columns past V add 0).
          emu::online_merge_tile(st.st, v, TC, A);
        }
    FusedState r;
    for (int w = 0; w < W; ++w) {
      FusedState a = th[w][0], b = th[w][2];
      fused_merge(a, th[w][1], A);
      fused_merge(b, th[w][3], A);
      fused_merge(a, b, A);
      if (w == 0)
        r = a;
      else
        fused_merge(r, a, A);
    }
    std::int64_t n = 1;
    while (!weight.empty() && weight.back() == n) {
      FusedState l = stack.back();
      stack.pop_back();
      weight.pop_back();
      fused_merge(l, r, A);
      r = l;
      n *= 2;
    }
    stack.push_back(r);
    weight.push_back(n);
  }
  FusedState out;
  if (!stack.empty()) {
    out = stack.back();
    for (std::size_t t = stack.size() - 1; t-- > 0;) {
      FusedState l = stack[t];
      fused_merge(l, out, A);
      out = l;
    }
  }
  return out;
}

/// The CUDA strategies' cuBLAS workspace (gpu/cuda/common/gemm.cuh kCublasWorkspaceBytes), which
/// a memory budget holds besides the fused strategy's stage.
constexpr std::int64_t kEmulatedCublasWorkspace = std::int64_t{32} << 20;

class FusedEmulation final : public ChunkedEmulation {
 public:
  std::string name() const override { return "fused"; }
  DeclaredArithmetic arithmetic(const Recipe& r) const override {
    DeclaredArithmetic a = gpu::fused_declared_arithmetic();
    a.note = fmt::format(
        "cpu-emulation fused: the kernel's online (max,sum) states ({} columns per thread and "
        "tile, quad, vocabulary ranges pairwise), accum {}; gradients per token group as chunked",
        gpu::kFusedThreadColumns, to_string(r.accum));
    return a;
  }

 protected:
  VocabSums vocab_sums(const EngineContext& c, const float* x, std::int64_t n, bool need_sx,
                       float*) const override {
    const FusedState f = fused_row_state(c, x, n, need_sx);
    return {f.st.m, f.st.s, f.sx};
  }
  std::int64_t block_rows(const RunRequest& req, std::int64_t V, std::int64_t S) const override {
    const std::int64_t N = std::max<std::int64_t>(S, 1);
    std::int64_t stage = gpu::kFusedStageBytes;
    if (req.memory_budget > 0 && req.chunk_tokens <= 0) {
      const int sms = req.emulated_sms > 0 ? req.emulated_sms : gpu::kFusedModelSms;
      const std::int64_t states =
          (3 * std::int64_t{gpu::fused_vocab_ranges(N, V, sms)} + 1) * N * 4;
      stage = std::max<std::int64_t>(0, req.memory_budget - kEmulatedCublasWorkspace - states);
    }
    return gpu::fused_group_rows(N, V, size_of(req.recipe.logits), stage, req.chunk_tokens);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_fused() {
  return std::make_unique<FusedEmulation>();
}

}  // namespace xentlab::emulation

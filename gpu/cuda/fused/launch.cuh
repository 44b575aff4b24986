#pragma once
// fused: linear + cross-entropy with no logits in device memory (docs/arithmetic.md §9; the
// kernel design and its measurements: docs/fused.md). The launch interface between the files of
// this folder:
//   common.cuh    tile configuration, PTX wrappers, tile loads and epilogue helpers both passes use
//   forward.cu    1. the forward kernels (wgmma, mma.sync) and 2. finalize
//   backward.cuh  3. the backward kernels (wgmma, mma.sync)
//   backward.cu   the backward's launches (launch_fused_backward)
//   strategy.cu   the strategy: plan, kernel choice, launches, refusals
//   fused.hpp     the public switches (kernel path) and record (kernels of the last run)
//
// Three kernels, each a tensor-core GEMM of H (N×D) against W (V×D) with bf16 or fp16 operands and
// fp32 accumulation over D in increasing k, whose epilogue never stores a logit:
//   1. forward: a CTA walks a range of vocabulary tiles (128 tokens × 256 entries) for its 128
//      rows and folds each tile into per-thread running (max, sum-exp) states in the accumulator
//      dtype (and Σx for label smoothing), 4 threads per row with 64 columns each; the thread that
//      holds the target column records x_t; the quad's states are merged into one partial per
//      (row, range). Two kernels with the same tree: wgmma m64n256k16 (HGMMA) fed by TMA on
//      sm_90a, and mma.sync m16n8k16 (HMMA) through cp.async elsewhere (fused.hpp);
//   2. finalize: per row, the partials of the vocabulary ranges are merged pairwise → lse, loss;
//   3. backward: per (token block, vocabulary block) tile the logits are recomputed (the same fp32
//      dot products over D in the same k order, rounded alike: z equals the forward's), dz is
//      formed in registers from the stored lse and the upstream gradient, rounded to the logits
//      dtype (= the operand dtype, see below) and kept in shared memory; then dH[rows, :] +=
//      dz·W[cols, :] and dW[cols, :] += dzᵀ·H[rows, :] are two more tensor-core GEMMs over D in
//      slices of 64, added (load, fp32 add, store) into fp32 accumulators, and db likewise. dz is
//      never written to global memory. The additions into each slice of dH rows take turns in
//      increasing vocabulary tile, those into dW and db in increasing token block (order flags in
//      global memory, tiles claimed in increasing order: backward.cuh), so every output is the
//      same bits from run to run, in the CPU emulation's order (on the wgmma kernel, whose dH tiles
//      are the emulation's 256 entries; the mma.sync kernel's are 128). Two kernels: wgmma
//      (sm_90a, where the forward is wgmma: tiles 128 × 256, the forward's TMA mainloop for the
//      recompute, wgmma m64n64k16 for the gradient GEMMs) and mma.sync (tiles 128 × 128,
//      cp.async; elsewhere).
//
// Recipes: operands bf16 or fp16 (the problem's input dtype); logits dtype = input dtype (dz is
// held in the logits dtype and must be an exact tensor-core operand; an fp32 dz would need an fp32
// GEMM, which this strategy does not have); any accumulator dtype (fp32/bf16/fp16: the online
// state is rounded to it after every operation) and grad dtype. Others are refused by
// can_implement. Linear problems only (a logits problem has its logits in memory already).
// Extra device memory: the fp32 dH and dW accumulators (none when the grad dtype is fp32: the
// outputs accumulate), the fp32 db accumulator, the per-row partial states ((3·ranges + 1)·4
// bytes a row: 24.5 MiB at N = 131072; gpu/plans/fused_plan.hpp), and with
// gradients the backward's order flags (4·fused_order_ints bytes: about 1 MiB at N = 131072,
// V = 128256, D = 4096).
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "gpu/cuda/common/ce_math.cuh"
#include "gpu/cuda/fused/fused.hpp"
#include "numerics/recipe.hpp"

namespace xentlab::gpu::fused {
using namespace cemath;

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
  // The backward's fixed order of additions (backward.cuh, "ordered additions"): zeroed by the
  // caller before each backward; fused_order_ints(N, V, D) ints from `order`.
  int* order = nullptr;
};

/// Ints of the backward's order flags (backward.cuh): a tile counter, then per (token block,
/// consumer half, D slice of 64) the vocabulary tiles that have added into dH, per (vocabulary
/// block of 128, half, slice) the token blocks that have added into dW, and per (vocabulary block
/// of 128, half) those that have added into db. Covers both kernels' tile shapes.
inline std::int64_t fused_order_ints(std::int64_t N, std::int64_t V, std::int64_t D) {
  const std::int64_t MB = (N + 127) / 128, VB = (V + 127) / 128, S = (D + 63) / 64;
  return 1 + MB * 2 * S + VB * 2 * S + VB * 2;
}

/// Launches the forward of `a` (input: bf16 or fp16, the dtype of H and W) on `stream`: the wgmma
/// kernel when `wgmma` (the caller has checked that it applies), else mma.sync with vector loads
/// when `vec` (D % 8 == 0 and 16-byte-aligned H and W). Throws DeviceError.
void launch_fused_forward(DType input, bool vec, bool wgmma, const FusedArgs& a,
                          cudaStream_t stream);
/// Merges the forward's partial states of each row into lse (N) and loss (N). Throws DeviceError.
void launch_fused_finalize(const FusedArgs& a, float* loss, float* lse, cudaStream_t stream);
/// Launches the backward of `a` (dH, dW, db zeroed by the caller) as launch_fused_forward chooses
/// its kernel (backward.cu). Throws DeviceError.
void launch_fused_backward(DType input, bool vec, bool wgmma, const FusedArgs& a,
                           cudaStream_t stream);
/// A backward launch: launch_fused_backward, or a timing variant of it that a lab probe passes to
/// make_cuda_fused_variant (lab/probes/fused_breakdown.cu).
using FusedBackwardLaunch = void (*)(DType, bool, bool, const FusedArgs&, cudaStream_t);

/// The fused strategy with kernel path `path` and backward `backward` (make_cuda_fused(path) is
/// this with launch_fused_backward).
std::unique_ptr<Strategy> make_cuda_fused_variant(FusedKernelPath path,
                                                  FusedBackwardLaunch backward);

}  // namespace xentlab::gpu::fused

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
//   3. backward, two designs (fused.hpp FusedBackward):
//      staged (the registry's): per token group of fused_group_rows rows (gpu/plans/fused_plan.hpp)
//      a kernel recomputes the logits tile by tile (the same fp32 dot products over D in the same
//      k order, rounded alike: z equals the forward's), forms dz from the stored lse and the
//      upstream gradient, rounded to the logits dtype, and writes it into the stage (rows × V);
//      then cuBLAS: dH rows = dz·W, dW += dzᵀ·H rows, db (gpu/cuda/steps.cuh chunk_backward, as
//      chunked), groups in increasing order. Deterministic: fixed GEMM calls, no atomics. The dz
//      kernels: wgmma (sm_90a, the forward's TMA mainloop, one CTA per token block and vocabulary
//      range) and mma.sync (tiles 128 × 128, cp.async; elsewhere).
//      on_chip: per (token block, vocabulary block) tile the logits recomputed, dz kept in shared
//      memory, then dH[rows, :] += dz·W[cols, :] and dW[cols, :] += dzᵀ·H[rows, :] as two more
//      tensor-core GEMMs over D in slices of 64, added (load, fp32 add, store) into fp32
//      accumulators, and db likewise; dz is never written to global memory. The additions into
//      each slice of dH rows take turns in increasing vocabulary tile, those into dW and db in
//      increasing token block (order flags in global memory, tiles claimed in increasing order:
//      backward.cuh), so every output is the same bits from run to run. Two kernels: wgmma
//      (sm_90a, tiles 128 × 256, wgmma m64n64k16 for the gradient GEMMs) and mma.sync (tiles
//      128 × 128).
//
// Recipes: operands bf16 or fp16 (the problem's input dtype); logits dtype = input dtype (dz is
// held in the logits dtype and must be an exact tensor-core operand; an fp32 dz would need an fp32
// GEMM, which this strategy does not have); any accumulator dtype (fp32/bf16/fp16: the online
// state is rounded to it after every operation) and grad dtype. Others are refused by
// can_implement. Linear problems only (a logits problem has its logits in memory already).
// Extra device memory: the per-row partial states ((3·ranges + 1)·4 bytes a row: 24.5 MiB at
// N = 131072; gpu/plans/fused_plan.hpp); with gradients, staged: the dz stage (rows × V, 192 MiB
// by default), the cuBLAS workspace and chunked's accumulators (steps.cuh plan_workspace: none
// for fp32 gradients with an fp32 accumulator); on_chip: the fp32 dH and dW accumulators (none
// when the grad dtype is fp32), the fp32 db accumulator and the order flags (4·fused_order_ints
// bytes: about 1 MiB at N = 131072, V = 128256, D = 4096).
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
  // The on-chip backward's fixed order of additions (backward.cuh, "ordered additions"): zeroed
  // by the caller before each backward; fused_order_ints(N, V, D) ints from `order`.
  int* order = nullptr;
  // The staged backward's token group: dz of rows [stage_r0, stage_r0 + stage_rows) into `stage`
  // (stage_rows × V, row-major, logits dtype = input dtype).
  void* stage = nullptr;
  std::int64_t stage_r0 = 0, stage_rows = 0;
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
/// The staged backward's dz of one token group (a.stage, a.stage_r0, a.stage_rows; a.lse and a.g
/// set): the logits recomputed as the forward computed them and dz written in the logits dtype,
/// 0 on rows without a valid target; the kernel chosen as launch_fused_forward chooses. Throws
/// DeviceError.
void launch_fused_dz(DType input, bool vec, bool wgmma, const FusedArgs& a, cudaStream_t stream);
/// An on-chip backward launch: launch_fused_backward, or a timing variant of it that a lab probe
/// passes to make_cuda_fused_variant (lab/probes/fused_breakdown.cu).
using FusedBackwardLaunch = void (*)(DType, bool, bool, const FusedArgs&, cudaStream_t);

/// The fused strategy with kernel path `path` and the on-chip backward `backward`, or the staged
/// backward where `backward` is null (make_cuda_fused(path, FusedBackward::on_chip) is this with
/// launch_fused_backward; make_cuda_fused(path) with null).
std::unique_ptr<Strategy> make_cuda_fused_variant(FusedKernelPath path,
                                                  FusedBackwardLaunch backward);

}  // namespace xentlab::gpu::fused

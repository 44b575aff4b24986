#pragma once
// The fused CUDA strategy (gpu/cuda/fused/) as tests and probes see it: the choice of kernel path
// and which kernels a run took. Forward and backward each have two kernels: wgmma with TMA loads
// (sm_90a devices; D % 8 == 0, 16-byte-aligned H and W, N ≥ 128, V ≥ 256, D ≥ 64) and mma.sync
// (every other case). The two forwards fold the same reduction tree (gpu/plans/fused_plan.hpp):
// their loss and lse must agree bit for bit; so must the dz that the two staged backwards write,
// and so their gradients (test_gpu_strategies). Host C++: no CUDA header is needed to include this.
#include <memory>

#include "gpu/strategy.hpp"

namespace xentlab::gpu {

enum class FusedKernelPath {
  automatic,  ///< wgmma where it applies, else mma.sync (the registry's fused strategy)
  mma_sync,   ///< always the mma.sync kernels
};

/// The fused strategy's backward (docs/fused.md).
enum class FusedBackward {
  /// The registry's: per token group (gpu/plans/fused_plan.hpp fused_group_rows) a kernel
  /// recomputes the logits and writes dz (logits dtype) into a stage of rows × V, and cuBLAS sums
  /// the gradients (dH rows = dz·W, dW += dzᵀ·H, in increasing group). Extra memory besides the
  /// forward's row states: the stage (192 MiB by default), the cuBLAS workspace and chunked's
  /// buffers (gpu/cuda/steps.cuh plan_workspace: with several groups an fp32 V·D dW accumulator
  /// unless grad and accum are fp32, and a second V·D fp32 buffer with a 16-bit accum).
  staged,
  /// dz never leaves the chip: per (token block, vocabulary tile) the gradient GEMMs run on the
  /// tile's dz and add into fp32 accumulators in a fixed order (order flags in global memory).
  /// Extra memory about 26 MiB at N = 131072, and slower (docs/benchmarks.md). Not in the registry
  /// and without a CPU emulation of its own order (its gradients are held to the declared bound).
  on_chip,
};

/// The fused strategy whose runs take kernels by `path` (forward and backward alike) and the
/// backward `backward`; the registry holds the automatic, staged one (gpu/registry.cpp).
std::unique_ptr<Strategy> make_cuda_fused(FusedKernelPath path,
                                          FusedBackward backward = FusedBackward::staged);
std::unique_ptr<Strategy> make_cuda_fused();  ///< make_cuda_fused(FusedKernelPath::automatic)

/// The kernels of the last run of one fused strategy object: "wgmma" or "mma.sync" each, "" before
/// any run (backward: before any run that wanted gradients).
struct FusedKernels {
  const char* forward = "";
  const char* backward = "";
};
/// `fused` must be a strategy made by make_cuda_fused (the registry's CUDA "fused" is one); throws
/// std::invalid_argument naming the strategy otherwise. Each object keeps its own record (no
/// process-wide state); concurrent runs of one object leave the record of one of them.
FusedKernels last_fused_kernels(const Strategy& fused);

}  // namespace xentlab::gpu

#pragma once
// The fused CUDA strategy (gpu/cuda/fused/) as tests and probes see it: the choice of kernel path
// and which kernels a run took. Forward and backward each have two kernels: wgmma with TMA loads
// (sm_90a devices; D % 8 == 0, 16-byte-aligned H and W, N ≥ 128, V ≥ 256, D ≥ 64) and mma.sync
// (every other case). The two forwards fold the same reduction tree (gpu/plans/fused_plan.hpp):
// their loss and lse must agree bit for bit; the two backwards differ only in the order of their
// fp32 gradient sums (test_gpu_strategies). Host C++: no CUDA header is needed to include this.
#include <memory>

#include "gpu/strategy.hpp"

namespace xentlab::gpu {

enum class FusedKernelPath {
  automatic,  ///< wgmma where it applies, else mma.sync (the registry's fused strategy)
  mma_sync,   ///< always the mma.sync kernels
};

/// The fused strategy whose runs take kernels by `path` (forward and backward alike); the registry
/// holds the automatic one (gpu/registry.cpp).
std::unique_ptr<Strategy> make_cuda_fused(FusedKernelPath path);
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

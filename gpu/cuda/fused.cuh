#pragma once
// Switches and state of the fused strategy's kernels (gpu/cuda/fused.cu) for tests and benchmarks.
// Forward and backward each have two kernels: wgmma with TMA loads (sm_90a devices; D % 8 == 0,
// 16-byte-aligned H and W, N ≥ 128, V ≥ 256, D ≥ 64) and mma.sync (every other case). The two
// forwards fold the same reduction tree (gpu/fused_plan.hpp): their loss and lse must agree bit for
// bit; the two backwards differ only in the order of their fp32 gradient sums (test_gpu_strategies).

namespace xentlab::gpu {

enum class FusedKernelPath {
  automatic,  ///< wgmma where it applies, else mma.sync (the default)
  mma_sync,   ///< always the mma.sync kernels
};

/// Process-wide, for forward and backward; for tests and benchmarks (not thread-safe against
/// concurrent fused runs).
void set_fused_kernel_path(FusedKernelPath p);
FusedKernelPath fused_kernel_path();

/// "wgmma" or "mma.sync": the kernel the last fused forward (backward) in this process ran ("" before
/// any).
const char* last_fused_forward_kernel();
const char* last_fused_backward_kernel();
void note_fused_forward_kernel(bool wgmma);
void note_fused_backward_kernel(bool wgmma);

}  // namespace xentlab::gpu

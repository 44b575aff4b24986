#pragma once
// Switches and state of the fused strategy's forward (gpu/cuda/fused.cu) for tests and benchmarks.
// The forward has two kernels that fold the same reduction tree (gpu/fused_plan.hpp): wgmma with
// TMA loads (sm_90a devices; D % 8 == 0, 16-byte-aligned H and W, N ≥ 128, V ≥ 256, D ≥ 64) and
// mma.sync (every other case). Their loss and lse must agree bit for bit (test_gpu_strategies).

namespace xentlab::gpu {

enum class FusedForwardPath {
  automatic,  ///< wgmma where it applies, else mma.sync (the default)
  mma_sync,   ///< always the mma.sync kernel
};

/// Process-wide; for tests and benchmarks (not thread-safe against concurrent fused runs).
void set_fused_forward_path(FusedForwardPath p);
FusedForwardPath fused_forward_path();

/// "wgmma" or "mma.sync": the kernel the last fused forward in this process ran ("" before any).
const char* last_fused_forward_kernel();
void note_fused_forward_kernel(bool wgmma);

}  // namespace xentlab::gpu

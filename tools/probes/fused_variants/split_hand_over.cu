// The fused backward variant FusedBackwardSplitHandOver (fused_variants.cuh) for
// fused_breakdown.
#include "gpu/cuda/fused/backward.cuh"
#include "tools/probes/fused_variants/fused_variants.cuh"

namespace xentlab::gpu::fused {

template void launch_fused_backward<FusedBackwardSplitHandOver>(DType input, bool vec, bool wgmma,
                                                                const FusedArgs& a,
                                                                cudaStream_t stream);

}  // namespace xentlab::gpu::fused

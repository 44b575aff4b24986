// The fused strategy's backward kernels as the strategy runs them (backward.cuh, launch.cuh).
#include "gpu/cuda/fused/backward.cuh"

namespace xentlab::gpu::fused {

template void launch_fused_backward<FusedStrategyBackward>(DType input, bool vec, bool wgmma,
                                                           const FusedArgs& a, cudaStream_t stream);

}  // namespace xentlab::gpu::fused

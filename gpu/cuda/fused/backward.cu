// The fused strategy's backwards: their launches (launch.cuh) of the kernels of backward.cuh.
#include "gpu/cuda/fused/backward.cuh"

namespace xentlab::gpu::fused {

void launch_fused_backward(DType input, bool vec, bool wgmma, const FusedArgs& a,
                           cudaStream_t stream) {
  input == DType::bf16 ? launch_backward<__nv_bfloat16>(vec, wgmma, a, stream)
                       : launch_backward<__half>(vec, wgmma, a, stream);
}

void launch_fused_dz(DType input, bool vec, bool wgmma, const FusedArgs& a, cudaStream_t stream) {
  input == DType::bf16 ? launch_dz<__nv_bfloat16>(vec, wgmma, a, stream)
                       : launch_dz<__half>(vec, wgmma, a, stream);
}

}  // namespace xentlab::gpu::fused

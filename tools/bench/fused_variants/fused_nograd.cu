// Timing-only variant of the fused strategy for tools/bench/fused_breakdown.cu: gpu/cuda/fused.cu
// compiled with XL_FUSED_EXP_NO_GRAD (its gradients are wrong by construction; docs/fused.md).
#define XL_FUSED_EXP_NO_GRAD
#define make_cuda_fused make_cuda_fused_nograd
#include "gpu/cuda/fused.cu"

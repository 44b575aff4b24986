// Timing variant of the fused strategy for tools/bench/fused_breakdown.cu: gpu/cuda/fused.cu with
// backward raster groups of 16 token blocks in both backward kernels (XL_FUSED_GROUP_N; the
// strategy's are 8 for wgmma, 16 for mma.sync); same results up to the order of the fp32
// reductions (docs/fused.md).
#define XL_FUSED_GROUP_N 16
#define make_cuda_fused make_cuda_fused_group16
#include "gpu/cuda/fused.cu"

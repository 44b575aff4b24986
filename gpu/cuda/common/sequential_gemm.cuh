#pragma once
// The GEMM of the sequential-sum model (gpu/cuda/naive.cu, the differential baseline's model of a
// candidate that sums in index order): every output element one fp32 sum over k in increasing
// order, each product added with one rounding (fmaf; exact products for bf16/fp16 operands),
// rounded once to the output dtype — the CPU emulation's GEMM order (gpu/emulation/common.cpp
// block_linear_logits, block_dH, add_dW_row), so its logits, dH and dW are the emulation's bit for
// bit given the same operands. A plain shared-memory tiled kernel (64×64 outputs per block of 256
// threads, 4×4 per thread, 16 k per tile): far from cuBLAS's rate, fast enough for a baseline.
#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/dtype.hpp"

namespace xentlab::gpu {

/// A row-major or transposed operand: element (i, j) at p[i·s_i + j·s_j] (in elements of the
/// GEMM's operand dtype).
struct StridedOperand {
  const void* p = nullptr;
  std::int64_t s_i = 0, s_j = 0;
};

/// C (M, N) row-major with leading dimension ldc: C[m][n] = rnd_out(c0 + Σ_{k<K} A(m, k)·B(k, n)),
/// the sum in increasing k with one rounding per fma, c0 = C[m][n] (read as fp32: `out` must be
/// fp32) when accumulate, else 0. A and B in `op`. Throws InputError for another dtype or an
/// accumulate into a 16-bit output; DeviceError on a launch failure.
void sequential_gemm(DType op, StridedOperand A, StridedOperand B, std::int64_t M, std::int64_t N,
                     std::int64_t K, DType out, void* C, std::int64_t ldc, bool accumulate,
                     cudaStream_t stream);

}  // namespace xentlab::gpu

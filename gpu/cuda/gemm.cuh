#pragma once
// cuBLAS wrappers of the CUDA strategies, for row-major tensors (docs/arithmetic.md §1, §8).
// Every GEMM uses cublasGemmEx_64 with compute type CUBLAS_COMPUTE_32F and the default math mode
// (no TF32, no reduced-precision reductions): products of the stored operands accumulated in fp32,
// the result rounded once to the output dtype. Operands of one GEMM share a dtype; cuBLAS writes an
// output of the operand dtype or fp32 (operands bf16/fp16), or fp32 only (operands fp32). Callers
// use gemm_output_direct() to choose between a direct write and an fp32 temporary that a rounding
// kernel (ce_kernels.cuh) converts — the same single rounding of the fp32 accumulator.
// The cuBLAS workspace is set explicitly (cublasSetWorkspace) from the tracking allocator at the
// first GEMM of a handle, so it counts as extra device memory (and a run without GEMMs has none). Errors: DeviceError through XL_CUBLAS_CHECK.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/cuda/device_buffer.cuh"
#include "numerics/dtype.hpp"

namespace xentlab::gpu {

/// Bytes of cuBLAS workspace every strategy sets (32 MiB, NVIDIA's advice for Hopper).
constexpr std::int64_t kCublasWorkspaceBytes = std::int64_t{32} << 20;

/// A cuBLAS handle bound to a stream, with its workspace taken from the tracker (extra memory).
class Blas {
 public:
  Blas(DeviceMemoryTracker& mem, cudaStream_t stream);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  /// The handle; the first call takes the workspace from the tracker (extra memory).
  cublasHandle_t handle() const;
  cudaStream_t stream() const { return stream_; }

 private:
  DeviceMemoryTracker* mem_ = nullptr;
  cublasHandle_t h_ = nullptr;
  cudaStream_t stream_ = nullptr;
  mutable DeviceBuffer workspace_;
};

/// True when cuBLAS writes an output of dtype `out` from operands of dtype `operands` directly.
bool gemm_output_direct(DType operands, DType out);

/// logits (rows, V) = H (rows, D) · Wᵀ, W (V, D); H and W in `in`, logits in `out`
/// (gemm_output_direct(in, out) must hold).
void gemm_logits(const Blas& b, DType in, const void* H /* (rows, D) */, const void* W /* (V, D) */,
                 std::int64_t rows, std::int64_t V, std::int64_t D, DType out,
                 void* logits /* (rows, V) */);

/// dH (rows, D) = dz (rows, V) · W (V, D); operands in `op`, dH in `out`; beta 0.
void gemm_dH(const Blas& b, DType op, const void* dz /* (rows, V) */, const void* W /* (V, D) */,
             std::int64_t rows, std::int64_t V, std::int64_t D, DType out,
             void* dH /* (rows, D) */);

/// dW (V, D) = beta·dW + dzᵀ · H, dz (rows, V), H (rows, D); operands in `op`, dW in `out`;
/// beta ∈ {0, 1} (1: accumulate in the output dtype, one rounding per call).
void gemm_dW(const Blas& b, DType op, const void* dz /* (rows, V) */, const void* H /* (rows, D) */,
             std::int64_t rows, std::int64_t V, std::int64_t D, DType out, void* dW /* (V, D) */,
             float beta);

}  // namespace xentlab::gpu

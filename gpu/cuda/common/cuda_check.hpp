#pragma once
// The one error-check macro family for CUDA runtime calls, cuBLAS calls and kernel launches.
// Each throws xentlab::DeviceError with the expression, the error's name and text, file and line.
//   XL_CUDA_CHECK(cudaMalloc(&p, n));
//   XL_CUBLAS_CHECK(cublasGemmEx(...));
//   kernel<<<g, b>>>(...); XL_CUDA_CHECK_LAUNCH();
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "numerics/error.hpp"

namespace xentlab::gpu::detail {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  throw DeviceError(std::string(file) + ":" + std::to_string(line) + ": " + expr +
                    " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* expr, const char* file,
                                      int line) {
  throw DeviceError(std::string(file) + ":" + std::to_string(line) + ": " + expr +
                    " failed: " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
}

}  // namespace xentlab::gpu::detail

#define XL_CUDA_CHECK(expr)                                                   \
  do {                                                                        \
    const cudaError_t xl_err_ = (expr);                                       \
    if (xl_err_ != cudaSuccess)                                               \
      ::xentlab::gpu::detail::throw_cuda(xl_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define XL_CUBLAS_CHECK(expr)                                                  \
  do {                                                                         \
    const cublasStatus_t xl_st_ = (expr);                                      \
    if (xl_st_ != CUBLAS_STATUS_SUCCESS)                                       \
      ::xentlab::gpu::detail::throw_cublas(xl_st_, #expr, __FILE__, __LINE__); \
  } while (0)

/// After a kernel launch: the launch error, if any (does not synchronise).
#define XL_CUDA_CHECK_LAUNCH() XL_CUDA_CHECK(cudaGetLastError())

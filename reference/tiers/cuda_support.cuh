#pragma once
// What the GPU parts of the reference share (the cuda tier, the calibrated-target sampler):
// error checks, an owning device array, a cuBLAS handle in plain fp64 mode, a row-major DGEMM and
// the exact widening of bf16/fp16/fp32 storage to doubles. Included by .cu files only; the
// kernels and helpers have internal linkage (one copy per translation unit).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "numerics/dtype.hpp"
#include "numerics/error.hpp"

namespace xentlab {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(fmt::format("cuda reference: {}: {}", what, cudaGetErrorString(e)));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("cuda reference: {}: cuBLAS status {}", what, int(s)));
}

template <class T>
struct DeviceArray {
  T* p = nullptr;
  std::size_t n = 0;
  DeviceArray() = default;
  explicit DeviceArray(std::size_t count, const char* what) : n(count) {
    if (n) check(cudaMalloc(&p, n * sizeof(T)), what);
  }
  ~DeviceArray() {
    if (p) cudaFree(p);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr, o.n = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(p, o.p);
    std::swap(n, o.n);
    return *this;
  }
};

struct Cublas {
  cublasHandle_t h = nullptr;
  Cublas() {
    check(cublasCreate(&h), "cublasCreate");
    // Plain fp64 arithmetic: no emulation or reduced-precision mode.
    check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  ~Cublas() { cublasDestroy(h); }
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
};

// Row-major C (m×n, ldc) = alpha·op(A)·op(B) + beta·C (the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ).
void dgemm(cublasHandle_t h, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
           double alpha, const double* A, std::int64_t lda, const double* B, std::int64_t ldb,
           double beta, double* C, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  for (std::int64_t v : {m, n, k, lda, ldb, ldc})
    if (v > std::numeric_limits<int>::max())
      throw InputError(
          fmt::format("cuda reference: GEMM dimension {} does not fit cuBLAS's 32-bit "
                      "integers",
                      v));
  check(cublasDgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(n),
                    int(m), int(k), &alpha, B, int(ldb), A, int(lda), &beta, C, int(ldc)),
        "cublasDgemm");
}

// Raw dtype storage → doubles (exact), and |x| when abs_out is given.
__global__ void widen_kernel(const void* raw, int dtype, std::int64_t n, double* out,
                             double* abs_out) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    double v;
    if (dtype == 0) {
      v = static_cast<const float*>(raw)[i];
    } else if (dtype == 2) {  // bf16: the high half of an fp32
      v = __uint_as_float(std::uint32_t(static_cast<const std::uint16_t*>(raw)[i]) << 16);
    } else {  // fp16
      v = __half2float(static_cast<const __half*>(raw)[i]);
    }
    out[i] = v;
    if (abs_out) abs_out[i] = ::fabs(v);
  }
}

int grid_for(std::int64_t n, int threads = 256) {
  return static_cast<int>(std::min<std::int64_t>((n + threads - 1) / threads, 65535 * 16));
}

int dtype_code(DType t) {
  switch (t) {
    case DType::fp32:
      return 0;
    case DType::fp16:
      return 1;
    case DType::bf16:
      return 2;
    default:
      throw InputError("cuda reference: H/W must be fp32, fp16 or bf16");
  }
}

template <class T>
DeviceArray<T> upload(const std::vector<T>& v, const char* what) {
  DeviceArray<T> d(v.size(), what);
  if (!v.empty())
    check(cudaMemcpy(d.p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), what);
  return d;
}

}  // namespace
}  // namespace xentlab

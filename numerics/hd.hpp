#pragma once
// XL_HD marks small inline arithmetic that the CPU code and the CUDA kernels share (the
// reference's row arithmetic, the error-free transformations): __host__ __device__ under nvcc,
// nothing elsewhere. xl_isfinite/xl_fma/... pick the host's <cmath> or the device's built-ins.
#include <cmath>
#include <limits>

#if defined(__CUDACC__)
#define XL_HD __host__ __device__
#else
#define XL_HD
#endif

namespace xentlab::hd {

XL_HD inline bool isfinite(double x) {
#if defined(__CUDA_ARCH__)
  return ::isfinite(x);
#else
  return std::isfinite(x);
#endif
}
XL_HD inline bool isinf(double x) {
#if defined(__CUDA_ARCH__)
  return ::isinf(x);
#else
  return std::isinf(x);
#endif
}
XL_HD inline double fma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return ::fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
XL_HD inline double fabs(double x) {
#if defined(__CUDA_ARCH__)
  return ::fabs(x);
#else
  return std::fabs(x);
#endif
}

XL_HD inline double inf() {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(0x7ff0000000000000LL);
#else
  return std::numeric_limits<double>::infinity();
#endif
}
XL_HD inline double nan() {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(0x7ff8000000000000LL);
#else
  return std::numeric_limits<double>::quiet_NaN();
#endif
}

}  // namespace xentlab::hd

// The sequential-order GEMM (see sequential_gemm.cuh). Each block computes a 64×64 tile of C;
// thread (ty, tx) of 16×16 owns rows 4·ty … 4·ty + 3 and columns 4·tx … 4·tx + 3 of it and adds the
// products of every k into its 16 accumulators in increasing k: tiles of 16 k in order, within a
// tile k in order. Operand tiles are staged in shared memory as fp32 (exact conversions); each
// thread loads 4 elements of each, along the operand's contiguous index when it has one.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "gpu/cuda/common/ce_math.cuh"
#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/common/sequential_gemm.cuh"
#include "numerics/error.hpp"

namespace xentlab::gpu {
namespace {
using cemath::to_f;

constexpr int kBM = 64, kBN = 64, kBK = 16, kTM = 4, kTN = 4, kThreadsPerBlock = 256;
static_assert((kBM / kTM) * (kBN / kTN) == kThreadsPerBlock, "one 4×4 micro-tile per thread");
static_assert(kBM * kBK == 4 * kThreadsPerBlock && kBK * kBN == 4 * kThreadsPerBlock,
              "four operand elements per thread and tile");

__device__ __forceinline__ void store_out(void* C, std::int64_t idx, int out, float v) {
  if (out == 0)
    static_cast<float*>(C)[idx] = v;
  else if (out == 1)
    static_cast<__nv_bfloat16*>(C)[idx] = __float2bfloat16_rn(v);
  else
    static_cast<__half*>(C)[idx] = __float2half_rn(v);
}

template <class T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    sequential_gemm_kernel(const T* A, std::int64_t a_i, std::int64_t a_k, const T* B,
                           std::int64_t b_k, std::int64_t b_j, std::int64_t M, std::int64_t N,
                           std::int64_t K, int out, void* C, std::int64_t ldc, bool accumulate) {
  __shared__ float As[kBK][kBM];
  __shared__ float Bs[kBK][kBN];
  const std::int64_t m0 = std::int64_t(blockIdx.y) * kBM, n0 = std::int64_t(blockIdx.x) * kBN;
  const int tx = threadIdx.x % (kBN / kTN), ty = threadIdx.x / (kBN / kTN);
  float acc[kTM][kTN];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const std::int64_t m = m0 + ty * kTM + i, n = n0 + tx * kTN + j;
      acc[i][j] = accumulate && m < M && n < N ? static_cast<const float*>(C)[m * ldc + n] : 0.0f;
    }
  for (std::int64_t k0 = 0; k0 < K; k0 += kBK) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int e = threadIdx.x + kThreadsPerBlock * q;
      // A tile (kBM rows, kBK k): along k when k is A's contiguous index, else along the rows.
      int mm, kk;
      if (a_k == 1) {
        kk = e % kBK;
        mm = e / kBK;
      } else {
        mm = e % kBM;
        kk = e / kBM;
      }
      std::int64_t m = m0 + mm, k = k0 + kk;
      As[kk][mm] = m < M && k < K ? to_f(A[m * a_i + k * a_k]) : 0.0f;
      int nn;
      if (b_j == 1) {
        nn = e % kBN;
        kk = e / kBN;
      } else {
        kk = e % kBK;
        nn = e / kBK;
      }
      const std::int64_t n = n0 + nn;
      k = k0 + kk;
      Bs[kk][nn] = n < N && k < K ? to_f(B[k * b_k + n * b_j]) : 0.0f;
    }
    __syncthreads();
    const int kn = K - k0 < kBK ? static_cast<int>(K - k0) : kBK;  // no padded k is added
    for (int kk = 0; kk < kn; ++kk) {
      float a[kTM], b[kTN];
#pragma unroll
      for (int i = 0; i < kTM; ++i) a[i] = As[kk][ty * kTM + i];
#pragma unroll
      for (int j = 0; j < kTN; ++j) b[j] = Bs[kk][tx * kTN + j];
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const std::int64_t m = m0 + ty * kTM + i, n = n0 + tx * kTN + j;
      if (m < M && n < N) store_out(C, m * ldc + n, out, acc[i][j]);
    }
}

int out_code(DType t) {
  switch (t) {
    case DType::fp32:
      return 0;
    case DType::bf16:
      return 1;
    case DType::fp16:
      return 2;
    default:
      break;
  }
  throw InputError("sequential GEMM: unsupported output dtype " + std::string(to_string(t)));
}

}  // namespace

void sequential_gemm(DType op, StridedOperand A, StridedOperand B, std::int64_t M, std::int64_t N,
                     std::int64_t K, DType out, void* C, std::int64_t ldc, bool accumulate,
                     cudaStream_t stream) {
  const int oc = out_code(out);
  if (accumulate && out != DType::fp32)
    throw InputError("sequential GEMM: accumulating into a " + std::string(to_string(out)) +
                     " output (only fp32 holds a running sum)");
  if (M <= 0 || N <= 0) return;
  const std::int64_t gx = (N + kBN - 1) / kBN, gy = (M + kBM - 1) / kBM;
  if (gx > 0x7fffffffLL || gy > 65535)
    throw InputError("sequential GEMM: " + std::to_string(M) + "×" + std::to_string(N) +
                     " outputs exceed one grid (rows ≤ " + std::to_string(65535LL * kBM) + ")");
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  switch (op) {
    case DType::fp32:
      sequential_gemm_kernel<float><<<grid, kThreadsPerBlock, 0, stream>>>(
          static_cast<const float*>(A.p), A.s_i, A.s_j, static_cast<const float*>(B.p), B.s_i,
          B.s_j, M, N, K, oc, C, ldc, accumulate);
      break;
    case DType::bf16:
      sequential_gemm_kernel<__nv_bfloat16><<<grid, kThreadsPerBlock, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(A.p), A.s_i, A.s_j,
          static_cast<const __nv_bfloat16*>(B.p), B.s_i, B.s_j, M, N, K, oc, C, ldc, accumulate);
      break;
    case DType::fp16:
      sequential_gemm_kernel<__half><<<grid, kThreadsPerBlock, 0, stream>>>(
          static_cast<const __half*>(A.p), A.s_i, A.s_j, static_cast<const __half*>(B.p), B.s_i,
          B.s_j, M, N, K, oc, C, ldc, accumulate);
      break;
    default:
      throw InputError("sequential GEMM: unsupported operand dtype " + std::string(to_string(op)));
  }
  XL_CUDA_CHECK_LAUNCH();
}

}  // namespace xentlab::gpu

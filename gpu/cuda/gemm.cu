// cuBLAS wrappers (see gemm.cuh). Row-major X (r, c) is column-major Xᵀ (c, r) with ld = c, so
// every row-major product is issued as its transpose.
#include <string>

#include "gpu/cuda/cuda_check.hpp"
#include "gpu/cuda/gemm.cuh"

namespace xentlab::gpu {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::fp32:
      return CUDA_R_32F;
    case DType::fp16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      break;
  }
  throw InputError("cuBLAS GEMM: unsupported dtype " + std::string(to_string(t)));
}

void gemm(const Blas& b, cublasOperation_t ta, cublasOperation_t tb, std::int64_t m, std::int64_t n,
          std::int64_t k, const void* A, std::int64_t lda, const void* B, std::int64_t ldb,
          DType op, float beta, void* C, std::int64_t ldc, DType out) {
  if (!gemm_output_direct(op, out))
    throw InputError("cuBLAS GEMM: no direct " + std::string(to_string(out)) + " output from " +
                     std::string(to_string(op)) + " operands");
  if (m <= 0 || n <= 0) return;
  const float alpha = 1.0f;
  XL_CUBLAS_CHECK(cublasGemmEx_64(b.handle(), ta, tb, m, n, k, &alpha, A, cuda_type(op), lda, B,
                                  cuda_type(op), ldb, &beta, C, cuda_type(out), ldc,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

Blas::Blas(DeviceMemoryTracker& mem, cudaStream_t stream) : mem_(&mem), stream_(stream) {
  XL_CUBLAS_CHECK(cublasCreate(&h_));
  try {
    XL_CUBLAS_CHECK(cublasSetStream(h_, stream));
    XL_CUBLAS_CHECK(cublasSetMathMode(h_, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    cublasDestroy(h_);
    throw;
  }
}

cublasHandle_t Blas::handle() const {
  // The workspace is taken at the first GEMM, so a run that issues none (fused) holds none.
  if (workspace_.get() == nullptr) {
    workspace_ = DeviceBuffer(*mem_, kCublasWorkspaceBytes, MemKind::extra, "cuBLAS workspace");
    XL_CUBLAS_CHECK(
        cublasSetWorkspace(h_, workspace_.get(), static_cast<std::size_t>(kCublasWorkspaceBytes)));
  }
  return h_;
}

Blas::~Blas() {
  if (h_ != nullptr) cublasDestroy(h_);
}

bool gemm_output_direct(DType operands, DType out) {
  if (operands == DType::fp32) return out == DType::fp32;
  if (operands == DType::bf16 || operands == DType::fp16)
    return out == operands || out == DType::fp32;
  return false;
}

void gemm_logits(const Blas& b, DType in, const void* H, const void* W, std::int64_t rows,
                 std::int64_t V, std::int64_t D, DType out, void* logits) {
  // logitsᵀ (V, rows) = W (V, D) · Hᵀ (D, rows): A = W col-major (D, V) transposed, B = H (D,
  // rows).
  gemm(b, CUBLAS_OP_T, CUBLAS_OP_N, V, rows, D, W, D, H, D, in, 0.0f, logits, V, out);
}

void gemm_dH(const Blas& b, DType op, const void* dz, const void* W, std::int64_t rows,
             std::int64_t V, std::int64_t D, DType out, void* dH) {
  // dHᵀ (D, rows) = Wᵀ (D, V) · dzᵀ (V, rows).
  gemm(b, CUBLAS_OP_N, CUBLAS_OP_N, D, rows, V, W, D, dz, V, op, 0.0f, dH, D, out);
}

void gemm_dW(const Blas& b, DType op, const void* dz, const void* H, std::int64_t rows,
             std::int64_t V, std::int64_t D, DType out, void* dW, float beta) {
  // dWᵀ (D, V) = Hᵀ (D, rows) · dz (rows, V); dz col-major is (V, rows), so op T.
  gemm(b, CUBLAS_OP_N, CUBLAS_OP_T, D, V, rows, H, D, dz, V, op, beta, dW, D, out);
}

}  // namespace xentlab::gpu

// The selftest model's fp64 products on a GPU (harness/selftest/model_gemms.hpp): W and the
// chunk's dW stay on the device; per block of token rows the logits go to the host (the per-row
// arithmetic is the host's, as in the CPU model) and dL/dlogits come back for dH and dW.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <limits>
#include <memory>
#include <stdexcept>
#include <type_traits>

#include "harness/selftest/model_gemms.hpp"

namespace xentlab::selftest {
namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(
        fmt::format("the selftest's model on the GPU: {}: {}", what, cudaGetErrorString(e)));
}
void ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(
        fmt::format("the selftest's model on the GPU: {}: cuBLAS status {}", what, int(s)));
}

struct DeviceFree {
  void operator()(double* p) const { cudaFree(p); }
};
using DeviceDoubles = std::unique_ptr<double, DeviceFree>;

// A cuBLAS handle destroyed with its owner, also when a later step of the owner's constructor
// throws (a destructor does not run for a half-built object).
struct BlasDestroy {
  void operator()(cublasHandle_t h) const { cublasDestroy(h); }
};
using BlasHandle = std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, BlasDestroy>;

BlasHandle blas_handle() {
  cublasHandle_t h = nullptr;
  ok(cublasCreate(&h), "cublasCreate");
  return BlasHandle(h);
}

DeviceDoubles device_doubles(std::int64_t n, const char* what) {
  void* p = nullptr;
  ok(cudaMalloc(&p, static_cast<std::size_t>(n) * sizeof(double)), what);
  return DeviceDoubles(static_cast<double*>(p));
}

int dim(std::int64_t v) {
  if (v > std::numeric_limits<int>::max())
    throw std::runtime_error(fmt::format(
        "the selftest's model on the GPU: a GEMM dimension {} past cuBLAS's 32-bit integers", v));
  return static_cast<int>(v);
}

class CudaGemms final : public Gemms<double> {
 public:
  CudaGemms(const double* W, std::int64_t V, std::int64_t D)
      : V_(V),
        D_(D),
        W_(device_doubles(V * D, "W (fp64)")),
        dW_(device_doubles(V * D, "the chunk's dW (fp64)")),
        Hb_(device_doubles(kRows * D, "a block of H")),
        Z_(device_doubles(kRows * V, "a block of logits")),
        dHb_(device_doubles(kRows * D, "a block of dH")),
        h_(blas_handle()) {
    ok(cublasSetMathMode(h_.get(), CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // plain fp64
    ok(cudaMemcpy(W_.get(), W, bytes(V * D), cudaMemcpyHostToDevice), "copying W");
    ok(cudaMemset(dW_.get(), 0, bytes(V * D)), "zeroing dW");
  }
  CudaGemms(const CudaGemms&) = delete;
  CudaGemms& operator=(const CudaGemms&) = delete;

  std::int64_t block_rows() const override { return kRows; }
  void logits(const double* Hb, std::int64_t B, double* Z) override {
    ok(cudaMemcpy(Hb_.get(), Hb, bytes(B * D_), cudaMemcpyHostToDevice), "copying H");
    gemm(false, true, B, V_, D_, Hb_.get(), D_, W_.get(), D_, 0.0, Z_.get(), V_);
    ok(cudaMemcpy(Z, Z_.get(), bytes(B * V_), cudaMemcpyDeviceToHost), "copying the logits");
  }
  void backward(const double* dZ, const double* Hb, std::int64_t B, double* dHb) override {
    ok(cudaMemcpy(Z_.get(), dZ, bytes(B * V_), cudaMemcpyHostToDevice), "copying dL/dlogits");
    ok(cudaMemcpy(Hb_.get(), Hb, bytes(B * D_), cudaMemcpyHostToDevice), "copying H");
    gemm(false, false, B, D_, V_, Z_.get(), V_, W_.get(), D_, 0.0, dHb_.get(), D_);
    gemm(true, false, V_, D_, B, Z_.get(), V_, Hb_.get(), D_, 1.0, dW_.get(), D_);
    ok(cudaMemcpy(dHb, dHb_.get(), bytes(B * D_), cudaMemcpyDeviceToHost), "copying dH");
  }
  void take_dW(double* dW) override {
    ok(cudaMemcpy(dW, dW_.get(), bytes(V_ * D_), cudaMemcpyDeviceToHost), "copying dW");
    ok(cudaMemset(dW_.get(), 0, bytes(V_ * D_)), "zeroing dW");
  }

 private:
  static constexpr std::int64_t kRows = 512;  // token rows per block: 512·V logits in fp64
  static std::size_t bytes(std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(double); }
  // Row-major C (m, n) = op(A)·op(B) + beta·C, as the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ.
  void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const double* A,
            std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C,
            std::int64_t ldc) {
    if (m == 0 || n == 0) return;
    const double one = 1.0;
    ok(cublasDgemm(h_.get(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, dim(n),
                   dim(m), dim(k), &one, B, dim(ldb), A, dim(lda), &beta, C, dim(ldc)),
       "cublasDgemm");
  }

  std::int64_t V_, D_;
  DeviceDoubles W_, dW_, Hb_, Z_, dHb_;
  BlasHandle h_;  // after the buffers: destroyed before them
};

}  // namespace

std::unique_ptr<Gemms<double>> cuda_gemms(const double* W, std::int64_t V, std::int64_t D) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    throw std::runtime_error("the selftest's model on the GPU: no CUDA device");
  return std::make_unique<CudaGemms>(W, V, D);
}

}  // namespace xentlab::selftest

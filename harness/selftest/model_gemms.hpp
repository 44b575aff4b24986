#pragma once
// The selftest model's products of a block of token rows (harness/selftest/model.cpp), behind one
// interface so that the fp64 model's GEMMs can run on the host's BLAS or on a GPU's cuBLAS.
#include <cstdint>
#include <memory>

namespace xentlab::selftest {

/// W (V, D) fixed at construction; per block of B ≤ block_rows() token rows Hb (B, D):
/// logits Z = Hb·Wᵀ (B, V), and backward: dHb = dZ·W (B, D), the chunk's dW += dZᵀ·Hb (V, D).
/// Row-major host arrays throughout.
template <class T>
class Gemms {
 public:
  virtual ~Gemms() = default;
  virtual std::int64_t block_rows() const = 0;
  virtual void logits(const T* Hb, std::int64_t B, T* Z) = 0;
  virtual void backward(const T* dZ, const T* Hb, std::int64_t B, T* dHb) = 0;
  /// dW (V, D) = the sum of dZᵀ·Hb since the last call; the sum restarts at zero.
  virtual void take_dW(T* dW) = 0;
};

/// The fp64 products with W and the chunk's dW resident on the first CUDA device (cuBLAS DGEMM,
/// default math mode: plain fp64). Throws std::runtime_error in a build without CUDA, without a
/// device, or when a CUDA call fails (out of device memory: 16·V·D bytes and the block's buffers).
std::unique_ptr<Gemms<double>> cuda_gemms(const double* W, std::int64_t V, std::int64_t D);

}  // namespace xentlab::selftest

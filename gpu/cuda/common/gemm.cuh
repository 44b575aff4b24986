#pragma once
// cuBLAS wrappers of the CUDA strategies, for row-major tensors (docs/arithmetic.md §1, §8).
// Every GEMM uses cublasGemmEx_64 (or cublasLtMatmul without split-K, see "Algorithm choice")
// with compute type CUBLAS_COMPUTE_32F and the default math mode (no TF32, no reduced-precision
// reductions): products of the stored operands accumulated in fp32,
// the result rounded once to the output dtype. Operands of one GEMM share a dtype; cuBLAS writes an
// output of the operand dtype or fp32 (operands bf16/fp16), or fp32 only (operands fp32). Callers
// use gemm_output_direct() to choose between a direct write and an fp32 temporary that a rounding
// kernel (ce_kernels.cuh) converts — the same single rounding of the fp32 accumulator.
// The cuBLAS workspace is set explicitly (cublasSetWorkspace) from the tracking allocator at the
// first GEMM of a handle, so it counts as extra device memory (and a run without GEMMs has none).
// Errors: DeviceError through XL_CUBLAS_CHECK.
//
// Algorithm choice. cuBLAS picks the kernel of every GEMM by its heuristic, except for the three
// GEMMs of a chunk with 16-bit operands on compute capability 9.0, where another kernel it offers
// was measured as fast or faster (H200, V = 128256, D = 4096, 8192-token chunks, candidates timed
// in interleaved rounds since the card runs at its power cap; lab/probes/gemm_candidates.cu,
// lab/results/): logits 12.78 ms with the default, 12.19 ms with 176×128 tiles; dW with
// beta = 1 into fp32 11.56 ms, 10.96 ms with 128×160 tiles; dH 10.87 ms, 10.81 ms with 128×256
// tiles (no measurable gain, kept). End to end at N = 131072 the three together were worth
// 650.5 against 652.5 ms (alternated runs). There the GEMM runs through cuBLASLt with the first
// candidate of cuBLASLt's own heuristic list that has the preferred tile and no split-K; when the
// list has none, the default is used. The choice is a function of the shapes, dtypes and cuBLAS
// version only (never of a timing), so repeat runs use the same kernel and give the same bits;
// every candidate accumulates the products in fp32 (CUBLAS_COMPUTE_32F) and rounds once.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "gpu/cuda/common/device_buffer.cuh"
#include "numerics/dtype.hpp"

namespace xentlab::gpu {

/// Bytes of cuBLAS workspace every strategy sets (32 MiB, NVIDIA's advice for Hopper).
constexpr std::int64_t kCublasWorkspaceBytes = std::int64_t{32} << 20;

/// How the GEMMs of a Blas sum their products: cuBLAS's kernels (the strategies), or one fp32 sum
/// per output element in increasing k (the sequential-sum model of the differential baseline:
/// gpu/cuda/common/sequential_gemm.cuh), which never touches cuBLAS.
enum class GemmOrder : std::uint8_t { cublas, sequential };

/// A cuBLAS handle bound to a stream, with its workspace taken from the tracker (extra memory).
class Blas {
 public:
  Blas(DeviceMemoryTracker& mem, cudaStream_t stream, GemmOrder order = GemmOrder::cublas);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  /// The handle; the first call takes the workspace from the tracker (extra memory).
  cublasHandle_t handle() const;
  /// The cuBLASLt handle (same workspace, taken at the first call of either).
  cublasLtHandle_t lt_handle() const;
  void* workspace() const { return workspace_.get(); }
  cudaStream_t stream() const { return stream_; }
  /// True on a device of compute capability 9.0 (where the preferred tiles were measured).
  bool sm90() const { return sm90_; }
  GemmOrder order() const { return order_; }

  /// Shapes, transposes, leading dimensions, dtypes and preferred tile of one GEMM.
  using AlgoKey = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                             std::int64_t, std::int64_t, int, int, int>;
  /// The chosen cuBLASLt algorithm per key (found = false: use cublasGemmEx's default).
  struct Choice {
    bool found = false;
    cublasLtMatmulAlgo_t algo{};
  };
  mutable std::map<AlgoKey, Choice> choices;

 private:
  void take_workspace() const;
  DeviceMemoryTracker* mem_ = nullptr;
  cublasHandle_t h_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool sm90_ = false;
  GemmOrder order_ = GemmOrder::cublas;
  mutable DeviceBuffer workspace_;
};

/// Benchmarks only: turns the preferred tiles of "Algorithm choice" off (they are on by default) so
/// that one process can alternate the two (an A/B timing in the lab). Call it only while
/// no GEMM is being issued.
void set_preferred_tiles(bool on);

/// The three GEMMs of gemm_logits, gemm_dH and gemm_dW.
enum class GemmOp : std::uint8_t { logits, dH, dW };

/// The cuBLASLt tile `op` asks for with 16-bit operands on compute capability 9.0 (see "Algorithm
/// choice"); it runs cuBLAS's default where the heuristic does not offer that tile.
cublasLtMatmulTile_t preferred_tile(GemmOp op);

/// True when cuBLAS writes an output of dtype `out` from operands of dtype `operands` directly.
bool gemm_output_direct(DType operands, DType out);

/// logits (rows, V) = H (rows, D) · Wᵀ, W (V, D); H and W in `in`, logits in `out`
/// (gemm_output_direct(in, out) must hold).
void gemm_logits(const Blas& b, DType in, const void* H /* (rows, D) */, const void* W /* (V, D) */,
                 std::int64_t rows, std::int64_t V, std::int64_t D, DType out,
                 void* logits /* (rows, V) */);

/// dH (rows, D) = beta·dH + dz (rows, V) · W (V, D); operands in `op`, dH in `out`; beta ∈ {0, 1}
/// (1: the product added to dH's value with one rounding per element, vocab_chunked's fp32 sum
/// across vocabulary splits; GemmOrder::sequential: the sum continues from dH's value, fp32 only).
void gemm_dH(const Blas& b, DType op, const void* dz /* (rows, V) */, const void* W /* (V, D) */,
             std::int64_t rows, std::int64_t V, std::int64_t D, DType out, void* dH /* (rows, D) */,
             float beta = 0.0f);

/// dW (V, D) = beta·dW + dzᵀ · H, dz (rows, V), H (rows, D); operands in `op`, dW in `out`;
/// beta ∈ {0, 1} (1: accumulate in the output dtype, one rounding per call; GemmOrder::sequential:
/// the sum continues from dW's value, fp32 only).
void gemm_dW(const Blas& b, DType op, const void* dz /* (rows, V) */, const void* H /* (rows, D) */,
             std::int64_t rows, std::int64_t V, std::int64_t D, DType out, void* dW /* (V, D) */,
             float beta);

}  // namespace xentlab::gpu

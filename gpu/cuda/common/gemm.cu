// cuBLAS wrappers (see gemm.cuh). Row-major X (r, c) is column-major Xᵀ (c, r) with ld = c, so
// every row-major product is issued as its transpose.
#include <atomic>
#include <string>

#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/common/gemm.cuh"
#include "gpu/cuda/common/sequential_gemm.cuh"

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

/// set_preferred_tiles' switch (benchmarks only).
std::atomic<bool> g_preferred_tiles{true};

/// cuBLASLt heuristic candidates examined for a preferred tile.
constexpr int kCandidates = 16;

/// The first candidate of cuBLASLt's heuristic with `tile` and no split-K, cached in b.choices.
const Blas::Choice& choose(const Blas& b, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                           cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                           const Blas::AlgoKey& key, cublasLtMatmulTile_t tile) {
  auto it = b.choices.find(key);
  if (it != b.choices.end()) return it->second;
  Blas::Choice ch;
  cublasLtMatmulPreference_t pref = nullptr;
  XL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::size_t ws = static_cast<std::size_t>(kCublasWorkspaceBytes);
  cublasLtMatmulHeuristicResult_t res[kCandidates];
  int n = 0;
  const cublasStatus_t st =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                           sizeof ws) == CUBLAS_STATUS_SUCCESS
          ? cublasLtMatmulAlgoGetHeuristic(b.lt_handle(), desc, la, lb, lc, lc, pref, kCandidates,
                                           res, &n)
          : CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS) {
    for (int i = 0; i < n && !ch.found; ++i) {
      if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
      int t = 0, splitk = 0;
      std::size_t w = 0;
      if (cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &t,
                                               sizeof t, &w) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                               &splitk, sizeof splitk, &w) != CUBLAS_STATUS_SUCCESS)
        continue;
      if (t == static_cast<int>(tile) && splitk <= 1) {
        ch.found = true;
        ch.algo = res[i].algo;
      }
    }
  }
  return b.choices.emplace(key, ch).first->second;
}

/// A GEMM through cuBLASLt with the preferred tile; false when cuBLASLt offers none (the caller
/// then uses cublasGemmEx).
bool gemm_preferred(const Blas& b, cublasOperation_t ta, cublasOperation_t tb, std::int64_t m,
                    std::int64_t n, std::int64_t k, const void* A, std::int64_t lda, const void* B,
                    std::int64_t ldb, DType op, float beta, void* C, std::int64_t ldc, DType out,
                    cublasLtMatmulTile_t tile) {
  const Blas::AlgoKey key{int(ta), int(tb), m, n, k, lda, ldb, ldc, int(op), int(out), int(tile)};
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  bool ran = false;
  auto cleanup = [&] {
    if (lc != nullptr) cublasLtMatrixLayoutDestroy(lc);
    if (lb != nullptr) cublasLtMatrixLayoutDestroy(lb);
    if (la != nullptr) cublasLtMatrixLayoutDestroy(la);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  };
  try {
    XL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    XL_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    XL_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
    XL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, cuda_type(op), an ? m : k, an ? k : m, lda));
    XL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, cuda_type(op), bn ? k : n, bn ? n : k, ldb));
    XL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, cuda_type(out), m, n, ldc));
    const Blas::Choice& ch = choose(b, desc, la, lb, lc, key, tile);
    if (ch.found) {
      const float alpha = 1.0f;
      const cublasLtHandle_t lt = b.lt_handle();  // takes the workspace before it is passed
      XL_CUBLAS_CHECK(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &ch.algo,
                                     b.workspace(), static_cast<std::size_t>(kCublasWorkspaceBytes),
                                     b.stream()));
      ran = true;
    }
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  return ran;
}

void gemm(const Blas& b, cublasOperation_t ta, cublasOperation_t tb, std::int64_t m, std::int64_t n,
          std::int64_t k, const void* A, std::int64_t lda, const void* B, std::int64_t ldb,
          DType op, float beta, void* C, std::int64_t ldc, DType out,
          cublasLtMatmulTile_t tile = CUBLASLT_MATMUL_TILE_UNDEFINED) {
  if (!gemm_output_direct(op, out))
    throw InputError("cuBLAS GEMM: no direct " + std::string(to_string(out)) + " output from " +
                     std::string(to_string(op)) + " operands");
  if (m <= 0 || n <= 0) return;
  if (tile != CUBLASLT_MATMUL_TILE_UNDEFINED && g_preferred_tiles.load() && b.sm90() &&
      op != DType::fp32 && k > 0 &&
      gemm_preferred(b, ta, tb, m, n, k, A, lda, B, ldb, op, beta, C, ldc, out, tile))
    return;
  const float alpha = 1.0f;
  XL_CUBLAS_CHECK(cublasGemmEx_64(b.handle(), ta, tb, m, n, k, &alpha, A, cuda_type(op), lda, B,
                                  cuda_type(op), ldb, &beta, C, cuda_type(out), ldc,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

Blas::Blas(DeviceMemoryTracker& mem, cudaStream_t stream, GemmOrder order)
    : mem_(&mem), stream_(stream), order_(order) {
  int dev = 0, major = 0, minor = 0;
  XL_CUDA_CHECK(cudaGetDevice(&dev));
  XL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  XL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  sm90_ = major == 9 && minor == 0;
  XL_CUBLAS_CHECK(cublasCreate(&h_));
  try {
    XL_CUBLAS_CHECK(cublasSetStream(h_, stream));
    XL_CUBLAS_CHECK(cublasSetMathMode(h_, CUBLAS_DEFAULT_MATH));
    XL_CUBLAS_CHECK(cublasLtCreate(&lt_));
  } catch (...) {
    cublasDestroy(h_);
    throw;
  }
}

void Blas::take_workspace() const {
  // The workspace is taken at the first GEMM, so a run that issues none (fused) holds none.
  if (workspace_.get() == nullptr) {
    workspace_ = DeviceBuffer(*mem_, kCublasWorkspaceBytes, MemKind::extra, "cuBLAS workspace");
    XL_CUBLAS_CHECK(
        cublasSetWorkspace(h_, workspace_.get(), static_cast<std::size_t>(kCublasWorkspaceBytes)));
  }
}

cublasHandle_t Blas::handle() const {
  take_workspace();
  return h_;
}

cublasLtHandle_t Blas::lt_handle() const {
  take_workspace();
  return lt_;
}

Blas::~Blas() {
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (h_ != nullptr) cublasDestroy(h_);
}

void set_preferred_tiles(bool on) {
  g_preferred_tiles.store(on);
}

cublasLtMatmulTile_t preferred_tile(GemmOp op) {
  switch (op) {
    case GemmOp::logits:
      return CUBLASLT_MATMUL_TILE_176x128;
    case GemmOp::dH:
      return CUBLASLT_MATMUL_TILE_128x256;
    case GemmOp::dW:
      return CUBLASLT_MATMUL_TILE_128x160;
  }
  return CUBLASLT_MATMUL_TILE_UNDEFINED;
}

bool gemm_output_direct(DType operands, DType out) {
  if (operands == DType::fp32) return out == DType::fp32;
  if (operands == DType::bf16 || operands == DType::fp16)
    return out == operands || out == DType::fp32;
  return false;
}

void gemm_logits(const Blas& b, DType in, const void* H, const void* W, std::int64_t rows,
                 std::int64_t V, std::int64_t D, DType out, void* logits) {
  if (b.order() == GemmOrder::sequential) {
    sequential_gemm(in, {H, D, 1}, {W, 1, D}, rows, V, D, out, logits, V, false, b.stream());
    return;
  }
  // logitsᵀ (V, rows) = W (V, D) · Hᵀ (D, rows): A = W col-major (D, V) transposed, B = H (D,
  // rows).
  gemm(b, CUBLAS_OP_T, CUBLAS_OP_N, V, rows, D, W, D, H, D, in, 0.0f, logits, V, out,
       preferred_tile(GemmOp::logits));
}

void gemm_dH(const Blas& b, DType op, const void* dz, const void* W, std::int64_t rows,
             std::int64_t V, std::int64_t D, DType out, void* dH, float beta) {
  if (b.order() == GemmOrder::sequential) {
    sequential_gemm(op, {dz, V, 1}, {W, D, 1}, rows, D, V, out, dH, D, beta != 0.0f, b.stream());
    return;
  }
  // dHᵀ (D, rows) = Wᵀ (D, V) · dzᵀ (V, rows).
  gemm(b, CUBLAS_OP_N, CUBLAS_OP_N, D, rows, V, W, D, dz, V, op, beta, dH, D, out,
       preferred_tile(GemmOp::dH));
}

void gemm_dW(const Blas& b, DType op, const void* dz, const void* H, std::int64_t rows,
             std::int64_t V, std::int64_t D, DType out, void* dW, float beta) {
  if (b.order() == GemmOrder::sequential) {
    sequential_gemm(op, {dz, 1, V}, {H, D, 1}, V, D, rows, out, dW, D, beta != 0.0f, b.stream());
    return;
  }
  // dWᵀ (D, V) = Hᵀ (D, rows) · dz (rows, V); dz col-major is (V, rows), so op T.
  gemm(b, CUBLAS_OP_N, CUBLAS_OP_T, D, V, rows, H, D, dz, V, op, beta, dW, D, out,
       preferred_tile(GemmOp::dW));
}

}  // namespace xentlab::gpu

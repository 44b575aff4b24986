#pragma once
// Row-major double GEMM on the system BLAS (the Fortran interface dgemm_, which every BLAS
// exports: OpenBLAS, BLIS, the reference BLAS). Used by reference/ (the BLAS tier) and datasets/
// (the logits of calibrated targets); numerics/ links the BLAS.
#include <cstdint>

namespace xentlab {

/// C (m×n, leading dimension ldc) = alpha · op(A) · op(B) + beta · C, all row-major doubles;
/// op(A) is m×k (A is m×k with lda, or k×m with lda when trans_a), op(B) is k×n (B is k×n with
/// ldb, or n×k with ldb when trans_b). Throws InputError when a dimension or leading dimension
/// does not fit the BLAS's 32-bit integers. Any BLAS computes each entry of C as a sum of the k
/// products in some order (no fast matrix multiplication): the certified tier charges
/// γ_k·Σ|a||b| for it (docs/reference.md, "BLAS tier").
void dgemm_row_major(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                     double alpha, const double* A, std::int64_t lda, const double* B,
                     std::int64_t ldb, double beta, double* C, std::int64_t ldc);

/// Where OpenBLAS fell back to its oldest kernels on a processor it does not recognise, starts
/// the program again (execv of its own resolved path with argv) with OPENBLAS_CORETYPE naming the
/// kernels that the processor's instruction sets allow (SkylakeX for AVX-512, Haswell for AVX2 +
/// FMA); the restarted program removes both variables it set, so that the programs it starts see
/// the environment as it was. Does nothing with another BLAS, when the user set OPENBLAS_CORETYPE,
/// or when started through the dynamic loader. Call first in main, before any thread starts.
void choose_blas_kernels(char** argv);
/// The OPENBLAS_CORETYPE that choose_blas_kernels would start the program with ("SkylakeX",
/// "Haswell"), or nullptr when it would change nothing (another BLAS, a recognised processor, or
/// OPENBLAS_CORETYPE already set). For a host that cannot restart itself (the Python package asks
/// a child process, then sets the variable before it loads the library).
const char* preferred_blas_coretype();

/// The BLAS library's name and version as it reports them (e.g. "OpenBLAS 0.3.21 …"), or
/// "unknown BLAS".
const char* blas_description();

/// While alive, every BLAS call runs on its calling thread alone, so that the threads of an OpenMP
/// parallel region may each call dgemm_row_major on their own part of a product (each entry then
/// comes from a one-thread GEMM of the same shape whatever the number of threads). OpenBLAS's
/// OpenMP build does so inside a parallel region by itself; its pthread build is set to one thread
/// here and set back on destruction; any other BLAS is left as it is (the reference BLAS has no
/// threads). Create it outside the parallel region.
class BlasOneThreadPerCall {
 public:
  BlasOneThreadPerCall();
  ~BlasOneThreadPerCall();
  BlasOneThreadPerCall(const BlasOneThreadPerCall&) = delete;
  BlasOneThreadPerCall& operator=(const BlasOneThreadPerCall&) = delete;

 private:
  int saved_ = 0;  ///< the pthread build's thread count to restore (0: nothing changed)
};

}  // namespace xentlab

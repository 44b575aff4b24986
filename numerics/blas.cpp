#include "numerics/blas.hpp"

#include <fmt/format.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "numerics/error.hpp"

extern "C" {
// The reference BLAS interface (column-major, LP64 integers).
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
            const double* beta, double* c, const int* ldc);
// OpenBLAS only; declared weak so that another BLAS links too.
__attribute__((weak)) char* openblas_get_config();
__attribute__((weak)) char* openblas_get_corename();
__attribute__((weak)) int openblas_get_parallel();  // 0 sequential, 1 pthreads, 2 OpenMP
__attribute__((weak)) void openblas_set_num_threads(int);
__attribute__((weak)) int openblas_get_num_threads();
}

namespace xentlab {
namespace {

int blas_int(std::int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    throw InputError(
        fmt::format("BLAS {} = {} does not fit a 32-bit integer (at most {}): the "
                    "dimension is too large for the system BLAS",
                    what, v, std::numeric_limits<int>::max()));
  return static_cast<int>(v);
}

}  // namespace

void dgemm_row_major(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                     double alpha, const double* A, std::int64_t lda, const double* B,
                     std::int64_t ldb, double beta, double* C, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands, keep the
  // transposition flags (a row-major X is the column-major Xᵀ).
  const int M = blas_int(n, "n"), N = blas_int(m, "m"), K = blas_int(k, "k");
  const int la = blas_int(lda, "lda"), lb = blas_int(ldb, "ldb"), lc = blas_int(ldc, "ldc");
  const char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
  dgemm_(&ta, &tb, &M, &N, &K, &alpha, B, &lb, A, &la, &beta, C, &lc);
}

const char* preferred_blas_coretype() {
  if (!openblas_get_corename || std::getenv("OPENBLAS_CORETYPE")) return nullptr;
  // OpenBLAS's DYNAMIC_ARCH reads the processor's model number; on a model it does not know
  // (new processors, or a virtual machine that masks the model) it falls back to its oldest
  // kernel set, Prescott (SSE3): 3 GFLOP/s a core in fp64 where the AVX-512 kernels give 40
  // (measured on the 2-core CI machine). Choose by the instruction sets instead.
  const std::string core = openblas_get_corename();
  if (core != "Prescott" && core != "Core2" && core != "Penryn" && core != "Dunnington" &&
      core != "Nehalem" && core != "Atom")
    return nullptr;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

void choose_blas_kernels(char** argv) {
  if (std::getenv("XENTLAB_BLAS_CHOSEN")) {
    // The restarted process: OpenBLAS has read the variable; the programs it starts must not.
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("XENTLAB_BLAS_CHOSEN");
    return;
  }
  const char* want = preferred_blas_coretype();
  if (!want) return;
  // OpenBLAS reads OPENBLAS_CORETYPE when it is loaded, before main: start again with it set —
  // only when /proc/self/exe is the program itself (not a loader it was started through).
  char self[4096] = {}, named[4096] = {};
  const char* execfn = reinterpret_cast<const char*>(getauxval(AT_EXECFN));
  if (!execfn || !realpath("/proc/self/exe", self) || !realpath(execfn, named) ||
      std::strcmp(self, named) != 0)
    return;
  setenv("OPENBLAS_CORETYPE", want, 1);
  setenv("XENTLAB_BLAS_CHOSEN", "1", 1);
  execv(self, argv);  // the resolved path: the process keeps its name (ps, pgrep)
  // execv returned: it failed. Go on with the library's choice, leaving no trace for children.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("XENTLAB_BLAS_CHOSEN");
}

const char* blas_description() {
  if (openblas_get_config) return openblas_get_config();
  return "unknown BLAS";
}

BlasOneThreadPerCall::BlasOneThreadPerCall() {
  if (openblas_get_parallel && openblas_set_num_threads && openblas_get_num_threads &&
      openblas_get_parallel() == 1) {
    saved_ = openblas_get_num_threads();
    openblas_set_num_threads(1);
  }
}

BlasOneThreadPerCall::~BlasOneThreadPerCall() {
  if (saved_ > 0) openblas_set_num_threads(saved_);
}

}  // namespace xentlab

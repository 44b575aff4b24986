// Calibrated targets of a linear head on the GPU (TargetEngine, datasets/generators.hpp): W widened
// to doubles once, then per block of token rows the fp64 logits by cuBLAS DGEMM and one block of
// threads per row that draws the row's target from the softmax of its spec-transformed logits.
//
// The draw follows make_head's CPU path (sample_target): weights w_j = exp(z_j − max z), the
// target is the first j whose running sum passes u·Σw. Each thread sums a contiguous segment of
// the row in vocabulary order; the segments' sums are prefixed in order by one thread, which finds
// the segment holding u·Σw, and that segment's thread walks it. The logits' GEMM, the order of the
// sums and CUDA's exp and tanh (within an ULP or two of glibc's) differ from the CPU's, so a target
// can differ only where u falls within those roundings of a boundary (docs/design.md, "Calibrated
// targets on the GPU").
//
// Device memory: W as doubles (V·D·8 bytes) and, per block of m rows, the logits (m·V·8, at most
// 1 GiB) and the rows of H (raw and as doubles).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "numerics/error.hpp"
#include "numerics/loss_kernel.hpp"
#include "reference/reference.hpp"
#include "reference/tiers/cuda_support.cuh"

namespace xentlab {
namespace {

constexpr int kSampleThreads = 256;
constexpr std::int64_t kLogitsBlockBytes = std::int64_t{1} << 30;

struct Transform {
  double scale, softcap;  // softcap 0: off
  __device__ double operator()(double r) const { return kernel_logit(r, scale, softcap); }
};

// One block per row of Z (rows × V, row-major): t[r] ~ softmax(tr(Z_r)) drawn with u[r].
__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const double* Z, std::int64_t V, Transform tr, const double* u, std::int64_t* t) {
  __shared__ double part[kSampleThreads];
  __shared__ double prefix[kSampleThreads + 1];
  __shared__ double shared_max, target_mass;
  __shared__ int segment;
  const std::int64_t r = blockIdx.x;
  const double* z = Z + r * V;
  const int k = threadIdx.x;
  const std::int64_t seg = (V + kSampleThreads - 1) / kSampleThreads;
  const std::int64_t j0 = k * seg < V ? k * seg : V, j1 = j0 + seg < V ? j0 + seg : V;

  double mx = -INFINITY;
  for (std::int64_t j = j0; j < j1; ++j) mx = ::fmax(mx, tr(z[j]));
  part[k] = mx;
  __syncthreads();
  for (int s = kSampleThreads / 2; s > 0; s >>= 1) {
    if (k < s) part[k] = ::fmax(part[k], part[k + s]);
    __syncthreads();
  }
  if (k == 0) shared_max = part[0];
  __syncthreads();
  mx = shared_max;
  if (mx == -INFINITY) {  // no finite logit (not a linear head's row): no distribution
    if (k == 0) t[r] = -1;
    return;
  }
  double sum = 0;
  for (std::int64_t j = j0; j < j1; ++j) sum += ::exp(tr(z[j]) - mx);
  __syncthreads();
  part[k] = sum;
  __syncthreads();
  if (k == 0) {
    double c = 0;
    for (int q = 0; q < kSampleThreads; ++q) {
      prefix[q] = c;
      c += part[q];
    }
    prefix[kSampleThreads] = c;
    const double U = u[r] * c;
    // The first segment whose end passes U; past every end (rounding), the last with weight.
    int hit = -1, last = -1;
    for (int q = 0; q < kSampleThreads; ++q) {
      if (part[q] == 0) continue;
      last = q;
      if (U < prefix[q + 1]) {
        hit = q;
        break;
      }
    }
    segment = hit >= 0 ? hit : last;
    target_mass = U;
  }
  __syncthreads();
  if (k != segment) return;
  double c = prefix[k];
  std::int64_t last = j0;
  for (std::int64_t j = j0; j < j1; ++j) {
    const double w = ::exp(tr(z[j]) - mx);
    if (w == 0) continue;
    last = j;
    c += w;
    if (target_mass < c) {
      t[r] = j;
      return;
    }
  }
  t[r] = last;  // the running sum rounded below u·Σw: the segment's last entry with weight
}

class CudaTargetEngine final : public TargetEngine {
 public:
  CudaTargetEngine() {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    name_ = prop.name;
  }
  std::string describe() const override { return "cuda: " + name_ + " (cuBLAS DGEMM)"; }

  void sample(const Tensor& H, const Tensor& W, const LossSpec& spec, const std::vector<double>& u,
              std::vector<std::int64_t>& t, const GenerationProgress& progress) const override {
    if (H.rank() != 2 || W.rank() != 2 || H.dim(1) != W.dim(1) || H.dtype() != W.dtype())
      throw InputError("cuda targets: H (N × D) and W (V × D) must be matrices of one dtype and D");
    const std::int64_t N = H.dim(0), V = W.dim(0), D = W.dim(1);
    if (static_cast<std::int64_t>(u.size()) != N)
      throw InputError(fmt::format("cuda targets: {} uniforms for {} rows", u.size(), N));
    const int code = dtype_code(W.dtype());
    const std::int64_t esize =
        static_cast<std::int64_t>(W.nbytes()) / std::max<std::int64_t>(1, V * D);
    // A block's logits and H rows as doubles take at most 1 GiB (as make_head's CPU blocks).
    const std::int64_t m =
        std::max<std::int64_t>(1, std::min<std::int64_t>(N, kLogitsBlockBytes / (8 * (V + D))));
    // Peak: W raw + W as doubles while widening, then the block's logits, H rows and per-row data.
    const std::int64_t need =
        std::max(V * D * (8 + esize), V * D * 8 + m * V * 8 + m * D * (8 + esize) + N * 16);
    std::size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (need > static_cast<std::int64_t>(free_b))
      throw InputError(fmt::format(
          "cuda targets: {} rows × V = {} × D = {} need {} bytes of device memory, {} are free", N,
          V, D, need, free_b));
    DeviceArray<double> Wd(static_cast<std::size_t>(V * D), "W (fp64)");
    {
      DeviceArray<unsigned char> raw(W.nbytes(), "W (raw)");
      check(cudaMemcpy(raw.p, W.data(), W.nbytes(), cudaMemcpyHostToDevice), "W upload");
      widen_kernel<<<grid_for(V * D), 256>>>(raw.p, code, V * D, Wd.p, nullptr);
      check(cudaGetLastError(), "widen W");
      check(cudaDeviceSynchronize(), "widen W");
    }
    DeviceArray<double> Z(static_cast<std::size_t>(m * V), "logits block");
    DeviceArray<double> X(static_cast<std::size_t>(m * D), "H block (fp64)");
    DeviceArray<unsigned char> Hraw(static_cast<std::size_t>(m * D * esize), "H block (raw)");
    DeviceArray<double> ud = upload(u, "uniforms");
    DeviceArray<std::int64_t> td(static_cast<std::size_t>(N), "targets");
    const Cublas cb;
    const Transform tr{spec.logit_scale, spec.softcap};
    const auto* Hbytes = static_cast<const unsigned char*>(H.data());
    for (std::int64_t i0 = 0; i0 < N; i0 += m) {
      const std::int64_t rows = std::min(m, N - i0);
      check(cudaMemcpy(Hraw.p, Hbytes + i0 * D * esize, static_cast<std::size_t>(rows * D * esize),
                       cudaMemcpyHostToDevice),
            "H upload");
      widen_kernel<<<grid_for(rows * D), 256>>>(Hraw.p, code, rows * D, X.p, nullptr);
      check(cudaGetLastError(), "widen H");
      dgemm(cb.h, false, true, rows, V, D, 1.0, X.p, D, Wd.p, D, 0.0, Z.p, V);
      sample_kernel<<<static_cast<unsigned>(rows), kSampleThreads>>>(Z.p, V, tr, ud.p + i0,
                                                                     td.p + i0);
      check(cudaGetLastError(), "sample");
      check(cudaDeviceSynchronize(), "sample");
      if (progress) progress(i0 + rows, N);
    }
    t.resize(static_cast<std::size_t>(N));
    check(cudaMemcpy(t.data(), td.p, static_cast<std::size_t>(N) * 8, cudaMemcpyDeviceToHost),
          "targets download");
    for (std::int64_t i = 0; i < N; ++i)
      if (t[static_cast<std::size_t>(i)] < 0)
        throw InputError(fmt::format(
            "cuda targets: row {} has no finite logit after the spec's transformation (logit "
            "scale {}): no softmax to draw a target from",
            i, spec.logit_scale));
  }

 private:
  std::string name_;
};

}  // namespace

std::shared_ptr<const TargetEngine> make_cuda_target_engine() {
  std::string why;
  if (!cuda_reference_available(&why))
    throw InputError("calibrated targets on the GPU are not available: " + why);
  return std::make_shared<CudaTargetEngine>();
}

}  // namespace xentlab

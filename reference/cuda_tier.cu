// The cuda tier of the certified reference: the BLAS tier's arithmetic and bounds on the GPU.
// GEMMs are cuBLAS DGEMM (each entry a sum of the k products in some order: γ_k·Σ|x||y|, as for
// any BLAS); the row work runs the shared row arithmetic (reference/row_math.hpp) in fp64
// kernels, its Sum2 reductions split over a block's threads and merged by TwoSum (the Sum2 bound
// holds for any summation tree: docs/reference.md, "cuda tier"). Compiled with -fmad=false: the
// error-free transformations need every rounding where the source puts it.
//
// Device memory: W and |W| as doubles (V×D each), a token block's raw logits, |dz| and δdz
// (m×V each), its H rows, and dW's value and condition accumulators and its bound (J×D each).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <limits>
#include <new>
#include <stdexcept>

#include "numerics/error.hpp"
#include "reference/cuda_support.cuh"
#include "reference/row.hpp"
#include "reference/row_math.hpp"

// The staging copies and the H rows are OpenMP loops in host code: without -fopenmp for the host
// compiler (reference/CMakeLists.txt) nvcc drops the pragmas and they run on one thread.
#ifndef _OPENMP
#error "cuda_tier.cu needs OpenMP in its host code (-Xcompiler=-fopenmp)"
#endif

namespace xentlab {
namespace {

struct RowParams {
  LossSpec sp;
  std::int64_t V, D;
  double g_logit;  // γ_{D+1}
  bool backward, want_dz;
};

struct RowOut {
  detail::RowStats st;
  double gs, row_gb, row_gb2;
};

constexpr int kRowThreads = 512;

// One token row per block: raw logits (R) → z and bounds → reductions → RowStats → dz (written
// over R), δdz (GB), |dz| (A), Σδdz and Σδdz² of the row.
__global__ void __launch_bounds__(kRowThreads)
    row_kernel(RowParams P, double* R, double* A, double* GB, const double* bias,
               const double* w_norm, const double* h_norm, const std::int64_t* targets,
               const double* gscale, RowOut* out) {
  using detail::kRefLibm;
  using detail::kRefU;
  const std::int64_t q = blockIdx.x;
  const std::int64_t V = P.V;
  double* r = R + q * V;
  const std::int64_t t_raw = targets[q];
  const bool valid = t_raw != P.sp.ignore_index;
  const std::int64_t t = valid ? t_raw : -1;
  const double hn = h_norm[q];
  auto logit = [&](std::int64_t j, double& z, double& zb, double& ch, double& chb) {
    const double b = bias ? bias[j] : 0.0;
    if (b == -hd::inf()) {  // a masked vocabulary entry, transformed as the CPU tiers do
      detail::transform_logit(P.sp, -hd::inf(), 0.0, z, zb, ch, chb);
      return;
    }
    const double raw = bias ? r[j] + b : r[j];
    detail::transform_logit(P.sp, raw, kRefU * ::fabs(raw) + P.g_logit * hn * w_norm[j], z, zb, ch,
                            chb);
  };
  __shared__ double sh_d[kRowThreads];
  __shared__ double sh_d2[kRowThreads];
  __shared__ std::int64_t sh_k[kRowThreads];
  // Raw storage: CompensatedSum has default member initialisers, which __shared__ does not take.
  __shared__ alignas(
      eft::CompensatedSum) unsigned char sh_c_raw[kRowThreads * sizeof(eft::CompensatedSum)];
  auto* sh_c = reinterpret_cast<eft::CompensatedSum*>(sh_c_raw);
  __shared__ detail::RowSums sums;
  __shared__ detail::GradRow grow;
  const int tid = threadIdx.x;

  // Pass 1: a = max z (first index), max δz over finite logits.
  double a = -hd::inf(), dzmax = 0.0;
  std::int64_t k = -1;
  for (std::int64_t j = tid; j < V; j += blockDim.x) {
    double z, zb, ch, chb;
    logit(j, z, zb, ch, chb);
    if (z > a) a = z, k = j;
    if (hd::isfinite(z)) dzmax = ::fmax(dzmax, zb);
  }
  sh_d[tid] = a, sh_d2[tid] = dzmax, sh_k[tid] = k;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) {
      const double a2 = sh_d[tid + s];
      const std::int64_t k2 = sh_k[tid + s];
      if (a2 > sh_d[tid] || (a2 == sh_d[tid] && k2 >= 0 && (sh_k[tid] < 0 || k2 < sh_k[tid])))
        sh_d[tid] = a2, sh_k[tid] = k2;
      sh_d2[tid] = ::fmax(sh_d2[tid], sh_d2[tid + s]);
    }
    __syncthreads();
  }
  if (tid == 0) {
    sums = detail::RowSums{};
    sums.a = sh_d[0], sums.k = sh_k[0], sums.dzmax = sh_d2[0];
  }
  __syncthreads();
  a = sums.a, k = sums.k;
  if (k < 0) {  // every logit −inf
    if (tid == 0) {
      double ops, omp_t;
      RowOut o{};
      o.st = detail::undefined_row(P.sp, valid, a, sums.dzmax, ops, omp_t);
      o.gs = gscale[q];
      out[q] = o;
    }
    for (std::int64_t j = tid; j < V; j += blockDim.x) {
      r[j] = 0.0;
      if (P.backward) A[q * V + j] = 0.0;
      if (P.backward || P.want_dz) GB[q * V + j] = 0.0;
    }
    return;
  }

  // Pass 2: the Sum2 reductions, one accumulator set per thread, merged by TwoSum below.
  eft::CompensatedSum s, s_ex, ent, pz, gap;
  double err_s = 0.0;
  const bool want_gap = valid && P.sp.label_smoothing > 0.0;
  for (std::int64_t j = tid; j < V; j += blockDim.x) {
    double z, zb, ch, chb;
    logit(j, z, zb, ch, chb);
    if (want_gap) gap.add(a - z);
    if (j == t)
      sums.z_t = z, sums.zb_t = zb,
      sums.e_t = (j == k) ? 1.0 : (z == -hd::inf() ? 0.0 : detail::ref_exp(-(a - z)));
    if (j == k || z == -hd::inf()) continue;
    const double g = a - z;
    const double ej = detail::ref_exp(-g);
    s.add(ej);
    if (j != t) s_ex.add(ej);
    err_s += ej * (kRefU * g + kRefLibm);
    ent.add(ej * g);
    pz.add(ej * ::fabs(z));
  }
  auto merge = [&](eft::CompensatedSum mine) -> double {
    __syncthreads();
    new (&sh_c[tid]) eft::CompensatedSum(mine);
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
      if (tid < st) sh_c[tid].add(sh_c[tid + st]);
      __syncthreads();
    }
    return sh_c[0].value();
  };
  auto merge_plain = [&](double mine) -> double {
    __syncthreads();
    sh_d[tid] = mine;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
      if (tid < st) sh_d[tid] += sh_d[tid + st];
      __syncthreads();
    }
    return sh_d[0];
  };
  const double sv = merge(s), sexv = merge(s_ex), entv = merge(ent), pzv = merge(pz);
  const double gapv = want_gap ? merge(gap) : 0.0;
  const double errv = merge_plain(err_s);
  if (tid == 0) {
    sums.s = sv, sums.s_ex = sexv, sums.ent = entv, sums.pz = pzv, sums.zsum_gap = gapv;
    sums.err_s = errv;
    double ops, omp_t;
    RowOut o{};
    o.st = detail::finish_row(P.sp, V, t, valid, sums, ops, omp_t);
    o.gs = gscale[q];
    grow = detail::grad_row(P.sp, V, t_raw, valid, o.st, o.gs, ops, omp_t);
    out[q] = o;
  }
  __syncthreads();

  // Pass 3: the gradient entries (over R), their bounds and |dz|; Σ δdz and Σ δdz² of the row.
  double s1 = 0.0, s2 = 0.0;
  for (std::int64_t j = tid; j < V; j += blockDim.x) {
    double z, zb, ch, chb;
    logit(j, z, zb, ch, chb);
    const double ej = (j == k) ? 1.0 : (z == -hd::inf() ? 0.0 : detail::ref_exp(-(a - z)));
    double g, gb;
    detail::grad_entry(grow, j, ej, ch, chb, g, gb);
    r[j] = g;
    if (P.backward || P.want_dz) GB[q * V + j] = gb;
    if (P.backward) A[q * V + j] = ::fabs(g);
    s1 += gb;
    s2 += gb * gb;
  }
  const double t1 = merge_plain(s1), t2 = merge_plain(s2);
  if (tid == 0) out[q].row_gb = t1, out[q].row_gb2 = t2;
}

// Columns of a token block: db by Sum2 in token order, Σδdz and Σδdz² per vocabulary row, and the
// sampled columns of dz and |dz| (DZJ, ADZJ: m×J) when dW is asked for a subset of rows.
__global__ void column_kernel(std::int64_t m, std::int64_t V, std::int64_t J,
                              const std::int64_t* vocab_rows, const double* R, const double* GB,
                              eft::CompensatedSum* db, double* db_bnd, double* db_abs,
                              double* col_gb, double* col_gb2, double* DZJ, double* ADZJ) {
  const std::int64_t jj = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (jj >= J) return;
  const std::int64_t j = vocab_rows ? vocab_rows[jj] : jj;
  eft::CompensatedSum acc = db ? db[jj] : eft::CompensatedSum{};
  double bnd = db ? db_bnd[jj] : 0.0, ab = db ? db_abs[jj] : 0.0;
  double c1 = col_gb[jj], c2 = col_gb2[jj];
  for (std::int64_t q = 0; q < m; ++q) {
    const double x = R[q * V + j], bx = GB[q * V + j];
    c1 += bx;
    c2 += bx * bx;
    acc.add(x);
    bnd += bx;
    ab += ::fabs(x);
    if (DZJ) DZJ[q * J + jj] = x, ADZJ[q * J + jj] = ::fabs(x);
  }
  col_gb[jj] = c1, col_gb2[jj] = c2;
  if (db) db[jj] = acc, db_bnd[jj] = bnd, db_abs[jj] = ab;
}

// Bounds of a gradient matrix (rows × D): cond ← cond·(1 + 2γ), bound = min(s1·colmax,
// √s2·colnorm) + γ·cond (docs/reference.md, "BLAS tier").
__global__ void grad_bound_kernel(std::int64_t rows, std::int64_t D, double g, const double* s1,
                                  const double* s2, double s_up, const double* colmax,
                                  const double* colnorm, double* cond, double* bound) {
  const std::int64_t n = rows * D;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t q = i / D, d = i % D;
    const double c = cond[i] * (1.0 + 2 * g);
    // The Cauchy–Schwarz form only where no square can have underflowed (blas_tier.cpp,
    // norm_from_squares); else the other form alone.
    const double sq = s2[q] * s_up;
    const double a1 = s1[q] * s_up,
                 a2 = sq >= 0x1p-900 ? ::sqrt(sq) * (1.0 + 2 * detail::kRefU) : hd::inf();
    cond[i] = c;
    bound[i] = ::fmin(a1 * colmax[d], a2 * colnorm[d]) + g * c;
  }
}

// Device → host copies of the large outputs through two pinned staging buffers: the DMA of one
// piece overlaps the parallel memcpy of the previous one into the (pageable) destination.
class HostCopier {
 public:
  static constexpr std::size_t kPiece = std::size_t{128} << 20;
  HostCopier() {
    for (int k = 0; k < 2; ++k) {
      check(cudaMallocHost(&buf_[k], kPiece), "pinned staging buffer");
      check(cudaEventCreateWithFlags(&done_[k], cudaEventDisableTiming), "event");
    }
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "copy stream");
  }
  ~HostCopier() {
    for (int k = 0; k < 2; ++k) {
      cudaFreeHost(buf_[k]);
      cudaEventDestroy(done_[k]);
    }
    cudaStreamDestroy(stream_);
  }
  HostCopier(const HostCopier&) = delete;
  HostCopier& operator=(const HostCopier&) = delete;

  void copy(void* dst, const void* src, std::size_t bytes, const char* what) {
    copy_after(nullptr, dst, src, bytes, what);
  }
  // The same once `ready` (an event recorded after the producers of src) has happened; without
  // one, once the whole device is idle. The work queued after the event runs on meanwhile.
  void copy_after(cudaEvent_t ready, void* dst, const void* src, std::size_t bytes,
                  const char* what) {
    if (ready)
      check(cudaStreamWaitEvent(stream_, ready, 0), what);
    else
      check(cudaDeviceSynchronize(), what);  // the producers of src ran on the default stream
    auto* d = static_cast<unsigned char*>(dst);
    const auto* sd = static_cast<const unsigned char*>(src);
    const std::size_t pieces = (bytes + kPiece - 1) / kPiece;
    auto issue = [&](std::size_t p) {
      const std::size_t off = p * kPiece, n = std::min(kPiece, bytes - off);
      check(cudaMemcpyAsync(buf_[p % 2], sd + off, n, cudaMemcpyDeviceToHost, stream_), what);
      check(cudaEventRecord(done_[p % 2], stream_), what);
    };
    if (pieces > 0) issue(0);
    for (std::size_t p = 0; p < pieces; ++p) {
      check(cudaEventSynchronize(done_[p % 2]), what);
      if (p + 1 < pieces) issue(p + 1);
      const std::size_t off = p * kPiece, n = std::min(kPiece, bytes - off);
      const auto* from = static_cast<const unsigned char*>(buf_[p % 2]);
      const std::int64_t lines = static_cast<std::int64_t>((n + (1 << 20) - 1) >> 20);
#pragma omp parallel for schedule(static)
      for (std::int64_t l = 0; l < lines; ++l) {
        const std::size_t o = static_cast<std::size_t>(l) << 20;
        std::memcpy(d + off + o, from + o, std::min<std::size_t>(std::size_t{1} << 20, n - o));
      }
    }
  }

 private:
  void* buf_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {};
  cudaStream_t stream_ = nullptr;
};

// A CUDA event (no timing) owned for its scope.
struct Event {
  cudaEvent_t e = nullptr;
  Event() { check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event"); }
  ~Event() {
    if (e) cudaEventDestroy(e);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : e(o.e) { o.e = nullptr; }
  Event& operator=(Event&&) = delete;
};

// Stage times on stderr when XENTLAB_REFERENCE_TIMINGS is set (for measurements).
struct StageClock {
  bool on = std::getenv("XENTLAB_REFERENCE_TIMINGS") != nullptr;
  std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now();
  // sync = false: the stage's end as the host sees it, the GPU's queued work left running (a
  // synchronisation there would serialise what the stages overlap).
  void mark(const char* what, bool sync = true) {
    if (!on) return;
    if (sync) cudaDeviceSynchronize();
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "[cuda reference] %-28s %8.3f s\n", what,
                 std::chrono::duration<double>(now - t).count());
    t = now;
  }
};

}  // namespace

bool cuda_reference_available(std::string* why_not) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why_not)
      *why_not = e != cudaSuccess ? fmt::format("no CUDA device: {}", cudaGetErrorString(e))
                                  : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  return true;
}

namespace detail {

double cuda_dgemm_rate() {
  std::string why;
  if (!cuda_reference_available(&why))
    throw InputError("the cuda reference tier is not available: " + why);
  const std::int64_t n = 8192;
  DeviceArray<double> a(static_cast<std::size_t>(n * n), "a"), b(a.n, "b"), c(a.n, "c");
  std::vector<double> h(a.n);
  for (std::size_t k = 0; k < h.size(); ++k) h[k] = 1.0 + static_cast<double>(k % 7) / 8.0;
  check(cudaMemcpy(a.p, h.data(), a.n * 8, cudaMemcpyHostToDevice), "a");
  check(cudaMemcpy(b.p, h.data(), a.n * 8, cudaMemcpyHostToDevice), "b");
  Cublas cb;
  dgemm(cb.h, false, false, n, n, n, 1.0, a.p, n, b.p, n, 0.0, c.p, n);
  check(cudaDeviceSynchronize(), "warm-up");
  const int reps = 5;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r)
    dgemm(cb.h, false, false, n, n, n, 1.0, a.p, n, b.p, n, 0.0, c.p, n);
  check(cudaDeviceSynchronize(), "dgemm");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * double(n) * n * n * reps / secs;
}

void cuda_tier(const Problem& pb, const LossSpec& sp, const ReferenceOptions& opt,
               ReferenceResult& res, std::int64_t budget, bool budget_given) {
  const std::int64_t V = pb.V, D = pb.D;
  const bool want_dH = opt.want_dH, want_dW = opt.want_dW, want_db = opt.want_db;
  const bool backward = want_dH || want_dW || want_db;
  const auto S = static_cast<std::int64_t>(res.token_rows.size());
  const auto J = static_cast<std::int64_t>(res.vocab_rows.size());
  const bool all_vocab = J == V;
  const int code = dtype_code(pb.H.dtype());

  // Host memory: the outputs (as the blas tier) and the row statistics.
  const double host_need =
      8.0 * (12.0 * S + (opt.want_dz ? 2.0 * S * V : 0.0) + (want_dH ? 3.0 * S * D : 0.0) +
             (want_dW ? 3.0 * J * D : 0.0) + (want_db ? 4.0 * J : 0.0) + 2.0 * V + 4.0 * D) +
      2.0 * HostCopier::kPiece + (sizeof(RowOut) + 2.0 * 8 + 16.0 * D) * std::min<double>(S, 8192);
  const std::string what = fmt::format("the cuda reference of {} rows × V={} × D={}{}", S, V, D,
                                       want_dW ? fmt::format(" with dW of {} rows", J) : "");
  check_memory(host_need, budget, budget_given, what + " (host outputs)");
  // Device memory: W and |W|, dW accumulators, per-row block buffers.
  std::size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const double dev_budget = 0.92 * static_cast<double>(free_b) - (512.0 * (1 << 20));
  const double dev_fixed = 8.0 * (static_cast<double>(V) * D * (want_dH ? 2.0 : 1.0) +
                                  (want_dW ? 3.0 * J * D : 0.0) + 6.0 * J + 3.0 * V + 3.0 * D) +
                           2.0 * std::max(pb.W.nbytes(), static_cast<std::size_t>(1)) / 2.0 +
                           sizeof(eft::CompensatedSum) * double(J);
  // Per token row: R, |dz|, δdz (V each); H, |H|, dH, its bound and condition (D each) and the
  // raw H row; the row scalars.
  const double dev_row = 8.0 * (static_cast<double>(V) * (backward || opt.want_dz ? 3 : 1) +
                                6.0 * D + 8.0 + (want_dW && !all_vocab ? 2.0 * J : 0.0)) +
                         sizeof(RowOut);
  if (dev_fixed + dev_row > dev_budget)
    throw InputError(fmt::format(
        "{} needs {:.0f} bytes ({:.2f} GiB) of GPU memory for one token row a block but the GPU "
        "has {} bytes free: sample vocabulary rows (--vocab-rows) or use --reference blas",
        what, dev_fixed + dev_row, (dev_fixed + dev_row) / double(1 << 30), free_b));
  std::int64_t block = static_cast<std::int64_t>((dev_budget - dev_fixed) / dev_row);
  block = std::min<std::int64_t>({block, S, 8192});
  if (opt.block_rows > 0) block = std::min(opt.block_rows, block);

  StageClock clock;
  Cublas cb;
  HostCopier copier;
  clock.mark("start (cuBLAS, staging)");
  allocate_outputs(res, opt.want_dz, want_dH);
  // dW, its bound and its condition (4.2 GB each for the Llama-3-8B head) are only written at
  // the end: their allocation and zero-fill run on another thread while the GPU works. (The
  // futures of std::async wait for their thread when destroyed: an exception on this thread
  // never leaves one running on a result being destroyed.)
  std::future<void> dw_alloc;
  if (want_dW)
    dw_alloc = std::async(std::launch::async, [&res, n = static_cast<std::size_t>(J * D)] {
      res.dW.resize(n);
      res.dW_bound.resize(n);
      res.dW_cond.resize(n);
    });
  clock.mark("host outputs allocated");
  // W (and |W|) as doubles on the device; meanwhile ‖W_j‖ and the column statistics on the host.
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  std::vector<double> w_norm_h;
  ColumnStats wcol, hcol;
  std::future<void> host_stats = std::async(std::launch::async, [&] {
    w_norm_h = row_norms_upper(pb.W, V, D, threads);
    if (want_dH) wcol = column_stats(pb.W, D, {}, V, threads);
    if (want_dW) hcol = column_stats(pb.H, D, res.token_rows, S, threads);
  });
  DeviceArray<double> Wd(static_cast<std::size_t>(V * D), "W"),
      AWd(want_dH ? static_cast<std::size_t>(V * D) : 0, "|W|");
  {
    DeviceArray<unsigned char> raw(pb.W.nbytes(), "W (raw)");
    check(cudaMemcpy(raw.p, pb.W.data(), pb.W.nbytes(), cudaMemcpyHostToDevice), "W upload");
    widen_kernel<<<grid_for(V * D), 256>>>(raw.p, code, V * D, Wd.p, want_dH ? AWd.p : nullptr);
    check(cudaGetLastError(), "widen W");
    check(cudaDeviceSynchronize(), "widen W");
  }
  clock.mark("W on the device");
  host_stats.get();  // rethrows its failure
  clock.mark("norms and column statistics");
  DeviceArray<double> w_norm = upload(w_norm_h, "‖W_j‖");
  DeviceArray<double> d_wmax = upload(wcol.max_abs, "W column max"),
                      d_wnrm = upload(wcol.norm, "W column norm");
  DeviceArray<double> d_hmax = upload(hcol.max_abs, "H column max"),
                      d_hnrm = upload(hcol.norm, "H column norm");
  std::vector<double> bias_h;
  if (pb.bias) {
    bias_h.resize(static_cast<std::size_t>(V));
    pb.bias->read(0, V, bias_h.data());
  }
  DeviceArray<double> bias = upload(bias_h, "bias");
  std::vector<std::int64_t> vocab_h = res.vocab_rows;
  DeviceArray<std::int64_t> vocab =
      upload(all_vocab ? std::vector<std::int64_t>{} : vocab_h, "vocabulary rows");

  DeviceArray<double> dW(want_dW ? static_cast<std::size_t>(J * D) : 0, "dW"), dWc(dW.n, "dW cond"),
      dWb(dW.n, "dW bound");
  if (want_dW) {
    check(cudaMemset(dW.p, 0, dW.n * 8), "dW");
    check(cudaMemset(dWc.p, 0, dWc.n * 8), "dW cond");
  }
  DeviceArray<eft::CompensatedSum> db(want_db ? static_cast<std::size_t>(J) : 0, "db");
  DeviceArray<double> db_bnd(db.n, "db bound"), db_abs(db.n, "db |dz|");
  DeviceArray<double> col_gb(static_cast<std::size_t>(J), "Σδdz"),
      col_gb2(static_cast<std::size_t>(J), "Σδdz²");
  check(cudaMemset(col_gb.p, 0, J * 8), "Σδdz");
  check(cudaMemset(col_gb2.p, 0, J * 8), "Σδdz²");
  if (want_db) {
    check(cudaMemset(db.p, 0, db.n * sizeof(eft::CompensatedSum)), "db");
    check(cudaMemset(db_bnd.p, 0, db.n * 8), "db bound");
    check(cudaMemset(db_abs.p, 0, db.n * 8), "db |dz|");
  }

  const std::size_t bV = static_cast<std::size_t>(block * V),
                    bD = static_cast<std::size_t>(block * D);
  DeviceArray<double> R(bV, "logits block"), A(backward ? bV : 0, "|dz| block"),
      GB(backward || opt.want_dz ? bV : 0, "δdz block");
  DeviceArray<double> Hb(bD, "H block"), AHb(want_dW ? bD : 0, "|H| block");
  DeviceArray<unsigned char> Hraw(bD * pb.H.nbytes() / std::max<std::size_t>(1, pb.H.numel()),
                                  "H block (raw)");
  DeviceArray<double> hn(static_cast<std::size_t>(block), "‖H_i‖"),
      gsc(static_cast<std::size_t>(block), "grad scale");
  DeviceArray<std::int64_t> tg(static_cast<std::size_t>(block), "targets");
  DeviceArray<RowOut> rows(static_cast<std::size_t>(block), "row statistics");
  DeviceArray<double> rgb(static_cast<std::size_t>(block), "row Σδdz"),
      rgb2(static_cast<std::size_t>(block), "row Σδdz²");
  DeviceArray<double> DZJ(want_dW && !all_vocab ? static_cast<std::size_t>(block * J) : 0,
                          "dz columns"),
      ADZJ(DZJ.n, "|dz| columns");
  DeviceArray<double> dHc(want_dH ? bD : 0, "dH cond"), dHb(want_dH ? bD : 0, "dH bound"),
      dHv(want_dH ? bD : 0, "dH");

  const std::size_t esz = pb.H.nbytes() / std::max<std::size_t>(1, pb.H.numel());
  std::vector<unsigned char> hraw_h(bD * esz);
  std::vector<double> hn_h(static_cast<std::size_t>(block)), gs_h(static_cast<std::size_t>(block));
  std::vector<std::int64_t> tg_h(static_cast<std::size_t>(block));
  std::vector<RowOut> rows_h(static_cast<std::size_t>(block));
  RowParams P{sp, V, D, eft::gamma_n(double(D + 1)), backward, opt.want_dz};

  // dW += dzᵀ·H and its condition |dz|ᵀ·|H| over the vocabulary rows [r0, r1) of the block.
  const auto dw_gemms = [&](std::int64_t m, std::int64_t r0, std::int64_t r1) {
    if (all_vocab) {
      dgemm(cb.h, true, false, r1 - r0, D, m, 1.0, R.p + r0, V, Hb.p, D, 1.0, dW.p + r0 * D, D);
      dgemm(cb.h, true, false, r1 - r0, D, m, 1.0, A.p + r0, V, AHb.p, D, 1.0, dWc.p + r0 * D, D);
    } else {
      dgemm(cb.h, true, false, r1 - r0, D, m, 1.0, DZJ.p + r0, J, Hb.p, D, 1.0, dW.p + r0 * D, D);
      dgemm(cb.h, true, false, r1 - r0, D, m, 1.0, ADZJ.p + r0, J, AHb.p, D, 1.0, dWc.p + r0 * D,
            D);
    }
  };
  // The slices of the last block's dW: 256 MiB of each of dW, its condition and bound a slice.
  const std::int64_t slice_rows = std::max<std::int64_t>(
      1, std::min<std::int64_t>(J, (std::int64_t{32} << 20) / std::max<std::int64_t>(D, 1)));
  std::vector<Event> slices(want_dW ? static_cast<std::size_t>((J + slice_rows - 1) / slice_rows)
                                    : 0);
  const double dw_up = 1.0 + 2 * eft::gamma_n(double(S + 2));
  // The last token block's dW in those slices, each slice's bound after its GEMMs and an event
  // after both: the copies of a slice to the host overlap the GEMMs of the next ones.
  const auto queue_dw_slices = [&](std::int64_t m) {
    for (std::size_t k = 0; k < slices.size(); ++k) {
      const std::int64_t r0 = static_cast<std::int64_t>(k) * slice_rows,
                         r1 = std::min(J, r0 + slice_rows);
      dw_gemms(m, r0, r1);
      grad_bound_kernel<<<grid_for((r1 - r0) * D), 256>>>(
          r1 - r0, D, eft::gamma_n(double(S + 2)), col_gb.p + r0, col_gb2.p + r0, dw_up, d_hmax.p,
          d_hnrm.p, dWc.p + r0 * D, dWb.p + r0 * D);
      check(cudaGetLastError(), "dW bound");
      check(cudaEventRecord(slices[k].e, nullptr), "dW slice event");
    }
  };
  Event dh_ready;

  for (std::int64_t b0 = 0; b0 < S; b0 += block) {
    const std::int64_t m = std::min(block, S - b0);
#pragma omp parallel for schedule(static)
    for (std::int64_t q = 0; q < m; ++q) {
      const std::int64_t i = res.token_rows[static_cast<std::size_t>(b0 + q)];
      std::memcpy(hraw_h.data() + q * D * esz,
                  static_cast<const unsigned char*>(pb.H.data()) + i * D * esz, D * esz);
      std::vector<double> h(static_cast<std::size_t>(D));
      pb.H.read(i * D, D, h.data());
      double ss = 0;
      for (double x : h) ss += x * x;
      hn_h[static_cast<std::size_t>(q)] =
          std::sqrt(ss * (1.0 + 2 * eft::gamma_n(double(D + 2)))) * (1.0 + 2 * kRefU);
      const std::int64_t t = pb.targets[static_cast<std::size_t>(i)];
      tg_h[static_cast<std::size_t>(q)] = t;
      gs_h[static_cast<std::size_t>(q)] =
          row_grad_scale(sp, res.n_valid, opt.upstream, i, t != sp.ignore_index);
    }
    check(cudaMemcpy(Hraw.p, hraw_h.data(), m * D * esz, cudaMemcpyHostToDevice), "H upload");
    check(cudaMemcpy(hn.p, hn_h.data(), m * 8, cudaMemcpyHostToDevice), "‖H‖ upload");
    check(cudaMemcpy(gsc.p, gs_h.data(), m * 8, cudaMemcpyHostToDevice), "scale upload");
    check(cudaMemcpy(tg.p, tg_h.data(), m * 8, cudaMemcpyHostToDevice), "targets upload");
    widen_kernel<<<grid_for(m * D), 256>>>(Hraw.p, code, m * D, Hb.p, want_dW ? AHb.p : nullptr);
    check(cudaGetLastError(), "widen H");
    dgemm(cb.h, false, true, m, V, D, 1.0, Hb.p, D, Wd.p, D, 0.0, R.p, V);
    row_kernel<<<int(m), kRowThreads>>>(P, R.p, A.p, GB.p, pb.bias ? bias.p : nullptr, w_norm.p,
                                        hn.p, tg.p, gsc.p, rows.p);
    check(cudaGetLastError(), "row kernel");
    check(cudaMemcpy(rows_h.data(), rows.p, m * sizeof(RowOut), cudaMemcpyDeviceToHost),
          "row statistics");
    std::vector<double> rgb_h(static_cast<std::size_t>(m)), rgb2_h(static_cast<std::size_t>(m));
    for (std::int64_t q = 0; q < m; ++q) {
      store_row_outputs(res, b0 + q, rows_h[static_cast<std::size_t>(q)].st,
                        rows_h[static_cast<std::size_t>(q)].gs);
      rgb_h[static_cast<std::size_t>(q)] = rows_h[static_cast<std::size_t>(q)].row_gb;
      rgb2_h[static_cast<std::size_t>(q)] = rows_h[static_cast<std::size_t>(q)].row_gb2;
    }
    if (opt.want_dz) {
      copier.copy(res.dz.data() + b0 * V, R.p, m * V * 8, "dz");
      copier.copy(res.dz_bound.data() + b0 * V, GB.p, m * V * 8, "dz bound");
    }
    if (backward) {
      column_kernel<<<grid_for(J), 256>>>(m, V, J, all_vocab ? nullptr : vocab.p, R.p, GB.p,
                                          want_db ? db.p : nullptr, db_bnd.p, db_abs.p, col_gb.p,
                                          col_gb2.p, DZJ.n ? DZJ.p : nullptr, ADZJ.p);
      check(cudaGetLastError(), "column kernel");
    }
    if (want_dH) {
      dgemm(cb.h, false, false, m, D, V, 1.0, R.p, V, Wd.p, D, 0.0, dHv.p, D);
      dgemm(cb.h, false, false, m, D, V, 1.0, A.p, V, AWd.p, D, 0.0, dHc.p, D);
      check(cudaMemcpy(rgb.p, rgb_h.data(), m * 8, cudaMemcpyHostToDevice), "row Σδdz");
      check(cudaMemcpy(rgb2.p, rgb2_h.data(), m * 8, cudaMemcpyHostToDevice), "row Σδdz²");
      grad_bound_kernel<<<grid_for(m * D), 256>>>(m, D, eft::gamma_n(double(V + 2)), rgb.p, rgb2.p,
                                                  1.0 + 2 * eft::gamma_n(double(V + 2)), d_wmax.p,
                                                  d_wnrm.p, dHc.p, dHb.p);
      check(cudaGetLastError(), "dH bound");
      check(cudaEventRecord(dh_ready.e, nullptr), "dH event");
    }
    const bool last = b0 + m >= S;
    if (want_dW) {
      if (last)
        queue_dw_slices(m);
      else
        dw_gemms(m, 0, J);
    }
    // dH's copies overlap the dW GEMMs queued after it.
    if (want_dH) {
      copier.copy_after(dh_ready.e, res.dH.data() + b0 * D, dHv.p, m * D * 8, "dH");
      copier.copy_after(dh_ready.e, res.dH_cond.data() + b0 * D, dHc.p, m * D * 8, "dH cond");
      copier.copy_after(dh_ready.e, res.dH_bound.data() + b0 * D, dHb.p, m * D * 8, "dH bound");
    }
    if (last && want_dW) break;  // no synchronisation: dW's copies wait for each slice's event
    check(cudaDeviceSynchronize(), "token block");
    if (opt.progress) opt.progress(b0 + m, S);
  }
  clock.mark(want_dW ? "token blocks (dW slices queued)" : "token blocks", !want_dW);

  if (want_dW) {
    if (S == 0) queue_dw_slices(0);  // no token block: dW and its bound of no rows
    dw_alloc.get();                  // rethrows its failure
    clock.mark("host dW allocated", false);
    for (std::size_t k = 0; k < slices.size(); ++k) {
      const std::int64_t r0 = static_cast<std::int64_t>(k) * slice_rows,
                         n = (std::min(J, r0 + slice_rows) - r0) * D;
      copier.copy_after(slices[k].e, res.dW.data() + r0 * D, dW.p + r0 * D, n * 8, "dW");
      copier.copy_after(slices[k].e, res.dW_cond.data() + r0 * D, dWc.p + r0 * D, n * 8, "dW cond");
      copier.copy_after(slices[k].e, res.dW_bound.data() + r0 * D, dWb.p + r0 * D, n * 8,
                        "dW bound");
    }
    check(cudaDeviceSynchronize(), "dW");
    if (opt.progress) opt.progress(S, S);
    clock.mark("dW slices and their copies");
  }
  if (want_db) {
    std::vector<eft::CompensatedSum> acc(static_cast<std::size_t>(J));
    std::vector<double> bnd(static_cast<std::size_t>(J)), ab(static_cast<std::size_t>(J));
    check(cudaMemcpy(acc.data(), db.p, J * sizeof(eft::CompensatedSum), cudaMemcpyDeviceToHost),
          "db");
    check(cudaMemcpy(bnd.data(), db_bnd.p, J * 8, cudaMemcpyDeviceToHost), "db bound");
    check(cudaMemcpy(ab.data(), db_abs.p, J * 8, cudaMemcpyDeviceToHost), "db |dz|");
    finish_db(acc, bnd, ab, S, res);
  }
}

}  // namespace detail
}  // namespace xentlab

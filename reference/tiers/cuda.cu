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
#include "numerics/no_device.hpp"
#include "reference/row.hpp"
#include "reference/row_math.hpp"
#include "reference/tiers/cuda_kernels.cuh"
#include "reference/tiers/cuda_staging.cuh"
#include "reference/tiers/cuda_support.cuh"
#include "reference/tiers/plan.hpp"

// The staging copies and the H rows are OpenMP loops in host code: without -fopenmp for the host
// compiler (reference/CMakeLists.txt) nvcc drops the pragmas and they run on one thread.
#ifndef _OPENMP
#error "cuda_tier.cu needs OpenMP in its host code (-Xcompiler=-fopenmp)"
#endif

namespace xentlab {

bool cuda_reference_available(std::string* why_not) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why_not)
      *why_not = no_cuda_device_reason(e == cudaErrorInsufficientDriver,
                                       e == cudaErrorNoDevice || (e == cudaSuccess && n == 0),
                                       cudaGetErrorString(e));
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

namespace {

// Host memory: the outputs (as the blas tier) and the row statistics.
void check_host_memory(const TierPlan& tp, const ReferenceOptions& opt, std::int64_t budget,
                       bool budget_given) {
  const std::int64_t V = tp.V, D = tp.D, S = tp.S;
  const double host_need = 8.0 * (host_output_words(S, V, D, tp.J, opt) + 2.0 * V + 4.0 * D) +
                           2.0 * HostCopier::kPiece +
                           (sizeof(RowOut) + 2.0 * 8 + 16.0 * D) * std::min<double>(S, 8192);
  check_memory(host_need, budget, budget_given, tp.what + " (host outputs)");
}

// Token rows a block from the GPU's free memory: W and |W|, dW accumulators, per-row block
// buffers. Throws InputError when one token row does not fit.
std::int64_t device_block_rows(const Problem& pb, const TierPlan& tp, const ReferenceOptions& opt) {
  const std::int64_t V = tp.V, D = tp.D, S = tp.S, J = tp.J;
  const bool want_dH = tp.want_dH, want_dW = tp.want_dW;
  std::size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const double dev_budget = 0.92 * static_cast<double>(free_b) - (512.0 * (1 << 20));
  const double dev_fixed = 8.0 * (static_cast<double>(V) * D * (want_dH ? 2.0 : 1.0) +
                                  (want_dW ? 3.0 * J * D : 0.0) + 6.0 * J + 3.0 * V + 3.0 * D) +
                           2.0 * std::max(pb.W.nbytes(), static_cast<std::size_t>(1)) / 2.0 +
                           sizeof(eft::CompensatedSum) * double(J);
  // Per token row: R, |dz|, δdz (V each); H, |H|, dH, its bound and condition (D each) and the
  // raw H row; the row scalars.
  const double dev_row = 8.0 * (static_cast<double>(V) * (tp.backward || opt.want_dz ? 3 : 1) +
                                6.0 * D + 8.0 + (want_dW && !tp.all_vocab ? 2.0 * J : 0.0)) +
                         sizeof(RowOut);
  if (dev_fixed + dev_row > dev_budget)
    throw InputError(fmt::format(
        "{} needs {:.0f} bytes ({:.2f} GiB) of GPU memory for one token row a block but the GPU "
        "has {} bytes free: sample vocabulary rows (--vocab-rows) or use --reference blas",
        tp.what, dev_fixed + dev_row, (dev_fixed + dev_row) / double(1 << 30), free_b));
  std::int64_t block = static_cast<std::int64_t>((dev_budget - dev_fixed) / dev_row);
  block = std::min<std::int64_t>({block, S, 8192});
  if (opt.block_rows > 0) block = std::min(opt.block_rows, block);
  return block;
}

// dW, its bound and its condition (4.2 GB each for the Llama-3-8B head) are only written at the
// end: their allocation and zero-fill run on another thread while the GPU works. (The futures of
// std::async wait for their thread when destroyed: an exception on this thread never leaves one
// running on a result being destroyed.) No future without dW.
std::future<void> allocate_dW_async(ReferenceResult& res, const TierPlan& tp) {
  std::future<void> dw_alloc;
  if (tp.want_dW)
    dw_alloc = std::async(std::launch::async, [&res, n = static_cast<std::size_t>(tp.J * tp.D)] {
      res.dW.resize(n);
      res.dW_bound.resize(n);
      res.dW_cond.resize(n);
    });
  return dw_alloc;
}

// What the kernels read of the problem, on the device.
struct DeviceInputs {
  DeviceArray<double> Wd, AWd;                         // W and |W| as doubles (V×D)
  DeviceArray<double> w_norm;                          // ‖W_j‖
  DeviceArray<double> d_wmax, d_wnrm, d_hmax, d_hnrm;  // column maxima and norms of W and H
  DeviceArray<double> bias;
  DeviceArray<std::int64_t> vocab;  // the vocabulary rows, empty for all of them
};

// W (and |W|) as doubles on the device; meanwhile ‖W_j‖ and the column statistics on the host,
// then uploaded with the bias and the vocabulary rows.
DeviceInputs upload_inputs(const Problem& pb, const ReferenceResult& res, const TierPlan& tp,
                           int code, StageClock& clock) {
  const std::int64_t V = tp.V, D = tp.D, S = tp.S;
  const bool want_dH = tp.want_dH, want_dW = tp.want_dW;
  const int threads = tp.threads;
  DeviceInputs in;
  std::vector<double> w_norm_h;
  ColumnStats wcol, hcol;
  std::future<void> host_stats = std::async(std::launch::async, [&] {
    w_norm_h = row_norms_upper(pb.W, V, D, threads);
    if (want_dH) wcol = column_stats(pb.W, D, {}, V, threads);
    if (want_dW) hcol = column_stats(pb.H, D, res.token_rows, S, threads);
  });
  in.Wd = DeviceArray<double>(static_cast<std::size_t>(V * D), "W");
  in.AWd = DeviceArray<double>(want_dH ? static_cast<std::size_t>(V * D) : 0, "|W|");
  {
    DeviceArray<unsigned char> raw(pb.W.nbytes(), "W (raw)");
    check(cudaMemcpy(raw.p, pb.W.data(), pb.W.nbytes(), cudaMemcpyHostToDevice), "W upload");
    widen_kernel<<<grid_for(V * D), 256>>>(raw.p, code, V * D, in.Wd.p,
                                           want_dH ? in.AWd.p : nullptr);
    check(cudaGetLastError(), "widen W");
    check(cudaDeviceSynchronize(), "widen W");
  }
  clock.mark("W on the device");
  host_stats.get();  // rethrows its failure
  clock.mark("norms and column statistics");
  in.w_norm = upload(w_norm_h, "‖W_j‖");
  in.d_wmax = upload(wcol.max_abs, "W column max");
  in.d_wnrm = upload(wcol.norm, "W column norm");
  in.d_hmax = upload(hcol.max_abs, "H column max");
  in.d_hnrm = upload(hcol.norm, "H column norm");
  std::vector<double> bias_h;
  if (pb.bias) {
    bias_h.resize(static_cast<std::size_t>(V));
    pb.bias->read(0, V, bias_h.data());
  }
  in.bias = upload(bias_h, "bias");
  std::vector<std::int64_t> vocab_h = res.vocab_rows;
  in.vocab = upload(tp.all_vocab ? std::vector<std::int64_t>{} : vocab_h, "vocabulary rows");
  return in;
}

// The accumulators across token blocks: dW, its condition and bound (J×D); db's Sum2, bound and
// Σ|dz| (J); Σδdz and Σδdz² per vocabulary row. Zeroed where they accumulate.
struct DeviceAccumulators {
  DeviceArray<double> dW, dWc, dWb;
  DeviceArray<eft::CompensatedSum> db;
  DeviceArray<double> db_bnd, db_abs;
  DeviceArray<double> col_gb, col_gb2;
};

DeviceAccumulators make_accumulators(const TierPlan& tp) {
  const std::int64_t D = tp.D, J = tp.J;
  const bool want_dW = tp.want_dW, want_db = tp.want_db;
  DeviceAccumulators a;
  a.dW = DeviceArray<double>(want_dW ? static_cast<std::size_t>(J * D) : 0, "dW");
  a.dWc = DeviceArray<double>(a.dW.n, "dW cond");
  a.dWb = DeviceArray<double>(a.dW.n, "dW bound");
  if (want_dW) {
    check(cudaMemset(a.dW.p, 0, a.dW.n * 8), "dW");
    check(cudaMemset(a.dWc.p, 0, a.dWc.n * 8), "dW cond");
  }
  a.db = DeviceArray<eft::CompensatedSum>(want_db ? static_cast<std::size_t>(J) : 0, "db");
  a.db_bnd = DeviceArray<double>(a.db.n, "db bound");
  a.db_abs = DeviceArray<double>(a.db.n, "db |dz|");
  a.col_gb = DeviceArray<double>(static_cast<std::size_t>(J), "Σδdz");
  a.col_gb2 = DeviceArray<double>(static_cast<std::size_t>(J), "Σδdz²");
  check(cudaMemset(a.col_gb.p, 0, J * 8), "Σδdz");
  check(cudaMemset(a.col_gb2.p, 0, J * 8), "Σδdz²");
  if (want_db) {
    check(cudaMemset(a.db.p, 0, a.db.n * sizeof(eft::CompensatedSum)), "db");
    check(cudaMemset(a.db_bnd.p, 0, a.db.n * 8), "db bound");
    check(cudaMemset(a.db_abs.p, 0, a.db.n * 8), "db |dz|");
  }
  return a;
}

// The buffers of one token block on the device, and their host staging.
struct BlockBuffers {
  DeviceArray<double> R, A, GB;  // raw logits then dz, |dz|, δdz (block×V)
  DeviceArray<double> Hb, AHb;   // H and |H| rows as doubles (block×D)
  DeviceArray<unsigned char> Hraw;
  DeviceArray<double> hn, gsc;
  DeviceArray<std::int64_t> tg;
  DeviceArray<RowOut> rows;
  DeviceArray<double> rgb, rgb2;
  DeviceArray<double> DZJ, ADZJ;  // sampled dz and |dz| columns (block×J)
  DeviceArray<double> dHc, dHb, dHv;
  std::size_t esz = 0;  // bytes of an H element
  std::vector<unsigned char> hraw_h;
  std::vector<double> hn_h, gs_h;
  std::vector<std::int64_t> tg_h;
  std::vector<RowOut> rows_h;
};

BlockBuffers make_block_buffers(const Problem& pb, const TierPlan& tp, const ReferenceOptions& opt,
                                std::int64_t block) {
  const std::int64_t V = tp.V, D = tp.D, J = tp.J;
  const bool want_dH = tp.want_dH, want_dW = tp.want_dW, backward = tp.backward;
  BlockBuffers b;
  const std::size_t bV = static_cast<std::size_t>(block * V),
                    bD = static_cast<std::size_t>(block * D);
  b.R = DeviceArray<double>(bV, "logits block");
  b.A = DeviceArray<double>(backward ? bV : 0, "|dz| block");
  b.GB = DeviceArray<double>(backward || opt.want_dz ? bV : 0, "δdz block");
  b.Hb = DeviceArray<double>(bD, "H block");
  b.AHb = DeviceArray<double>(want_dW ? bD : 0, "|H| block");
  b.Hraw = DeviceArray<unsigned char>(bD * pb.H.nbytes() / std::max<std::size_t>(1, pb.H.numel()),
                                      "H block (raw)");
  b.hn = DeviceArray<double>(static_cast<std::size_t>(block), "‖H_i‖");
  b.gsc = DeviceArray<double>(static_cast<std::size_t>(block), "grad scale");
  b.tg = DeviceArray<std::int64_t>(static_cast<std::size_t>(block), "targets");
  b.rows = DeviceArray<RowOut>(static_cast<std::size_t>(block), "row statistics");
  b.rgb = DeviceArray<double>(static_cast<std::size_t>(block), "row Σδdz");
  b.rgb2 = DeviceArray<double>(static_cast<std::size_t>(block), "row Σδdz²");
  b.DZJ = DeviceArray<double>(want_dW && !tp.all_vocab ? static_cast<std::size_t>(block * J) : 0,
                              "dz columns");
  b.ADZJ = DeviceArray<double>(b.DZJ.n, "|dz| columns");
  b.dHc = DeviceArray<double>(want_dH ? bD : 0, "dH cond");
  b.dHb = DeviceArray<double>(want_dH ? bD : 0, "dH bound");
  b.dHv = DeviceArray<double>(want_dH ? bD : 0, "dH");

  b.esz = pb.H.nbytes() / std::max<std::size_t>(1, pb.H.numel());
  b.hraw_h.resize(bD * b.esz);
  b.hn_h.resize(static_cast<std::size_t>(block));
  b.gs_h.resize(static_cast<std::size_t>(block));
  b.tg_h.resize(static_cast<std::size_t>(block));
  b.rows_h.resize(static_cast<std::size_t>(block));
  return b;
}

// dW in slices of vocabulary rows: each token block's GEMMs, and the last block's in slices of
// 256 MiB of each of dW, its condition and bound, each slice's bound after its GEMMs and an
// event after both: the copies of a slice to the host overlap the GEMMs of the next ones.
class DwSlices {
 public:
  DwSlices(const TierPlan& tp, const Cublas& cb, const DeviceInputs& in, DeviceAccumulators& acc,
           const BlockBuffers& blk)
      : tp_(tp),
        cb_(cb),
        in_(in),
        acc_(acc),
        blk_(blk),
        slice_rows_(std::max<std::int64_t>(
            1, std::min<std::int64_t>(tp.J,
                                      (std::int64_t{32} << 20) / std::max<std::int64_t>(tp.D, 1)))),
        slices_(tp.want_dW ? static_cast<std::size_t>((tp.J + slice_rows_ - 1) / slice_rows_) : 0),
        dw_up_(1.0 + 2 * eft::gamma_n(double(tp.S + 2))) {}

  // dW += dzᵀ·H and its condition |dz|ᵀ·|H| over the vocabulary rows [r0, r1) of the block.
  void gemms(std::int64_t m, std::int64_t r0, std::int64_t r1) const {
    const std::int64_t V = tp_.V, D = tp_.D, J = tp_.J;
    const DeviceArray<double>&R = blk_.R, &A = blk_.A, &Hb = blk_.Hb, &AHb = blk_.AHb;
    const DeviceArray<double>&DZJ = blk_.DZJ, &ADZJ = blk_.ADZJ;
    const DeviceArray<double>&dW = acc_.dW, &dWc = acc_.dWc;
    if (tp_.all_vocab) {
      dgemm(cb_.h, true, false, r1 - r0, D, m, 1.0, R.p + r0, V, Hb.p, D, 1.0, dW.p + r0 * D, D);
      dgemm(cb_.h, true, false, r1 - r0, D, m, 1.0, A.p + r0, V, AHb.p, D, 1.0, dWc.p + r0 * D, D);
    } else {
      dgemm(cb_.h, true, false, r1 - r0, D, m, 1.0, DZJ.p + r0, J, Hb.p, D, 1.0, dW.p + r0 * D, D);
      dgemm(cb_.h, true, false, r1 - r0, D, m, 1.0, ADZJ.p + r0, J, AHb.p, D, 1.0, dWc.p + r0 * D,
            D);
    }
  }

  // The last token block's dW, slice by slice, each with its bound and its event.
  void queue(std::int64_t m) {
    const std::int64_t D = tp_.D, J = tp_.J, S = tp_.S;
    for (std::size_t k = 0; k < slices_.size(); ++k) {
      const std::int64_t r0 = static_cast<std::int64_t>(k) * slice_rows_,
                         r1 = std::min(J, r0 + slice_rows_);
      gemms(m, r0, r1);
      grad_bound_kernel<<<grid_for((r1 - r0) * D), 256>>>(
          r1 - r0, D, eft::gamma_n(double(S + 2)), acc_.col_gb.p + r0, acc_.col_gb2.p + r0, dw_up_,
          in_.d_hmax.p, in_.d_hnrm.p, acc_.dWc.p + r0 * D, acc_.dWb.p + r0 * D);
      check(cudaGetLastError(), "dW bound");
      check(cudaEventRecord(slices_[k].e, nullptr), "dW slice event");
    }
  }

  // Each slice's dW, condition and bound to the host once its event has happened.
  void copy_to_host(HostCopier& copier, ReferenceResult& res) const {
    const std::int64_t D = tp_.D, J = tp_.J;
    for (std::size_t k = 0; k < slices_.size(); ++k) {
      const std::int64_t r0 = static_cast<std::int64_t>(k) * slice_rows_,
                         n = (std::min(J, r0 + slice_rows_) - r0) * D;
      copier.copy_after(slices_[k].e, res.dW.data() + r0 * D, acc_.dW.p + r0 * D, n * 8, "dW");
      copier.copy_after(slices_[k].e, res.dW_cond.data() + r0 * D, acc_.dWc.p + r0 * D, n * 8,
                        "dW cond");
      copier.copy_after(slices_[k].e, res.dW_bound.data() + r0 * D, acc_.dWb.p + r0 * D, n * 8,
                        "dW bound");
    }
  }

 private:
  const TierPlan& tp_;
  const Cublas& cb_;
  const DeviceInputs& in_;
  DeviceAccumulators& acc_;
  const BlockBuffers& blk_;
  const std::int64_t slice_rows_;
  std::vector<Event> slices_;
  const double dw_up_;
};

// The steps of one token block, over the run's buffers.
struct TokenBlocks {
  const Problem& pb;
  const LossSpec& sp;
  const ReferenceOptions& opt;
  ReferenceResult& res;
  const TierPlan& tp;
  const int code;
  const Cublas& cb;
  HostCopier& copier;
  const DeviceInputs& in;
  DeviceAccumulators& acc;
  BlockBuffers& blk;
  DwSlices& dw;
  const RowParams& P;
  Event& dh_ready;

  // Token rows [b0, b0 + m); false after the last block with dW (its copies are queued behind
  // the dW slices' events, no synchronisation).
  bool token_block(std::int64_t b0, std::int64_t m) {
    stage_rows(b0, m);
    forward(m);
    std::vector<double> rgb_h(static_cast<std::size_t>(m)), rgb2_h(static_cast<std::size_t>(m));
    store_rows(b0, m, rgb_h, rgb2_h);
    if (opt.want_dz) {
      copier.copy(res.dz.data() + b0 * tp.V, blk.R.p, m * tp.V * 8, "dz");
      copier.copy(res.dz_bound.data() + b0 * tp.V, blk.GB.p, m * tp.V * 8, "dz bound");
    }
    if (tp.backward) {
      column_kernel<<<grid_for(tp.J), 256>>>(
          m, tp.V, tp.J, tp.all_vocab ? nullptr : in.vocab.p, blk.R.p, blk.GB.p,
          tp.want_db ? acc.db.p : nullptr, acc.db_bnd.p, acc.db_abs.p, acc.col_gb.p, acc.col_gb2.p,
          blk.DZJ.n ? blk.DZJ.p : nullptr, blk.ADZJ.p);
      check(cudaGetLastError(), "column kernel");
    }
    if (tp.want_dH) dH(m, rgb_h, rgb2_h);
    const bool last = b0 + m >= tp.S;
    if (tp.want_dW) {
      if (last)
        dw.queue(m);
      else
        dw.gemms(m, 0, tp.J);
    }
    // dH's copies overlap the dW GEMMs queued after it.
    if (tp.want_dH) {
      const std::int64_t D = tp.D;
      copier.copy_after(dh_ready.e, res.dH.data() + b0 * D, blk.dHv.p, m * D * 8, "dH");
      copier.copy_after(dh_ready.e, res.dH_cond.data() + b0 * D, blk.dHc.p, m * D * 8, "dH cond");
      copier.copy_after(dh_ready.e, res.dH_bound.data() + b0 * D, blk.dHb.p, m * D * 8, "dH bound");
    }
    if (last && tp.want_dW) return false;
    check(cudaDeviceSynchronize(), "token block");
    if (opt.progress) opt.progress(b0 + m, tp.S);
    return true;
  }

 private:
  // The block's raw H rows, ‖H_i‖, targets and gradient scales, staged and uploaded.
  void stage_rows(std::int64_t b0, std::int64_t m) {
    const std::int64_t D = tp.D;
    const std::size_t esz = blk.esz;
#pragma omp parallel for schedule(static)
    for (std::int64_t q = 0; q < m; ++q) {
      const std::int64_t i = res.token_rows[static_cast<std::size_t>(b0 + q)];
      std::memcpy(blk.hraw_h.data() + q * D * esz,
                  static_cast<const unsigned char*>(pb.H.data()) + i * D * esz, D * esz);
      std::vector<double> h(static_cast<std::size_t>(D));
      pb.H.read(i * D, D, h.data());
      double ss = 0;
      for (double x : h) ss += x * x;
      blk.hn_h[static_cast<std::size_t>(q)] =
          std::sqrt(ss * (1.0 + 2 * eft::gamma_n(double(D + 2)))) * (1.0 + 2 * kRefU);
      const std::int64_t t = pb.targets[static_cast<std::size_t>(i)];
      blk.tg_h[static_cast<std::size_t>(q)] = t;
      blk.gs_h[static_cast<std::size_t>(q)] =
          row_grad_scale(sp, res.n_valid, opt.upstream, i, t != sp.ignore_index);
    }
    check(cudaMemcpy(blk.Hraw.p, blk.hraw_h.data(), m * D * esz, cudaMemcpyHostToDevice),
          "H upload");
    check(cudaMemcpy(blk.hn.p, blk.hn_h.data(), m * 8, cudaMemcpyHostToDevice), "‖H‖ upload");
    check(cudaMemcpy(blk.gsc.p, blk.gs_h.data(), m * 8, cudaMemcpyHostToDevice), "scale upload");
    check(cudaMemcpy(blk.tg.p, blk.tg_h.data(), m * 8, cudaMemcpyHostToDevice), "targets upload");
  }

  // H rows widened, the logits GEMM and the row kernel.
  void forward(std::int64_t m) {
    const std::int64_t V = tp.V, D = tp.D;
    widen_kernel<<<grid_for(m * D), 256>>>(blk.Hraw.p, code, m * D, blk.Hb.p,
                                           tp.want_dW ? blk.AHb.p : nullptr);
    check(cudaGetLastError(), "widen H");
    dgemm(cb.h, false, true, m, V, D, 1.0, blk.Hb.p, D, in.Wd.p, D, 0.0, blk.R.p, V);
    row_kernel<<<int(m), kRowThreads>>>(P, blk.R.p, blk.A.p, blk.GB.p,
                                        pb.bias ? in.bias.p : nullptr, in.w_norm.p, blk.hn.p,
                                        blk.tg.p, blk.gsc.p, blk.rows.p);
    check(cudaGetLastError(), "row kernel");
  }

  // The rows' statistics into res; their Σδdz and Σδdz² into rgb_h and rgb2_h.
  void store_rows(std::int64_t b0, std::int64_t m, std::vector<double>& rgb_h,
                  std::vector<double>& rgb2_h) {
    check(cudaMemcpy(blk.rows_h.data(), blk.rows.p, m * sizeof(RowOut), cudaMemcpyDeviceToHost),
          "row statistics");
    for (std::int64_t q = 0; q < m; ++q) {
      const RowOut& o = blk.rows_h[static_cast<std::size_t>(q)];
      store_row_outputs(res, b0 + q, o.st, o.gs);
      rgb_h[static_cast<std::size_t>(q)] = o.row_gb;
      rgb2_h[static_cast<std::size_t>(q)] = o.row_gb2;
    }
  }

  // dH = dz·W, its condition |dz|·|W| and its bound; dh_ready after them.
  void dH(std::int64_t m, const std::vector<double>& rgb_h, const std::vector<double>& rgb2_h) {
    const std::int64_t V = tp.V, D = tp.D;
    dgemm(cb.h, false, false, m, D, V, 1.0, blk.R.p, V, in.Wd.p, D, 0.0, blk.dHv.p, D);
    dgemm(cb.h, false, false, m, D, V, 1.0, blk.A.p, V, in.AWd.p, D, 0.0, blk.dHc.p, D);
    check(cudaMemcpy(blk.rgb.p, rgb_h.data(), m * 8, cudaMemcpyHostToDevice), "row Σδdz");
    check(cudaMemcpy(blk.rgb2.p, rgb2_h.data(), m * 8, cudaMemcpyHostToDevice), "row Σδdz²");
    grad_bound_kernel<<<grid_for(m * D), 256>>>(m, D, eft::gamma_n(double(V + 2)), blk.rgb.p,
                                                blk.rgb2.p, 1.0 + 2 * eft::gamma_n(double(V + 2)),
                                                in.d_wmax.p, in.d_wnrm.p, blk.dHc.p, blk.dHb.p);
    check(cudaGetLastError(), "dH bound");
    check(cudaEventRecord(dh_ready.e, nullptr), "dH event");
  }
};

// db and its bound from the device accumulators.
void download_db(const DeviceAccumulators& a, const TierPlan& tp, ReferenceResult& res) {
  const std::int64_t J = tp.J;
  std::vector<eft::CompensatedSum> acc(static_cast<std::size_t>(J));
  std::vector<double> bnd(static_cast<std::size_t>(J)), ab(static_cast<std::size_t>(J));
  check(cudaMemcpy(acc.data(), a.db.p, J * sizeof(eft::CompensatedSum), cudaMemcpyDeviceToHost),
        "db");
  check(cudaMemcpy(bnd.data(), a.db_bnd.p, J * 8, cudaMemcpyDeviceToHost), "db bound");
  check(cudaMemcpy(ab.data(), a.db_abs.p, J * 8, cudaMemcpyDeviceToHost), "db |dz|");
  finish_db(acc, bnd, ab, tp.S, res);
}

}  // namespace

void cuda_tier(const Problem& pb, const LossSpec& sp, const ReferenceOptions& opt,
               ReferenceResult& res, std::int64_t budget, bool budget_given) {
  const TierPlan tp = plan_tier(pb, opt, res, "cuda");
  const int code = dtype_code(pb.H.dtype());
  check_host_memory(tp, opt, budget, budget_given);
  const std::int64_t block = device_block_rows(pb, tp, opt);

  StageClock clock;
  Cublas cb;
  HostCopier copier;
  clock.mark("start (cuBLAS, staging)");
  allocate_outputs(res, opt.want_dz, tp.want_dH);
  std::future<void> dw_alloc = allocate_dW_async(res, tp);
  clock.mark("host outputs allocated");
  const DeviceInputs in = upload_inputs(pb, res, tp, code, clock);
  DeviceAccumulators acc = make_accumulators(tp);
  BlockBuffers blk = make_block_buffers(pb, tp, opt, block);
  const RowParams P{sp, tp.V, tp.D, eft::gamma_n(double(tp.D + 1)), tp.backward, opt.want_dz};
  DwSlices dw(tp, cb, in, acc, blk);
  Event dh_ready;
  TokenBlocks blocks{pb, sp, opt, res, tp, code, cb, copier, in, acc, blk, dw, P, dh_ready};
  for (std::int64_t b0 = 0; b0 < tp.S; b0 += block)
    if (!blocks.token_block(b0, std::min(block, tp.S - b0))) break;
  clock.mark(tp.want_dW ? "token blocks (dW slices queued)" : "token blocks", !tp.want_dW);

  if (tp.want_dW) {
    if (tp.S == 0) dw.queue(0);  // no token block: dW and its bound of no rows
    dw_alloc.get();              // rethrows its failure
    clock.mark("host dW allocated", false);
    dw.copy_to_host(copier, res);
    check(cudaDeviceSynchronize(), "dW");
    if (opt.progress) opt.progress(tp.S, tp.S);
    clock.mark("dW slices and their copies");
  }
  if (tp.want_db) download_db(acc, tp, res);
}

}  // namespace detail
}  // namespace xentlab

// GPU tests of single kernels of gpu/cuda (label "gpu"; skip without a device).
//
// ce_rows' plain path (scale 1, no softcap, label smoothing or z-loss) leaves out operations that
// are exact identities there (×1, unused option branches) and the per-element bounds checks of
// full groups. It must give the general path's bits: loss, lse and the in-place dz are compared
// bit for bit (NaN equal to NaN) over the three logit dtypes and three accumulators, row lengths
// around the 2048-element stride and the group of 8 (rows not 16-byte aligned when V is odd),
// ignored, valid and out-of-range targets, a row of −inf logits and a row with a NaN logit,
// per-row and scalar upstream gradients, with and without dz.
//
// vocab_chunked's split_row_stats (one kernel) gives launch_shard_row_max's and then
// launch_shard_row_sums's bits with the split's own maximum, over the dtypes, accumulators, odd
// and even split widths and column offsets, label smoothing, a softcap, and a row of −inf logits;
// the widths reach 1, 2, 4 and more groups of 2048 columns a block, full and with a tail.
//
// dz of 16-byte aligned rows (16-byte loads and stores) gives the bits of the same rows one
// element off alignment (element by element, with the same ownership), over the dtypes, dz
// in the logits dtype (also written over z) and fp32, targets inside and outside the split,
// ignored and out of range, NaN and ±inf logits, the options, and per-row and scalar upstream
// gradients.
//
// dz written in a dtype O is rnd_O(rnd_logits(dz)) (docs/arithmetic.md §7) for every pair of
// logits and output dtypes: the same launch with an fp32 output gives rnd_logits(dz) exactly, and
// rounding it to O on the host must give the O output's bits. dz_row leaves out the rounding to the
// logits dtype where the store's rounding alone gives those bits (logits in fp32, or in O's own
// 16-bit dtype); a pair where it may not (fp16 logits into bf16 or the reverse: double rounding,
// and fp16's narrower range) fails here if the kernel leaves it out there too.
//
// The row sums follow the contract's order (docs/arithmetic.md §4: 256 per-thread partials over
// groups of 8 in increasing j, every add rounded to the accumulator, then the tree t += t + s for
// s = 128 … 1), bit for bit against the CPU emulation's emu::sum_blocked of that order. Logits of 0
// and −∞ make every term exp(x − m) exactly 1 or 0 (no libm in the comparison); in bf16 and fp16
// accumulators the sums pass the dtypes' exact integers, so another tree or assignment of columns
// to threads rounds differently (a thread's own partial, an integer of at most 8 bits here, does
// not show the order of its additions).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/cuda/common/ce_kernels.cuh"
#include "gpu/cuda/common/device.hpp"
#include "numerics/dtype.hpp"
#include "numerics/emulate.hpp"

namespace xentlab {
namespace {

const gpu::DeviceInfo& device() {
  static const gpu::DeviceInfo d = gpu::query_device();
  return d;
}

/// Element i of host logits z stored in dtype t set to x rounded to t (NaN: the dtype's quiet NaN).
void put_logit(std::vector<unsigned char>& z, DType t, std::int64_t i, double x) {
  if (t == DType::fp32) {
    const float f = static_cast<float>(x);
    std::memcpy(&z[i * 4], &f, 4);
  } else {
    const std::uint16_t b = t == DType::bf16 ? bf16_bits_from_double(x) : fp16_bits_from_double(x);
    std::memcpy(&z[i * 2], &b, 2);
  }
}

/// Host bytes of rows×V Gaussian logits (σ = 4) stored in dtype t.
std::vector<unsigned char> logits_bytes(DType t, std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 4.0);
  std::vector<unsigned char> out(static_cast<std::size_t>(n) * size_of(t));
  for (std::int64_t i = 0; i < n; ++i) put_logit(out, t, i, nd(rng));
  return out;
}

/// Label smoothing (ε = 0.1) and a softcap of 20 on p, whose V is set.
void smoothing_and_softcap(gpu::RowLossParams& p) {
  p.smoothing = true;
  p.eps_over_V = static_cast<float>(0.1 / double(p.V));
  p.one_minus_eps = 0.9f;
  p.softcap = 20.0f;
}

struct RowsOut {
  std::vector<float> loss, lse;
  std::vector<unsigned char> dz;
};

/// One launch of ce_rows on a device copy of z_host. per_row: the upstream gradient g_rows[i] per
/// row (else g_rows[0] for every row); write_dz: dz in place (else z comes back unchanged).
RowsOut run_ce_rows(DType t, const std::vector<unsigned char>& z_host, std::int64_t rows,
                    const std::vector<std::int64_t>& targets, const std::vector<float>& g_rows,
                    gpu::RowLossParams p, bool per_row, bool write_dz) {
  RowsOut o;
  void* z = nullptr;
  std::int64_t* tg = nullptr;
  float *loss = nullptr, *lse = nullptr, *g = nullptr;
  EXPECT_EQ(cudaMalloc(&z, z_host.size()), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&tg), rows * 8), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&loss), rows * 4), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&lse), rows * 4), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&g), rows * 4), cudaSuccess);
  cudaMemcpy(z, z_host.data(), z_host.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(tg, targets.data(), rows * 8, cudaMemcpyHostToDevice);
  cudaMemcpy(g, g_rows.data(), rows * 4, cudaMemcpyHostToDevice);
  gpu::launch_ce_rows(t, z, rows, tg, loss, lse, p, write_dz,
                      gpu::RowGradScale{per_row ? g : nullptr, g_rows[0]}, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  o.loss.resize(rows);
  o.lse.resize(rows);
  o.dz.resize(z_host.size());
  cudaMemcpy(o.loss.data(), loss, rows * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(o.lse.data(), lse, rows * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(o.dz.data(), z, z_host.size(), cudaMemcpyDeviceToHost);
  for (void* q : {z, static_cast<void*>(tg), static_cast<void*>(loss), static_cast<void*>(lse),
                  static_cast<void*>(g)})
    cudaFree(q);
  return o;
}

/// Bytes a and b of dz in dtype d equal entry by entry, or both NaN (two NaNs with different
/// payloads are the same value here); `differing` counts the entries that are not.
bool same_dz(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b, DType d,
             std::int64_t& differing) {
  const auto value = [d](const unsigned char* e) {
    if (d == DType::fp32) {
      float f;
      std::memcpy(&f, e, 4);
      return static_cast<double>(f);
    }
    std::uint16_t b;
    std::memcpy(&b, e, 2);
    return d == DType::bf16 ? bf16_bits_to_double(b) : fp16_bits_to_double(b);
  };
  differing = 0;
  const std::int64_t es = size_of(d), n = static_cast<std::int64_t>(a.size()) / es;
  for (std::int64_t k = 0; k < n; ++k) {
    if (std::memcmp(&a[k * es], &b[k * es], es) == 0) continue;
    if (!(std::isnan(value(&a[k * es])) && std::isnan(value(&b[k * es])))) ++differing;
  }
  return differing == 0;
}

bool same_bits_or_both_nan(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, 4) == 0;
}

TEST(GpuKernels, CeRowsPlainPathGivesTheGeneralPathsBits) {
  if (!device().available) GTEST_SKIP() << device().reason;
  const std::int64_t rows = 9;
  int compared = 0;
  for (DType t : {DType::bf16, DType::fp16, DType::fp32})
    for (DType a : {DType::fp32, DType::bf16, DType::fp16})
      for (std::int64_t V :
           {std::int64_t{1}, std::int64_t{7}, std::int64_t{507}, std::int64_t{2047},
            std::int64_t{2048}, std::int64_t{2056}, std::int64_t{20001}}) {
        SCOPED_TRACE(std::string(to_string(t)) + " logits, " + std::string(to_string(a)) +
                     " accumulator, V = " + std::to_string(V));
        auto z = logits_bytes(t, rows * V, 1000 + V);
        // Row 7: every logit −inf (lse −inf, loss +inf, dz NaN); row 8: one NaN logit.
        for (std::int64_t j = 0; j < V; ++j) put_logit(z, t, 7 * V + j, -INFINITY);
        put_logit(z, t, 8 * V + V / 2, NAN);
        std::vector<std::int64_t> targets(rows);
        std::vector<float> g(rows);
        for (std::int64_t i = 0; i < rows; ++i) {
          targets[i] = (i * 7919) % V;
          g[i] = 1.0f / static_cast<float>(i + 3);
        }
        targets[2] = -100;  // ignored
        targets[5] = V;     // out of range: NaN loss and dz
        targets[6] = V - 1;
        // Per-row upstream gradients with dz written in odd V, a scalar one without dz in even V.
        const bool per_row = V % 2 == 1;
        gpu::RowLossParams p;
        p.V = V;
        p.accum = a;
        const RowsOut plain = run_ce_rows(t, z, rows, targets, g, p, per_row, per_row);
        p.general_path = true;
        const RowsOut general = run_ce_rows(t, z, rows, targets, g, p, per_row, per_row);
        if (!per_row) {
          EXPECT_EQ(plain.dz, z) << "write_dz = false changed the logits";
        }
        for (std::int64_t i = 0; i < rows; ++i) {
          EXPECT_TRUE(same_bits_or_both_nan(plain.loss[i], general.loss[i]))
              << "loss of row " << i << ": " << plain.loss[i] << " vs " << general.loss[i];
          EXPECT_TRUE(same_bits_or_both_nan(plain.lse[i], general.lse[i]))
              << "lse of row " << i << ": " << plain.lse[i] << " vs " << general.lse[i];
        }
        ASSERT_EQ(plain.dz.size(), general.dz.size());
        std::int64_t differing = 0;
        EXPECT_TRUE(same_dz(plain.dz, general.dz, t, differing))
            << differing << " dz entries differ";
        ++compared;
      }
  EXPECT_EQ(compared, 63);
}

/// The split statistics of a (rows, cols) slab at column col0 of a V-wide vocabulary, by the
/// fused kernel (fused) or the two shard kernels: m, x_t, then the 2·rows sums as raw bytes.
struct SplitStats {
  std::vector<float> m, xt;
  std::vector<unsigned char> sums;
};
SplitStats run_split_stats(DType t, const std::vector<unsigned char>& z_host, std::int64_t rows,
                           gpu::ShardColumns sh, const std::vector<std::int64_t>& targets,
                           const gpu::RowLossParams& p, bool fused) {
  SplitStats o;
  const std::int64_t sbytes = 2 * rows * size_of(p.accum);
  void *z = nullptr, *sums = nullptr;
  std::int64_t* tg = nullptr;
  float *m = nullptr, *xt = nullptr;
  EXPECT_EQ(cudaMalloc(&z, z_host.size()), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&sums, sbytes), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&tg), rows * 8), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&m), rows * 4), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&xt), rows * 4), cudaSuccess);
  cudaMemcpy(z, z_host.data(), z_host.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(tg, targets.data(), rows * 8, cudaMemcpyHostToDevice);
  if (fused) {
    gpu::launch_split_row_stats(t, z, rows, sh, tg, p, m, xt, sums, nullptr);
  } else {
    gpu::launch_shard_row_max(t, z, rows, sh, tg, p, m, xt, nullptr);
    gpu::launch_shard_row_sums(t, z, rows, sh, m, p, sums, nullptr);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  o.m.resize(rows);
  o.xt.resize(rows);
  o.sums.resize(static_cast<std::size_t>(sbytes));
  cudaMemcpy(o.m.data(), m, rows * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(o.xt.data(), xt, rows * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(o.sums.data(), sums, sbytes, cudaMemcpyDeviceToHost);
  for (void* q : {z, sums, static_cast<void*>(tg), static_cast<void*>(m), static_cast<void*>(xt)})
    cudaFree(q);
  return o;
}

TEST(GpuKernels, SplitRowStatsGiveTheShardKernelsBits) {
  if (!device().available) GTEST_SKIP() << device().reason;
  const std::int64_t rows = 6, V = 30011;
  int compared = 0;
  for (DType t : {DType::bf16, DType::fp16, DType::fp32})
    for (DType a : {DType::fp32, DType::bf16})
      // Widths of 1, 2, 4 and more 2048-column strides, full and with a tail, odd and even.
      for (const gpu::ShardColumns sh :
           {gpu::ShardColumns{0, 4008}, gpu::ShardColumns{4008, 4007},
            gpu::ShardColumns{26004, 4007}, gpu::ShardColumns{0, 4096}, gpu::ShardColumns{8, 4097},
            gpu::ShardColumns{100, 8192}, gpu::ShardColumns{7, 8193},
            gpu::ShardColumns{13000, 16032}, gpu::ShardColumns{20000, 2000}})
        for (const bool options : {false, true}) {
          SCOPED_TRACE(std::string(to_string(t)) + " logits, " + std::string(to_string(a)) +
                       " accumulator, columns " + std::to_string(sh.col0) + " + " +
                       std::to_string(sh.cols) + (options ? ", smoothing and softcap" : ""));
          auto z = logits_bytes(t, rows * sh.cols, 77 + sh.col0);
          for (std::int64_t j = 0; j < sh.cols; ++j)  // row 4: every logit −inf
            put_logit(z, t, 4 * sh.cols + j, -INFINITY);
          // Targets in this split, in another, ignored.
          const std::vector<std::int64_t> targets = {
              sh.col0 + 5, sh.col0 + sh.cols - 1, (sh.col0 + sh.cols) % V,
              -100,        sh.col0 + 1,           sh.col0};
          gpu::RowLossParams p;
          p.V = V;
          p.accum = a;
          if (options) smoothing_and_softcap(p);
          const SplitStats f = run_split_stats(t, z, rows, sh, targets, p, true);
          const SplitStats two = run_split_stats(t, z, rows, sh, targets, p, false);
          for (std::int64_t i = 0; i < rows; ++i) {
            EXPECT_TRUE(same_bits_or_both_nan(f.m[i], two.m[i])) << "m of row " << i;
            EXPECT_TRUE(same_bits_or_both_nan(f.xt[i], two.xt[i])) << "x_t of row " << i;
          }
          EXPECT_EQ(f.sums, two.sums) << "the sums' bytes differ";
          ++compared;
        }
  EXPECT_EQ(compared, 108);
}

/// dz of a (rows, cols) slab at column col0 by launch_shard_dz_rows, the buffers placed `offset`
/// elements past a 256-byte boundary (offset 0: 16-byte aligned rows when cols is a multiple of 8,
/// so 16-byte loads and stores; offset 1: element loads and stores); in_place: dz
/// written over z (dz_dtype must be t).
std::vector<unsigned char> run_shard_dz(
    DType t, DType logits_dtype, DType dz_dtype, const std::vector<unsigned char>& z_host,
    std::int64_t rows, gpu::ShardColumns sh, const std::vector<std::int64_t>& targets,
    const std::vector<float>& lse_host, const std::vector<float>& g_host, bool per_row,
    const gpu::RowLossParams& p, std::int64_t offset, bool in_place) {
  const std::int64_t n = rows * sh.cols, zs = size_of(t), ds = size_of(dz_dtype);
  unsigned char *z = nullptr, *dz = nullptr;
  std::int64_t* tg = nullptr;
  float *lse = nullptr, *g = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&z), (n + offset) * zs), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&dz), (n + offset) * ds), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&tg), rows * 8), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&lse), rows * 4), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&g), rows * 4), cudaSuccess);
  cudaMemcpy(z + offset * zs, z_host.data(), n * zs, cudaMemcpyHostToDevice);
  cudaMemcpy(tg, targets.data(), rows * 8, cudaMemcpyHostToDevice);
  cudaMemcpy(lse, lse_host.data(), rows * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(g, g_host.data(), rows * 4, cudaMemcpyHostToDevice);
  unsigned char* dst = in_place ? z : dz;
  gpu::launch_shard_dz_rows(t, z + offset * zs, logits_dtype, dz_dtype, dst + offset * ds, rows, sh,
                            tg, lse, p, gpu::RowGradScale{per_row ? g : nullptr, g_host[0]},
                            nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned char> out(static_cast<std::size_t>(n * ds));
  cudaMemcpy(out.data(), dst + offset * ds, n * ds, cudaMemcpyDeviceToHost);
  for (void* q : {static_cast<void*>(z), static_cast<void*>(dz), static_cast<void*>(tg),
                  static_cast<void*>(lse), static_cast<void*>(g)})
    cudaFree(q);
  return out;
}

/// A NaN, a +inf and a −inf logit in the row that starts at element `row_start`.
void put_specials(std::vector<unsigned char>& z, DType t, std::int64_t row_start) {
  put_logit(z, t, row_start + 1, NAN);
  put_logit(z, t, row_start + 3, INFINITY);
  put_logit(z, t, row_start + 5, -INFINITY);
}

/// The dz tests' loss: none, or label smoothing, softcap and z-loss (λ = 1e-4).
gpu::RowLossParams dz_params(std::int64_t V, bool options) {
  gpu::RowLossParams p;
  p.V = V;
  if (options) {
    smoothing_and_softcap(p);
    p.zloss = true;
    p.lambda = 1e-4f;
    p.two_lambda = 2e-4f;
  }
  return p;
}

/// The dz tests' seven rows: their targets (in the split sh: its first, last and middle column;
/// in another split; ignored, −100; out of range, V + 3 and −7) and upstream gradients g.
std::vector<std::int64_t> dz_targets(const gpu::ShardColumns& sh, std::int64_t V) {
  return {sh.col0, sh.col0 + sh.cols - 1, (sh.col0 + sh.cols) % V, -100, V + 3,
          -7,      sh.col0 + sh.cols / 2};
}
const std::vector<float> kDzG = {0.5f, 0.25f, 1.0f / 3.0f, 2.0f, 1.0f, 0.125f, 0.75f};

/// The dz tests' trace: the dtypes, the split's columns and the loss options.
std::string dz_trace(DType t, DType out, const gpu::ShardColumns& sh, bool options) {
  return std::string(to_string(t)) + " logits, dz in " + std::string(to_string(out)) +
         ", columns " + std::to_string(sh.col0) + " + " + std::to_string(sh.cols) +
         (options ? ", smoothing, softcap and z-loss" : "");
}

TEST(GpuKernels, DzOfAlignedRowsGivesTheUnalignedRowsBits) {
  // dz_row's 16-byte path (aligned rows of whole groups) and its element path (the same rows one
  // element off alignment) must give the same bits, and so must dz written over z.
  if (!device().available) GTEST_SKIP() << device().reason;
  const std::int64_t rows = 7, V = 30011;
  int compared = 0;
  const std::pair<DType, DType> dtypes[] = {{DType::bf16, DType::bf16},
                                            {DType::bf16, DType::fp32},
                                            {DType::fp16, DType::fp16},
                                            {DType::fp16, DType::fp32},
                                            {DType::fp32, DType::fp32}};
  for (const auto& [t, out] : dtypes)
    for (const gpu::ShardColumns sh :
         {gpu::ShardColumns{0, 4008}, gpu::ShardColumns{8, 16}, gpu::ShardColumns{25003, 5008}})
      for (const bool options : {false, true}) {
        SCOPED_TRACE(dz_trace(t, out, sh, options));
        auto z = logits_bytes(t, rows * sh.cols, 91 + sh.col0);
        put_specials(z, t, 6 * sh.cols);
        const std::vector<std::int64_t> targets = dz_targets(sh, V);
        const std::vector<float> lse = {9.5f, 10.25f, 11.0f, 12.0f, 8.75f, 10.0f, 9.0f};
        const std::vector<float>& g = kDzG;
        const gpu::RowLossParams p = dz_params(V, options);
        for (const bool per_row : {false, true}) {
          const auto aligned =
              run_shard_dz(t, t, out, z, rows, sh, targets, lse, g, per_row, p, 0, false);
          const auto unaligned =
              run_shard_dz(t, t, out, z, rows, sh, targets, lse, g, per_row, p, 1, false);
          std::int64_t differing = 0;
          EXPECT_TRUE(same_dz(aligned, unaligned, out, differing))
              << differing << " dz entries differ" << (per_row ? " (per-row g)" : "");
          if (out == t) {  // dz over z, as the strategies write it
            const auto in_place =
                run_shard_dz(t, t, out, z, rows, sh, targets, lse, g, per_row, p, 0, true);
            EXPECT_TRUE(same_dz(aligned, in_place, out, differing))
                << differing << " dz entries differ in place" << (per_row ? " (per-row g)" : "");
          }
          // The out-of-range target's row is NaN, the ignored row 0 (dz_row's contract).
          if (out == DType::fp32) {
            float v;
            std::memcpy(&v, &aligned[(4 * sh.cols) * 4], 4);
            EXPECT_TRUE(std::isnan(v)) << "row of target V + 3";
            std::memcpy(&v, &aligned[(3 * sh.cols) * 4], 4);
            EXPECT_EQ(v, 0.0f) << "ignored row";
          }
          ++compared;
        }
      }
  EXPECT_EQ(compared, 60);
}

/// dz bytes in dtype o from fp32 values: each rounded once to o (NaN: o's quiet NaN).
std::vector<unsigned char> rounded_to(const std::vector<unsigned char>& f32, DType o) {
  const std::int64_t n = static_cast<std::int64_t>(f32.size()) / 4;
  std::vector<unsigned char> out(static_cast<std::size_t>(n * size_of(o)));
  for (std::int64_t k = 0; k < n; ++k) {
    float f;
    std::memcpy(&f, &f32[k * 4], 4);
    put_logit(out, o, k, static_cast<double>(f));
  }
  return out;
}

TEST(GpuKernels, DzInTheOutputDtypeIsTheLogitsDtypesDzRounded) {
  if (!device().available) GTEST_SKIP() << device().reason;
  const std::int64_t rows = 7, V = 30011;
  int compared = 0;
  for (DType t : {DType::bf16, DType::fp16, DType::fp32})
    for (DType out : {DType::bf16, DType::fp16, DType::fp32})
      for (const gpu::ShardColumns sh :
           {gpu::ShardColumns{0, 4008}, gpu::ShardColumns{25003, 5007}})
        for (const bool options : {false, true}) {
          SCOPED_TRACE(dz_trace(t, out, sh, options));
          auto z = logits_bytes(t, rows * sh.cols, 57 + sh.col0);
          put_specials(z, t, 6 * sh.cols);
          const std::vector<std::int64_t> targets = dz_targets(sh, V);
          // lse near the logits' own (σ = 4 over 30011 columns): many p_j below fp16's smallest
          // subnormal, where fp16 and bf16 round differently.
          const std::vector<float> lse = {18.5f, 19.25f, 20.0f, 18.0f, 18.75f, 19.0f, 19.5f};
          const std::vector<float>& g = kDzG;
          const gpu::RowLossParams p = dz_params(V, options);
          // fp32 output: rnd_logits(dz) itself (the rounding to t is exact in fp32).
          const auto f32 =
              run_shard_dz(t, t, DType::fp32, z, rows, sh, targets, lse, g, true, p, 0, false);
          const auto got = run_shard_dz(t, t, out, z, rows, sh, targets, lse, g, true, p, 0, false);
          std::int64_t differing = 0;
          EXPECT_TRUE(same_dz(rounded_to(f32, out), got, out, differing))
              << differing << " dz entries differ from rnd_out(rnd_logits(dz))";
          ++compared;
        }
  EXPECT_EQ(compared, 36);
}

TEST(GpuKernels, RowSumsFollowTheContractsTree) {
  if (!device().available) GTEST_SKIP() << device().reason;
  const std::int64_t rows = 5;
  std::mt19937_64 rng(2024);
  int compared = 0, rounded = 0;
  for (DType a : {DType::bf16, DType::fp16})
    for (std::int64_t cols : {std::int64_t{4008}, std::int64_t{30011}, std::int64_t{65536}}) {
      SCOPED_TRACE(std::string(to_string(a)) + " accumulator, " + std::to_string(cols) +
                   " columns");
      // Row i keeps a logit of 0 with probability (i + 1)/6 (else −∞); row 4 keeps none.
      std::vector<float> z(static_cast<std::size_t>(rows * cols));
      std::uniform_real_distribution<double> u(0.0, 1.0);
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
          z[i * cols + j] = i < 4 && u(rng) < double(i + 1) / 6.0 ? 0.0f : -INFINITY;
      std::vector<unsigned char> bytes(z.size() * 4);
      std::memcpy(bytes.data(), z.data(), bytes.size());
      const std::vector<std::int64_t> targets(rows, 0);
      gpu::RowLossParams p;
      p.V = cols;
      p.accum = a;
      for (const bool one_kernel : {true, false}) {
        const SplitStats got = run_split_stats(DType::fp32, bytes, rows, gpu::ShardColumns{0, cols},
                                               targets, p, one_kernel);
        for (std::int64_t i = 0; i < rows; ++i) {
          std::vector<float> terms(static_cast<std::size_t>(cols));
          double count = 0;
          for (std::int64_t j = 0; j < cols; ++j) {
            terms[j] = z[i * cols + j] == 0.0f ? 1.0f : 0.0f;
            count += terms[j];
          }
          // The contract's order: emu::sum_blocked (256 threads, groups of 8), the CPU emulation's.
          const double want = i < 4 ? emu::sum_blocked(terms.data(), cols, a) : 0.0;
          std::uint16_t b = 0;
          std::memcpy(&b, &got.sums[static_cast<std::size_t>(i) * 2], 2);
          const double have = a == DType::bf16 ? bf16_bits_to_double(b) : fp16_bits_to_double(b);
          EXPECT_EQ(have, want) << "row " << i << " (" << count << " ones, "
                                << (one_kernel ? "split_row_stats" : "shard_row_sums") << ")";
          EXPECT_EQ(got.m[i], i < 4 ? 0.0f : -INFINITY) << "maximum of row " << i;
          if (want != count) ++rounded;
          ++compared;
        }
      }
    }
  EXPECT_EQ(compared, 60);
  EXPECT_GT(rounded, 20) << "too few sums rounded: the test would not see another order";
}

}  // namespace
}  // namespace xentlab

#pragma once
// Softmax/cross-entropy kernels of the CUDA strategies, behind host launchers that dispatch on
// dtypes at run time (the one dtype-dispatch point of gpu/cuda). Arithmetic: docs/arithmetic.md
// §2–8, which the CPU emulation (gpu/emulation) reproduces; every fp32 operation is written with
// __fadd_rn/__fmul_rn/… (and the target is built with -fmad=false) so nothing is contracted into an
// FMA behind the contract's back. No fast-math: expf/logf/tanhf are CUDA's accurate versions.
//
// Row kernels use one block of T = 256 threads per row; element j of a row belongs to thread
// (j/8) mod 256 (16-byte loads of 8 bf16/fp16 values, two 16-byte loads for fp32; scalar loads with
// the same ownership when the row is not 16-byte aligned or at its tail). Orders, exactly:
//   x_j   = scale·fp32(z_j)  (scale as fp32);  softcap c > 0: th_j = tanhf(x_j / c), x_j = c·th_j
//   m     = max_j x_j
//   s     = Σ_j rnd_A(expf(x_j − m)): per thread sequential in increasing j, each add rounded to
//           the accumulator dtype A, then partial[t] = rnd_A(partial[t] + partial[t+s]) for
//           s = 128, 64, …, 1. Label smoothing sums rnd_A(x_j) the same way (Σx).
//   lse   = rnd_A(m + logf(s));  lse = −inf when every x_j is −inf
//   loss  = rnd_A(lse − x_t)  or, with ε > 0, rnd_A((lse − (1−ε)·x_t) − (ε/V)·Σx); with z-loss
//           rnd_A(loss + λ·(lse·lse)). (1−ε), ε/V and λ are the fp32 roundings of the double
//           values. Ignored rows: loss 0. A valid row with x_t = −inf: loss +inf.
//   dz_j  = rnd_logits( ((p_j·(1 + (2λ)·lse) − [j=t]·(1−ε) − ε/V) · chain_j) · g ),  p_j = expf(x_j
//   − lse)
//           where the z-loss factor is applied only when λ > 0, the ε/V term only when ε > 0,
//           chain_j = scale (no softcap) or scale·(1 − th_j·th_j), and g the row's upstream
//           gradient (1/n_valid or 1/normaliser for mean, 1 for sum, the given value for none;
//           fp32). Ignored rows: dz = 0. Logits problems return dz in the grad dtype:
//           rnd_grad(rnd_logits(dz)).
// Per-token loss and lse are returned as fp32 holding values already rounded to A.
#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/dtype.hpp"

namespace xentlab::gpu {

/// The loss options as the kernels use them (fp32 constants rounded once from the LossSpec).
struct RowLossParams {
  std::int64_t V = 0;  ///< row length (vocabulary)
  std::int64_t ignore_index = -100;
  float scale = 1.0f;          ///< logit scale
  float softcap = 0.0f;        ///< c > 0 enables softcap
  float one_minus_eps = 1.0f;  ///< fp32(1 − ε)
  float eps_over_V = 0.0f;     ///< fp32(ε/V)
  bool smoothing = false;      ///< ε > 0
  float lambda = 0.0f;         ///< fp32(λ)
  float two_lambda = 0.0f;     ///< fp32(2λ)
  bool zloss = false;          ///< λ > 0
  DType accum = DType::fp32;   ///< accumulator dtype A
  /// The sequential-sum model (gpu/cuda/naive.cu): launch_ce_rows forms s and Σx by one
  /// sequential sum over the row in increasing j (thread 0 alone; the tree then adds exact zeros),
  /// each add rounded to A, instead of the 256 per-thread partials and their tree.
  bool sequential_sums = false;
  /// Tests only: launch_ce_rows takes its general per-element path even where the plain one
  /// (scale 1, no softcap, smoothing or z-loss) applies. Both give the same bits by construction.
  bool general_path = false;
};

/// Upstream gradient of each row: g_rows[i] when non-null (reduction none), else g_scalar.
struct RowGradScale {
  const float* g_rows = nullptr;  // (rows), device
  float g_scalar = 1.0f;
};

/// Forward over `rows` rows of logits z (rows, V) stored in `z_dtype`: writes loss (rows) and lse
/// (rows) (fp32 arrays on the device). When write_dz, overwrites z in place with dz (same dtype),
/// using the row's lse just computed and `g` (the chunked/naive "gradient in the forward").
/// grid_rows: blocks of the grid-stride launch (rows in flight); 0 = default_ce_grid. The result
/// does not depend on it.
void launch_ce_rows(DType z_dtype, void* z /* (rows, V) */, std::int64_t rows,
                    const std::int64_t* targets /* (rows) */, float* loss /* (rows) */,
                    float* lse /* (rows) */, const RowLossParams& p, bool write_dz, RowGradScale g,
                    cudaStream_t stream, std::int64_t grid_rows = 0);

/// Default grid of launch_ce_rows for `rows` rows of `row_bytes` bytes.
std::int64_t default_ce_grid(std::int64_t rows, std::int64_t row_bytes);

/// dz from the stored lse (checkpointed backward; logits problems): reads z (rows, V) in z_dtype,
/// rounds each dz to logits_dtype (dz is held in the logits dtype, §7) and writes it in dz_dtype
/// (a second rounding for a logits problem whose grad dtype differs; dz may alias z when the
/// dtypes are equal).
void launch_dz_rows(DType z_dtype, const void* z /* (rows, V) */, DType logits_dtype,
                    DType dz_dtype, void* dz /* (rows, V) */, std::int64_t rows,
                    const std::int64_t* targets /* (rows) */, const float* lse /* (rows) */,
                    const RowLossParams& p, RowGradScale g, cudaStream_t stream);

// ---- one rank's vocabulary shard (vocab_parallel) ---------------------------------------------
// A rank holds the columns [col0, col0 + cols) of rows whose full length is p.V; targets are
// full-vocabulary indices, valid as in the row kernels (t ≠ ignore_index, 0 ≤ t < p.V), and
// p.eps_over_V is ε over the full vocabulary. The shard's logits z are (rows, cols) in z_dtype.
// Element j of the shard belongs to thread (j/8) mod 256, as in the row kernels over their
// columns, so with one shard (col0 = 0, cols = p.V) every value below is launch_ce_rows' bit for
// bit.

/// The shard's columns of the full rows.
struct ShardColumns {
  std::int64_t col0 = 0;
  std::int64_t cols = 0;
};

/// Per row: m[i] = max_j x_j over the shard's kernel logits (§2; −inf for none finite), and
/// x_t[i] = the target's kernel logit when the row is valid and the shard holds its target, 0
/// otherwise (so that a sum over the shards is the target logit exactly).
void launch_shard_row_max(DType z_dtype, const void* z /* (rows, cols) */, std::int64_t rows,
                          ShardColumns sh, const std::int64_t* targets /* (rows) */,
                          const RowLossParams& p, float* m /* (rows) */, float* x_t /* (rows) */,
                          cudaStream_t stream);

/// Per row, with the row's maximum over the whole vocabulary m[i]: the shard's sum-exp
/// s = Σ_j rnd_A(expf(x_j − m)) and (label smoothing) Σx = Σ_j rnd_A(x_j), each in the row
/// kernels' order over the shard's columns and rounded to the accumulator dtype A = p.accum,
/// stored as A values: sums[i] = s, sums[rows + i] = Σx (0 without label smoothing); s = 0 when
/// m = −inf, Σx whatever m (−inf for a shard of −inf logits: vocab_chunked passes a split's own
/// maximum, −inf for a masked split of a row with finite logits elsewhere). sums (2·rows) in the
/// storage of A (fp32, fp16 or bf16).
void launch_shard_row_sums(DType z_dtype, const void* z /* (rows, cols) */, std::int64_t rows,
                           ShardColumns sh, const float* m /* (rows) */, const RowLossParams& p,
                           void* sums /* (2·rows) of A */, cudaStream_t stream);

/// vocab_chunked's split in one kernel: launch_shard_row_max (m, x_t) and then
/// launch_shard_row_sums with the split's own maximum m, bit for bit, each block reading its row
/// from memory once (its second pass hits the cache).
void launch_split_row_stats(DType z_dtype, const void* z /* (rows, cols) */, std::int64_t rows,
                            ShardColumns sh, const std::int64_t* targets /* (rows) */,
                            const RowLossParams& p, float* m /* (rows) */, float* x_t /* (rows) */,
                            void* sums /* (2·rows) of A */, cudaStream_t stream);

/// Per row, from the whole vocabulary's m, (s, Σx) (sums as written by launch_shard_row_sums and
/// summed over the shards) and target logit x_t: lse = rnd_A(m + logf(s)) and the loss, as
/// launch_ce_rows forms them (ce_math.cuh row_lse, row_loss).
void launch_shard_row_loss(std::int64_t rows, const std::int64_t* targets /* (rows) */,
                           const float* m, const void* sums /* (2·rows) of A */, const float* x_t,
                           const RowLossParams& p, float* loss /* (rows) */,
                           float* lse /* (rows) */, cudaStream_t stream);

/// vocab_chunked: per row, the states of P vocabulary splits — each split's maximum m_r and target
/// logit x_t,r (launch_shard_row_max) and its sums (s_r, Σx_r) taken with its own maximum m_r
/// (launch_shard_row_sums with m = m_r) — merged in split order into the row's (m, sums, x_t) for
/// launch_shard_row_loss: m = max_r m_r; s = Σ_r rnd_A(s_r·expf(m_r − m)) added in A in split order
/// (the term s_r itself where m_r = m, 0 where m_r = −inf); Σx = Σ_r Σx_r in A in split order;
/// x_t = Σ_r x_t,r in fp32 (exact: one split holds the target). Layouts: split_m and split_xt
/// (P·rows) fp32, split r at r·rows; split_sums: split r's 2·rows values of A at r·2·rows; sums
/// (2·rows) of A as launch_shard_row_sums writes them.
void launch_merge_split_states(std::int64_t splits, std::int64_t rows, const float* split_m,
                               const float* split_xt, const void* split_sums, DType accum,
                               float* m /* (rows) */, float* x_t /* (rows) */,
                               void* sums /* (2·rows) of A */, cudaStream_t stream);

/// dz of the shard's columns from the row's lse, as launch_dz_rows (dz may alias z when the dtypes
/// are equal; the target is the full-vocabulary index).
void launch_shard_dz_rows(DType z_dtype, const void* z /* (rows, cols) */, DType logits_dtype,
                          DType dz_dtype, void* dz /* (rows, cols) */, std::int64_t rows,
                          ShardColumns sh, const std::int64_t* targets /* (rows) */,
                          const float* lse /* (rows) */, const RowLossParams& p, RowGradScale g,
                          cudaStream_t stream);

/// dst[i, j] = rnd_dst(src[i, j] + bias[j]) in fp32 (bias may be null: plain rounding). dst may
/// alias src when dst_dtype is fp32. src (rows, cols) fp32, bias (cols) fp32.
void launch_round_rows(const float* src, const float* bias, std::int64_t rows, std::int64_t cols,
                       DType dst_dtype, void* dst, cudaStream_t stream);

/// Element-wise conversion of n values (exact for widening, one rounding to nearest even for
/// narrowing).
void launch_convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n,
                    cudaStream_t stream);

/// acc[j] = rnd_A(acc[j] + dz[i, j]) for i = 0 … rows−1 in order (db: sequential over tokens in
/// the accumulator dtype A, continued across chunks). dz (rows, V) in dz_dtype, acc (V) fp32
/// holding A values.
void launch_db_accumulate(DType dz_dtype, const void* dz, std::int64_t rows, std::int64_t V,
                          DType accum, float* acc, cudaStream_t stream);

/// acc[k] = rnd_A(acc[k] + add[k]) for n elements (cross-chunk dW sums in a 16-bit accumulator).
void launch_accumulate(float* acc, const float* add, std::int64_t n, DType accum,
                       cudaStream_t stream);

}  // namespace xentlab::gpu

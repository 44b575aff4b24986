#pragma once
// The CPU emulation backend: every strategy's arithmetic (docs/arithmetic.md) on the host, with
// each rounding of the recipe emulated exactly (numerics/emulate.hpp). One engine
// (gpu/emulation/common.cpp) runs the steps every strategy shares — the logits GEMM (§1), the
// loss-kernel logits (§2), lse and loss from a row's vocabulary sums (§3–5), dz (§7), dH (§8) and
// the token reduction (§6) — and asks the strategy, through the hooks of EmulatedStrategy, for
// what distinguishes it: its reduction orders, each in the strategy's own file.
//
//   strategy         vocab reduction            dW, db accumulation              rows at once
//   naive.cpp        blocked, T = 256           one fp32 GEMM over all rows      64 MiB of logits
//                                               (in row order); db in accum
//   chunked.cpp      blocked, T = 256           fp32 GEMM per chunk, chunk       a chunk
//                                               results added in accum
//   checkpointed.cpp as chunked (the backward recomputes the logits exactly; only memory differs)
//   fused.cpp        the kernel's online        fp32 partial per block of 128    128 (the kernel's
//                    states: 8 columns per      rows added in fp32 (dH          token block)
//                    thread and 256-tile,       likewise per vocabulary tile of
//                    quad, warps, vocabulary    256; db fp32)
//                    ranges pairwise (by the
//                    SM count: gpu/plans/fused_plan.hpp;
//                    declared online_tree, as
//                    the CUDA kernel)
//   vocab_parallel   the local strategy's       the local strategy's (each rank's  the local
//   .cpp             (naive, chunked,           own vocabulary rows)               strategy's
//                    checkpointed or fused) per
//                    shard, the P partials
//                    added in rank order; dH:
//                    the local strategy's per
//                    shard, added in rank order
//                    (the engine's run_sharded)
//
// Host memory is the emulator's own (a block of rows' logits/dz, the dW accumulator), reported in
// peak_extra_bytes; W is read on demand in panels, never copied whole. OpenMP over token rows
// (forward, dz, dH) and over vocabulary rows (dW, db); every rounding happens in a fixed order, so
// results do not depend on the thread count.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpu/plans/vocab_shards.hpp"
#include "gpu/strategy.hpp"
#include "numerics/emulate.hpp"

namespace xentlab::emulation {

/// Default token chunk of chunked/checkpointed when the request gives neither chunk_tokens nor a
/// memory budget.
inline constexpr std::int64_t kDefaultChunkTokens = 1024;
/// Block size (threads) of the blocked vocabulary reduction.
inline constexpr std::int64_t kBlockThreads = 256;
/// Products per block of the tensor-core accumulation model (EngineContext::logits_block): the k
/// of one Hopper wgmma instruction on 16-bit inputs (m64nNk16), whose products the hardware adds
/// to the fp32 accumulator at once. docs/verify.md, "The tensor-core model", compares it with
/// cuBLAS on an H200.
inline constexpr std::int64_t kTensorCoreBlock = 16;

/// The order in which EmulatedStrategy::run_sharded adds the ranks' fp32 dH partials: rank order
/// (vocab_parallel), or reverse rank order (vocab_chunked, whose backward takes the last split
/// first: the one whose logits the forward left in memory).
enum class DHRankOrder { increasing, decreasing };

/// Everything the engine and a strategy's hooks read during one run (read-only).
struct EngineContext {
  const RunRequest* req = nullptr;
  const Problem* pb = nullptr;
  LossSpec sp;
  Recipe rc;
  DeclaredArithmetic ar;  ///< the strategy's run_arithmetic(req)
  /// Vocabulary-parallel runs (EmulatedStrategy::run_sharded): the P = ar.vocab_ranks shards of
  /// vocab_shards(V, P), in rank order; empty for a run over the whole vocabulary.
  std::vector<VocabShard> shards;
  DHRankOrder dH_order = DHRankOrder::increasing;  ///< with shards: the order of dH's partials
  std::int64_t N = 0, V = 0, D = 0;
  bool linear = false;
  std::vector<float> bias;  ///< (V) bias as float (exact; −Inf allowed), empty when absent
  /// §2 and §7 constants in fp32: logit scale, softcap c (0 = off), label smoothing ε, z-loss λ.
  float scale = 1.0f, cap = 0.0f, eps = 0.0f, lam = 0.0f, eps_over_V = 0.0f, one_minus_eps = 1.0f;
  /// §1 accumulation of the logits GEMM (EmulatedStrategy::logits_gemm_block): 0 = IEEE fp32,
  /// one rounding to nearest per product (fma) in increasing d; B > 0 = the tensor-core model,
  /// blocks of B products summed exactly into the fp32 accumulator, rounded toward zero once per
  /// block.
  std::int64_t logits_block = 0;
};

/// A row's vocabulary sums in the accum dtype (§3–4, §9): the maximum m of the kernel logits, the
/// sum of exp(x_j − m), and Σ_j x_j (label smoothing only; 0 when not asked for).
struct VocabSums {
  float m = 0.0f;
  float s = 0.0f;
  float sx = 0.0f;
};

/// One block of R token rows for a strategy's dW/db accumulation (§8). dz and H rows are fp32
/// values (dz already rounded to the logits dtype).
struct BlockGrads {
  const float* dz = nullptr;  ///< (R, V)
  const float* H = nullptr;   ///< (R, D) the block's rows of H
  std::int64_t R = 0, V = 0, D = 0;
  /// Vocabulary rows computed (RunRequest::vocab_rows, sorted), empty = all; k indexes dW/db.
  const std::vector<std::int64_t>* vocab_rows = nullptr;
  std::int64_t J = 0;         ///< rows of dW/db: V or vocab_rows->size()
  float* dW = nullptr;        ///< (J, D) the strategy's accumulator, across blocks
  float* db = nullptr;        ///< (J) likewise; nullptr without a bias
  bool parallel = false;      ///< OpenMP over vocabulary rows
  DType accum = DType::fp32;  ///< the recipe's accumulator dtype
};

/// Base of the emulated strategies: the engine (run, workspace_size, can_implement) and the hooks
/// each strategy's file implements.
class EmulatedStrategy : public Strategy {
 public:
  Backend backend() const override { return Backend::cpu_emulation; }
  /// fp32/fp16/bf16 recipes reading the problem's input dtype, and a valid loss spec.
  Status can_implement(const Problem& p, const LossSpec& s, const Recipe& r) const override;
  std::int64_t workspace_size(const RunRequest& req) const override;
  StrategyOutputs run(const RunRequest& req) const override;
  /// This strategy as the local part of vocabulary parallelism (vocab_parallel,
  /// docs/vocab_parallel.md): the vocabulary split into the P = ar.vocab_ranks shards of
  /// vocab_shards(V, P), each rank's cross-entropy over its shard in this strategy's orders, and
  /// the cross-rank reductions of docs/arithmetic.md §10 in rank order: the maximum (exact); the
  /// sum-exp (a plain order, two-pass: each shard's sum with the global maximum; an online order:
  /// each rank's own state over its shard, rescaled once to the global maximum,
  /// rnd_A(s_r·expf(m_r − m))), added in the accum dtype; Σx likewise; dH as each rank's fp32
  /// partial over its shard (this strategy's dH within it), added in fp32. dW and db are each
  /// rank's own rows, this strategy's. `ar` is the run's declaration (vocab_ranks = P ≥ 1), `as`
  /// the name errors give, `dH_order` the order of dH's partials (rank order, or the reverse).
  /// Throws InputError as run(), and when P > V.
  StrategyOutputs run_sharded(const RunRequest& req, const DeclaredArithmetic& ar,
                              const std::string& as,
                              DHRankOrder dH_order = DHRankOrder::increasing) const;
  /// workspace_size(req) of run_sharded with P ranks.
  std::int64_t sharded_workspace_size(const RunRequest& req, std::int64_t ranks) const;

 protected:
  /// §3–4 (§9 for online states): the vocabulary sums of n kernel logits x (the row, or a rank's
  /// shard of it), in this strategy's order; sx only when `need_sx`. scratch: n floats the hook
  /// may use.
  virtual VocabSums vocab_sums(const EngineContext& c, const float* x, std::int64_t n, bool need_sx,
                               float* scratch) const = 0;
  /// Token rows whose logits (then dz) the engine holds at once, ≥ 1 (clamped to the S rows): the
  /// unit of the strategy's dW/db accumulation (add_block_grads).
  virtual std::int64_t block_rows(const RunRequest& req, std::int64_t V, std::int64_t S) const = 0;
  /// §8 dW += dzᵀ·H (and db += Σ_rows dz) of one block, in this strategy's order.
  virtual void add_block_grads(const BlockGrads& b) const = 0;
  /// §1: 0 for the IEEE fp32 logits GEMM every strategy emulates; B > 0 for the tensor-core
  /// accumulation model (EngineContext::logits_block; the baseline's make_tensor_core_model).
  virtual std::int64_t logits_gemm_block() const { return 0; }

 private:
  struct TokenRows;  // per token row: loss, lse, gradient scale, validity (common.cpp)
  /// The engine: run() (shards = 0) and run_sharded (shards = P).
  StrategyOutputs run_engine(const RunRequest& req, const DeclaredArithmetic& ar,
                             std::int64_t shards, const std::string& as,
                             DHRankOrder dH_order = DHRankOrder::increasing) const;
  /// The row's vocabulary sums: vocab_sums over the row, or, with c.shards, per shard and reduced
  /// across the ranks (run_sharded; both defined in gpu/emulation/vocab_parallel.cpp).
  VocabSums row_vocab_sums(const EngineContext& c, const float* x, bool need_sx,
                           float* scratch) const;
  /// Forward (§2–5) and dz (§7) of token rows [q0, q1) whose logits are in zbuf (block, V): loss
  /// and lse into tr, dz over the logits (and into out.dz for a logits problem).
  void forward_block(const EngineContext& c, TokenRows& tr, std::int64_t q0, std::int64_t q1,
                     float* zbuf, bool par, StrategyOutputs& out) const;
};

// ---- Building blocks of the hooks (common.cpp) --------------------------------------------------

/// EmulatedStrategy::can_implement for the strategy `name`: fp32/fp16/bf16 recipes reading the
/// problem's input dtype, and a valid loss spec; not_supported naming why otherwise.
Status emulation_can_implement(const std::string& name, const Problem& p, const LossSpec& s,
                               const Recipe& r);

/// The blocked vocabulary reduction (kBlockThreads threads, numerics/emulate.hpp's sum_exp and
/// sum_ordered with the strategy's declared arithmetic c.ar).
VocabSums blocked_vocab_sums(const EngineContext& c, const float* x, std::int64_t n, bool need_sx,
                             float* scratch);
/// The declaration of the blocked reduction (T = kBlockThreads, tokens pairwise, no GEMM k-split).
DeclaredArithmetic blocked_arithmetic(const std::string& name, const Recipe& r);
/// Rows of 64 MiB of fp32 logits (at least 1): the block of a strategy that does not chunk.
std::int64_t host_block_rows(std::int64_t V);
/// Token rows per chunk: req.chunk_tokens, else from req.memory_budget (8 bytes per logit), else
/// min(S, kDefaultChunkTokens).
std::int64_t chunk_rows(const RunRequest& req, std::int64_t V, std::int64_t S);
/// Calls fn(k, j, part) for every computed vocabulary row k < b.J (j its row of the vocabulary),
/// over OpenMP threads when b.parallel; `part` is the calling thread's scratch of b.D floats.
/// Rows are independent, so the schedule does not change any result.
void for_each_vocab_row(const BlockGrads& b,
                        const std::function<void(std::int64_t k, std::int64_t j, float* part)>& fn);
/// Adds Σ_r dz[r][j]·H[r] into acc (D floats) over the block's rows in increasing order: fp32 with
/// exact products (fma, one rounding each). Rows whose dz_rj is exactly 0 are skipped (adding
/// exact zeros leaves an fp32 sum unchanged); every other dz_rj is passed to add_db in the same
/// order.
template <class AddDb>
void add_dW_row(const BlockGrads& b, std::int64_t j, float* acc, AddDb&& add_db) {
  for (std::int64_t r = 0; r < b.R; ++r) {
    const float dzj = b.dz[r * b.V + j];
    if (dzj == 0.0f) continue;
    const float* h = b.H + r * b.D;
    for (std::int64_t d = 0; d < b.D; ++d) acc[d] = std::fma(dzj, h[d], acc[d]);
    add_db(dzj);
  }
}

}  // namespace xentlab::emulation

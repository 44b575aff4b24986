// CPU emulation of the vocab_parallel strategy: tensor parallelism over the LM head's vocabulary.
// P = RunRequest::ranks virtual ranks (≤ 0 means 1), rank r owning the contiguous vocabulary rows
// of vocab_shards(V, P) (gpu/plans/vocab_shards.hpp: the first V mod P shards one row larger).
// Token rows are processed in chunks exactly as chunked (chunk_rows). Its declared arithmetic,
// shared with the CUDA/NCCL strategy (docs/arithmetic.md §10; docs/vocab_parallel.md):
//   1. each rank's maximum m_r of the row's kernel logits over its shard (exact); m = max_r m_r
//      (all-reduce MAX, exact in any order);
//   2. each rank's s_r = Σ_{j in shard} rnd_accum(expf(x_j − m)) with the GLOBAL m, in the blocked
//      order (T = 256 threads over the shard's columns, groups of 8) in the accum dtype; likewise
//      sx_r = Σ_{j in shard} x_j for label smoothing; the target logit x_t from the rank owning t
//      (the others contribute 0, so its cross-rank sum is exact);
//   3. the cross-rank sums in the accum dtype, s = rnd(…rnd(rnd(s_0 + s_1) + s_2)… + s_{P−1}) in
//      rank order here (NCCL's all-reduce order differs for P ≥ 3: the declaration,
//      DeclaredArithmetic::vocab_ranks, charges P − 1 additions in any order); sx likewise;
//   4. lse, loss and dz as the engine's other strategies (§5, §7);
//   5. dH: each rank's fp32 partial dz[:, shard]·W[shard] (one fp32 sum over the shard's rows, as
//      chunked's over the whole row), the P partials added in fp32 in rank order, rounded to the
//      grad dtype once;
//   6. dW, db: each rank's own vocabulary rows, accumulated across token chunks exactly as chunked
//      (they never cross ranks).
// With P = 1 every step is chunked's: the outputs are chunked's bit for bit.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "gpu/emulation/chunked.hpp"
#include "gpu/plans/vocab_shards.hpp"
#include "numerics/error.hpp"

namespace xentlab::emulation {
namespace {

std::int64_t ranks_of(const RunRequest& req) {
  return req.ranks > 0 ? req.ranks : 1;
}

// Step 3: the ranks' partial sums of y over their shards (each in the declared blocked order),
// added in the accum dtype in rank order.
float rank_sum(const EngineContext& c, const std::vector<VocabShard>& shards, const float* y) {
  float s = 0.0f;
  for (std::size_t r = 0; r < shards.size(); ++r) {
    const float part = emu::sum_ordered(y + shards[r].begin, shards[r].size(), c.rc.accum, c.ar);
    s = r == 0 ? part : emu::rnd(s + part, c.rc.accum);
  }
  return s;
}

class VocabParallelEmulation final : public ChunkedEmulation {
 public:
  std::string name() const override { return "vocab_parallel"; }
  /// The declaration of one rank (vocab_ranks = 1); run_arithmetic adds the request's ranks.
  DeclaredArithmetic arithmetic(const Recipe& r) const override {
    return blocked_arithmetic(name(), r);
  }
  DeclaredArithmetic run_arithmetic(const RunRequest& req) const override {
    DeclaredArithmetic a = arithmetic(req.recipe);
    a.vocab_ranks = ranks_of(req);
    a.note = fmt::format(
        "cpu-emulation vocab_parallel: {} ranks, block reduce T={} over each shard, groups of 8, "
        "the ranks' partials added in rank order, accum {}",
        a.vocab_ranks, kBlockThreads, to_string(req.recipe.accum));
    return a;
  }
  /// Refuses a layout with a rank that owns no vocabulary row (P > V) before any work.
  StrategyOutputs run(const RunRequest& req) const override {
    if (req.problem != nullptr) {
      try {
        (void)vocab_shards(req.problem->V, ranks_of(req));
      } catch (const InputError& e) {
        throw InputError(fmt::format("{} (cpu-emulation): {}", name(), e.what()));
      }
    }
    return ChunkedEmulation::run(req);
  }

 protected:
  VocabSums vocab_sums(const EngineContext& c, const float* x, bool need_sx,
                       float* scratch) const override {
    const std::vector<VocabShard> shards = vocab_shards(c.V, c.ar.vocab_ranks);
    VocabSums v;
    // Step 1: the ranks' maxima over their shards, then their maximum (all-reduce MAX).
    v.m = -INFINITY;
    for (const VocabShard& sh : shards) {
      float m_r = -INFINITY;
      for (std::int64_t j = sh.begin; j < sh.end; ++j) m_r = std::max(m_r, x[j]);
      v.m = std::max(v.m, m_r);
    }
    // Steps 2–3 with the global maximum; an all-masked row has sum 0 (lse = −Inf).
    if (v.m != -INFINITY) {
      for (std::int64_t j = 0; j < c.V; ++j)
        scratch[j] = emu::rnd(std::exp(x[j] - v.m), c.rc.accum);
      v.s = rank_sum(c, shards, scratch);
    }
    if (need_sx) v.sx = rank_sum(c, shards, x);
    return v;
  }
  // Step 5: each rank's fp32 partial over its shard, added in rank order (one sum with one rank).
  std::vector<std::int64_t> dH_vocab_begins(const EngineContext& c) const override {
    if (c.ar.vocab_ranks <= 1) return {};
    std::vector<std::int64_t> begins;
    for (const VocabShard& sh : vocab_shards(c.V, c.ar.vocab_ranks)) begins.push_back(sh.begin);
    return begins;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_vocab_parallel() {
  return std::make_unique<VocabParallelEmulation>();
}

}  // namespace xentlab::emulation

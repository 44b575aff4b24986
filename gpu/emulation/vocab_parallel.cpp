// CPU emulation of the vocab_parallel strategy: tensor parallelism over the LM head's vocabulary.
// P = RunRequest::ranks virtual ranks (≤ 0 means 1), rank r owning the contiguous vocabulary rows
// of vocab_shards(V, P) (gpu/plans/vocab_shards.hpp: the first V mod P shards one row larger). Its
// local part — the cross-entropy each rank runs over its shard — is one of the emulated strategies
// (RunRequest::local_strategy: naive, chunked, checkpointed or fused; chunked when none is named),
// run by the engine's run_sharded (gpu/emulation/common.cpp). Its declared arithmetic, shared with
// the CUDA/NCCL strategy for the chunked local part (docs/arithmetic.md §10;
// docs/vocab_parallel.md):
//   1. each rank's local part over its shard, in the local strategy's orders: a plain order
//      (naive, chunked, checkpointed: blocked, T = 256 threads over the shard's columns, groups of
//      8) takes its sums with the GLOBAL maximum m = max_r m_r (all-reduce MAX, exact in any
//      order); an online order (fused: the kernel's tree over the shard's tiles) keeps its own
//      state (m_r, s_r) and rescales it once to the global m, rnd_A(s_r·expf(m_r − m)); Σx over the
//      shard in the local order; the target logit x_t from the rank owning t (the others
//      contribute 0, so its cross-rank sum is exact);
//   2. the cross-rank sums in the accum dtype, s = rnd(…rnd(rnd(s_0 + s_1) + s_2)… + s_{P−1}) in
//      rank order here (NCCL's all-reduce order differs for P ≥ 3: the declaration,
//      DeclaredArithmetic::vocab_ranks, charges P − 1 additions in any order); Σx likewise;
//   3. lse, loss and dz as the engine's other strategies (§5, §7);
//   4. dH: each rank's fp32 partial dz[:, shard]·W[shard] in the local strategy's order over its
//      shard (chunked, and fused's staged backward: one fp32 sum), the P
//      partials added in fp32 in rank order, rounded to the grad dtype once;
//   5. dW, db: each rank's own vocabulary rows, accumulated as the local strategy does (they never
//      cross ranks).
// With P = 1 every step is the local strategy's: the outputs are its own bit for bit.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu/emulation/common.hpp"
#include "gpu/plans/vocab_shards.hpp"
#include "numerics/error.hpp"

namespace xentlab::emulation {

// The emulated strategies a rank can run over its shard (their files; gpu/registry.cpp lists the
// same factories).
std::unique_ptr<Strategy> make_naive();
std::unique_ptr<Strategy> make_chunked();
std::unique_ptr<Strategy> make_checkpointed();
std::unique_ptr<Strategy> make_fused();

namespace {

std::int64_t ranks_of(const RunRequest& req) {
  return req.ranks > 0 ? req.ranks : 1;
}

class VocabParallelEmulation final : public Strategy {
 public:
  VocabParallelEmulation() {
    for (auto* make : {&make_naive, &make_chunked, &make_checkpointed, &make_fused}) {
      std::unique_ptr<Strategy> s = make();
      auto* e = dynamic_cast<EmulatedStrategy*>(s.get());
      if (e == nullptr)
        throw std::logic_error("vocab_parallel: a local part that is not an emulated strategy");
      (void)s.release();
      locals_.emplace_back(e);
    }
  }
  std::string name() const override { return "vocab_parallel"; }
  Backend backend() const override { return Backend::cpu_emulation; }
  Status can_implement(const Problem& p, const LossSpec& s, const Recipe& r) const override {
    return emulation_can_implement(name(), p, s, r);  // the engine's, whatever the local part
  }
  Status can_run_local(std::string_view local) const override {
    if (find(local) != nullptr) return Status::Ok();
    return Status::NotSupported(fmt::format(
        "{} (cpu-emulation): '{}' is not a local part it composes (a rank runs one of {} over its "
        "shard)",
        name(), local, fmt::join(local_names(), ", ")));
  }
  std::int64_t workspace_size(const RunRequest& req) const override {
    return local(req).sharded_workspace_size(req, ranks_of(req));
  }
  /// The declaration of one rank with the default local part (vocab_ranks = 1); run_arithmetic
  /// takes the request's local part and ranks.
  DeclaredArithmetic arithmetic(const Recipe& r) const override {
    DeclaredArithmetic a = find(kDefaultLocalStrategy)->arithmetic(r);
    a.note = note(kDefaultLocalStrategy, 1, a, r);
    return a;
  }
  /// The local strategy's declaration with vocab_ranks = P: its order over a shard, and the
  /// cross-rank additions (judge/bounds.hpp). Throws InputError for an unknown local part.
  DeclaredArithmetic run_arithmetic(const RunRequest& req) const override {
    const EmulatedStrategy& l = local(req);
    DeclaredArithmetic a = l.arithmetic(req.recipe);
    a.vocab_ranks = ranks_of(req);
    a.note = note(l.name(), a.vocab_ranks, a, req.recipe);
    return a;
  }
  /// Refuses an unknown local part, and a layout with a rank that owns no vocabulary row (P > V),
  /// before any work.
  StrategyOutputs run(const RunRequest& req) const override {
    return local(req).run_sharded(req, run_arithmetic(req), name());
  }

 private:
  std::vector<std::unique_ptr<EmulatedStrategy>> locals_;

  const EmulatedStrategy* find(std::string_view local) const {
    if (local.empty()) local = kDefaultLocalStrategy;
    for (const auto& l : locals_)
      if (l->name() == local) return l.get();
    return nullptr;
  }
  const EmulatedStrategy& local(const RunRequest& req) const {
    const EmulatedStrategy* l = find(req.local_strategy);
    if (l == nullptr) throw InputError(can_run_local(req.local_strategy).message);
    return *l;
  }
  std::vector<std::string> local_names() const {
    std::vector<std::string> n;
    for (const auto& l : locals_) n.push_back(l->name());
    return n;
  }
  static std::string note(const std::string& local, std::int64_t P, const DeclaredArithmetic& a,
                          const Recipe& r) {
    return fmt::format(
        "cpu-emulation vocab_parallel: {} ranks, each running {} over its shard ({}), the ranks' "
        "partials added in rank order, accum {}",
        P, local, to_string(a.vocab_order), to_string(r.accum));
  }
};

}  // namespace

// ---- The engine's vocabulary-parallel steps (EmulatedStrategy, gpu/emulation/common.hpp) --------

StrategyOutputs EmulatedStrategy::run_sharded(const RunRequest& req, const DeclaredArithmetic& ar,
                                              const std::string& as, DHRankOrder dH_order) const {
  return run_engine(req, ar, std::max<std::int64_t>(1, ar.vocab_ranks), as, dH_order);
}

namespace {

bool online_order(ReductionOrder o) {
  return o == ReductionOrder::online_tiles || o == ReductionOrder::online_tree;
}

// The ranks' partial sums of y over their shards (each in the declared plain order c.ar), added in
// the accum dtype in rank order (§10: the all-reduce SUM; the first partial is taken as it is).
float rank_sum(const EngineContext& c, const float* y) {
  float s = 0.0f;
  for (std::size_t r = 0; r < c.shards.size(); ++r) {
    const VocabShard& sh = c.shards[r];
    const float part = emu::sum_ordered(y + sh.begin, sh.size(), c.rc.accum, c.ar);
    s = r == 0 ? part : emu::rnd(s + part, c.rc.accum);
  }
  return s;
}

}  // namespace

// §10 (docs/arithmetic.md; docs/vocab_parallel.md): the cross-rank reductions are the same for
// every local strategy — the maximum (all-reduce MAX, exact), the sum-exp and Σx (all-reduce SUM
// in the accum dtype, here in rank order), the target logit (held by one rank: exact) — and the
// local part is the strategy's own:
//   plain orders (naive, chunked, checkpointed: blocked), two passes: each rank's maximum over its
//     shard, then its sum of rnd_A(expf(x_j − m)) with the global m in the declared order;
//   online orders (fused), one pass: each rank's own state (m_r, s_r) over its shard in the
//     strategy's order, then rescaled once to the global m, rnd_A(s_r·expf(m_r − m)) (exact when
//     m_r = m: expf(0) = 1, so with one rank the state is the strategy's own); a plain order
//     likewise where DeclaredArithmetic::rescaled_ranks (vocab_chunked, one pass over its splits).
VocabSums EmulatedStrategy::row_vocab_sums(const EngineContext& c, const float* x, bool need_sx,
                                           float* scratch) const {
  if (c.shards.empty()) return vocab_sums(c, x, c.V, need_sx, scratch);
  const DType A = c.rc.accum;
  VocabSums v;
  v.m = -INFINITY;
  // Each rank's own state, rescaled once to the global maximum: an online order's, and a plain
  // order's where declared (vocab_chunked's splits: one pass over the logits).
  if (online_order(c.ar.vocab_order) || c.ar.rescaled_ranks) {
    std::vector<VocabSums> part(c.shards.size());
    for (std::size_t r = 0; r < c.shards.size(); ++r) {
      const VocabShard& sh = c.shards[r];
      part[r] = vocab_sums(c, x + sh.begin, sh.size(), need_sx, scratch);
      v.m = std::max(v.m, part[r].m);
    }
    for (std::size_t r = 0; r < part.size(); ++r) {
      // The rank holding the maximum keeps its sum (factor exactly 1); an empty state adds 0.
      const float term = part[r].m == v.m ? part[r].s
                         : part[r].m == -INFINITY
                             ? 0.0f
                             : emu::rnd(part[r].s * std::exp(part[r].m - v.m), A);
      v.s = r == 0 ? term : emu::rnd(v.s + term, A);
      if (need_sx) v.sx = r == 0 ? part[r].sx : emu::rnd(v.sx + part[r].sx, A);
    }
    return v;
  }
  for (const VocabShard& sh : c.shards) {
    float m_r = -INFINITY;
    for (std::int64_t j = sh.begin; j < sh.end; ++j) m_r = std::max(m_r, x[j]);
    v.m = std::max(v.m, m_r);
  }
  // An all-masked row has sum 0 (lse = −Inf).
  if (v.m != -INFINITY) {
    for (std::int64_t j = 0; j < c.V; ++j) scratch[j] = emu::rnd(std::exp(x[j] - v.m), A);
    v.s = rank_sum(c, scratch);
  }
  if (need_sx) v.sx = rank_sum(c, x);
  return v;
}

std::unique_ptr<Strategy> make_vocab_parallel() {
  return std::make_unique<VocabParallelEmulation>();
}

}  // namespace xentlab::emulation

// CPU emulation of the vocab_chunked strategy: the vocabulary split into P = vocab_chunk_splits
// (gpu/plans/vocab_shards.hpp) contiguous splits, the shards of vocab_shards(V, P), processed one
// after another on one device with the logits of all tokens over one split (the "slab") held at
// a time — the design of Megatron-LM's linear cross-entropy and of PyTorch's vocabulary chunking.
// Its declared arithmetic (docs/arithmetic.md §10 with the splits as ranks; the engine's
// run_sharded, gpu/emulation/common.cpp, with naive's orders within a split):
//   1. forward, one pass over the splits: per row and split its own maximum m_r and the sum
//      s_r = Σ rnd_A(expf(x_j − m_r)) over the split in the blocked order (T = 256 threads over the
//      split's columns, groups of 8, then the tree), Σx over the split likewise;
//   2. per row, m = max_r m_r (exact), each state rescaled once to m, rnd_A(s_r·expf(m_r − m))
//      (exactly s_r where m_r = m, 0 for a split whose logits are all −Inf), the P terms added in
//      the accum dtype in split order; Σx added likewise (DeclaredArithmetic::rescaled_ranks);
//   3. lse, loss and dz as the engine's other strategies (§5, §7);
//   4. backward, the splits in reverse order (the last split's logits are still in memory from
//      the forward, the others recomputed exactly): dH = Σ_r dz[:, r]·W[r], each split's product
//      one fp32 sum over the split's columns, added into the fp32 accumulator from the last split
//      to the first, rounded to the grad dtype once;
//   5. dW and db of a split's own vocabulary rows from all tokens at once, as naive's (one fp32
//      sum per entry over the token rows in increasing order; db a running sum in the accum
//      dtype): they never cross splits and are written once.
// With P = 1 every step is naive's: the outputs are naive's bit for bit. The number of splits
// depends on the whole problem's N (not on RunRequest::token_rows), so a sampled run keeps the
// arithmetic of the full one.
#include <fmt/format.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "gpu/emulation/common.hpp"
#include "gpu/plans/vocab_shards.hpp"
#include "numerics/error.hpp"

namespace xentlab::emulation {

std::unique_ptr<Strategy> make_naive();  // gpu/emulation/naive.cpp

namespace {

class VocabChunkedEmulation final : public Strategy {
 public:
  VocabChunkedEmulation() {
    std::unique_ptr<Strategy> s = make_naive();
    auto* e = dynamic_cast<EmulatedStrategy*>(s.get());
    if (e == nullptr) throw std::logic_error("vocab_chunked: naive is not an emulated strategy");
    (void)s.release();
    local_.reset(e);
  }
  std::string name() const override { return "vocab_chunked"; }
  Backend backend() const override { return Backend::cpu_emulation; }
  Status can_implement(const Problem& p, const LossSpec& s, const Recipe& r) const override {
    return emulation_can_implement(name(), p, s, r);
  }
  std::int64_t workspace_size(const RunRequest& req) const override {
    return local_->sharded_workspace_size(req, splits(req));
  }
  /// The declaration of one split (naive's: the vocabulary reduction of a problem that needs one
  /// split); run_arithmetic takes the request's splits.
  DeclaredArithmetic arithmetic(const Recipe& r) const override {
    DeclaredArithmetic a = local_->arithmetic(r);
    a.note = note(1, r);
    return a;
  }
  /// naive's declaration with vocab_ranks = P splits whose states are rescaled to the global
  /// maximum (rescaled_ranks). Throws InputError as vocab_chunk_splits.
  DeclaredArithmetic run_arithmetic(const RunRequest& req) const override {
    DeclaredArithmetic a = local_->arithmetic(req.recipe);
    a.vocab_ranks = splits(req);
    a.rescaled_ranks = a.vocab_ranks > 1;
    a.note = note(a.vocab_ranks, req.recipe);
    return a;
  }
  StrategyOutputs run(const RunRequest& req) const override {
    return local_->run_sharded(req, run_arithmetic(req), name(), DHRankOrder::decreasing);
  }

 private:
  std::unique_ptr<EmulatedStrategy> local_;

  /// P for the request: its vocab_splits, or from its memory budget over the whole problem's N.
  std::int64_t splits(const RunRequest& req) const {
    if (req.problem == nullptr)
      throw InputError(name() + " (cpu-emulation): RunRequest without a problem");
    const Problem& p = *req.problem;
    try {
      return vocab_chunk_splits(p.N, p.V, size_of(req.recipe.logits), req.memory_budget,
                                req.vocab_splits);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{} (cpu-emulation): {}", name(), e.what()));
    }
  }
  std::string note(std::int64_t P, const Recipe& r) const {
    return fmt::format(
        "cpu-emulation vocab_chunked: {} vocabulary split{}, each with its own maximum and naive's "
        "blocked order, rescaled to the global maximum and added in split order, accum {}; dH "
        "added in reverse split order",
        P, P == 1 ? "" : "s", to_string(r.accum));
  }
};

}  // namespace

std::unique_ptr<Strategy> make_vocab_chunked() {
  return std::make_unique<VocabChunkedEmulation>();
}

}  // namespace xentlab::emulation

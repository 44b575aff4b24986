// vocab_chunked: the vocabulary in P splits on one device — the shards of vocab_shards(V, P),
// P = vocab_chunk_splits (gpu/plans/vocab_shards.hpp: RunRequest::vocab_splits, or the fewest
// splits whose logits slab of all N tokens fits the memory budget, 1 GiB by default) — the design
// of Megatron-LM's linear cross-entropy and of PyTorch's vocabulary chunking. Linear problems only
// (given logits are already in memory: nothing to split). No atomics: deterministic.
//   forward, per split r in order: the slab's logits (N, |split|) by cuBLAS in the logits dtype
//     (+ bias, one rounding; steps::chunk_logits on the split as a problem of its own), per row
//     the split's maximum m_r and target logit and its sums (s_r, Σx_r) with its own maximum m_r
//     (launch_split_row_stats: launch_shard_row_max and launch_shard_row_sums in one kernel, one
//     read of the slab from memory); then, per row, the splits' states merged
//     in split order (launch_merge_split_states: m = max m_r, s = Σ rnd_A(s_r·expf(m_r − m))),
//     lse and loss (launch_shard_row_loss);
//   backward, per split in reverse order (P − 1 down to 0): the slab recomputed (the same GEMM
//     and rounding: the forward's logits bit for bit), except for the last split, whose logits the
//     forward left in the slab; dz in place (launch_shard_dz_rows), dH += dz·W[split] in fp32
//     (cuBLAS beta = 1 after the first backward split; the grad dtype's output itself when that is
//     fp32), dW[split] = dzᵀ·H over all N tokens written once (one GEMM: no cross-split or
//     cross-chunk sum), db of the split's rows (a running sum over tokens in the accum dtype, as
//     naive); dH rounded to the grad dtype once at the end.
// GEMMs: P forward logits, P − 1 recomputed, 2 gradient GEMMs per split: 8·N·V·D − 2·N·⌊V/P⌋·D
// flops (the last split, the one kept, has ⌊V/P⌋ rows: (8 − 2/P)·N·V·D where P divides V).
// The CPU emulation twin (gpu/emulation/vocab_chunked.cpp) runs the same declared arithmetic:
// naive's orders within a split, the splits as vocabulary ranks whose states are rescaled
// (DeclaredArithmetic::rescaled_ranks). With one split every operation is naive's; on the device
// its outputs are naive's bits (dH where the grad dtype is fp32: naive may write a 16-bit dH from
// its GEMM directly, this strategy rounds its fp32 sum).
// Extra device memory: the slab (N·⌈V/P⌉ in the logits dtype), the fp32 GEMM result where the
// logits need a bias or a rounding cuBLAS cannot write (N·⌈V/P⌉·4), dz widened to fp32 for an fp32
// backward GEMM (N·⌈V/P⌉·4), H and the split's W widened to fp32 where the recipe's operands are
// (N·D·4, ⌈V/P⌉·D·4), the fp32 dH accumulator unless the grad dtype is fp32 (N·D·4), dW of a split
// in fp32 where cuBLAS cannot write the grad dtype (⌈V/P⌉·D·4), the split's db accumulator, and
// the row states (16·N·(P + 1) bytes).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gpu/cuda/steps.cuh"
#include "gpu/plans/vocab_shards.hpp"

namespace xentlab::gpu {
namespace {

std::int64_t sz(DType t) {
  return size_of(t);
}

const void* offset(const void* p, std::int64_t bytes) {
  return static_cast<const char*>(p) + bytes;
}
void* offset(void* p, std::int64_t bytes) {
  return static_cast<char*>(p) + bytes;
}

/// P for a run of N tokens over V vocabulary rows (throws InputError naming the strategy).
std::int64_t splits_of(std::int64_t N, std::int64_t V, const Recipe& rc, std::int64_t budget,
                       std::int64_t splits) {
  try {
    return vocab_chunk_splits(N, V, sz(rc.logits), budget, splits);
  } catch (const InputError& e) {
    throw InputError(std::string("vocab_chunked (cuda): ") + e.what());
  }
}

/// The workspace of P splits: the plan of one split of ⌈V/P⌉ rows as a one-chunk problem of its
/// own (plan_workspace with all N rows: slab, staging buffers, the fp32 dH of the sharded plan),
/// the fp32 dH accumulator only where the grad dtype is not fp32 (else dH accumulates in the
/// output), and the row states of every split plus the merged ones.
WorkspacePlan split_plan(const WorkspaceQuery& q, std::int64_t P) {
  WorkspaceQuery qs = q;
  qs.V = (q.V + P - 1) / P;
  WorkspacePlan p = plan_workspace(qs, q.N, true);
  if (q.recipe.grad == DType::fp32) p.dH_f32 = 0;
  p.row_states = 16 * q.N * (P + 1);
  return p;
}

class VocabChunkedStrategy final : public CudaStrategy {
 public:
  std::string name() const override { return "vocab_chunked"; }

  /// The plan of the splits the budget gives (RunRequest::vocab_splits is not part of a query:
  /// workspace_size takes it).
  WorkspacePlan plan(const WorkspaceQuery& q, std::int64_t budget,
                     std::int64_t /*chunk_tokens*/) const override {
    return split_plan(q, splits_of(q.N, q.V, q.recipe, budget, 0));
  }
  std::int64_t workspace_size(const RunRequest& req) const override {
    const Problem& P = *req.problem;
    const WorkspaceQuery q{P.N,
                           P.V,
                           P.is_linear() ? P.D : 0,
                           P.input_dtype(),
                           P.is_linear() && P.bias.has_value(),
                           req.recipe,
                           req.want_grads};
    return split_plan(q, splits_of(P.N, P.V, req.recipe, req.memory_budget, req.vocab_splits))
        .total();
  }
  DeclaredArithmetic arithmetic(const Recipe& r) const override {
    DeclaredArithmetic a = CudaStrategy::arithmetic(r);
    a.note =
        "cuBLAS GemmEx_64, fp32 compute (no TF32); per vocabulary split: CE rows 256 threads, "
        "groups of 8, tree, with the split's own maximum; the splits' states rescaled to the "
        "row's maximum and added in split order (accum dtype); dH summed over the splits in fp32 "
        "in reverse split order (GEMM beta 1), dW and db per split";
    return a;
  }
  DeclaredArithmetic run_arithmetic(const RunRequest& req) const override {
    DeclaredArithmetic a = arithmetic(req.recipe);
    if (req.problem == nullptr) return a;
    a.vocab_ranks =
        splits_of(req.problem->N, req.problem->V, req.recipe, req.memory_budget, req.vocab_splits);
    a.rescaled_ranks = a.vocab_ranks > 1;
    return a;
  }

  void forward_backward(const DeviceRun& r, const DeviceContext& c) const override {
    const DeviceProblem& P = r.prob;
    if (!P.linear())
      throw InputError("vocab_chunked (cuda): a logits problem (its logits are given)");
    const DType L = r.recipe.logits, A = r.recipe.accum, grad = r.recipe.grad;
    const std::int64_t N = P.N, V = P.V, D = P.D;
    const std::int64_t S = splits_of(N, V, r.recipe, r.memory_budget, r.vocab_splits);
    const std::vector<VocabShard> splits = vocab_shards(V, S);
    Workspace ws(c.mem, split_plan(workspace_query(r), S));
    const RowLossParams rp = make_row_params(r.spec, V, A);  // ε/V and the targets: the full V

    // Row states: per split m_r and x_t,r (S·N fp32 each) and (s_r, Σx_r) (2·N values of A, 4
    // bytes reserved each); then the merged m, x_t and sums.
    float* const split_m = ws.row_states.as<float>();
    float* const split_xt = split_m + S * N;
    void* const split_sums = split_xt + S * N;
    float* const m = split_xt + S * N + S * 2 * N;
    float* const x_t = m + N;
    void* const sums = x_t + N;
    const auto split_sums_of = [&](std::int64_t k) {
      return offset(split_sums, k * 2 * N * sz(A));
    };

    // The split k as a problem of its own: its rows of W and of the bias, all N tokens.
    const auto split_run = [&](const VocabShard& sh) {
      DeviceRun s = r;
      s.prob.V = sh.size();
      s.prob.W = offset(P.W, sh.begin * D * sz(P.input));
      if (P.bias != nullptr) s.prob.bias = P.bias + sh.begin;
      return s;
    };

    void* last_slab = nullptr;  // the last split's logits, which the backward takes first
    for (std::int64_t k = 0; k < S; ++k) {
      const VocabShard& sh = splits[static_cast<std::size_t>(k)];
      const DeviceRun s = split_run(sh);
      void* z = steps::chunk_logits(s, c, ws, 0, N);  // (N, |split|) logits dtype
      last_slab = z;
      if (r.gemms_only) continue;
      const ShardColumns cols{sh.begin, sh.size()};
      launch_split_row_stats(L, z, N, cols, P.targets, rp, split_m + k * N, split_xt + k * N,
                             split_sums_of(k), c.stream);
    }
    if (!r.gemms_only) {
      launch_merge_split_states(S, N, split_m, split_xt, split_sums, A, m, x_t, sums, c.stream);
      launch_shard_row_loss(N, P.targets, m, sums, x_t, rp, r.out.loss, r.out.lse, c.stream);
    }
    if (!r.want_grads) return;

    // dH accumulates in fp32: in the output where the grad dtype is fp32, else in the workspace.
    const bool dH_in_output = grad == DType::fp32;
    void* const dH_acc = dH_in_output ? r.out.dH : ws.dH_f32.get();
    // The splits in reverse order: the last split's logits are still in the slab (the merge and
    // loss kernels read only the row states), so the first backward split needs no recompute.
    for (std::int64_t k = S - 1; k >= 0; --k) {
      const VocabShard& sh = splits[static_cast<std::size_t>(k)];
      const DeviceRun s = split_run(sh);
      // The forward's logits: kept (the last split) or recomputed (the same GEMM and rounding).
      void* z = k == S - 1 ? last_slab : steps::chunk_logits(s, c, ws, 0, N);
      const ShardColumns cols{sh.begin, sh.size()};
      if (!r.gemms_only)
        launch_shard_dz_rows(L, z, L, L, z, N, cols, P.targets, r.out.lse, rp, r.g, c.stream);
      if (ws.plan.W_f32 > 0)  // the split's W widened for an fp32 backward GEMM
        launch_convert(P.input, s.prob.W, DType::fp32, ws.W_f32.get(), sh.size() * D, c.stream);
      const steps::BackwardOperands o = steps::backward_operands(s, c, ws, z, 0, N);
      gemm_dH(c.blas, o.op, o.dz, o.W, N, sh.size(), D, DType::fp32, dH_acc,
              k == S - 1 ? 0.0f : 1.0f);
      // dW and db of the split's rows: written once (a one-chunk plan), db through the split's
      // accumulator rounded into its rows of the output.
      DeviceRun out = s;
      out.out.dW = offset(r.out.dW, sh.begin * D * sz(grad));
      out.out.db = r.out.db != nullptr ? offset(r.out.db, sh.begin * sz(grad)) : nullptr;
      if (ws.plan.db_acc > 0)
        XL_CUDA_CHECK(cudaMemsetAsync(ws.db_acc.get(), 0, static_cast<std::size_t>(ws.plan.db_acc),
                                      c.stream));
      steps::chunk_dW_db(out, c, ws, o, z, N, 0);
      steps::finish(out, c, ws);
    }
    // Kept under gemms_only too: it rounds the dH GEMMs' result to the grad dtype (a conversion
    // of their result the recipe needs, as steps::chunk_dH and steps::finish do for the others).
    if (!dH_in_output)
      launch_round_rows(ws.dH_f32.as<float>(), nullptr, N, D, grad, r.out.dH, c.stream);
  }

 protected:
  Status check_specific(const Problem& p, const LossSpec&, const Recipe&) const override {
    if (!p.is_linear())
      return Status::NotSupported(
          "vocab_chunked (cuda): the logits are given, so there is nothing to recompute or split "
          "(it takes a linear head: H, W)");
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Strategy> make_cuda_vocab_chunked() {
  return std::make_unique<VocabChunkedStrategy>();
}

}  // namespace xentlab::gpu

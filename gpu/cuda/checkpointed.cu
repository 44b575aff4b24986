// checkpointed: the forward keeps only the per-token lse (fp32 holding accum values) and the loss;
// the backward recomputes each chunk's logits with the very same GEMM (same chunk boundaries, same
// shapes, same dtype: bit-identical logits) and forms dz from the stored lse with an arbitrary
// per-token upstream gradient (reduction none; 1/n_valid, 1/normaliser or 1 for mean/sum), then dH,
// dW and db as chunked does (docs/arithmetic.md §7–8). Peak extra memory O(rows·V) + the
// accumulators; the chunk size comes from chunk_tokens or the memory budget (kDefaultChunkBudget
// for the chunk buffers when none is given).
#include <memory>
#include <string>

#include "gpu/cuda/steps.cuh"

namespace xentlab::gpu {
namespace {

class CheckpointedStrategy final : public ChunkStrategy {
 public:
  std::string name() const override { return "checkpointed"; }

  void forward_backward(const DeviceRun& r, const DeviceContext& c) const override {
    const DeviceProblem& P = r.prob;
    const WorkspaceQuery q = workspace_query(r);
    Workspace ws(c.mem, plan(q, r.memory_budget, r.chunk_tokens));
    const RowLossParams rp = make_row_params(r.spec, P.V, r.recipe.accum);
    forward(r, c, ws, rp);
    if (r.want_grads) backward(r, c, ws, rp);
  }

 private:
  /// Loss and lse of every token; nothing else survives the forward.
  static void forward(const DeviceRun& r, const DeviceContext& c, Workspace& ws,
                      const RowLossParams& rp) {
    const DeviceProblem& P = r.prob;
    for (std::int64_t r0 = 0; r0 < P.N; r0 += ws.plan.rows) {
      const std::int64_t rows = std::min(ws.plan.rows, P.N - r0);
      void* z = steps::chunk_logits(r, c, ws, r0, rows);
      if (P.linear() && r.gemms_only) continue;
      launch_ce_rows(r.recipe.logits, z, rows, P.targets + r0, r.out.loss + r0, r.out.lse + r0, rp,
                     false, r.g, c.stream);
    }
  }

  /// Recomputes the logits chunk by chunk and forms dz from the stored lse, then the gradients.
  static void backward(const DeviceRun& r, const DeviceContext& c, Workspace& ws,
                       const RowLossParams& rp) {
    const DeviceProblem& P = r.prob;
    if (P.linear()) steps::begin(r, c, ws);
    for (std::int64_t k = 0, r0 = 0; r0 < P.N; ++k, r0 += ws.plan.rows) {
      const std::int64_t rows = std::min(ws.plan.rows, P.N - r0);
      RowGradScale g = r.g;
      if (g.g_rows != nullptr) g.g_rows += r0;
      void* z = steps::chunk_logits(r, c, ws, r0, rows);
      if (P.linear()) {
        if (!r.gemms_only)
          launch_dz_rows(r.recipe.logits, z, r.recipe.logits, r.recipe.logits, z, rows,
                         P.targets + r0, r.out.lse + r0, rp, g, c.stream);
        steps::chunk_backward(r, c, ws, z, r0, rows, k);
      } else {
        launch_dz_rows(r.recipe.logits, z, r.recipe.logits, r.recipe.grad,
                       static_cast<char*>(r.out.dz) + r0 * P.V * size_of(r.recipe.grad), rows,
                       P.targets + r0, r.out.lse + r0, rp, g, c.stream);
      }
    }
    if (P.linear()) steps::finish(r, c, ws);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_cuda_checkpointed() {
  return std::make_unique<CheckpointedStrategy>();
}

}  // namespace xentlab::gpu

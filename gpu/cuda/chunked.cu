// chunked: token chunks with the gradient computed in the forward. Per chunk of `rows` tokens:
// logits (rows, V) by cuBLAS in the logits dtype → one kernel writes loss and lse and overwrites
// the logits with dz in place → dH rows = dz·W (complete over V: one rounding to grad) → dW +=
// dzᵀ·H_chunk into an accumulator of the accum dtype (an fp32 buffer when accum is fp32; the fp32
// dW output itself when grad is fp32 too), rounded to grad at the end; db sequential over tokens in
// accum. With a single chunk the dW GEMM writes the output directly (no cross-chunk sum), exactly
// as naive. The chunk size comes from RunRequest::chunk_tokens or from the memory budget
// (kDefaultChunkBudget for the chunk buffers when none is given): peak extra memory O(rows·V) + the
// accumulators.
#include <memory>
#include <string>

#include "gpu/cuda/steps.cuh"

namespace xentlab::gpu {
namespace {

class ChunkedStrategy final : public ChunkStrategy {
 public:
  std::string name() const override { return "chunked"; }

  void forward_backward(const DeviceRun& r, const DeviceContext& c) const override {
    const DeviceProblem& P = r.prob;
    const WorkspaceQuery q = workspace_query(r);
    Workspace ws(c.mem, plan(q, r.memory_budget, r.chunk_tokens));
    steps::begin(r, c, ws);
    const RowLossParams rp = make_row_params(r.spec, P.V, r.recipe.accum);
    const std::int64_t step = ws.plan.rows;
    for (std::int64_t k = 0, r0 = 0; r0 < P.N; ++k, r0 += step) {
      const std::int64_t rows = std::min(step, P.N - r0);
      RowGradScale g = r.g;
      if (g.g_rows != nullptr) g.g_rows += r0;
      void* z = steps::chunk_logits(r, c, ws, r0, rows);  // (rows, V) logits dtype
      if (P.linear()) {
        if (!r.gemms_only)
          launch_ce_rows(r.recipe.logits, z, rows, P.targets + r0, r.out.loss + r0, r.out.lse + r0,
                         rp, r.want_grads, g, c.stream);
#ifdef XENTLAB_BROKEN_CHUNKED
        // A test build's deliberate fault (XENTLAB_BROKEN_STRATEGY=chunked): the first token
        // chunk's backward is skipped, as an off-by-one in this loop would do (its dH rows and
        // dW keep what the unwritten buffers hold).
        if (r.want_grads && k > 0) steps::chunk_backward(r, c, ws, z, r0, rows, k);
#else
        if (r.want_grads) steps::chunk_backward(r, c, ws, z, r0, rows, k);
#endif
      } else {
        launch_ce_rows(r.recipe.logits, z, rows, P.targets + r0, r.out.loss + r0, r.out.lse + r0,
                       rp, false, g, c.stream);
        if (r.want_grads)
          launch_dz_rows(r.recipe.logits, z, r.recipe.logits, r.recipe.grad,
                         static_cast<char*>(r.out.dz) + r0 * P.V * size_of(r.recipe.grad), rows,
                         P.targets + r0, r.out.lse + r0, rp, g, c.stream);
      }
    }
    if (r.want_grads && P.linear()) steps::finish(r, c, ws);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_cuda_chunked() {
  return std::make_unique<ChunkedStrategy>();
}

}  // namespace xentlab::gpu

// naive: the whole logits tensor (N, V) in the recipe's logits dtype from one cuBLAS GEMM (fp32
// compute), one CE/lse kernel that also writes the full dz in place (docs/arithmetic.md §2–7), then
// the two backward GEMMs dH = dz·W and dW = dzᵀ·H over all N tokens (§8, one rounding to grad
// each); db sequential over tokens in the accum dtype. Extra memory O(N·V): when that does not fit
// the device (or the caller's memory budget), the strategy refuses with the bytes it needs.
//
// The same steps make the sequential-sum model of the differential baseline (make_baseline_models
// on the CUDA backend; never a strategy of the table): every GEMM one fp32 sum per element in
// increasing k (sequential_gemm.cuh) and the row sums one sequential pass over the vocabulary
// (RowLossParams::sequential_sums) — the CPU emulation's sequential-sum model
// (gpu/emulation/naive.cpp) on the GPU, where it runs at the Llama-3 head in seconds.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/steps.cuh"

namespace xentlab::gpu {
namespace {

class NaiveStrategy final : public CudaStrategy {
 public:
  explicit NaiveStrategy(bool sequential = false) : sequential_(sequential) {}
  std::string name() const override { return sequential_ ? "sequential-sum model" : "naive"; }
  GemmOrder gemm_order() const override {
    return sequential_ ? GemmOrder::sequential : GemmOrder::cublas;
  }
  DeclaredArithmetic arithmetic(const Recipe& r) const override {
    DeclaredArithmetic a = CudaStrategy::arithmetic(r);
    if (sequential_) {
      a.vocab_order = ReductionOrder::sequential;
      a.token_order = ReductionOrder::sequential;
      a.note = fmt::format(
          "cuda {}: every GEMM one fp32 sum per element in increasing k (fma), row sums "
          "sequential, accum {}",
          name(), to_string(r.accum));
    }
    return a;
  }

  WorkspacePlan plan(const WorkspaceQuery& q, std::int64_t, std::int64_t) const override {
    return plan_workspace(q, q.N);
  }

  void forward_backward(const DeviceRun& r, const DeviceContext& c) const override {
    const DeviceProblem& P = r.prob;
    const WorkspaceQuery q = workspace_query(r);
    const WorkspacePlan wp = plan_workspace(q, P.N);
    check_fits(wp.total(), r.memory_budget, c);
    if (P.N > 0x7fffffffLL)
      throw InputError(name() + ": N = " + std::to_string(P.N) +
                       " rows exceed one kernel grid (2^31−1)");
    Workspace ws(c.mem, wp);
    steps::begin(r, c, ws);
    RowLossParams rp = make_row_params(r.spec, P.V, r.recipe.accum);
    rp.sequential_sums = sequential_;
    void* z = steps::chunk_logits(r, c, ws, 0, P.N);  // (N, V) logits dtype
    if (P.linear()) {
      if (!r.gemms_only)
        launch_ce_rows(r.recipe.logits, z, P.N, P.targets, r.out.loss, r.out.lse, rp, r.want_grads,
                       r.g, c.stream);
      if (r.want_grads) {
        steps::chunk_backward(r, c, ws, z, 0, P.N, 0);
        steps::finish(r, c, ws);
      }
    } else {
      launch_ce_rows(r.recipe.logits, z, P.N, P.targets, r.out.loss, r.out.lse, rp, false, r.g,
                     c.stream);
      if (r.want_grads)
        launch_dz_rows(r.recipe.logits, z, r.recipe.logits, r.recipe.grad, r.out.dz, P.N, P.targets,
                       r.out.lse, rp, r.g, c.stream);
    }
  }

 protected:
  Status check_specific(const Problem& p, const LossSpec&, const Recipe& r) const override {
    const WorkspaceQuery q{
        p.N, p.V, p.is_linear() ? p.D : 0, p.input_dtype(), p.is_linear() && p.bias.has_value(),
        r,   true};
    const std::int64_t need = plan_workspace(q, p.N).total();
    std::size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      (void)cudaGetLastError();
      return Status::NotSupported(name() + ": cannot query device memory");
    }
    if (need > static_cast<std::int64_t>(free_b))
      return Status::NotSupported(name() + " needs " + std::to_string(need) +
                                  " bytes of extra device memory (logits " + std::to_string(p.N) +
                                  "×" + std::to_string(p.V) + " in " +
                                  std::string(to_string(r.logits)) + " and temporaries); " +
                                  std::to_string(free_b) + " bytes are free");
    return Status::Ok();
  }

 private:
  bool sequential_ = false;
  void check_fits(std::int64_t need, std::int64_t budget, const DeviceContext&) const {
    if (budget > 0 && need > budget)
      throw InputError(name() + " needs " + std::to_string(need) +
                       " bytes of extra device memory, over the memory budget of " +
                       std::to_string(budget) + " bytes");
    std::size_t free_b = 0, total_b = 0;
    XL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (need > static_cast<std::int64_t>(free_b))
      throw InputError(name() + " needs " + std::to_string(need) +
                       " bytes of extra device memory; " + std::to_string(free_b) + " of " +
                       std::to_string(total_b) + " bytes are free");
  }
};

}  // namespace

std::unique_ptr<Strategy> make_cuda_naive() {
  return std::make_unique<NaiveStrategy>();
}

std::unique_ptr<Strategy> make_cuda_sequential_model() {
  return std::make_unique<NaiveStrategy>(true);
}

}  // namespace xentlab::gpu

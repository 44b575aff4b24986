// The fused strategy (launch.cuh): its workspace plan, the choice between the wgmma and mma.sync
// kernels, the launches of forward (forward.cu), finalize and backward (backward.cu: staged, or
// on-chip), and the recipes it refuses.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/fused/common.cuh"
#include "gpu/cuda/fused/fused.hpp"
#include "gpu/cuda/fused/launch.cuh"
#include "gpu/cuda/steps.cuh"
#include "gpu/plans/fused_plan.hpp"

namespace xentlab::gpu {
namespace fused {
namespace {

class FusedStrategy final : public CudaStrategy {
 public:
  /// `backward`: the on-chip backward's launch, or null for the staged backward (fused.hpp).
  FusedStrategy(FusedKernelPath path, FusedBackwardLaunch backward)
      : path_(path), backward_(backward) {}

  std::string name() const override { return "fused"; }

  /// The kernels of this object's last run (fused.hpp).
  FusedKernels last_kernels() const {
    return {kernel_name(last_forward_.load()), kernel_name(last_backward_.load())};
  }

  DeclaredArithmetic arithmetic(const Recipe& r) const override {
    // The kernel's own tree (gpu/plans/fused_plan.hpp; judge/bounds.hpp online_tree), declared
    // alike by its CPU emulation.
    DeclaredArithmetic d = fused_declared_arithmetic();
    d.note =
        "cuda fused: forward wgmma m64n256k16 (HGMMA, sm_90a) or mma.sync m16n8k16 (HMMA) "
        "tiles 128x256, fp32 accumulation over D; online (max,sum) per thread over 64 "
        "columns of each tile in " +
        std::string(to_string(r.accum)) + ", merged by quad and vocabulary range (pairwise); " +
        (backward_ == nullptr
             ? std::string("backward per token group: tiles recomputed, dz staged in the logits "
                           "dtype, cuBLAS GemmEx dH = dz.W and dW += dz^T.H (fp32 compute), "
                           "groups in increasing order")
             : std::string("on-chip backward recomputes tiles 128x256 (wgmma, sm_90a) or 128x128 "
                           "(mma.sync), dH/dW/db fp32 additions in increasing vocabulary tile "
                           "(dH) and token block (dW, db)"));
    return d;
  }

  WorkspacePlan plan(const WorkspaceQuery& q, std::int64_t budget,
                     std::int64_t chunk_tokens) const override {
    const int splits = fused_vocab_ranges(q.N, q.V, sms());
    // (m, s, Σx) per row and vocabulary range, and x_t per row.
    const std::int64_t states = (std::int64_t{3} * splits + 1) * q.N * 4;
    if (q.want_grads && backward_ == nullptr) return staged_plan(q, budget, chunk_tokens, states);
    WorkspacePlan w;
    w.rows = q.N;
    w.n_chunks = 1;
    w.cublas = 0;
    w.row_states = states;
    if (q.want_grads) {  // on-chip: the order flags after the row states (fused_order_ints)
      w.row_states += fused_order_ints(q.N, q.V, q.D) * 4;
      if (q.recipe.grad != DType::fp32) {
        w.dH_f32 = q.N * q.D * 4;
        w.dW_acc = q.V * q.D * 4;
      }
      if (q.has_bias) w.db_acc = q.V * 4;
    }
    return w;
  }

  void forward_backward(const DeviceRun& r, const DeviceContext& c) const override {
    const DeviceProblem& P = r.prob;
    if (!P.linear()) throw InputError("fused: needs a linear problem (H, W)");
    const WorkspaceQuery q = workspace_query(r);
    const WorkspacePlan wp = plan(q, r.memory_budget, r.chunk_tokens);
    if (r.memory_budget > 0 && wp.total() > r.memory_budget)
      throw InputError("fused needs " + std::to_string(wp.total()) +
                       " bytes of extra device memory (row states, and with gradients the dz "
                       "stage or the fp32 accumulators), over the memory budget of " +
                       std::to_string(r.memory_budget) + " bytes");
    const std::int64_t MB = (P.N + kBM - 1) / kBM, VB = (P.V + kBN - 1) / kBN;
    if (MB * VB > 0x7fffffffLL)
      throw InputError("fused: " + std::to_string(MB) + "×" + std::to_string(VB) +
                       " tiles exceed one kernel grid (2^31−1)");
    Workspace ws(c.mem, wp);
    const int splits = fused_vocab_ranges(P.N, P.V, sms());
    FusedArgs a;
    a.H = static_cast<const std::uint16_t*>(P.H);
    a.W = static_cast<const std::uint16_t*>(P.W);
    a.bias = P.bias;
    a.targets = P.targets;
    a.N = P.N;
    a.V = P.V;
    a.D = P.D;
    a.p = make_row_params(r.spec, P.V, r.recipe.accum);
    a.logits_code = acc_code(r.recipe.logits);
    a.acc_code = acc_code(r.recipe.accum);
    a.splits = splits;
    const std::int64_t VT = (P.V + kFBN - 1) / kFBN;  // forward tiles
    a.tiles_per_split = (VT + splits - 1) / splits;
    float* st = ws.row_states.as<float>();
    a.part_m = st;
    a.part_s = st + std::int64_t(splits) * P.N;
    a.part_sx = a.p.smoothing ? st + 2 * std::int64_t(splits) * P.N : nullptr;
    a.x_target = st + 3 * std::int64_t(splits) * P.N;
    const bool vec =
        P.D % 8 == 0 &&
        ((reinterpret_cast<std::uintptr_t>(P.H) | reinterpret_cast<std::uintptr_t>(P.W)) & 15) == 0;
    // The wgmma forward where its TMA boxes apply (16-byte rows and bases; at least one box of
    // each operand), else mma.sync: the same tree either way (fused.hpp).
    const bool wgmma = vec && path_ == FusedKernelPath::automatic && P.N >= kBM && P.V >= kFBN &&
                       P.D >= Ring::kBK && hopper::hopper_forward_available();
    launch_fused_forward(P.input, vec, wgmma, a, c.stream);
    last_forward_.store(wgmma ? 1 : 0);
    launch_fused_finalize(a, r.out.loss, r.out.lse, c.stream);
    if (!r.want_grads) return;

    a.lse = r.out.lse;
    a.g = r.g;
    if (backward_ == nullptr) {
      staged_backward(r, c, ws, a, vec, wgmma);
      return;
    }
    const DType grad = r.recipe.grad;
    float* dH = grad == DType::fp32 ? static_cast<float*>(r.out.dH) : ws.dH_f32.as<float>();
    float* dW = grad == DType::fp32 ? static_cast<float*>(r.out.dW) : ws.dW_acc.as<float>();
    XL_CUDA_CHECK(cudaMemsetAsync(dH, 0, static_cast<std::size_t>(P.N * P.D * 4), c.stream));
    XL_CUDA_CHECK(cudaMemsetAsync(dW, 0, static_cast<std::size_t>(P.V * P.D * 4), c.stream));
    if (P.bias != nullptr)
      XL_CUDA_CHECK(
          cudaMemsetAsync(ws.db_acc.get(), 0, static_cast<std::size_t>(P.V * 4), c.stream));
    a.dH = dH;
    a.dW = dW;
    a.db = P.bias != nullptr ? ws.db_acc.as<float>() : nullptr;
    a.order = reinterpret_cast<int*>(st + (3 * std::int64_t(splits) + 1) * P.N);
    XL_CUDA_CHECK(cudaMemsetAsync(
        a.order, 0, static_cast<std::size_t>(fused_order_ints(P.N, P.V, P.D) * 4), c.stream));
    backward_(P.input, vec, wgmma, a, c.stream);
    last_backward_.store(wgmma ? 1 : 0);
    if (grad != DType::fp32) {
      launch_round_rows(dH, nullptr, P.N, P.D, grad, r.out.dH, c.stream);
      launch_round_rows(dW, nullptr, P.V, P.D, grad, r.out.dW, c.stream);
    }
    if (P.bias != nullptr && r.out.db != nullptr)
      launch_round_rows(ws.db_acc.as<float>(), nullptr, 1, P.V, grad, r.out.db, c.stream);
  }

 protected:
  Status check_specific(const Problem& p, const LossSpec&, const Recipe& r) const override {
    if (!p.is_linear())
      return Status::NotSupported(
          "fused (cuda): a logits problem already has its logits in memory; fused needs H and W");
    if (r.input != DType::bf16 && r.input != DType::fp16)
      return Status::NotSupported("fused (cuda): recipe " + r.name() + " has " +
                                  std::string(to_string(r.input)) +
                                  " inputs; the tensor-core GEMM takes bf16 or fp16 operands "
                                  "(fp32 would need TF32, which is not the recipe)");
    if (r.logits != r.input)
      return Status::NotSupported(
          "fused (cuda): recipe " + r.name() + " holds logits (and so dz) in " +
          std::string(to_string(r.logits)) + ", not in the operand dtype " +
          std::string(to_string(r.input)) +
          "; the backward GEMMs take dz as a tensor-core operand exactly, so logits must equal "
          "the input dtype");
    return Status::Ok();
  }

 private:
  /// The staged backward's plan: the forward's row states, and chunked's buffers for groups of
  /// fused_group_rows rows (steps.cuh plan_workspace; its logits buffer is the dz stage, and no
  /// fp32 logits are needed: the dz kernel rounds in registers). The stage holds kFusedStageBytes
  /// by default; a memory budget sizes it (the budget less what does not grow with the group) and
  /// bounds the whole plan; chunk_tokens sets the group.
  WorkspacePlan staged_plan(const WorkspaceQuery& q, std::int64_t budget, std::int64_t chunk_tokens,
                            std::int64_t states) const {
    const auto at = [&](std::int64_t rows) {
      WorkspacePlan p = plan_workspace(q, rows);
      p.logits_f32 = 0;
      p.row_states = states;
      return p;
    };
    const std::int64_t lb = size_of(q.recipe.logits);
    std::int64_t stage = kFusedStageBytes;
    if (budget > 0 && chunk_tokens <= 0 && q.N > 2) {
      // Plans of several groups are affine in their rows: fixed + rows·per_row.
      const WorkspacePlan p1 = at(1), p2 = at(2);
      const std::int64_t per_row = p2.total() - p1.total(), fixed = p1.total() - per_row;
      if (budget < p1.total())
        throw InputError(
            "fused: memory budget " + std::to_string(budget) + " bytes is below the " +
            std::to_string(p1.total()) + " bytes its backward needs for a dz stage of one token (" +
            std::to_string(fixed) + " fixed + " + std::to_string(per_row) + " per token)");
      stage = (budget - fixed) / per_row * q.V * lb;
    }
    const WorkspacePlan p = at(fused_group_rows(q.N, q.V, lb, stage, chunk_tokens));
    if (budget > 0 && p.total() > budget)
      throw InputError("fused: token groups of " + std::to_string(p.rows) + " rows need " +
                       std::to_string(p.total()) + " bytes of extra device memory, past the " +
                       "memory budget of " + std::to_string(budget) + " bytes");
    return p;
  }

  /// The staged backward (fused.hpp FusedBackward::staged): per token group, dz into the stage
  /// (launch_fused_dz), then chunked's gradient GEMMs and db (steps.cuh chunk_backward), groups in
  /// increasing order; dW and db rounded to the grad dtype at the end (steps::finish).
  void staged_backward(const DeviceRun& r, const DeviceContext& c, Workspace& ws, FusedArgs a,
                       bool vec, bool wgmma) const {
    const DeviceProblem& P = r.prob;
    steps::begin(r, c, ws);
    const std::int64_t step = ws.plan.rows;
    a.stage = ws.logits.get();
    for (std::int64_t k = 0, r0 = 0; r0 < P.N; ++k, r0 += step) {
      a.stage_r0 = r0;
      a.stage_rows = std::min(step, P.N - r0);
      launch_fused_dz(P.input, vec, wgmma, a, c.stream);
      steps::chunk_backward(r, c, ws, a.stage, r0, a.stage_rows, k);
    }
    steps::finish(r, c, ws);
    last_backward_.store(wgmma ? 1 : 0);
  }

  static const char* kernel_name(int v) { return v < 0 ? "" : v == 1 ? "wgmma" : "mma.sync"; }

  static int sms() {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 132;
    }
    return n;
  }

  FusedKernelPath path_;
  FusedBackwardLaunch backward_;
  // The kernels of the last forward and backward: -1 none yet, 0 mma.sync, 1 wgmma.
  mutable std::atomic<int> last_forward_{-1}, last_backward_{-1};
};

}  // namespace

std::unique_ptr<Strategy> make_cuda_fused_variant(FusedKernelPath path,
                                                  FusedBackwardLaunch backward) {
  return std::make_unique<FusedStrategy>(path, backward);
}

}  // namespace fused

std::unique_ptr<Strategy> make_cuda_fused(FusedKernelPath path, FusedBackward backward) {
  return fused::make_cuda_fused_variant(
      path, backward == FusedBackward::on_chip ? &fused::launch_fused_backward : nullptr);
}

std::unique_ptr<Strategy> make_cuda_fused() {
  return make_cuda_fused(FusedKernelPath::automatic);
}

FusedKernels last_fused_kernels(const Strategy& s) {
  const auto* f = dynamic_cast<const fused::FusedStrategy*>(&s);
  if (f == nullptr)
    throw std::invalid_argument("last_fused_kernels: strategy " + s.name() + " (" +
                                std::string(to_string(s.backend())) +
                                ") was not made by make_cuda_fused");
  return f->last_kernels();
}

}  // namespace xentlab::gpu

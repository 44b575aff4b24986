// Host wrapper and shared steps of the CUDA strategies (see steps.cuh).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/common/device.hpp"
#include "gpu/cuda/steps.cuh"

namespace xentlab::gpu {
namespace {

std::int64_t sz(DType t) {
  return size_of(t);
}
const char* byte_ptr(const void* p, std::int64_t offset_bytes) {
  return static_cast<const char*>(p) + offset_bytes;
}
char* byte_ptr(void* p, std::int64_t offset_bytes) {
  return static_cast<char*>(p) + offset_bytes;
}
bool storage_dtype(DType t) {
  return t == DType::fp32 || t == DType::fp16 || t == DType::bf16;
}
DType backward_operand(const Recipe& r) {
  return r.logits == r.input ? r.input : DType::fp32;
}

}  // namespace

void device_values_to_doubles(const unsigned char* raw, std::int64_t n, DType t, double* out) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    if (t == DType::fp32) {
      float f;
      std::memcpy(&f, raw + 4 * i, 4);
      out[i] = f;
    } else {
      std::uint16_t b;
      std::memcpy(&b, raw + 2 * i, 2);
      out[i] = t == DType::bf16 ? bf16_bits_to_double(b) : fp16_bits_to_double(b);
    }
  }
}

OwnedStream::OwnedStream() {
  XL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
}
OwnedStream::~OwnedStream() {
  (void)cudaStreamDestroy(s);
}
OwnedEvent::OwnedEvent() {
  XL_CUDA_CHECK(cudaEventCreate(&e));
}
OwnedEvent::~OwnedEvent() {
  (void)cudaEventDestroy(e);
}

// ---- workspace --------------------------------------------------------------------------------

WorkspacePlan plan_workspace(const WorkspaceQuery& q, std::int64_t rows, bool vocab_sharded) {
  WorkspacePlan p;
  p.rows = rows;
  p.n_chunks = rows > 0 ? (q.N + rows - 1) / rows : 0;
  const DType L = q.recipe.logits;
  const bool linear = q.D > 0;
  if (linear) {
    p.logits = rows * q.V * sz(L);
    const bool via_f32 = q.has_bias || !gemm_output_direct(q.input, L);
    if (via_f32 && L != DType::fp32) p.logits_f32 = rows * q.V * 4;
  } else if (q.input != L) {
    p.logits = rows * q.V * sz(L);
  }
  if (q.want_grads && linear) {
    const DType op = backward_operand(q.recipe);
    const DType grad = q.recipe.grad;
    if (op == DType::fp32 && L != DType::fp32) p.dz_f32 = rows * q.V * 4;
    if (op == DType::fp32 && q.input != DType::fp32) {
      p.H_f32 = rows * q.D * 4;
      p.W_f32 = q.V * q.D * 4;
    }
    if (!gemm_output_direct(op, grad)) p.dH_f32 = rows * q.D * 4;
    if (p.n_chunks <= 1) {
      if (!gemm_output_direct(op, grad)) p.dW_tmp = q.V * q.D * 4;
    } else if (q.recipe.accum == DType::fp32) {
      if (grad != DType::fp32) p.dW_acc = q.V * q.D * 4;  // grad fp32: the output accumulates
    } else {
      p.dW_acc = q.V * q.D * 4;
      p.dW_tmp = q.V * q.D * 4;
    }
    if (q.has_bias) p.db_acc = q.V * 4;
    if (vocab_sharded) p.dH_f32 = rows * q.D * 4;  // all-reduced in fp32, then rounded
  }
  if (vocab_sharded) p.row_states = rows * 16;
  return p;
}

WorkspacePlan plan_chunks(const WorkspaceQuery& q, std::int64_t memory_budget,
                          std::int64_t chunk_tokens, const std::string& strategy,
                          bool vocab_sharded) {
  const bool budget_given = memory_budget > 0;
  // Multi-chunk plans are affine in rows: fixed + rows·per_row (plan_workspace(q, 1) is
  // multi-chunk whenever N > 1, as is every plan below N).
  const WorkspacePlan p1 = plan_workspace(q, 1, vocab_sharded),
                      p2 = plan_workspace(q, 2, vocab_sharded);
  const std::int64_t per_row = p2.total() - p1.total();
  const std::int64_t fixed = p1.total() - per_row;
  // The default bounds the chunk buffers; what every multi-chunk plan needs whatever its chunk
  // size (the V·D fp32 dW accumulator, W widened to fp32) comes on top of it.
  const std::int64_t budget =
      budget_given ? memory_budget : kDefaultChunkBudget + std::max<std::int64_t>(0, fixed);
  if (chunk_tokens > 0) {
    const WorkspacePlan p = plan_workspace(q, std::min(chunk_tokens, q.N), vocab_sharded);
    if (budget_given && p.total() > budget)
      throw InputError(strategy + ": chunks of " + std::to_string(p.rows) + " tokens need " +
                       std::to_string(p.total()) + " bytes, past the memory budget of " +
                       std::to_string(budget) +
                       " bytes (smaller chunks fit, or let the budget size them)");
    return p;
  }
  const std::int64_t cap =
      std::max<std::int64_t>(1, kMaxChunkLogits / std::max<std::int64_t>(1, q.V));
  const WorkspacePlan whole = plan_workspace(q, q.N, vocab_sharded);
  if (q.N <= cap && whole.total() <= budget) return whole;
  std::int64_t rows = per_row > 0 ? (budget - fixed) / per_row : q.N;
  // The cap never makes a plan fail or shrink below what one chunk of the whole batch gives:
  // where one chunk fits and the budget, not the cap, limits several (they can need more than
  // one: the cross-chunk dW accumulator).
  if (whole.total() <= budget && (p1.total() > budget || rows < std::min(cap, q.N))) return whole;
  if (p1.total() > budget)
    throw InputError(strategy + ": memory budget " + std::to_string(budget) +
                     " bytes is below the " + std::to_string(p1.total()) +
                     " bytes needed for one token per chunk (" + std::to_string(fixed) +
                     " fixed + " + std::to_string(per_row) + " per token)");
  rows = std::max<std::int64_t>(1, std::min({rows, q.N, cap}));
  // Balance: the same work in every chunk, in multiples of 128 tokens where that fits.
  const std::int64_t n_chunks = (q.N + rows - 1) / rows;
  std::int64_t balanced = (q.N + n_chunks - 1) / n_chunks;
  const std::int64_t rounded = (balanced + 127) / 128 * 128;
  if (rounded <= rows) balanced = rounded;
  return plan_workspace(q, std::min(balanced, q.N), vocab_sharded);
}

Workspace::Workspace(DeviceMemoryTracker& mem, const WorkspacePlan& p)
    : plan(p),
      logits(mem, p.logits, MemKind::extra, "chunk logits"),
      logits_f32(mem, p.logits_f32, MemKind::extra, "fp32 logits before rounding"),
      dz_f32(mem, p.dz_f32, MemKind::extra, "dz widened to fp32"),
      H_f32(mem, p.H_f32, MemKind::extra, "H chunk widened to fp32"),
      W_f32(mem, p.W_f32, MemKind::extra, "W widened to fp32"),
      dH_f32(mem, p.dH_f32, MemKind::extra, "fp32 dH chunk"),
      dW_acc(mem, p.dW_acc, MemKind::extra, "dW accumulator"),
      dW_tmp(mem, p.dW_tmp, MemKind::extra, "fp32 dW of one chunk"),
      db_acc(mem, p.db_acc, MemKind::extra, "db accumulator"),
      row_states(mem, p.row_states, MemKind::extra, "fused row states") {}

RowLossParams make_row_params(const LossSpec& s, std::int64_t V, DType accum) {
  RowLossParams p;
  p.V = V;
  p.ignore_index = s.ignore_index;
  p.scale = static_cast<float>(s.logit_scale);
  p.softcap = static_cast<float>(s.softcap);
  p.smoothing = s.label_smoothing > 0.0;
  p.one_minus_eps = static_cast<float>(1.0 - s.label_smoothing);
  p.eps_over_V = static_cast<float>(s.label_smoothing / static_cast<double>(V));
  p.zloss = s.z_loss > 0.0;
  p.lambda = static_cast<float>(s.z_loss);
  p.two_lambda = static_cast<float>(2.0 * s.z_loss);
  p.accum = accum;
  return p;
}

// ---- shared steps -----------------------------------------------------------------------------

namespace steps {

void begin(const DeviceRun& r, const DeviceContext& c, Workspace& ws) {
  if (ws.plan.W_f32 > 0)
    launch_convert(r.prob.input, r.prob.W, DType::fp32, ws.W_f32.get(), r.prob.V * r.prob.D,
                   c.stream);
  if (ws.plan.dW_acc > 0)
    XL_CUDA_CHECK(
        cudaMemsetAsync(ws.dW_acc.get(), 0, static_cast<std::size_t>(ws.plan.dW_acc), c.stream));
  if (ws.plan.db_acc > 0)
    XL_CUDA_CHECK(
        cudaMemsetAsync(ws.db_acc.get(), 0, static_cast<std::size_t>(ws.plan.db_acc), c.stream));
}

void* chunk_logits(const DeviceRun& r, const DeviceContext& c, Workspace& ws, std::int64_t r0,
                   std::int64_t rows) {
  const DeviceProblem& P = r.prob;
  const DType L = r.recipe.logits;
  if (!P.linear()) {
    const void* src = byte_ptr(P.logits, r0 * P.V * sz(P.input));
    if (P.input == L) return const_cast<void*>(src);  // read-only use (no in-place dz)
    launch_convert(P.input, src, L, ws.logits.get(), rows * P.V, c.stream);
    return ws.logits.get();
  }
  const void* Hc = byte_ptr(P.H, r0 * P.D * sz(P.input));
  const bool via_f32 = P.bias != nullptr || !gemm_output_direct(P.input, L);
  if (!via_f32) {
    gemm_logits(c.blas, P.input, Hc, P.W, rows, P.V, P.D, L, ws.logits.get());
  } else if (L == DType::fp32) {
    gemm_logits(c.blas, P.input, Hc, P.W, rows, P.V, P.D, DType::fp32, ws.logits.get());
    launch_round_rows(ws.logits.as<float>(), P.bias, rows, P.V, DType::fp32, ws.logits.get(),
                      c.stream);
  } else {
    gemm_logits(c.blas, P.input, Hc, P.W, rows, P.V, P.D, DType::fp32, ws.logits_f32.get());
    launch_round_rows(ws.logits_f32.as<float>(), P.bias, rows, P.V, L, ws.logits.get(), c.stream);
  }
  return ws.logits.get();
}

BackwardOperands backward_operands(const DeviceRun& r, const DeviceContext& c, Workspace& ws,
                                   const void* dz, std::int64_t r0, std::int64_t rows) {
  const DeviceProblem& P = r.prob;
  const DType L = r.recipe.logits;
  BackwardOperands o;
  o.op = backward_operand(r.recipe);
  o.dz = dz;
  if (o.op == DType::fp32 && L != DType::fp32) {
    launch_convert(L, dz, DType::fp32, ws.dz_f32.get(), rows * P.V, c.stream);
    o.dz = ws.dz_f32.get();
  }
  o.H = byte_ptr(P.H, r0 * P.D * sz(P.input));
  o.W = P.W;
  if (ws.plan.W_f32 > 0) {
    launch_convert(P.input, o.H, DType::fp32, ws.H_f32.get(), rows * P.D, c.stream);
    o.H = ws.H_f32.get();
    o.W = ws.W_f32.get();
  }
  return o;
}

void chunk_dH(const DeviceRun& r, const DeviceContext& c, Workspace& ws, const BackwardOperands& o,
              std::int64_t r0, std::int64_t rows) {
  const DType grad = r.recipe.grad;
  const std::int64_t V = r.prob.V, D = r.prob.D;
  // dH rows: complete over V in one GEMM, one rounding to grad.
  void* dH_rows = byte_ptr(r.out.dH, r0 * D * sz(grad));
  if (gemm_output_direct(o.op, grad)) {
    gemm_dH(c.blas, o.op, o.dz, o.W, rows, V, D, grad, dH_rows);
  } else {
    gemm_dH(c.blas, o.op, o.dz, o.W, rows, V, D, DType::fp32, ws.dH_f32.get());
    launch_round_rows(ws.dH_f32.as<float>(), nullptr, rows, D, grad, dH_rows, c.stream);
  }
}

void chunk_dW_db(const DeviceRun& r, const DeviceContext& c, Workspace& ws,
                 const BackwardOperands& o, const void* dz, std::int64_t rows,
                 std::int64_t chunk_index) {
  const DeviceProblem& P = r.prob;
  const DType L = r.recipe.logits, grad = r.recipe.grad, accum = r.recipe.accum;
  const std::int64_t V = P.V, D = P.D;
  if (ws.plan.n_chunks <= 1) {
    if (gemm_output_direct(o.op, grad)) {
      gemm_dW(c.blas, o.op, o.dz, o.H, rows, V, D, grad, r.out.dW, 0.0f);
    } else {
      gemm_dW(c.blas, o.op, o.dz, o.H, rows, V, D, DType::fp32, ws.dW_tmp.get(), 0.0f);
      launch_round_rows(ws.dW_tmp.as<float>(), nullptr, V, D, grad, r.out.dW, c.stream);
    }
  } else if (accum == DType::fp32) {
    void* acc = ws.plan.dW_acc > 0 ? ws.dW_acc.get() : r.out.dW;
    gemm_dW(c.blas, o.op, o.dz, o.H, rows, V, D, DType::fp32, acc, chunk_index == 0 ? 0.0f : 1.0f);
  } else {
    gemm_dW(c.blas, o.op, o.dz, o.H, rows, V, D, DType::fp32, ws.dW_tmp.get(), 0.0f);
    launch_accumulate(ws.dW_acc.as<float>(), ws.dW_tmp.as<float>(), V * D, accum, c.stream);
  }
  if (P.bias != nullptr && ws.plan.db_acc > 0)
    launch_db_accumulate(L, dz, rows, V, accum, ws.db_acc.as<float>(), c.stream);
}

void chunk_backward(const DeviceRun& r, const DeviceContext& c, Workspace& ws, const void* dz,
                    std::int64_t r0, std::int64_t rows, std::int64_t chunk_index) {
  const BackwardOperands o = backward_operands(r, c, ws, dz, r0, rows);
  chunk_dH(r, c, ws, o, r0, rows);
  chunk_dW_db(r, c, ws, o, dz, rows, chunk_index);
}

void finish(const DeviceRun& r, const DeviceContext& c, Workspace& ws) {
  const DType grad = r.recipe.grad;
  if (ws.plan.n_chunks > 1 && ws.plan.dW_acc > 0)
    launch_round_rows(ws.dW_acc.as<float>(), nullptr, r.prob.V, r.prob.D, grad, r.out.dW, c.stream);
  if (ws.plan.db_acc > 0 && r.out.db != nullptr)
    launch_round_rows(ws.db_acc.as<float>(), nullptr, 1, r.prob.V, grad, r.out.db, c.stream);
}

}  // namespace steps

// ---- token reduction ---------------------------------------------------------------------------

double reduce_tokens(const std::vector<float>& loss, const std::vector<float>& g_rows,
                     const LossSpec& s, DType accum, std::int64_t n_valid) {
  auto rnd = [accum](float v) { return static_cast<float>(round_to(v, accum)); };
  std::vector<float> a(loss.size());
  for (std::size_t i = 0; i < loss.size(); ++i)
    a[i] = s.reduction == Reduction::none && !g_rows.empty() ? rnd(g_rows[i] * loss[i]) : loss[i];
  std::size_t n = a.size();
  while (n > 1) {
    const std::size_t half = n / 2;
    for (std::size_t i = 0; i < half; ++i) a[i] = rnd(a[2 * i] + a[2 * i + 1]);
    if (n % 2 == 1) a[half] = a[n - 1];
    n = half + n % 2;
  }
  const float sum = a.empty() ? 0.0f : a[0];
  if (s.reduction != Reduction::mean) return sum;
  const std::int64_t count = s.mean_count(n_valid);  // the caller's normaliser, when given
  if (count == 0)
    return s.empty_mean == EmptyMean::nan ? std::numeric_limits<double>::quiet_NaN() : 0.0;
  return rnd(sum / static_cast<float>(count));
}

// ---- the interface -----------------------------------------------------------------------------

Status CudaStrategy::check_specific(const Problem&, const LossSpec&, const Recipe&) const {
  return Status::Ok();
}

Status CudaStrategy::can_implement(const Problem& p, const LossSpec& s, const Recipe& r) const {
  const DeviceInfo dev = query_device();
  if (!dev.available) return Status::NotSupported(dev.reason);
  for (DType t : {r.input, r.logits, r.accum, r.grad})
    if (!storage_dtype(t))
      return Status::NotSupported(name() + " (cuda): recipe " + r.name() +
                                  " has an fp64 stage; the GPU strategies store fp32/fp16/bf16");
  if (p.N < 1 || p.V < 1) return Status::NotSupported(name() + " (cuda): empty problem");
  if (r.input != p.input_dtype())
    return Status::NotSupported(name() + " (cuda): recipe input " +
                                std::string(to_string(r.input)) + " but the problem stores " +
                                std::string(to_string(p.input_dtype())));
  if (p.is_linear() && p.bias && !storage_dtype(p.bias->dtype()))
    return Status::NotSupported(name() + " (cuda): bias dtype " +
                                std::string(to_string(p.bias->dtype())) + " is not exact in fp32");
  return check_specific(p, s, r);
}

std::int64_t CudaStrategy::workspace_size(const RunRequest& req) const {
  const Problem& P = *req.problem;
  WorkspaceQuery q{
      P.N,        P.V,           P.D, P.input_dtype(), P.is_linear() && P.bias.has_value(),
      req.recipe, req.want_grads};
  return plan(q, req.memory_budget, req.chunk_tokens).total();
}

DeclaredArithmetic CudaStrategy::arithmetic(const Recipe&) const {
  DeclaredArithmetic a;
  a.vocab_order = ReductionOrder::blocked;
  a.block_threads = 256;
  a.token_order = ReductionOrder::pairwise;
  a.gemm_k_split = 1;
  a.note = "cuBLAS GemmEx_64, fp32 compute (no TF32); CE rows: 256 threads, groups of 8, tree";
  return a;
}

// ---- the set-up of a device run -----------------------------------------------------------------

namespace run_setup {

const Problem& checked_problem(const Strategy& s, const RunRequest& req, const std::string& who) {
  if (req.problem == nullptr) throw InputError(who + ": RunRequest without a problem");
  const Problem& P = *req.problem;
  req.spec.validate();
  P.validate(req.spec.ignore_index);
  const Status st = s.can_implement(P, req.spec, req.recipe);
  if (!st.ok()) throw InputError(who + " cannot run " + P.describe() + ": " + st.message);
  return P;
}

void check_upstream(const RunRequest& req, std::int64_t N, const std::string& who) {
  if (req.spec.reduction != Reduction::none || req.upstream.empty()) return;
  if (static_cast<std::int64_t>(req.upstream.size()) != N)
    throw InputError(who + ": upstream gradient has " + std::to_string(req.upstream.size()) +
                     " entries, expected N = " + std::to_string(N));
  for (std::size_t i = 0; i < req.upstream.size(); ++i)
    if (!std::isfinite(req.upstream[i]))
      throw InputError(who + ": upstream gradient [" + std::to_string(i) + "] is not finite");
}

std::vector<float> bias_floats(const Problem& P) {
  std::vector<float> bias_f;
  if (!P.is_linear() || !P.bias) return bias_f;
  bias_f.resize(static_cast<std::size_t>(P.V));
  for (std::int64_t j = 0; j < P.V; ++j)
    bias_f[static_cast<std::size_t>(j)] = static_cast<float>(P.bias->get(j));
  return bias_f;
}

RowGradScale grad_scale(const RunRequest& req, std::int64_t n_valid, std::vector<float>& g_rows) {
  RowGradScale g;
  if (req.spec.reduction == Reduction::none && !req.upstream.empty()) {
    g_rows.resize(req.upstream.size());
    for (std::size_t i = 0; i < g_rows.size(); ++i) g_rows[i] = static_cast<float>(req.upstream[i]);
  } else if (req.spec.reduction == Reduction::mean) {
    const std::int64_t n = req.spec.mean_count(n_valid);  // the caller's normaliser, when given
    g.g_scalar = n > 0 ? static_cast<float>(1.0 / static_cast<double>(n)) : 0.0f;
  } else {
    g.g_scalar = 1.0f;
  }
  return g;
}

DeviceRun make_device_run(const RunRequest& req, std::int64_t V, std::int64_t D,
                          std::int64_t chunk_tokens, std::int64_t n_valid) {
  DeviceRun r;
  r.spec = req.spec;
  r.recipe = req.recipe;
  r.want_grads = req.want_grads;
  r.memory_budget = req.memory_budget;
  r.chunk_tokens = chunk_tokens;
  r.vocab_splits = req.vocab_splits;
  r.prob.N = req.problem->N;
  r.prob.V = V;
  r.prob.D = D;
  r.prob.input = req.problem->input_dtype();
  r.prob.n_valid = n_valid;
  return r;
}

DeviceBuffer upload(DeviceMemoryTracker& mem, cudaStream_t stream, const void* src,
                    std::int64_t bytes, const char* what) {
  DeviceBuffer b(mem, bytes, MemKind::io, what);
  if (bytes > 0)
    XL_CUDA_CHECK(cudaMemcpyAsync(b.get(), src, static_cast<std::size_t>(bytes),
                                  cudaMemcpyHostToDevice, stream));
  return b;
}

RowBuffers upload_rows(DeviceMemoryTracker& mem, cudaStream_t stream, const Problem& P,
                       const std::vector<float>& g_rows, RowGradScale g, DeviceRun& r) {
  RowBuffers b;
  b.targets = upload(mem, stream, P.targets.data(), P.N * 8, "targets");
  r.prob.targets = static_cast<const std::int64_t*>(b.targets.get());
  r.g = g;
  if (!g_rows.empty()) {
    b.g = upload(mem, stream, g_rows.data(), P.N * 4, "upstream gradient");
    r.g.g_rows = b.g.as<float>();
  }
  return b;
}

OutputBuffers make_outputs(DeviceMemoryTracker& mem, cudaStream_t stream, DeviceRun& r,
                           bool has_bias, bool shard) {
  const auto output = [&](std::int64_t bytes, const char* what) {
    DeviceBuffer b(mem, bytes, MemKind::io, what);
    if (bytes > 0)
      XL_CUDA_CHECK(cudaMemsetAsync(b.get(), 0xFF, static_cast<std::size_t>(bytes), stream));
    return b;
  };
  const std::int64_t N = r.prob.N, V = r.prob.V, D = r.prob.D;
  const DType grad = r.recipe.grad;
  OutputBuffers o;
  o.loss = output(N * 4, "loss");
  o.lse = output(N * 4, "lse");
  r.out.loss = o.loss.as<float>();
  r.out.lse = o.lse.as<float>();
  if (!r.want_grads) return o;
  if (r.prob.linear()) {
    o.dH = output(N * D * sz(grad), "dH");
    o.dW = output(V * D * sz(grad), shard ? "dW shard" : "dW");
    r.out.dH = o.dH.get();
    r.out.dW = o.dW.get();
    if (has_bias) {
      o.db = output(V * sz(grad), shard ? "db shard" : "db");
      r.out.db = o.db.get();
    }
  } else {
    o.dz = output(N * V * sz(grad), shard ? "dz shard" : "dz");
    r.out.dz = o.dz.get();
  }
  return o;
}

}  // namespace run_setup

StrategyOutputs CudaStrategy::run(const RunRequest& req) const {
  const std::string who = name() + " (cuda)";
  const Problem& P = run_setup::checked_problem(*this, req, who);
  run_setup::check_upstream(req, P.N, who);
  const std::int64_t n_valid = P.count_valid(req.spec.ignore_index);
  const DType grad = req.recipe.grad;
  const bool linear = P.is_linear();

  DeviceMemoryTracker mem;
  OwnedStream stream;
  Blas blas(mem, stream.s, gemm_order());
  DeviceContext ctx{mem, blas, stream.s};

  auto upload = [&](const void* src, std::int64_t bytes, const char* what) {
    return run_setup::upload(mem, stream.s, src, bytes, what);
  };
  DeviceRun r = run_setup::make_device_run(req, P.V, linear ? P.D : 0, req.chunk_tokens, n_valid);

  DeviceBuffer dH_in, dW_in, dbias, dlogits;
  std::vector<float> bias_f;
  if (linear) {
    dH_in = upload(P.H.data(), static_cast<std::int64_t>(P.H.nbytes()), "H");
    dW_in = upload(P.W.data(), static_cast<std::int64_t>(P.W.nbytes()), "W");
    r.prob.H = dH_in.get();
    r.prob.W = dW_in.get();
    if (P.bias) {
      bias_f = run_setup::bias_floats(P);
      dbias = upload(bias_f.data(), P.V * 4, "bias");
      r.prob.bias = dbias.as<float>();
    }
  } else {
    dlogits = upload(P.logits.data(), static_cast<std::int64_t>(P.logits.nbytes()), "logits");
    r.prob.logits = dlogits.get();
  }
  // Upstream gradient per row.
  std::vector<float> g_host;
  const RowGradScale g = run_setup::grad_scale(req, n_valid, g_host);
  const run_setup::RowBuffers row_buffers = run_setup::upload_rows(mem, stream.s, P, g_host, g, r);
  const run_setup::OutputBuffers outs =
      run_setup::make_outputs(mem, stream.s, r, linear && P.bias.has_value(), false);
  const DeviceBuffer &o_loss = outs.loss, &o_lse = outs.lse, &o_dH = outs.dH, &o_dW = outs.dW,
                     &o_db = outs.db, &o_dz = outs.dz;

  OwnedEvent start, stop;
  XL_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  mem.reset_peak();
  XL_CUDA_CHECK(cudaEventRecord(start.e, stream.s));
  forward_backward(r, ctx);
  XL_CUDA_CHECK(cudaEventRecord(stop.e, stream.s));
  XL_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  float ms = 0.0f;
  XL_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e, stop.e));

  StrategyOutputs o;
  o.token_rows.resize(static_cast<std::size_t>(P.N));
  for (std::int64_t i = 0; i < P.N; ++i) o.token_rows[static_cast<std::size_t>(i)] = i;
  o.loss_dtype = req.recipe.accum;
  o.grad_dtype = grad;
  o.seconds = ms / 1000.0;
  o.peak_extra_bytes = mem.peak_extra();
  // The staging bytes and the doubles are HostArrays: their pages are zeroed in parallel (a
  // std::vector's are faulted in one by one on one thread: seconds at dW's size).
  auto download = [&](const DeviceBuffer& b, DType t, auto& out) {
    HostArray<unsigned char> raw(static_cast<std::size_t>(b.bytes()));
    if (b.bytes() > 0)
      XL_CUDA_CHECK(cudaMemcpy(raw.data(), b.get(), raw.size(), cudaMemcpyDeviceToHost));
    device_values_to_doubles(raw, t, out);
  };
  std::vector<float> loss_f(static_cast<std::size_t>(P.N));
  XL_CUDA_CHECK(cudaMemcpy(loss_f.data(), o_loss.get(), loss_f.size() * 4, cudaMemcpyDeviceToHost));
  download(o_loss, DType::fp32, o.loss);
  download(o_lse, DType::fp32, o.lse);
  if (req.want_grads) {
    if (linear) {
      download(o_dH, grad, o.dH);
      download(o_dW, grad, o.dW);
      if (P.bias) download(o_db, grad, o.db);
    } else {
      download(o_dz, grad, o.dz);
    }
  }
  o.reduced_loss = reduce_tokens(loss_f, g_host, req.spec, req.recipe.accum, n_valid);
  return o;
}

}  // namespace xentlab::gpu

// vocab_parallel: tensor parallelism over the LM head's vocabulary on NCCL. P = RunRequest::ranks
// ranks (≤ 0: 1), one GPU each (rank r on device r) driven by one host thread with its own stream,
// cuBLAS handle and workspace; the communicators come from ncclCommInitAll over devices 0 … P−1.
// Rank r holds H (replicated), the targets, and its shard [begin, end) of vocab_shards(V, P)
// (gpu/plans/vocab_shards.hpp) of W and b (or of the given logits' columns, logits problems). Token
// rows go in chunks as chunked's (plan_chunks on rank 0's shard, the largest: the memory budget is
// per rank; RunRequest::chunk_tokens when given), every rank with the same chunks. Per chunk:
//   1. the shard's logits (rows, |shard|) as chunked's chunk logits (GEMM, + bias, one rounding);
//   2. per row the maximum m_r of the kernel logits (ce_math.cuh: logit scale, softcap) over the
//      shard, and the target logit x_t from the rank that holds the target (0 elsewhere);
//      m = ncclAllReduce MAX of m_r in fp32 (exact);
//   3. per row s_r = Σ rnd_A(expf(x_j − m)) over the shard with the global m, and Σx for label
//      smoothing, in the row kernels' blocked order over the shard's columns (256 threads, groups
//      of 8, then the tree) in the accum dtype A; (s, Σx) = ncclAllReduce SUM in A (ncclFloat,
//      ncclHalf or ncclBfloat16: NCCL's order over ranks, exact for P ≤ 2 up to the one rounding
//      of the sum), and x_t = ncclAllReduce SUM in fp32 (exact: one rank contributes);
//   4. lse = rnd_A(m + logf(s)) and the loss as the row kernels form them; dz of the shard's
//      columns (launch_shard_dz_rows), in place of the logits;
//   5. dH_r = dz[:, shard]·W[shard] by cuBLAS into fp32, ncclAllReduce SUM in fp32, rounded to the
//      grad dtype once;
//   6. dW[shard], db[shard] from dz and the H chunk, accumulated across chunks exactly as chunked
//      (steps::chunk_dW_db, steps::finish on the shard); they never cross ranks.
// With P = 1 steps 1–4 and 6 are chunked's operations, so loss, lse, dz, dW and db equal chunked's
// bit for bit; dH too where chunked's dH GEMM writes fp32 (grad fp32, or an fp32 operand GEMM).
// Outputs: loss, lse and dH of rank 0 (every rank holds the same after the all-reduces), dW and db
// (and dz of logits problems) gathered from the shards in vocabulary order.
// peak_extra_bytes is per rank: the largest of the ranks' measured extra device bytes.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/steps.cuh"
#include "gpu/cuda/vocab_parallel.hpp"
#include "gpu/plans/vocab_shards.hpp"

#define XL_NCCL_CHECK(expr)                                                                 \
  do {                                                                                      \
    const ncclResult_t xl_nr_ = (expr);                                                     \
    if (xl_nr_ != ncclSuccess)                                                              \
      throw ::xentlab::DeviceError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                   ": " #expr " failed: " + ncclGetErrorString(xl_nr_));    \
  } while (0)

namespace xentlab::gpu {
namespace {

const char* const kName = "vocab_parallel";

std::int64_t sz(DType t) {
  return size_of(t);
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::fp32:
      return ncclFloat;
    case DType::fp16:
      return ncclHalf;
    case DType::bf16:
      return ncclBfloat16;
    default:
      break;
  }
  throw InputError(std::string(kName) + " (cuda): no NCCL type for " + std::string(to_string(t)));
}

/// Communicators of the ranks on `devices` (ncclCommInitAll): destroyed, or aborted after a run
/// that failed (which may leave a collective waiting for a rank that never joins it).
class Comms {
 public:
  explicit Comms(const std::vector<int>& devices) : comms_(devices.size(), nullptr) {
    XL_NCCL_CHECK(ncclCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()));
    try {
      connect(devices);
    } catch (...) {
      abort();
      throw;
    }
  }
  Comms(const Comms&) = delete;
  Comms& operator=(const Comms&) = delete;
  ~Comms() {
    for (ncclComm_t c : comms_)
      if (c != nullptr) (void)ncclCommDestroy(c);
  }
  /// Aborts every communicator (unblocking any collective in flight). Never throws.
  void abort() noexcept {
    for (ncclComm_t& c : comms_) {
      if (c != nullptr) (void)ncclCommAbort(c);
      c = nullptr;
    }
  }
  ncclComm_t operator[](std::size_t r) const { return comms_[r]; }

 private:
  /// NCCL sets up a communicator's connections at its first collective, where a rank can block
  /// waiting for its peers: one all-reduce of one float on every rank here, from this thread in
  /// one group, so that no run's first collective waits on a peer that failed before joining.
  void connect(const std::vector<int>& devices) {
    int current = 0;
    XL_CUDA_CHECK(cudaGetDevice(&current));
    std::vector<float*> buf(devices.size(), nullptr);
    const auto release = [&] {
      for (std::size_t i = 0; i < buf.size(); ++i)
        if (buf[i] != nullptr) {
          (void)cudaSetDevice(devices[i]);
          (void)cudaFree(buf[i]);
        }
      (void)cudaSetDevice(current);
    };
    try {
      for (std::size_t i = 0; i < devices.size(); ++i) {
        XL_CUDA_CHECK(cudaSetDevice(devices[i]));
        XL_CUDA_CHECK(cudaMalloc(&buf[i], sizeof(float)));
        XL_CUDA_CHECK(cudaMemset(buf[i], 0, sizeof(float)));
      }
      XL_NCCL_CHECK(ncclGroupStart());
      for (std::size_t i = 0; i < devices.size(); ++i)
        XL_NCCL_CHECK(ncclAllReduce(buf[i], buf[i], 1, ncclFloat, ncclSum, comms_[i], nullptr));
      XL_NCCL_CHECK(ncclGroupEnd());
      for (std::size_t i = 0; i < devices.size(); ++i) {
        XL_CUDA_CHECK(cudaSetDevice(devices[i]));
        XL_CUDA_CHECK(cudaDeviceSynchronize());
      }
    } catch (...) {
      release();
      throw;
    }
    release();
  }
  std::vector<ncclComm_t> comms_;
};

/// Thrown inside a rank's thread when another rank failed before the collectives began.
struct SetupAbandoned {};

/// One rank's chunk loop (steps 1–6 of the file comment) on c.stream with communicator `comm`.
/// r.prob is the rank's shard as a problem of sh.cols vocabulary rows (targets full-vocabulary
/// indices); V the full vocabulary; `ws` the rank's workspace (made before the setup barrier) with
/// the chunk size of every rank.
void rank_forward_backward(const DeviceRun& r, const DeviceContext& c, ncclComm_t comm,
                           std::int64_t V, ShardColumns sh, Workspace& ws) {
  const DeviceProblem& P = r.prob;
  const DType L = r.recipe.logits, A = r.recipe.accum, grad = r.recipe.grad;
  steps::begin(r, c, ws);
  // p.V is the full vocabulary: the targets' validity and ε/V of label smoothing.
  const RowLossParams rp = make_row_params(r.spec, V, A);
  const std::int64_t step = ws.plan.rows;
  float* const m = ws.row_states.as<float>();  // (step) fp32
  float* const x_t = m + step;                 // (step) fp32
  void* const sums = x_t + step;               // (2·step) of A: s, then Σx
  for (std::int64_t k = 0, r0 = 0; r0 < P.N; ++k, r0 += step) {
    const std::int64_t rows = std::min(step, P.N - r0);
    RowGradScale g = r.g;
    if (g.g_rows != nullptr) g.g_rows += r0;
    const std::int64_t* targets = P.targets + r0;
    void* z = steps::chunk_logits(r, c, ws, r0, rows);  // (rows, sh.cols) logits dtype
    launch_shard_row_max(L, z, rows, sh, targets, rp, m, x_t, c.stream);
    XL_NCCL_CHECK(
        ncclAllReduce(m, m, static_cast<std::size_t>(rows), ncclFloat, ncclMax, comm, c.stream));
    launch_shard_row_sums(L, z, rows, sh, m, rp, sums, c.stream);
    XL_NCCL_CHECK(ncclGroupStart());
    XL_NCCL_CHECK(ncclAllReduce(sums, sums, static_cast<std::size_t>(2 * rows), nccl_type(A),
                                ncclSum, comm, c.stream));
    XL_NCCL_CHECK(ncclAllReduce(x_t, x_t, static_cast<std::size_t>(rows), ncclFloat, ncclSum, comm,
                                c.stream));
    XL_NCCL_CHECK(ncclGroupEnd());
    float* const lse = r.out.lse + r0;
    launch_shard_row_loss(rows, targets, m, sums, x_t, rp, r.out.loss + r0, lse, c.stream);
    if (!r.want_grads) continue;
    if (!P.linear()) {
      launch_shard_dz_rows(L, z, L, grad, static_cast<char*>(r.out.dz) + r0 * sh.cols * sz(grad),
                           rows, sh, targets, lse, rp, g, c.stream);
      continue;
    }
    launch_shard_dz_rows(L, z, L, L, z, rows, sh, targets, lse, rp, g, c.stream);
    const steps::BackwardOperands o = steps::backward_operands(r, c, ws, z, r0, rows);
    float* const dH = ws.dH_f32.as<float>();
    gemm_dH(c.blas, o.op, o.dz, o.W, rows, P.V, P.D, DType::fp32, dH);
    XL_NCCL_CHECK(ncclAllReduce(dH, dH, static_cast<std::size_t>(rows * P.D), ncclFloat, ncclSum,
                                comm, c.stream));
    launch_round_rows(dH, nullptr, rows, P.D, grad,
                      static_cast<char*>(r.out.dH) + r0 * P.D * sz(grad), c.stream);
    steps::chunk_dW_db(r, c, ws, o, z, rows, k);
  }
  if (r.want_grads && P.linear()) steps::finish(r, c, ws);
}

/// What one rank hands back: raw device bytes of its outputs, its measurements, or its error.
struct RankResult {
  HostArray<unsigned char> loss, lse, dH, dW, db, dz;
  std::int64_t peak_extra = 0;
  float ms = 0.0f;
  std::exception_ptr error;
};

/// A run's plan, the same for every rank: the request checked, the shards, the chunk size of
/// rank 0's plan and the host values every rank uploads.
struct ShardPlan {
  std::string who;  ///< "vocab_parallel (cuda)"
  int P = 1;
  std::vector<VocabShard> shards;
  std::int64_t N = 0, V = 0, D = 0;
  bool linear = false, has_bias = false;
  DType input = DType::bf16, grad = DType::fp32;
  std::int64_t n_valid = 0;
  std::int64_t rows = 0;  ///< token rows a chunk, every rank
  std::vector<float> bias_f, g_host;
  RowGradScale g_scalar;
  WorkspaceQuery query(const RunRequest& req, const VocabShard& sh) const {
    return WorkspaceQuery{N, sh.size(), D, input, has_bias, req.recipe, req.want_grads};
  }
};

/// The ranks' rendezvous: the setup barrier (every rank allocates and uploads before any of them
/// enters a collective; when one fails there, none enters, so no collective waits for a rank
/// that never joins it), and the ranks' ends.
class RankSync {
 public:
  explicit RankSync(int ranks) : P_(ranks) {}
  /// A rank set up: waits for every other rank's set-up; throws SetupAbandoned when one failed
  /// before any collective (none is entered).
  void set_up(bool& past_barrier) {
    std::unique_lock<std::mutex> lk(mu_);
    ++set_up_;
    past_barrier = true;
    cv_.notify_all();
    cv_.wait(lk, [&] { return set_up_ + setup_failed_ == P_; });
    if (setup_failed_ > 0) throw SetupAbandoned{};
  }
  /// A rank's end, failed or not.
  void finish(int rank, bool error, bool past_barrier) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (error) {
        if (first_failed_rank_ < 0) first_failed_rank_ = rank;
        if (!past_barrier) ++setup_failed_;  // releases the ranks waiting at the barrier
        failed_ = failed_ || past_barrier;   // a failure among the collectives
      }
      ++finished_;
    }
    cv_.notify_all();
  }
  /// The threads of ranks `started` … P−1 could not start: they never reach the barrier, so
  /// they count as failed in setup and the started ranks return without a collective.
  void not_started(int started) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      setup_failed_ += P_ - started;
      finished_ += P_ - started;
      if (first_failed_rank_ < 0) first_failed_rank_ = started;
    }
    cv_.notify_all();
  }
  /// Waits for every rank's end or a failure among the collectives; true on such a failure.
  bool wait_end_or_failure() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return finished_ == P_ || failed_; });
    return failed_;
  }
  /// The first failure in time (its rank), the error reported: the others may only be its echo
  /// (a collective aborted because of it). −1 when none failed. Read after the threads joined.
  int first_failed_rank() const { return first_failed_rank_; }
  bool failed() const { return failed_; }

 private:
  const int P_;
  std::mutex mu_;
  std::condition_variable cv_;
  int finished_ = 0;
  bool failed_ = false;
  int set_up_ = 0, setup_failed_ = 0;
  int first_failed_rank_ = -1;
};

/// A rank's inputs on its device: H (replicated), its shard of W and of the bias, or its columns
/// of the given logits; r.prob's pointers set.
struct ShardInputs {
  DeviceBuffer H, W, bias, logits;
};
ShardInputs upload_shard(const ShardPlan& s, const Problem& Pb, const VocabShard& sh,
                         DeviceMemoryTracker& mem, cudaStream_t stream, DeviceRun& r) {
  const std::int64_t N = s.N, V = s.V, D = s.D, Vs = sh.size();
  const DType input = s.input;
  const auto upload = [&](const void* src, std::int64_t bytes, const char* what) {
    return run_setup::upload(mem, stream, src, bytes, what);
  };
  ShardInputs in;
  if (s.linear) {
    in.H = upload(Pb.H.data(), static_cast<std::int64_t>(Pb.H.nbytes()), "H");
    in.W = upload(static_cast<const char*>(Pb.W.data()) + sh.begin * D * sz(input),
                  Vs * D * sz(input), "W shard");
    r.prob.H = in.H.get();
    r.prob.W = in.W.get();
    if (s.has_bias) {
      in.bias = upload(s.bias_f.data() + sh.begin, Vs * 4, "bias shard");
      r.prob.bias = in.bias.as<float>();
    }
  } else {
    // The shard's columns of the given logits, (N, Vs).
    in.logits = DeviceBuffer(mem, N * Vs * sz(input), MemKind::io, "logits shard");
    XL_CUDA_CHECK(cudaMemcpy2DAsync(
        in.logits.get(), static_cast<std::size_t>(Vs * sz(input)),
        static_cast<const char*>(Pb.logits.data()) + sh.begin * sz(input),
        static_cast<std::size_t>(V * sz(input)), static_cast<std::size_t>(Vs * sz(input)),
        static_cast<std::size_t>(N), cudaMemcpyHostToDevice, stream));
    r.prob.logits = in.logits.get();
  }
  return in;
}

/// Rank `rank` on device `rank`: set-up (uploads, outputs, workspace), the setup barrier, the
/// chunk loop timed, then the downloads of its outputs (loss, lse and dH from rank 0 only).
void run_rank(const RunRequest& req, const ShardPlan& s, int rank, ncclComm_t comm, RankSync& sync,
              RankResult& out, bool& past_barrier) {
  XL_CUDA_CHECK(cudaSetDevice(rank));
  const VocabShard sh = s.shards[static_cast<std::size_t>(rank)];
  const std::int64_t Vs = sh.size();
  DeviceMemoryTracker mem;
  OwnedStream stream;
  Blas blas(mem, stream.s);
  const DeviceContext ctx{mem, blas, stream.s};
  DeviceRun r = run_setup::make_device_run(req, Vs, s.D, s.rows, s.n_valid);
  const ShardInputs in = upload_shard(s, *req.problem, sh, mem, stream.s, r);
  const run_setup::RowBuffers row_buffers =
      run_setup::upload_rows(mem, stream.s, *req.problem, s.g_host, s.g_scalar, r);
  const run_setup::OutputBuffers o = run_setup::make_outputs(mem, stream.s, r, s.has_bias, true);
  const WorkspacePlan rank_plan = plan_workspace(s.query(req, sh), s.rows, true);
  Workspace ws(mem, rank_plan);

  OwnedEvent start, stop;
  XL_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  sync.set_up(past_barrier);
  mem.reset_peak();
  XL_CUDA_CHECK(cudaEventRecord(start.e, stream.s));
  rank_forward_backward(r, ctx, comm, s.V, ShardColumns{sh.begin, Vs}, ws);
  XL_CUDA_CHECK(cudaEventRecord(stop.e, stream.s));
  XL_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  XL_CUDA_CHECK(cudaEventElapsedTime(&out.ms, start.e, stop.e));
  out.peak_extra = mem.peak_extra();
  const auto download = [](const DeviceBuffer& b, HostArray<unsigned char>& raw) {
    raw.resize(static_cast<std::size_t>(b.bytes()));
    if (b.bytes() > 0)
      XL_CUDA_CHECK(cudaMemcpy(raw.data(), b.get(), raw.size(), cudaMemcpyDeviceToHost));
  };
  if (rank == 0) {
    download(o.loss, out.loss);
    download(o.lse, out.lse);
    download(o.dH, out.dH);
  }
  download(o.dW, out.dW);
  download(o.db, out.db);
  download(o.dz, out.dz);
}

/// The outputs from the ranks' results: loss, lse and dH of rank 0 (every rank holds the same
/// after the all-reduces), dW and db (and dz of logits problems) gathered from the shards in
/// vocabulary order, the time and the extra bytes of the slowest and largest rank.
StrategyOutputs gather(const RunRequest& req, const ShardPlan& s,
                       const std::vector<RankResult>& res) {
  const std::int64_t N = s.N, V = s.V;
  const DType grad = s.grad;
  StrategyOutputs o;
  o.token_rows.resize(static_cast<std::size_t>(N));
  std::iota(o.token_rows.begin(), o.token_rows.end(), std::int64_t{0});
  o.loss_dtype = req.recipe.accum;
  o.grad_dtype = grad;
  for (const RankResult& rr : res) {
    o.seconds = std::max(o.seconds, rr.ms / 1000.0);
    o.peak_extra_bytes = std::max(o.peak_extra_bytes, rr.peak_extra);  // per rank
  }
  const RankResult& r0 = res[0];
  device_values_to_doubles(r0.loss, DType::fp32, o.loss);
  device_values_to_doubles(r0.lse, DType::fp32, o.lse);
  if (req.want_grads) {
    if (s.linear) {
      device_values_to_doubles(r0.dH, grad, o.dH);
      // The shards are contiguous in rank order: dW and db are their concatenation.
      HostArray<unsigned char> dW, db;
      for (const RankResult& rr : res) {
        dW.insert(dW.end(), rr.dW.begin(), rr.dW.end());
        db.insert(db.end(), rr.db.begin(), rr.db.end());
      }
      device_values_to_doubles(dW, grad, o.dW);
      if (s.has_bias) device_values_to_doubles(db, grad, o.db);
    } else {
      const std::size_t e = static_cast<std::size_t>(sz(grad));
      HostArray<unsigned char> dz(static_cast<std::size_t>(N * V) * e);
      for (int rank = 0; rank < s.P; ++rank) {
        const VocabShard& sh = s.shards[static_cast<std::size_t>(rank)];
        const auto cols = static_cast<std::size_t>(sh.size());
        const HostArray<unsigned char>& part = res[static_cast<std::size_t>(rank)].dz;
        for (std::int64_t i = 0; i < N; ++i)
          std::memcpy(dz.data() + (static_cast<std::size_t>(i * V + sh.begin)) * e,
                      part.data() + static_cast<std::size_t>(i) * cols * e, cols * e);
      }
      device_values_to_doubles(dz, grad, o.dz);
    }
  }
  std::vector<float> loss_f(static_cast<std::size_t>(N));
  std::memcpy(loss_f.data(), r0.loss.data(), loss_f.size() * 4);
  o.reduced_loss = reduce_tokens(loss_f, s.g_host, req.spec, req.recipe.accum, s.n_valid);
  return o;
}

class VocabParallelStrategy final : public CudaStrategy {
 public:
  std::string name() const override { return kName; }

  /// The plan of one rank whose shard is q.V vocabulary rows (the budget is per rank).
  WorkspacePlan plan(const WorkspaceQuery& q, std::int64_t budget,
                     std::int64_t chunk_tokens) const override {
    return plan_chunks(q, budget, chunk_tokens, name(), true);
  }

  /// Extra device bytes of the largest rank (rank 0's shard).
  std::int64_t workspace_size(const RunRequest& req) const override {
    const Problem& P = *req.problem;
    const std::vector<VocabShard> shards = vocab_shards(P.V, req.ranks > 0 ? req.ranks : 1);
    const WorkspaceQuery q{P.N,
                           shards[0].size(),
                           P.is_linear() ? P.D : 0,
                           P.input_dtype(),
                           P.is_linear() && P.bias.has_value(),
                           req.recipe,
                           req.want_grads};
    return plan(q, req.memory_budget, req.chunk_tokens).total();
  }

  DeclaredArithmetic arithmetic(const Recipe& r) const override {
    DeclaredArithmetic a = CudaStrategy::arithmetic(r);
    a.note =
        "cuBLAS GemmEx_64, fp32 compute (no TF32); per vocabulary shard: CE rows 256 threads, "
        "groups of 8, tree; NCCL all-reduce MAX (fp32) of the row max, SUM of sum-exp and Σx "
        "(accum dtype) and of dH (fp32)";
    return a;
  }
  Status can_run_ranks(std::int64_t ranks) const override {
    if (ranks > std::numeric_limits<int>::max())
      return Status::NotSupported("ranks " + std::to_string(ranks) + " is past the int range");
    return vocab_parallel_ranks_supported(static_cast<int>(ranks));
  }
  /// The local part: chunked's per-rank steps only (RunRequest::local_strategy empty or
  /// "chunked"); naive, checkpointed and fused local parts compose in the CPU emulation only.
  Status can_run_local(std::string_view local) const override {
    if (local.empty() || local == kDefaultLocalStrategy) return Status::Ok();
    return Status::NotSupported(std::string(kName) + " (cuda): local part '" + std::string(local) +
                                "' is not built on CUDA; each rank runs chunked's steps (the CPU "
                                "emulation, --backend cpu, composes naive, chunked, checkpointed "
                                "and fused)");
  }
  /// The declaration of one run: the ranks' P charged by the bound (vocab_ranks; the cross-rank
  /// additions in NCCL's order, any order declared).
  DeclaredArithmetic run_arithmetic(const RunRequest& req) const override {
    DeclaredArithmetic a = arithmetic(req.recipe);
    a.vocab_ranks = req.ranks > 0 ? req.ranks : 1;
    return a;
  }

  /// One rank on the current device (the device-level entry point: the benchmark's timing).
  void forward_backward(const DeviceRun& r, const DeviceContext& c) const override {
    int dev = 0;
    XL_CUDA_CHECK(cudaGetDevice(&dev));
    const DeviceProblem& P = r.prob;
    const WorkspaceQuery q = workspace_query(r);
    const WorkspacePlan p = plan(q, r.memory_budget, r.chunk_tokens);
    std::lock_guard<std::mutex> lock(mu_);
    Comms& comms = comms_for({dev});
    Workspace ws(c.mem, p);
    rank_forward_backward(r, c, comms[0], P.V, ShardColumns{0, P.V}, ws);
  }

  StrategyOutputs run(const RunRequest& req) const override;

 private:
  /// The request checked (InputError naming the fault), its shards, rank 0's chunk size and the
  /// host values every rank uploads.
  ShardPlan plan_shards(const RunRequest& req) const;
  /// The communicators of `devices`, made at the first use and kept (mu_ held).
  Comms& comms_for(const std::vector<int>& devices) const {
    auto it = comms_.find(devices);
    if (it == comms_.end()) it = comms_.emplace(devices, std::make_unique<Comms>(devices)).first;
    return *it->second;
  }
  /// One run at a time per object: the communicators are shared by its runs.
  mutable std::mutex mu_;
  mutable std::map<std::vector<int>, std::unique_ptr<Comms>> comms_;
};

ShardPlan VocabParallelStrategy::plan_shards(const RunRequest& req) const {
  ShardPlan s;
  s.who = name() + " (cuda)";
  const std::string& who = s.who;
  const Problem& Pb = run_setup::checked_problem(*this, req, who);
  s.P = req.ranks > 0 ? req.ranks : 1;
  const Status local_ok = can_run_local(req.local_strategy);
  if (!local_ok.ok()) throw InputError(local_ok.message);
  const Status ranks_ok = vocab_parallel_ranks_supported(s.P);
  if (!ranks_ok.ok()) throw InputError(who + " cannot run: " + ranks_ok.message);
  try {
    s.shards = vocab_shards(Pb.V, s.P);
  } catch (const InputError& e) {
    throw InputError(who + ": " + e.what());
  }
  run_setup::check_upstream(req, Pb.N, who);
  s.N = Pb.N;
  s.V = Pb.V;
  s.linear = Pb.is_linear();
  s.D = s.linear ? Pb.D : 0;
  s.input = Pb.input_dtype();
  s.grad = req.recipe.grad;
  s.n_valid = Pb.count_valid(req.spec.ignore_index);
  s.has_bias = s.linear && Pb.bias.has_value();

  // Every rank processes the chunks of rank 0's plan (its shard is the largest): InputError here,
  // before any device work, when the budget cannot hold one token.
  s.rows = plan(s.query(req, s.shards[0]), req.memory_budget, req.chunk_tokens).rows;
  s.bias_f = run_setup::bias_floats(Pb);
  s.g_scalar = run_setup::grad_scale(req, s.n_valid, s.g_host);
  return s;
}

StrategyOutputs VocabParallelStrategy::run(const RunRequest& req) const {
  const ShardPlan s = plan_shards(req);
  const int P = s.P;
  std::lock_guard<std::mutex> run_lock(mu_);
  std::vector<int> devices(static_cast<std::size_t>(P));
  std::iota(devices.begin(), devices.end(), 0);
  Comms& comms = comms_for(devices);

  std::vector<RankResult> res(static_cast<std::size_t>(P));
  RankSync sync(P);
  const auto rank_main = [&](int rank) {
    RankResult& out = res[static_cast<std::size_t>(rank)];
    bool past_barrier = false;
    try {
      run_rank(req, s, rank, comms[static_cast<std::size_t>(rank)], sync, out, past_barrier);
    } catch (const SetupAbandoned&) {
      // Not a failure of this rank: the one that failed is reported.
    } catch (...) {
      out.error = std::current_exception();
    }
    sync.finish(rank, out.error != nullptr, past_barrier);
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(P));
  try {
    for (int rank = 0; rank < P; ++rank) threads.emplace_back(rank_main, rank);
  } catch (...) {
    // A thread that could not start never reaches the barrier: count it as failed in setup, so
    // the started ranks return without a collective, then join them.
    sync.not_started(static_cast<int>(threads.size()));
    for (std::thread& t : threads) t.join();
    throw DeviceError(s.who + ": could not start the host thread of rank " +
                      std::to_string(threads.size()));
  }
  // A rank that fails after the barrier may leave the others waiting in a collective (in their
  // stream): abort the communicators to release them.
  if (sync.wait_end_or_failure()) comms.abort();
  for (std::thread& t : threads) t.join();
  const int first_failed_rank = sync.first_failed_rank();
  if (first_failed_rank >= 0) {
    if (sync.failed()) comms_.erase(devices);  // aborted: made anew at the next run
    const RankResult& first = res[static_cast<std::size_t>(first_failed_rank)];
    try {
      std::rethrow_exception(first.error);
    } catch (const InputError& e) {
      throw InputError(s.who + ", rank " + std::to_string(first_failed_rank) + ": " + e.what());
    } catch (const DeviceError& e) {
      throw DeviceError(s.who + ", rank " + std::to_string(first_failed_rank) + ": " + e.what());
    }
  }
  return gather(req, s, res);
}

}  // namespace

std::unique_ptr<Strategy> make_cuda_vocab_parallel() {
  return std::make_unique<VocabParallelStrategy>();
}

Status vocab_parallel_ranks_supported(int ranks) {
  const int P = ranks > 0 ? ranks : 1;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::NotSupported(std::string(kName) + " (cuda): " + std::to_string(P) +
                                " ranks need " + std::to_string(P) +
                                " CUDA devices, none is usable: " + cudaGetErrorString(e));
  }
  if (P > count)
    return Status::NotSupported(
        std::string(kName) + " (cuda): " + std::to_string(P) + " ranks need " + std::to_string(P) +
        " CUDA devices (one per rank), this machine has " + std::to_string(count));
  return Status::Ok();
}

int nccl_version() {
  int v = 0;
  XL_NCCL_CHECK(ncclGetVersion(&v));
  return v;
}

}  // namespace xentlab::gpu

// `xentlab bench`, the measurement: every registered CUDA strategy × recipe on device-generated
// inputs, timed and memory-tracked (timing.hpp), and checked on sampled token rows against the
// certified CPU reference. Method: docs/benchmarks.md, "xentlab bench".
//
// Accuracy, exactly:
//  - S token rows are sampled (reference/reference.hpp sample_rows, seed); their H rows and targets
//    form the sub-problem (S, V, D), whose certified reference (reduction mean over S) is computed
//    once per input dtype, with dW on J sampled vocabulary rows.
//  - loss, lse: the full-size run's per-token values at the S rows vs the reference's (the same
//    quantities: a row's loss does not depend on the other rows).
//  - mean loss over the S rows: those S fp32 losses reduced as the strategy's host wrapper reduces
//    tokens (gpu::reduce_tokens: pairwise in the accum dtype, then / S) vs the reference's mean
//    over the sub-problem; relative error.
//  - dH: the full-size run's dH rows (gradient scale fp32(1/N)) vs the reference's rows rescaled
//    from 1/S to 1/N in double (a relative perturbation ≤ 2^-53).
//  - dW: a second run of the same strategy and recipe on the sub-problem (scale fp32(1/S)), with as
//    many chunks as the full-size run had, up to one per row, so that the cross-chunk accumulation
//    is exercised; compared on the J vocabulary rows. Labelled "dW (sub-problem)" everywhere.
// The judge (judge/sampled_check.hpp assess_sampled_run) forms every error — normwise relative,
// ErrorStats::normwise_rel_err (‖out − ref‖₂/‖ref‖₂; for the mean loss |out − ref|/|ref|) — and
// holds each output to the a-priori bound of the strategy's declared arithmetic with the audit's
// policy: a run beyond a bound is an `incorrect` row.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "datasets/problem.hpp"
#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/steps.cuh"
#include "gpu/plans/vocab_shards.hpp"
#include "gpu/registry.hpp"
#include "harness/bench/timing.hpp"
#include "judge/sampled_check.hpp"
#include "numerics/error.hpp"
#include "numerics/memory.hpp"
#include "numerics/version.hpp"
#include "reference/reference.hpp"

namespace xentlab::bench {
namespace {

using gpu::DeviceBuffer;
using gpu::DeviceMemoryTracker;
using gpu::MemKind;

const void* at(const void* p, std::int64_t bytes) {
  return static_cast<const char*>(p) + bytes;
}
void* at(void* p, std::int64_t bytes) {
  return static_cast<char*>(p) + bytes;
}

/// n device values of dtype t at p → exact doubles (through a host Tensor's conversion).
void download(const void* p, std::int64_t n, DType t, std::vector<double>& out) {
  Tensor host(t, {n}, "download");
  if (n > 0) XL_CUDA_CHECK(cudaMemcpy(host.data(), p, host.nbytes(), cudaMemcpyDeviceToHost));
  const std::size_t first = out.size();
  out.resize(first + static_cast<std::size_t>(n));
  host.read(0, n, out.data() + first);
}

/// Rows `rows` (each `cols` values of dtype t) of a row-major device matrix → doubles.
std::vector<double> download_rows(const void* p, const std::vector<std::int64_t>& rows,
                                  std::int64_t cols, DType t) {
  std::vector<double> out;
  out.reserve(rows.size() * static_cast<std::size_t>(cols));
  bool leading = true;  // rows 0, 1, …, n−1: one copy
  for (std::size_t k = 0; k < rows.size() && leading; ++k)
    leading = rows[k] == static_cast<std::int64_t>(k);
  if (leading) {
    download(p, static_cast<std::int64_t>(rows.size()) * cols, t, out);
    return out;
  }
  for (std::int64_t i : rows) download(at(p, i * cols * size_of(t)), cols, t, out);
  return out;
}

std::vector<float> download_floats(const float* p, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  if (n > 0) XL_CUDA_CHECK(cudaMemcpy(v.data(), p, v.size() * 4, cudaMemcpyDeviceToHost));
  return v;
}

/// The inputs of one input dtype on the device (copy 0 generated, the others copied from it).
struct Inputs {
  DeviceMemoryTracker mem;
  std::vector<DeviceBuffer> buffers;
  std::vector<InputSet> copies;
};

/// The sub-problem of the sampled rows and its reference.
struct SampleCheck {
  std::vector<std::int64_t> rows;  ///< sampled token rows, sorted
  DeviceBuffer H, targets;         ///< the sub-problem's inputs on the device
  Problem sub;                     ///< the sub-problem on the host (the judge's bounds read it)
  ReferenceResult ref;
  bool ok = false;
  std::string why;  ///< when !ok
};

class Runner {
 public:
  Runner(const BenchOptions& o, const std::function<void(const std::string&)>& progress)
      : o_(o), progress_(progress) {}

  BenchReport run() {
    const DeviceDescription dev = describe_device();
    if (!dev.available) throw DeviceError("no CUDA device: " + dev.reason);
    BenchReport rep;
    rep.options = o_;
    rep.meta = dev.meta;
    rep.meta.date_utc = now_utc();
    rep.meta.xentlab_version = kVersion;
    rep.meta.sample_rows = o_.sample_rows;
    rep.meta.vocab_rows = o_.sample_rows > 0 ? o_.vocab_rows : 0;

    // Without --strategies the default set; named, any row (vocab_parallel runs only when named).
    std::vector<std::unique_ptr<Strategy>> all = make_strategies(
        Backend::cuda, o_.strategies.empty() ? StrategySet::default_set : StrategySet::all);
    std::vector<const gpu::CudaStrategy*> strategies;
    for (const auto& s : all) {
      auto* cs = dynamic_cast<const gpu::CudaStrategy*>(s.get());
      if (cs == nullptr) continue;
      if (o_.strategies.empty() ||
          std::find(o_.strategies.begin(), o_.strategies.end(), cs->name()) != o_.strategies.end())
        strategies.push_back(cs);
    }
    if (strategies.empty()) throw InputError("no CUDA strategy to run (check --strategies)");

    // Every input dtype's inputs must fit before anything is measured (InputError: exit 2, no
    // measurement lost). Later problems of one input dtype become its rows (run_input_dtype_rows).
    std::vector<DType> inputs_seen;
    for (const Recipe& r : o_.recipes)
      if (std::find(inputs_seen.begin(), inputs_seen.end(), r.input) == inputs_seen.end())
        inputs_seen.push_back(r.input);
    for (DType input : inputs_seen) check_inputs_fit(input, rep.meta.l2_bytes);
    for (DType input : inputs_seen) check_host_fits(input);

    say("measuring the cuBLAS bf16 GEMM rate (8192^3)");
    rep.meta.gemm_tflops = cublas_bf16_gemm_tflops();
    say(fmt::format("cuBLAS bf16 GEMM: {:.1f} TFLOP/s", rep.meta.gemm_tflops));
    say("measuring it sustained (60 GEMMs back to back; 3 timed regions after an untimed one)");
    rep.meta.gemm_sustained_tflops = cublas_bf16_gemm_sustained_tflops();
    say(fmt::format("cuBLAS bf16 GEMM sustained: {:.1f} TFLOP/s", rep.meta.gemm_sustained_tflops));

    total_ = static_cast<int>(strategies.size() * o_.recipes.size());
    for (DType input : inputs_seen) run_input_dtype_rows(input, strategies, rep);

    // Rows in the order of --recipes, strategies in registry order within a recipe.
    std::stable_sort(rep.rows.begin(), rep.rows.end(), [&](const BenchRow& a, const BenchRow& b) {
      return recipe_index(a.recipe) < recipe_index(b.recipe);
    });
    fill_relative_throughput(rep.rows);
    return rep;
  }

 private:
  void say(const std::string& s) const {
    if (progress_) progress_(s);
  }
  std::size_t recipe_index(const std::string& name) const {
    for (std::size_t i = 0; i < o_.recipes.size(); ++i)
      if (o_.recipes[i].name() == name) return i;
    return o_.recipes.size();
  }

  /// InputError when the inputs of one input dtype (all their copies) and fp32-sized gradients do
  /// not fit in the device's free memory.
  void check_inputs_fit(DType input, std::int64_t l2_bytes) const {
    const std::int64_t N = o_.N, V = o_.V, D = o_.D;
    const std::int64_t in_bytes = o_.input_bytes(input);
    const int copies = rotation_copies(in_bytes, l2_bytes);
    std::size_t free_b = 0, total_b = 0;
    XL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const std::int64_t need = in_bytes * copies + 2 * N * 4 + (N * D + V * D) * 4;
    if (need > static_cast<std::int64_t>(free_b))
      throw InputError(fmt::format(
          "the {} inputs ({} copies) and fp32-sized gradients need {}; the device has {} free",
          to_string(input), copies, format_bytes(need), format_bytes(std::int64_t(free_b))));
  }

  /// InputError (exit 2, before anything is measured) when the host side of the sampled-row
  /// check would not fit the memory available now: W and the sampled rows of H copied to the host,
  /// the certified reference of the sampled rows at its largest (reference_peak_bytes), and per
  /// run the downloaded loss and lse (N floats each), the sampled dH and dW rows and their
  /// a-priori bounds as doubles.
  void check_host_fits(DType input) const {
    if (o_.sample_rows <= 0) return;
    const std::int64_t S = std::min(o_.N, o_.sample_rows), V = o_.V, D = o_.D;
    const std::int64_t J = std::min(V, o_.vocab_rows);
    const double isz = size_of(input);
    ReferenceOptions ro;
    ro.want_db = false;
    const double s = static_cast<double>(S), j = static_cast<double>(J), d = static_cast<double>(D);
    MemoryEstimate m;
    m.add("W and the sampled rows of H on the host",
          isz * (static_cast<double>(V) * d + s * d) + 8.0 * s);
    m.add("the reference of the sampled rows", reference_peak_bytes(S, V, D, J, ro));
    m.add("a run's downloaded outputs and their bounds",
          4.0 * 2.0 * static_cast<double>(o_.N) + 8.0 * 2.0 * (s * d + j * d) +
              8.0 * (s * d + 2.0 * j * d + 2.0 * j + 4.0 * s));
    check_memory_estimate(
        m, MemoryBudget::from(0),
        fmt::format("the sampled-row check of {} inputs ({} token rows, {} vocabulary rows)",
                    to_string(input), S, J),
        "check fewer rows (--sample-rows, --vocab-rows; 0 sample rows: no check) on a machine "
        "with more memory");
  }

  /// run_input_dtype, with a failure outside the per-row measurement (the inputs no longer fit,
  /// a CUDA error while generating them or preparing the check) turned into rows: every strategy
  /// × recipe of this input dtype not measured yet gets a does-not-fit (InputError) or failed
  /// (DeviceError) row with the message, and the rows measured so far are kept.
  void run_input_dtype_rows(DType input, const std::vector<const gpu::CudaStrategy*>& strategies,
                            BenchReport& rep) {
    RowStatus status = RowStatus::failed;
    std::string message;
    try {
      run_input_dtype(input, strategies, rep);
      return;
    } catch (const InputError& e) {
      status = RowStatus::does_not_fit;
      message = e.what();
    } catch (const DeviceError& e) {
      message = e.what();
    }
    say(fmt::format("{} inputs: {}: {}", to_string(input), to_string(status), message));
    for (const Recipe& recipe : o_.recipes) {
      if (recipe.input != input) continue;
      for (const gpu::CudaStrategy* cs : strategies) {
        const bool have = std::any_of(rep.rows.begin(), rep.rows.end(), [&](const BenchRow& r) {
          return r.strategy == cs->name() && r.recipe == recipe.name();
        });
        if (have) continue;
        BenchRow row;
        row.strategy = cs->name();
        row.recipe = recipe.name();
        row.status = status;
        row.message = message;
        rep.rows.push_back(row);
      }
    }
  }

  void run_input_dtype(DType input, const std::vector<const gpu::CudaStrategy*>& strategies,
                       BenchReport& rep) {
    const std::int64_t N = o_.N, V = o_.V, D = o_.D, isz = size_of(input);
    const std::int64_t in_bytes = o_.input_bytes(input);
    const int copies = rotation_copies(in_bytes, rep.meta.l2_bytes);
    rep.meta.input_copies = std::max(rep.meta.input_copies, copies);
    check_inputs_fit(input, rep.meta.l2_bytes);  // again: other processes may have taken memory
    say(fmt::format("generating {} inputs N={} V={} D={} ({} per copy, {} copies rotated)",
                    to_string(input), N, V, D, format_bytes(in_bytes), copies));
    Inputs in;
    for (int k = 0; k < copies; ++k) {
      in.buffers.emplace_back(in.mem, N * D * isz, MemKind::io, "H");
      in.buffers.emplace_back(in.mem, V * D * isz, MemKind::io, "W");
      in.buffers.emplace_back(in.mem, N * 8, MemKind::io, "targets");
      const auto& b = in.buffers;
      const std::size_t h = b.size() - 3, w = b.size() - 2, t = b.size() - 1;
      if (k == 0) {
        fill_normal(input, b[h].get(), N * D, 1.0, o_.seed);
        fill_normal(input, b[w].get(), V * D, 2.0 / std::sqrt(double(D)), o_.seed + 1);
        fill_targets(b[t].as<std::int64_t>(), N, V, o_.seed + 2);
      } else {
        for (std::size_t j = 0; j < 3; ++j)
          XL_CUDA_CHECK(cudaMemcpy(b[h + j].get(), b[j].get(),
                                   static_cast<std::size_t>(b[j].bytes()),
                                   cudaMemcpyDeviceToDevice));
      }
      in.copies.push_back({b[h].get(), b[w].get(), b[t].as<std::int64_t>()});
    }
    XL_CUDA_CHECK(cudaDeviceSynchronize());

    SampleCheck chk;
    if (o_.sample_rows > 0) prepare_check(input, in.copies[0], chk);

    for (const Recipe& recipe : o_.recipes) {
      if (recipe.input != input) continue;
      const DType g = recipe.grad;
      const std::int64_t gsz = size_of(g);
      DeviceMemoryTracker omem;
      DeviceBuffer loss(omem, N * 4, MemKind::io, "loss"), lse(omem, N * 4, MemKind::io, "lse");
      DeviceBuffer dH(omem, N * D * gsz, MemKind::io, "dH"),
          dW(omem, V * D * gsz, MemKind::io, "dW");
      Outputs out{&loss, &lse, &dH, &dW, in_bytes + N * 8 + (N * D + V * D) * gsz};
      // The recipe's strategies: planned one by one, timed interleaved (time_interleaved), then
      // each run once more into the outputs and checked.
      std::vector<Pending> pending;
      for (const gpu::CudaStrategy* cs : strategies) {
        ++done_;
        BenchRow row;
        Pending p;
        try {
          if (prepare_row(*cs, recipe, in, out, row, p)) {
            p.row = rep.rows.size();
            pending.push_back(std::move(p));
            row.status = RowStatus::failed;  // until finish_row fills it
            row.message = "not timed";
          }
        } catch (const DeviceError& e) {  // a CUDA failure outside the timed runs: a row too
          failed_row(row, out, e.what());
        }
        rep.rows.push_back(row);
      }
      if (pending.empty()) continue;
      std::vector<InterleavedRun> runs;
      for (const Pending& p : pending) runs.push_back({p.cs, &p.r});
      // --gemms-alone: each strategy that can also runs its GEMMs alone, in the same rounds.
      std::vector<gpu::DeviceRun> gemm_runs;
      gemm_runs.reserve(pending.size());
      // Index into runs of each strategy's GEMMs alone; kNone where they are not timed.
      constexpr std::size_t kNone = static_cast<std::size_t>(-1);
      std::vector<std::size_t> gemms_of(pending.size(), kNone);
      if (o_.gemms_alone)
        for (std::size_t k = 0; k < pending.size(); ++k)
          if (pending[k].cs->times_gemms_alone()) {
            gemm_runs.push_back(pending[k].r);
            gemm_runs.back().gemms_only = true;
            gemms_of[k] = runs.size();
            runs.push_back({pending[k].cs, &gemm_runs.back()});
          }
      say(fmt::format("{}: {} strategies interleaved{}, {} rounds ({} warm-up)", recipe.name(),
                      pending.size(),
                      runs.size() > pending.size()
                          ? fmt::format(" with the GEMMs alone of {}", runs.size() - pending.size())
                          : "",
                      o_.warmup + o_.repeats, o_.warmup));
      std::vector<InterleavedTimes> times;
      try {
        times = time_interleaved(runs, in.copies, o_.warmup, o_.repeats);
      } catch (const DeviceError& e) {
        for (const Pending& p : pending) failed_row(rep.rows[p.row], out, e.what());
        continue;
      }
      for (std::size_t k = 0; k < pending.size(); ++k) {
        BenchRow& row = rep.rows[pending[k].row];
        try {
          finish_row(pending[k], recipe, in, out, chk, times[k], row);
        } catch (const DeviceError& e) {
          failed_row(row, out, e.what());
        }
        if (gemms_of[k] != kNone) gemms_row(times[gemms_of[k]], row);
      }
    }
  }

  /// A strategy of a recipe, planned and ready to be timed.
  struct Pending {
    std::size_t row = 0;  ///< its row in the report
    const gpu::CudaStrategy* cs = nullptr;
    gpu::DeviceRun r;
    std::int64_t n_chunks = 1;
    std::string tag;
  };

  /// Samples the rows, builds the sub-problem on the device and the host, and its reference.
  void prepare_check(DType input, const InputSet& in, SampleCheck& chk) {
    const std::int64_t V = o_.V, D = o_.D, isz = size_of(input);
    chk.rows = sample_rows(o_.N, o_.sample_rows, o_.seed);
    const std::int64_t S = static_cast<std::int64_t>(chk.rows.size());
    DeviceMemoryTracker& mem = check_mem_;
    chk.H = DeviceBuffer(mem, S * D * isz, MemKind::io, "sampled H rows");
    chk.targets = DeviceBuffer(mem, S * 8, MemKind::io, "sampled targets");
    for (std::int64_t k = 0; k < S; ++k) {
      const std::int64_t i = chk.rows[static_cast<std::size_t>(k)];
      XL_CUDA_CHECK(cudaMemcpy(at(chk.H.get(), k * D * isz), at(in.H, i * D * isz),
                               static_cast<std::size_t>(D * isz), cudaMemcpyDeviceToDevice));
      XL_CUDA_CHECK(
          cudaMemcpy(at(chk.targets.get(), k * 8), in.targets + i, 8, cudaMemcpyDeviceToDevice));
    }
    XL_CUDA_CHECK(cudaDeviceSynchronize());
    try {
      Tensor H(input, {S, D}, "H (sampled rows)"), W(input, {V, D}, "W");
      XL_CUDA_CHECK(cudaMemcpy(H.data(), chk.H.get(), H.nbytes(), cudaMemcpyDeviceToHost));
      XL_CUDA_CHECK(cudaMemcpy(W.data(), in.W, W.nbytes(), cudaMemcpyDeviceToHost));
      std::vector<std::int64_t> t(static_cast<std::size_t>(S));
      XL_CUDA_CHECK(cudaMemcpy(t.data(), chk.targets.get(), t.size() * 8, cudaMemcpyDeviceToHost));
      chk.sub = Problem::linear(std::move(H), std::move(W), std::nullopt, std::move(t),
                                spec_.ignore_index, "bench sub-problem");
      ReferenceOptions ro;
      if (o_.vocab_rows < V) ro.vocab_rows = sample_rows(V, o_.vocab_rows, o_.seed + 1);
      ro.want_db = false;
      say(
          fmt::format("certified reference of the {} sampled rows (V={}, D={}; dW on {} vocabulary "
                      "rows) on the CPU",
                      S, V, D, o_.vocab_rows));
      const auto t0 = std::chrono::steady_clock::now();
      chk.ref = compute_reference(chk.sub, spec_, ro);
      say(fmt::format(
          "reference done in {:.1f} s",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
      chk.ok = true;
    } catch (const std::exception& e) {
      chk.why = std::string("no reference check: ") + e.what();
      say(chk.why);
    }
  }

  struct Outputs {
    DeviceBuffer *loss, *lse, *dH, *dW;
    std::int64_t io_bytes;
  };

  void failed_row(BenchRow& row, const Outputs& out, const std::string& what) const {
    row.status = RowStatus::failed;
    row.message = what;
    row.io_bytes = out.io_bytes;
    say(fmt::format("{} {}: failed: {}", row.strategy, row.recipe, row.message));
  }

  void poison(const Outputs& out) const {
    for (const DeviceBuffer* b : {out.loss, out.lse, out.dH, out.dW})
      XL_CUDA_CHECK(cudaMemset(b->get(), 0xFF, static_cast<std::size_t>(b->bytes())));
    // The strategies run on a non-blocking stream, which does not wait for the legacy stream.
    XL_CUDA_CHECK(cudaDeviceSynchronize());
  }

  /// Plans a strategy of a recipe: false when it does not fit or is not supported (the row says
  /// so), else true with p ready to be timed.
  bool prepare_row(const gpu::CudaStrategy& cs, const Recipe& recipe, const Inputs& in,
                   const Outputs& out, BenchRow& row, Pending& p) {
    const std::int64_t N = o_.N, V = o_.V, D = o_.D;
    row.strategy = cs.name();
    row.recipe = recipe.name();
    row.deterministic = strategy_traits(cs.name()).deterministic;
    row.io_bytes = out.io_bytes;
    const std::string tag = fmt::format("[{}/{}] {} {}", done_, total_, row.strategy, row.recipe);
    if (o_.ranks > 1 && strategy_traits(cs.name()).shards_vocabulary) {
      // The timers measure one device's stream; P ranks are P devices and their collectives.
      row.status = RowStatus::not_supported;
      row.message = fmt::format(
          "the bench times one device per run, and {} ranks span {} devices (xentlab audit "
          "--backend cuda --strategies {} --ranks {} checks their outputs)",
          o_.ranks, o_.ranks, cs.name(), o_.ranks);
      say(fmt::format("{}: {}: {}", tag, to_string(row.status), row.message));
      return false;
    }
    const gpu::WorkspaceQuery q{N, V, D, recipe.input, false, recipe, true};
    std::int64_t n_chunks = 1;
    try {
      const gpu::WorkspacePlan plan = cs.plan(q, o_.memory_budget, o_.chunk_tokens);
      row.planned_extra_bytes = plan.total();
      row.chunk_rows = plan.rows;
      if (strategy_traits(cs.name()).splits_vocabulary)
        row.vocab_splits =
            vocab_chunk_splits(N, V, size_of(recipe.logits), o_.memory_budget, o_.vocab_splits);
      n_chunks = plan.n_chunks;
    } catch (const InputError& e) {
      row.status = RowStatus::does_not_fit;
      row.message = e.what();
      try {
        row.planned_extra_bytes = cs.plan(q, 0, 1).total();  // the least it needs: 1-token chunks
      } catch (const std::exception&) {
      }
      say(fmt::format("{}: does not fit: {}", tag, row.message));
      return false;
    }
    // can_implement reads the shape and dtypes of a problem; the probe carries the device-resident
    // problem's N, V, D and input dtype (its tensors are placeholders).
    Problem probe;
    probe.name = "bench";
    probe.N = N;
    probe.V = V;
    probe.D = D;
    probe.H = Tensor(recipe.input, {1, D}, "H (shape probe)");
    probe.W = Tensor(recipe.input, {1, D}, "W (shape probe)");
    const Status st = cs.can_implement(probe, spec_, recipe);
    if (!st.ok()) {
      std::size_t free_b = 0, total_b = 0;
      XL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      const bool too_big = row.planned_extra_bytes > static_cast<std::int64_t>(free_b);
      row.status = too_big ? RowStatus::does_not_fit : RowStatus::not_supported;
      row.message = st.message;
      say(fmt::format("{}: {}: {}", tag, to_string(row.status), row.message));
      return false;
    }

    gpu::DeviceRun& r = p.r;
    r.prob = gpu::DeviceProblem{N,
                                V,
                                D,
                                recipe.input,
                                in.copies[0].H,
                                in.copies[0].W,
                                nullptr,
                                nullptr,
                                in.copies[0].targets,
                                N};
    r.spec = spec_;
    r.recipe = recipe;
    r.g.g_scalar = static_cast<float>(1.0 / double(N));
    r.want_grads = true;
    r.memory_budget = o_.memory_budget;
    r.chunk_tokens = o_.chunk_tokens;
    r.vocab_splits = o_.vocab_splits;
    r.out = gpu::DeviceOutputs{out.loss->as<float>(),
                               out.lse->as<float>(),
                               out.dH->get(),
                               out.dW->get(),
                               nullptr,
                               nullptr};
    say(fmt::format("{}: chunk {} tokens{}, plan {} extra", tag, row.chunk_rows,
                    row.vocab_splits > 0 ? fmt::format(", {} vocabulary splits", row.vocab_splits)
                                         : std::string(),
                    format_bytes(row.planned_extra_bytes)));
    p.cs = &cs;
    p.n_chunks = n_chunks;
    p.tag = tag;
    return true;
  }

  /// The row of a timed strategy: its times (or why it has none), then one more run into the
  /// outputs (poisoned first: an output the strategy does not write is NaN) for the mean loss
  /// and the sampled rows' check.
  void finish_row(const Pending& p, const Recipe& recipe, const Inputs& in, const Outputs& out,
                  const SampleCheck& chk, const InterleavedTimes& it, BenchRow& row) {
    const std::int64_t N = o_.N;
    const std::string& tag = p.tag;
    if (it.error) {
      status_from(it.error, row);
      say(fmt::format("{}: {}: {}", tag, to_string(row.status), row.message));
      return;
    }
    // Two passes on one caching tracker, as in the timed rounds: a workspace reused without
    // being reset shows in the second one's outputs.
    poison(out);
    try {
      (void)time_forward_backward(*p.cs, p.r, in.copies, 1, 1);
    } catch (...) {
      status_from(std::current_exception(), row);
      say(fmt::format("{}: {}: {}", tag, to_string(row.status), row.message));
      return;
    }
    row.status = RowStatus::ok;
    row.message.clear();
    row.times_ms = it.t.ms;
    row.time = summarize_times(it.t.ms);
    row.peak_extra_bytes = it.t.peak_extra_bytes;
    row.tflops = o_.flops() / (row.time.median * 1e-3) / 1e12;

    const std::vector<float> loss = download_floats(out.loss->as<float>(), N);
    row.reduced_loss_full = gpu::reduce_tokens(loss, {}, spec_, recipe.accum, N);
    if (!std::isfinite(row.reduced_loss_full)) row.message = "the mean loss is not finite";
    say(fmt::format("{}: median {:.2f} ms ({:.1f} TFLOP/s), peak extra {}", tag, row.time.median,
                    row.tflops, format_bytes(row.peak_extra_bytes)));
    if (o_.sample_rows > 0) {
      try {
        check_rows(*p.cs, recipe, p.r, p.n_chunks, in, out, loss, chk, row);
      } catch (const std::exception& e) {
        row.message +=
            (row.message.empty() ? "" : "; ") + std::string("reference check: ") + e.what();
      }
    }
  }

  /// The times of the strategy's GEMMs alone in its row (or, where they stopped, why).
  void gemms_row(const InterleavedTimes& it, BenchRow& row) const {
    if (it.error || it.t.ms.empty()) {
      BenchRow why;
      if (it.error) status_from(it.error, why);
      row.message += (row.message.empty() ? "" : "; ") +
                     std::string("its GEMMs alone were not timed: ") +
                     (it.error ? why.message : std::string("no timed run"));
      return;
    }
    row.gemms_time = summarize_times(it.t.ms);
    if (measured(row.status)) row.rel_to_gemms = row.time.median / row.gemms_time.median;
    say(fmt::format("{} {}: its GEMMs alone: median {:.2f} ms ({:.3f}× of them)", row.strategy,
                    row.recipe, row.gemms_time.median, row.rel_to_gemms));
  }

  /// The row's status and message from what stopped a strategy's runs: InputError (it does not
  /// fit), a DeviceError of cudaMalloc (does not fit), anything else failed.
  static void status_from(const std::exception_ptr& error, BenchRow& row) {
    try {
      std::rethrow_exception(error);
    } catch (const InputError& e) {
      row.status = RowStatus::does_not_fit;
      row.message = e.what();
    } catch (const DeviceError& e) {
      const std::string m = e.what();
      row.status =
          m.find("cudaMalloc") != std::string::npos ? RowStatus::does_not_fit : RowStatus::failed;
      row.message = m;
    } catch (const std::exception& e) {
      row.status = RowStatus::failed;
      row.message = e.what();
    } catch (...) {
      row.status = RowStatus::failed;
      row.message = "an exception that is not a std::exception";
    }
  }

  void check_rows(const gpu::CudaStrategy& cs, const Recipe& recipe, const gpu::DeviceRun& full,
                  std::int64_t n_chunks, const Inputs& in, const Outputs& out,
                  const std::vector<float>& loss, const SampleCheck& chk, BenchRow& row) {
    auto note = [&row](const std::string& s) {
      row.message += (row.message.empty() ? "" : "; ") + s;
    };
    if (!chk.ok) {
      note(chk.why);
      return;
    }
    const ReferenceResult& ref = chk.ref;
    const std::int64_t S = static_cast<std::int64_t>(chk.rows.size()), D = o_.D;
    SampledOutputs so;
    std::vector<float> lf;
    const std::vector<float> lse = download_floats(out.lse->as<float>(), o_.N);
    for (std::int64_t i : chk.rows) {
      lf.push_back(loss[static_cast<std::size_t>(i)]);
      so.loss.push_back(loss[static_cast<std::size_t>(i)]);
      so.lse.push_back(lse[static_cast<std::size_t>(i)]);
    }
    so.loss_dtype = recipe.accum;
    so.reduced_loss = gpu::reduce_tokens(lf, {}, spec_, recipe.accum, S);
    so.dH = download_rows(out.dH->get(), chk.rows, D, recipe.grad);
    so.dH_scale = double(S) / double(o_.N);  // reference scale 1/S → the run's 1/N
    so.run_tokens = o_.N;                    // the full run's vocabulary plan (fused's ranges)
    so.grad_dtype = recipe.grad;

    // dW: the same strategy and recipe on the sub-problem of the sampled rows.
    // A strategy that splits the vocabulary takes its splits from the full run's N tokens (the
    // row's vocab_splits, from prepare_row), which the declaration below names: the sub-problem
    // runs with them (from its own S tokens it would take fewer, another arithmetic: dW's bound
    // depends on the lse's, whose constant depends on the splits).
    const bool splits_vocabulary = row.vocab_splits > 0;
    const std::int64_t splits = splits_vocabulary ? row.vocab_splits : 1;
    gpu::DeviceRun sub = full;
    sub.prob.N = S;
    sub.prob.n_valid = S;
    sub.g.g_scalar = static_cast<float>(1.0 / double(S));
    if (splits_vocabulary) sub.vocab_splits = splits;
    const std::int64_t chunks = std::min(n_chunks, S);
    if (chunks > 1) sub.chunk_tokens = (S + chunks - 1) / chunks;
    poison(out);
    BenchRow sub_row;
    bool sub_ran = true;
    try {
      (void)time_forward_backward(
          cs, sub, {{chk.H.get(), in.copies[0].W, chk.targets.as<std::int64_t>()}}, 0, 1);
    } catch (...) {
      status_from(std::current_exception(), sub_row);
      sub_ran = false;
    }
    if (sub_ran)
      so.dW = download_rows(out.dW->get(), ref.vocab_rows, D, recipe.grad);
    else
      note("dW (sub-problem) run: " + sub_row.message);

    // The full run's declaration: a strategy that splits the vocabulary declares the splits of
    // its N tokens (the sampled rows' loss, lse and dH are the full run's; dW the sub-problem's,
    // run with the same splits above).
    DeclaredArithmetic ar = cs.arithmetic(recipe);
    if (splits_vocabulary) {
      ar.vocab_ranks = splits;
      ar.rescaled_ranks = splits > 1;
    }
    const RunAssessment ra =
        assess_sampled_run(chk.sub, spec_, recipe, ar, so, ref, policy_by_name(kJudgePolicy));
    row.err_loss = ra.loss.normwise_rel_err;
    row.err_lse = ra.lse.normwise_rel_err;
    row.err_reduced_loss = ra.reduced_loss.normwise_rel_err;
    if (ra.has_dH) row.err_dH = ra.dH.normwise_rel_err;
    if (ra.has_dW) row.err_dW_sub = ra.dW.normwise_rel_err;
    row.status = row_status(ra.verdict.disposition);
    if (row.status != RowStatus::ok) note(ra.verdict.reason);
    say(fmt::format(
        "[{}/{}] {} {}: errors on {} sampled rows: loss {}, lse {}, mean loss {}, dH {}, "
        "dW (sub-problem) {}; {}",
        done_, total_, row.strategy, row.recipe, S, format_error(row.err_loss),
        format_error(row.err_lse), format_error(row.err_reduced_loss), format_error(row.err_dH),
        format_error(row.err_dW_sub), ra.verdict.reason));
  }

  const BenchOptions& o_;
  std::function<void(const std::string&)> progress_;
  LossSpec spec_;  ///< mean over the tokens, no ignored rows, no options
  DeviceMemoryTracker check_mem_;
  int done_ = 0, total_ = 0;
};

}  // namespace

BenchReport run_bench(const BenchOptions& options,
                      const std::function<void(const std::string&)>& progress) {
  Runner r(options, progress);
  return r.run();
}

}  // namespace xentlab::bench

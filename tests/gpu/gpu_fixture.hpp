#pragma once
// The set-up shared by the GPU tests of the CUDA strategies (gpu/cuda): tests/gpu/*.cpp, one
// executable, test_gpu_strategies, label "gpu" (tests/CMakeLists.txt). Without a device every test
// skips with the reason query_device() gives (CI has nvcc, no GPU).
//
// What is checked, for every strategy of the registry (none is named by hand except where a test
// compares two of them):
//  - against the certified reference: every output within its a-priori bound for the declared
//    arithmetic (judge/bounds_for.hpp assess_run, policy "default"); where the recipe has no
//    meaningful bound (16-bit sum-exp over a long row), finiteness only;
//  - against the CPU emulation of the same strategy and recipe (same chunking) and the baseline
//    models of the recipe (sequential sums; tensor-core accumulation), with the judge's one
//    criterion (judge/emulation_check.hpp judge_against_emulation: normwise and q90 ≤ 2× the
//    least accurate one's + one ULP and four of fp32; the scale test);
//  - all outputs written: the host wrapper poisons every device output with NaN before each run,
//    and a NaN where the reference is finite fails the finiteness rule;
//  - chunked = checkpointed bit for bit (same chunks: the recomputed logits are identical), and
//    chunked with one chunk = naive bit for bit;
//  - clean refusals (InputError naming the bytes / the row), and 64-bit indexing (N·V > 2^31).
// Failures print the problem, seed, recipe, spec and the verdict's numbers.
//
// The tests, by subject: recipes.cpp (recipes and loss options × strategies), cases.cpp (the
// known-hard cases), determinism.cpp (repeat runs), chunked.cpp (chunked = checkpointed = naive),
// refusals.cpp, indexing.cpp (N·V > 2^31), fused.cpp (the fused strategy), paths.cpp (fused's two
// kernel paths, repeat runs, 64-bit offsets), vocab_parallel.cpp (NCCL), vocab_chunked.cpp (the
// vocabulary in splits on one device), baseline_models.cpp (the CUDA sequential-sum model of the
// differential baseline against its emulation).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "datasets/problem_ops.hpp"
#include "datasets/synthetic.hpp"
#include "gpu/cuda/common/device.hpp"
#include "gpu/cuda/fused/fused.hpp"
#include "gpu/registry.hpp"
#include "judge/bounds.hpp"
#include "judge/bounds_for.hpp"
#include "judge/emulation_check.hpp"
#include "judge/policy.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"
#include "tests/support/case_support.hpp"

namespace xentlab::gpu_tests {

using testing::same_bits;

inline const gpu::DeviceInfo& device() {
  static const gpu::DeviceInfo d = gpu::query_device();
  return d;
}
#define XL_REQUIRE_DEVICE()                      \
  if (!::xentlab::gpu_tests::device().available) \
  GTEST_SKIP() << ::xentlab::gpu_tests::device().reason

inline std::unique_ptr<Strategy> find_strategy(Backend b, const std::string& name) {
  return make_strategy(b, name);
}

struct Case {
  std::string name;
  Problem pb;
  LossSpec spec;
  std::vector<double> upstream;  ///< reduction none
};

/// Linear Gaussian problem; optional fp32 bias and ignored rows (every 7th row from 3).
inline Problem gaussian(std::int64_t N, std::int64_t V, std::int64_t D, DType dt, double sigma,
                        std::uint64_t seed, bool bias, bool ignore) {
  Problem p = make_gaussian_linear(N, V, D, dt, sigma, seed);
  std::vector<std::int64_t> t = p.targets;
  if (ignore)
    for (std::int64_t i = 3; i < N; i += 7) t[static_cast<std::size_t>(i)] = -100;
  std::optional<Tensor> b;
  if (bias) {
    Tensor bt(DType::fp32, {V}, "bias");
    NormalStream ns(seed + 101);
    for (std::int64_t j = 0; j < V; ++j) bt.set(j, ns.next());
    b = std::move(bt);
  }
  return Problem::linear(std::move(p.H), std::move(p.W), std::move(b), std::move(t), -100,
                         "gaussian-" + std::to_string(seed));
}

inline std::vector<double> random_upstream(std::int64_t N, std::uint64_t seed) {
  NormalStream ns(seed);
  std::vector<double> u(static_cast<std::size_t>(N));
  for (auto& v : u) v = ns.next();
  return u;
}

template <class Values = std::vector<double>>
double max_abs_finite(const Values& v) {
  double m = 0.0;
  for (double x : v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

inline ReferenceResult reference_for(const Case& c) {
  ReferenceOptions o;
  o.want_dz = !c.pb.is_linear();
  o.upstream = c.upstream;
  return compute_reference(c.pb, c.spec, o);
}

inline std::string describe(const Case& c, const Recipe& r, const std::string& strategy,
                            std::int64_t chunk) {
  return c.name + " [" + c.pb.describe() + "] spec {" + c.spec.describe() + "} recipe " + r.name() +
         " strategy " + strategy + " chunk_tokens " + std::to_string(chunk);
}

/// Whether the strategy implements every recipe of fp32/fp16/bf16 storage (the registry's trait;
/// fused refuses some).
inline bool every_recipe(const std::string& strategy) {
  return strategy_traits(strategy).every_recipe;
}

/// Whether the strategy works through the tokens in chunks (the registry's trait).
inline bool chunks_tokens(const std::string& strategy) {
  return strategy_traits(strategy).chunks_tokens;
}

/// The CPU emulation a CUDA strategy is compared with: its registry row's.
inline std::unique_ptr<Strategy> emulated_twin(const std::string& strategy) {
  return find_strategy(Backend::cpu_emulation, strategy);
}

/// Runs one strategy on one case and recipe; checks bound, finiteness and the emulation baseline.
/// Where the CPU emulation of the same declared arithmetic does not meet the a-priori bound
/// either (the recipe itself leaves the bound's validity: 16-bit lse at large offsets, outputs in
/// the subnormal range), the GPU is held to the emulation baseline and the finiteness rule only,
/// and the test log says so.
/// `ranks`: RunRequest::ranks (vocab_parallel; the other strategies ignore it). `twin`: the CPU
/// emulation to compare with when s is not a strategy of the table (a baseline model); null: s's
/// registry row's. `vocab_splits`: RunRequest::vocab_splits (vocab_chunked; others ignore it).
/// `twin_judges_dH` false: dH is held to the bound only, not to the emulation's error (for a dH
/// that is cuBLAS's sum over V where its value is exactly 0, all of its error rounding in an order
/// the emulation does not know; the caller says why), and the test log gives both errors; where
/// the bound's verdict is not checked (the emulation misses a bound too), the baseline still is.
inline void check_run(const Case& c, const ReferenceResult& ref, const Strategy& s, const Recipe& r,
                      std::int64_t chunk, int ranks = 0, const Strategy* twin = nullptr,
                      std::int64_t vocab_splits = 0, bool twin_judges_dH = true) {
  const std::string ctx =
      describe(c, r, s.name(), chunk) + (ranks > 0 ? " ranks " + std::to_string(ranks) : "");
  const Status st = s.can_implement(c.pb, c.spec, r);
  if (!st.ok() && st.code == Status::Code::not_supported && !every_recipe(s.name())) {
    // A strategy without the every_recipe trait (fused: only recipes whose dz is an exact
    // tensor-core operand, docs/fused.md) must say why it refuses one.
    EXPECT_FALSE(st.message.empty()) << ctx;
    return;
  }
  ASSERT_TRUE(st.ok()) << ctx << ": not supported: " << st.message;
  RunRequest req;
  req.problem = &c.pb;
  req.spec = c.spec;
  req.recipe = r;
  req.upstream = c.upstream;
  req.chunk_tokens = chunk;
  req.ranks = ranks;
  req.vocab_splits = vocab_splits;
  req.emulated_sms = device().multiprocessors;  // the fused emulation models this device's launch
  const StrategyOutputs out = s.run(req);
  // A strategy that does not chunk tokens accumulates dW in fp32 over all of them (one "chunk"
  // for the bounds).
  // (A baseline model is no row of the table: it does not chunk.)
  const bool chunks = find_strategy_entry(s.name()) != nullptr && chunks_tokens(s.name());
  const std::int64_t n_chunks = chunks ? (c.pb.N + chunk - 1) / chunk : 1;
  const Policy policy = policy_by_name("default");
  RunAssessment a;
  try {
    a = assess_run(c.pb, c.spec, r, s.run_arithmetic(req), out, ref, policy, n_chunks);
  } catch (const std::exception& e) {
    ADD_FAILURE() << ctx << ": assess_run failed: " << e.what();
    return;
  }

  // Baseline: the CPU emulation of the same strategy and recipe (same chunking).
  const auto own_twin = twin == nullptr ? emulated_twin(s.name()) : nullptr;
  const Strategy* emu = twin != nullptr ? twin : own_twin.get();
  const bool have_emu = emu != nullptr && emu->can_implement(c.pb, c.spec, r).ok();
  RunAssessment ea;
  if (have_emu) {
    try {
      const StrategyOutputs eo = emu->run(req);
      ea = assess_run(c.pb, c.spec, r, emu->run_arithmetic(req), eo, ref, policy, n_chunks);
    } catch (const std::exception& e) {
      ADD_FAILURE() << ctx << ": CPU emulation baseline failed: " << e.what();
      return;
    }
  }
  const bool emu_meets_bound = have_emu && ea.verdict.disposition == Disposition::passed;
  if (!have_emu || emu_meets_bound) {
    for (const ErrorStats* e : {&a.loss, &a.lse, &a.dz, &a.dH, &a.dW, &a.db}) {
      EXPECT_EQ(e->nonfinite_where_ref_finite, 0)
          << ctx << ": non-finite output where the reference is finite";
    }
  }
  // (Otherwise the baseline judge below compares the non-finite counts with the emulation's.)
  const bool bound_checked = a.bounds.meaningful && (!have_emu || emu_meets_bound);
  if (bound_checked) {
    EXPECT_EQ(a.verdict.disposition, Disposition::passed)
        << ctx << ": " << a.verdict.output << ": " << a.verdict.reason;
  } else if (have_emu && !emu_meets_bound) {
    std::cout << "[ note ] " << ctx << ": the emulated arithmetic misses the bound too ("
              << ea.verdict.output << ": " << ea.verdict.reason << "); baseline check only\n";
  }
  if (!have_emu) return;
  // The baseline models of the recipe, run on the same request (judge/emulation_check.hpp).
  std::vector<RunAssessment> models;
  for (const auto& m : make_baseline_models(r))
    if (m->can_implement(c.pb, c.spec, r).ok())
      models.push_back(
          assess_run(c.pb, c.spec, r, m->run_arithmetic(req), m->run(req), ref, policy, n_chunks));
  std::vector<const RunAssessment*> base{&ea};
  for (const auto& m : models) base.push_back(&m);
  RunAssessment passed = a;
  passed.verdict = Verdict{};  // the bound's verdict is checked above; here the baseline's alone
  // dH leaves the baseline's judgement only where the bound's verdict (dH's bound among the
  // others, and the non-finite check) was asserted above: where it was not (the emulation misses
  // a bound, or a bound is not meaningful), the baseline stays dH's judge.
  if (!twin_judges_dH && a.has_dH && bound_checked) {
    std::cout << "[ note ] " << ctx << ": dH normwise error " << a.dH.normwise_rel_err
              << ", its CPU emulation's " << ea.dH.normwise_rel_err
              << " (bound only, not the baseline)\n";
    // The baseline judges the profiles it is given: dH's leaves, the other outputs stay.
    auto& pr = passed.profiles;
    pr.erase(std::remove_if(pr.begin(), pr.end(), [](const auto& p) { return p.first == "dH"; }),
             pr.end());
  }
  const Verdict v = judge_against_emulation(passed, base, r.name());
  EXPECT_EQ(v.disposition, Disposition::passed)
      << ctx << ": " << v.output << " vs its CPU-emulated baseline: " << v.reason;
}

inline void check_all_strategies(const Case& c, const std::vector<Recipe>& recipes,
                                 std::int64_t chunk) {
  const ReferenceResult ref = reference_for(c);
  for (const auto& s : make_strategies(Backend::cuda))
    for (const Recipe& r : recipes) {
      SCOPED_TRACE(describe(c, r, s->name(), chunk));
      check_run(c, ref, *s, r, chunk);
    }
}

inline std::vector<Recipe> grid_for(DType input) {
  std::vector<Recipe> out;
  for (const Recipe& r : default_recipe_grid())
    if (r.input == input) out.push_back(r);
  // Recipes whose grad dtype differs from the input (fp32 gradients).
  Recipe f = out.front();
  f.logits = input;
  f.accum = DType::fp32;
  f.grad = DType::fp32;
  out.push_back(f);
  return out;
}

/// p with its ignored rows (target -100, the generators' marker) relabelled to sp.ignore_index,
/// so that a spec with another ignore_index still ignores them.
inline Problem ignoring_as(Problem p, const LossSpec& sp) {
  if (sp.ignore_index != -100)
    for (auto& t : p.targets)
      if (t == -100) t = sp.ignore_index;
  return p;
}

/// The loss settings of the option tests: mean, sum, none, label smoothing, z-loss, softcap with
/// a logit scale, all of them at once with ignore_index and reduction none, and a normaliser.
inline std::vector<LossSpec> loss_option_specs() {
  std::vector<LossSpec> specs;
  LossSpec s;
  specs.push_back(s);  // mean
  s.reduction = Reduction::sum;
  specs.push_back(s);
  s = LossSpec{};
  s.reduction = Reduction::none;
  specs.push_back(s);
  s = LossSpec{};
  s.label_smoothing = 0.1;
  specs.push_back(s);
  s = LossSpec{};
  s.z_loss = 1e-3;
  specs.push_back(s);
  s = LossSpec{};
  s.softcap = 30.0;
  s.logit_scale = 0.5;
  specs.push_back(s);
  s = LossSpec{};
  s.ignore_index = -1;
  s.label_smoothing = 0.2;
  s.z_loss = 1e-4;
  s.softcap = 20.0;
  s.logit_scale = 1.25;
  s.reduction = Reduction::none;
  specs.push_back(s);
  s = LossSpec{};
  s.normalizer = 200;  // the mean over the valid tokens of several micro-batches
  specs.push_back(s);
  return specs;
}

using testing::expect_same_outputs;

/// The N·V > 2^31 problem of the indexing tests: N = 17000 identical token rows (one Gaussian H
/// row), V = 128256, hidden size D (8 by default; the fused test uses 64, the smallest that its
/// wgmma kernels take), every target the last vocabulary entry.
inline Problem identical_rows_past_2pow31(std::int64_t D = 8) {
  const std::int64_t N = 17000, V = 128256;
  Problem g = make_gaussian_linear(1, V, D, DType::bf16, 4.0, 31);
  Tensor H(DType::bf16, {N, D}, "H");
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t d = 0; d < D; ++d) H.set(i * D + d, g.H.get(d));
  return Problem::linear(std::move(H), std::move(g.W), std::nullopt,
                         std::vector<std::int64_t>(static_cast<std::size_t>(N), V - 1));
}

/// V·D past 2^31 at D = 4096: V identical W rows and N identical H rows (bf16), every target the
/// last vocabulary row (its W offset past 2^31 elements), so every logit of a row is the same.
inline constexpr std::int64_t kWideD = 4096;
inline constexpr std::int64_t kWideV = (std::int64_t{1} << 31) / kWideD + 128;
inline Problem identical_weights_past_2pow31(std::int64_t N) {
  const std::int64_t D = kWideD, V = kWideV;
  Problem g = make_gaussian_linear(1, 1, D, DType::bf16, 1.0, 77);  // one H row, one W row
  Tensor W(DType::bf16, {V, D}, "W");
  for (std::int64_t j = 0; j < V; ++j)
    std::memcpy(static_cast<char*>(W.data()) + j * D * 2, g.W.data(),
                static_cast<std::size_t>(D * 2));
  Tensor H(DType::bf16, {N, D}, "H");
  for (std::int64_t i = 0; i < N; ++i)
    std::memcpy(static_cast<char*>(H.data()) + i * D * 2, g.H.data(),
                static_cast<std::size_t>(D * 2));
  return Problem::linear(std::move(H), std::move(W), std::nullopt,
                         std::vector<std::int64_t>(static_cast<std::size_t>(N), V - 1));
}

/// The loss of identical_weights_past_2pow31 with an fp32 accumulator: every token's the same
/// bits, and ln V (all logits equal: the sum of V exact ones is exact, lse and loss are two
/// roundings of ≈ |x| + ln V).
inline void expect_loss_is_log_V(const StrategyOutputs& o, std::int64_t N, std::int64_t V) {
  EXPECT_EQ(std::memcmp(&o.loss[0], &o.loss[static_cast<std::size_t>(N - 1)], 8), 0);
  const double x = o.lse[0] - o.loss[0];  // the common logit
  const double u = unit_roundoff(DType::fp32);
  EXPECT_NEAR(o.loss[0], std::log(static_cast<double>(V)),
              4 * u * (std::fabs(x) + std::log(static_cast<double>(V))))
      << "lse " << o.lse[0];
}

/// Runs `body(path name, fused strategy)` once per fused kernel path this device has: the
/// automatic choice (on sm_90 the wgmma kernels where the shape allows) and the forced mma.sync
/// kernels, each a fused strategy of its own (gpu/cuda/fused/fused.hpp).
template <class Body>
void for_each_fused_kernel_path(Body&& body) {
  for (const auto path : {gpu::FusedKernelPath::automatic, gpu::FusedKernelPath::mma_sync}) {
    const auto fused = gpu::make_cuda_fused(path);
    body(path == gpu::FusedKernelPath::automatic ? "automatic" : "mma.sync", *fused);
  }
}

/// Whether this device runs the fused wgmma kernels (sm_90 exactly: the sm_90a build).
inline bool fused_wgmma_device() {
  return device().sm_major == 9 && device().sm_minor == 0;
}

/// The kernels of the last run of `fused`, "forward/backward": "wgmma/wgmma" or
/// "mma.sync/mma.sync".
inline std::string fused_kernels_of_last_run(const Strategy& fused) {
  const gpu::FusedKernels k = gpu::last_fused_kernels(fused);
  return std::string(k.forward) + "/" + k.backward;
}

}  // namespace xentlab::gpu_tests

// The selftest's own candidates and its catalogue of faults (harness/selftest/faults.hpp). Each
// fault is one short function of the correct fp32 candidate (or of the model, harness/selftest/
// model.hpp, with one knob turned), so that the fault is the only difference from a candidate
// that passes.
#include "harness/selftest/faults.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "gpu/registry.hpp"
#include "harness/selftest/model.hpp"
#include "harness/verify/candidate.hpp"
#include "judge/tolerance.hpp"
#include "numerics/error.hpp"

namespace xentlab::selftest {

const char* to_string(GoldenKind k) {
  switch (k) {
    case GoldenKind::mean:
      return "mean";
    case GoldenKind::ignore_normalizer:
      return "ignored+normaliser";
    case GoldenKind::none_upstream:
      return "none+upstream";
  }
  return "?";
}

namespace {

Tensor tensor(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
              const std::vector<double>& v) {
  Tensor t(dtype, std::move(shape), name);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, v[static_cast<std::size_t>(i)]);
  return t;
}

Tensor& output(Outputs& o, const std::string& name) {
  for (auto& [n, t] : o)
    if (n == name) return t;
  throw InputError(fmt::format("the candidate holds no {}", name));
}
bool holds(const Outputs& o, const std::string& name) {
  return std::any_of(o.begin(), o.end(), [&](const auto& p) { return p.first == name; });
}

void scale(Outputs& o, const std::string& name, double f) {
  if (!holds(o, name)) return;
  Tensor& t = output(o, name);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, t.get(i) * f);
}

Outputs fp32_outputs(const Golden& g, const std::vector<double>& loss,
                     const std::vector<double>& lse, double reduced, const std::vector<double>& dH,
                     const std::vector<double>& dW, const std::vector<double>& db) {
  Outputs o;
  o.emplace_back("loss", tensor("loss", DType::fp32, {g.N}, loss));
  o.emplace_back("lse", tensor("lse", DType::fp32, {g.N}, lse));
  o.emplace_back("reduced_loss", tensor("reduced_loss", DType::fp32, {}, {reduced}));
  if (!dH.empty()) o.emplace_back("dH", tensor("dH", DType::fp32, {g.N, g.D}, dH));
  if (!dW.empty()) o.emplace_back("dW", tensor("dW", DType::fp32, {g.V, g.D}, dW));
  // db only where the problem has a bias: an implementation of a head without one forms none (as
  // the CUDA strategies), and a golden file too large to hold dz cannot judge one (no db_cond).
  if (!db.empty() && g.problem.bias) o.emplace_back("db", tensor("db", DType::fp32, {g.V}, db));
  return o;
}

// The model with knobs k, its outputs rounded to fp32; its GEMMs on the GPU where the strategy
// candidates run there (past kEmulationWork, on a machine with a GPU).
Outputs model_candidate(const Golden& g, const ModelKnobs& k) {
  const ModelOutputs m =
      run_model(g, k, candidate_backend(g) == Backend::cuda ? ModelDevice::cuda : ModelDevice::cpu);
  return fp32_outputs(g, m.loss, m.lse, m.reduced_loss, m.dH, m.dW, m.db);
}

// Token chunks of the chunked faults: four (at least one row each).
std::int64_t quarter(const Golden& g) {
  return std::max<std::int64_t>(1, (g.N + 3) / 4);
}

// ---- the faults: each takes the golden file, returns the faulty candidate
// ------------------------
Outputs dH_zero(const Golden& g) {
  Outputs o = fp32_reference(g);
  scale(o, "dH", 0.0);
  return o;
}
Outputs dW_half(const Golden& g) {
  Outputs o = fp32_reference(g);
  scale(o, "dW", 0.5);
  return o;
}
Outputs dW_09(const Golden& g) {
  Outputs o = fp32_reference(g);
  scale(o, "dW", 0.9);
  return o;
}
Outputs grads_101(const Golden& g) {
  Outputs o = fp32_reference(g);
  for (const char* n : {"dH", "dW", "db"}) scale(o, n, 1.01);
  return o;
}
Outputs loss_1e3(const Golden& g) {
  Outputs o = fp32_reference(g);
  for (const char* n : {"loss", "reduced_loss"}) scale(o, n, 1 + 1e-3);
  return o;
}
Outputs bf16_logits_all(const Golden& g) {
  ModelKnobs k;
  k.bf16_rows_end = g.N;
  return model_candidate(g, k);
}
Outputs bf16_logits_last_quarter(const Golden& g) {
  ModelKnobs k;
  k.bf16_rows_begin = g.N - quarter(g);
  k.bf16_rows_end = g.N;
  return model_candidate(g, k);
}
Outputs dW_bf16_chunks(const Golden& g) {
  ModelKnobs k;
  k.chunk_tokens = quarter(g);
  k.dW_chunk_sum = DType::bf16;
  return model_candidate(g, k);
}
Outputs loss_bf16_chunks(const Golden& g) {
  ModelKnobs k;
  k.chunk_tokens = quarter(g);
  k.loss_chunk_sum = DType::bf16;
  return model_candidate(g, k);
}
Outputs ignore_index_disregarded(const Golden& g) {
  ModelKnobs k;
  k.disregard_ignore_index = true;
  return model_candidate(g, k);
}
Outputs upstream_disregarded(const Golden& g) {
  ModelKnobs k;
  k.disregard_upstream = true;
  return model_candidate(g, k);
}
Outputs own_count(const Golden& g) {
  ModelKnobs k;
  k.disregard_normalizer = true;
  return model_candidate(g, k);
}
Outputs stale_row(const Golden& g) {
  Outputs o = fp32_reference(g);
  const std::int64_t to = g.N / 2, from = std::max<std::int64_t>(0, to - 1);
  output(o, "loss").set(to, output(o, "loss").get(from));
  output(o, "lse").set(to, output(o, "lse").get(from));
  if (holds(o, "dH")) {
    Tensor& dH = output(o, "dH");
    for (std::int64_t d = 0; d < g.D; ++d) dH.set(to * g.D + d, dH.get(from * g.D + d));
  }
  return o;
}
Outputs one_nan(const Golden& g) {
  Outputs o = fp32_reference(g);
  Tensor& dW = output(o, "dW");
  dW.set((g.V / 2) * g.D + g.D / 2, std::numeric_limits<double>::quiet_NaN());
  return o;
}
Outputs dW_rows_rotated(const Golden& g) {
  Outputs o = fp32_reference(g);
  Tensor& dW = output(o, "dW");
  std::vector<double> v(static_cast<std::size_t>(dW.numel()));
  dW.read(0, dW.numel(), v.data());
  std::rotate(v.begin(), v.begin() + g.D, v.end());  // row j holds row j+1's, the last row 0's
  dW = tensor("dW", DType::fp32, {g.V, g.D}, v);
  return o;
}

// The first registered strategy of candidate_backend(g), in the recipe of the bf16 policy
// (input/bf16/fp32/bf16): a correct candidate of that policy, as verify's differential baseline
// runs it.
Outputs bf16_strategy(const Golden& g) {
  const DType in = g.problem.input_dtype();
  const Recipe r = *policy_recipe(make_verify_policy("bf16"), in);
  const Backend b = candidate_backend(g);
  for (const StrategyEntry& e : strategy_table())
    if (auto st = make_strategy(b, e.name)) return run_strategy_candidate(g, *st, r).outputs;
  throw InputError(fmt::format("no strategy of the registry runs on {}", to_string(b)));
}
Outputs dW_09_bf16(const Golden& g) {
  Outputs o = bf16_strategy(g);
  scale(o, "dW", 0.9);
  return o;
}
Outputs grads_101_bf16(const Golden& g) {
  Outputs o = bf16_strategy(g);
  for (const char* n : {"dH", "dW", "db"}) scale(o, n, 1.01);
  return o;
}
Outputs loss_1e3_bf16(const Golden& g) {
  Outputs o = bf16_strategy(g);
  for (const char* n : {"loss", "reduced_loss"}) scale(o, n, 1 + 1e-3);
  return o;
}

Outputs sequential_fp32(const Golden& g) {
  ModelKnobs k;
  k.fp32_sequential = true;
  return model_candidate(g, k);
}
Outputs sequential_fp32_lse_minus_target(const Golden& g) {
  // Beyond the model's work limit (minutes of CPU), the CUDA sequential-sum model in the fp32
  // policy's recipe: the same sequential orders, loss = lse − x_t (gpu/cuda/naive.cu).
  if (static_cast<double>(g.N) * static_cast<double>(g.V) * static_cast<double>(g.D) >
      kSequentialWork) {
    const Recipe r = *policy_recipe(make_verify_policy("fp32"), g.problem.input_dtype());
    const auto models = make_baseline_models(r, Backend::cuda);
    if (models.empty()) throw InputError("this build has no CUDA sequential-sum model");
    return run_strategy_candidate(g, *models.front(), r).outputs;
  }
  ModelKnobs k;
  k.fp32_sequential = true;
  k.loss_as_lse_minus_target = true;
  return model_candidate(g, k);
}
Outputs bf16_loss(const Golden& g) {
  Outputs o = fp32_reference(g);
  for (auto& [n, t] : o)
    if (n == "loss" || n == "lse" || n == "reduced_loss") {
      std::vector<double> v(static_cast<std::size_t>(t.numel()));
      t.read(0, t.numel(), v.data());
      t = tensor(n, DType::bf16, t.shape(), v);  // Tensor::set rounds to nearest even
    }
  return o;
}

}  // namespace

Backend candidate_backend(const Golden& g) {
  const double work =
      static_cast<double>(g.N) * static_cast<double>(g.V) * static_cast<double>(g.D);
  return work > kEmulationWork && cuda_device_available() ? Backend::cuda : Backend::cpu_emulation;
}

Outputs fp32_reference(const Golden& g) {
  if (g.partial || g.J != g.V)
    throw InputError(fmt::format(
        "{}: a golden file of sampled rows; the selftest's candidates need every token and "
        "vocabulary row",
        g.path));
  return fp32_outputs(g, g.loss, g.lse, g.reduced_loss.value_or(std::nan("")), g.dH, g.dW, g.db);
}

std::vector<MadeCandidate> correct_candidates() {
  const std::vector<GoldenKind> all = {GoldenKind::mean, GoldenKind::ignore_normalizer,
                                       GoldenKind::none_upstream};
  return {
      {"fp32 reference", "the certified reference rounded to fp32 (as a numpy fp32 candidate)",
       "fp32", false, all, fp32_reference},
      {"fp32 sequential",
       "fp32 throughout: logits by sequential dot products, sum-exp in one sequential pass over "
       "the vocabulary, the loss as (max − z_t) + log Σ exp(z − max), dH and dW by sequential "
       "sums",
       "fp32", false, all, sequential_fp32, kSequentialWork},
      {"fp32 sequential, lse − z_t",
       "the fp32 sequential candidate with the loss as lse − z_t (numpy's logsumexp(z) − z[t]) "
       "instead of (max − z_t) + log Σ exp(z − max); above N·V·D = 2^36 the CUDA sequential-sum "
       "model in the fp32 policy's recipe (the same orders; a member of a CUDA baseline, so "
       "there only its bound check is informative)",
       "fp32", false, all, sequential_fp32_lse_minus_target, kSequentialWork, true},
      {"bf16 loss",
       "the fp32 reference with loss, lse and reduced_loss stored in bf16 (PyTorch's bf16 "
       "F.cross_entropy)",
       "bf16", false, all, bf16_loss},
  };
}

std::vector<MadeCandidate> fault_catalogue() {
  const std::vector<GoldenKind> main = {GoldenKind::mean};
  auto f = [](std::string name, std::string what, std::vector<GoldenKind> on,
              Outputs (*make)(const Golden&)) {
    return MadeCandidate{std::move(name), std::move(what), "fp32", true, std::move(on), make};
  };
  auto bf16 = [](std::string name, std::string what, Outputs (*make)(const Golden&)) {
    return MadeCandidate{std::move(name), std::move(what), "bf16", true, {GoldenKind::mean}, make};
  };
  // A scale fault: its relative size and the outputs it scales.
  auto scaled = [](MadeCandidate m, double delta, std::vector<std::string> outputs) {
    m.scale_delta = delta;
    m.scaled = std::move(outputs);
    return m;
  };
  const std::vector<std::string> grads = {"dH", "dW", "db"}, losses = {"loss", "reduced_loss"};
  return {
      scaled(f("dH = 0", "the backward forgets dH (all zeros)", main, dH_zero), 1.0, {"dH"}),
      scaled(f("dW × 0.5",
               "dW halved (the mean's divisor applied twice, or a 2× accumulation divisor)", main,
               dW_half),
             0.5, {"dW"}),
      scaled(f("dW × 0.9", "dW 10% small (a wrong divisor, a dropped tenth of the tokens)", main,
               dW_09),
             0.1, {"dW"}),
      scaled(f("gradients × 1.01", "dH, dW (and db) 1% large (a scale off by 1%)", main, grads_101),
             0.01, grads),
      scaled(f("loss × (1 + 1e-3)", "loss and reduced_loss 1e-3 relative too large (a biased loss)",
               main, loss_1e3),
             1e-3, losses),
      f("bf16 logits, all rows",
        "logits rounded to bf16 for every row under a policy of fp32 logits (a lowered precision)",
        main, bf16_logits_all),
      f("bf16 logits, last quarter",
        "logits rounded to bf16 for the last quarter of the token rows only (one chunk's path)",
        main, bf16_logits_last_quarter),
      f("dW chunks summed in bf16", "dW accumulated across four token chunks in a bf16 buffer",
        main, dW_bf16_chunks),
      f("loss chunks summed in bf16", "the reduced loss summed across four token chunks in bf16",
        main, loss_bf16_chunks),
      f("ignore_index disregarded",
        "rows whose target is ignore_index computed with target t mod V (Python's negative index) "
        "and counted",
        {GoldenKind::ignore_normalizer}, ignore_index_disregarded),
      f("upstream disregarded",
        "reduction none: the upstream gradient dL/dloss_i taken as 1 for every token",
        {GoldenKind::none_upstream}, upstream_disregarded),
      f("own count, not the normaliser",
        "the mean over the batch's own valid rows instead of the given normaliser",
        {GoldenKind::ignore_normalizer}, own_count),
      f("stale row", "token row N/2's loss, lse and dH are row N/2 − 1's (a stale buffer)", main,
        stale_row),
      f("one NaN", "one NaN in dW (an uninitialised element)", main, one_nan),
      f("dW rows permuted", "dW's rows rotated by one (an off-by-one vocabulary index)", main,
        dW_rows_rotated),
      // From a correct candidate of the bf16 policy (the first emulated strategy in its recipe),
      // each value scaled and stored in bf16 again.
      scaled(
          bf16("dW × 0.9, bf16 policy", "dW 10% small, in a bf16 recipe's candidate", dW_09_bf16),
          0.1, {"dW"}),
      scaled(bf16("gradients × 1.01, bf16 policy",
                  "dH, dW (and db) 1% large, in a bf16 recipe's candidate", grads_101_bf16),
             0.01, grads),
      scaled(bf16("loss × (1 + 1e-3), bf16 policy",
                  "loss and reduced_loss 1e-3 relative too large, in a bf16 recipe's candidate",
                  loss_1e3_bf16),
             1e-3, losses),
  };
}

}  // namespace xentlab::selftest

// `xentlab candidate golden.h5 out.h5 --strategy S --recipe R`: runs one of the lab's strategies
// (the CPU emulation, or the CUDA kernels) on a golden file's problem, with its loss spec, upstream
// gradient and normaliser, and writes what it returns as a candidate file (docs/formats.md) that
// `xentlab verify` scores like any other implementation's: the lab's own strategies as candidates.
#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "cli/options/reference.hpp"
#include "datasets/generators.hpp"
#include "datasets/io/atomic_file.hpp"
#include "gpu/registry.hpp"
#include "harness/text.hpp"
#include "harness/verify/golden.hpp"
#include "harness/verify/memory.hpp"
#include "harness/verify/verify.hpp"
#include "numerics/error.hpp"
#include "numerics/recipe.hpp"

namespace xentlab::cli {
namespace {

struct CandidateArgs {
  std::string golden, out, strategy, recipe, backend = "cpu", memory_budget;
  std::int64_t chunk_tokens = 0;
  bool force = false;
};

template <class Vec>  // std::vector<double> or HostArray<double>
Tensor tensor_of(const Vec& v, DType dtype, std::vector<std::int64_t> shape, const char* name) {
  Tensor t(dtype, std::move(shape), name);
  store_rounded(t, 0, v.data(), static_cast<std::int64_t>(v.size()));  // exact: already in dtype
  return t;
}

int run_candidate(const CandidateArgs& a) {
  Backend backend;
  if (a.backend == "cpu")
    backend = Backend::cpu_emulation;
  else if (a.backend == "cuda")
    backend = Backend::cuda;
  else
    throw InputError(fmt::format("--backend must be cpu or cuda, got '{}'", a.backend));
  if (a.chunk_tokens < 0)
    throw InputError(
        fmt::format("--chunk-tokens must be ≥ 0 (0: the strategy's own), got {}", a.chunk_tokens));
  const Recipe recipe = parse_recipe(a.recipe);
  const std::vector<std::unique_ptr<Strategy>> strategies =
      make_strategies(backend, StrategySet::all);
  if (strategies.empty())
    throw InputError("--backend cuda: this build of xentlab has no CUDA backend");
  const auto it = std::find_if(strategies.begin(), strategies.end(),
                               [&](const auto& s) { return s->name() == a.strategy; });
  if (it == strategies.end()) {
    std::vector<std::string> names;
    for (const auto& s : strategies) names.push_back(s->name());
    throw InputError(
        fmt::format("--strategy '{}': no such strategy on the {} backend (there are: {})",
                    a.strategy, a.backend, fmt::join(names, ", ")));
  }
  const Strategy& st = **it;
  if (a.chunk_tokens > 0 && !strategy_traits(st.name()).chunks_tokens) {
    std::vector<std::string> chunking;
    for (const StrategyEntry& e : strategy_table())
      if (e.traits.chunks_tokens) chunking.emplace_back(e.name);
    throw InputError(fmt::format(
        "--chunk-tokens {}: {} does not work through the tokens in chunks ({} do); leave the "
        "option out",
        a.chunk_tokens, st.name(), fmt::join(chunking, ", ")));
  }
  if (same_output_file(a.out, a.golden))  // even with --force: the golden file is the input
    throw InputError(fmt::format("{} is the golden file {} itself: write the candidate elsewhere",
                                 a.out, a.golden));
  { AtomicOutput probe(a.out, a.force); }  // refuse an existing file before the work
  const std::int64_t budget = parse_memory_budget(a.memory_budget);
  check_golden_read_memory(a.golden, budget, "candidate");
  const Golden g = read_golden(a.golden);
  const Status can = st.can_implement(g.problem, g.spec, recipe);
  if (!can.ok())
    throw InputError(fmt::format("{} cannot run recipe {} on {}: {}", st.name(), recipe.name(),
                                 a.golden, can.message));
  RunRequest req;
  req.problem = &g.problem;
  req.spec = g.spec;
  req.upstream = g.upstream;
  req.recipe = recipe;
  req.chunk_tokens = a.chunk_tokens;
  req.want_grads = g.D > 0 ? (!g.dH.empty() || !g.dW.empty() || !g.db.empty()) : !g.dz.empty();
  // What the run and the file's outputs hold, refused before the strategy runs when over the
  // budget.
  check_memory_estimate(
      candidate_memory(g, st, req), MemoryBudget::from(budget),
      fmt::format("candidate {} {} on {}", st.name(), recipe.name(), a.golden),
      "run it on a golden file of a smaller problem, or give a larger --memory-budget on a "
      "machine that has it");
  const StrategyOutputs o = st.run(req);
  const std::int64_t N = g.N, V = g.V, D = g.D;
  std::vector<std::pair<std::string, Tensor>> outputs;
  outputs.emplace_back("loss", tensor_of(o.loss, o.loss_dtype, {N}, "loss"));
  outputs.emplace_back("lse", tensor_of(o.lse, o.loss_dtype, {N}, "lse"));
  outputs.emplace_back("reduced_loss", tensor_of(std::vector<double>{o.reduced_loss}, o.loss_dtype,
                                                 {}, "reduced_loss"));
  if (!o.dH.empty()) outputs.emplace_back("dH", tensor_of(o.dH, o.grad_dtype, {N, D}, "dH"));
  if (!o.dW.empty()) outputs.emplace_back("dW", tensor_of(o.dW, o.grad_dtype, {V, D}, "dW"));
  if (!o.db.empty()) outputs.emplace_back("db", tensor_of(o.db, o.grad_dtype, {V}, "db"));
  if (!o.dz.empty()) outputs.emplace_back("dz", tensor_of(o.dz, o.grad_dtype, {N, V}, "dz"));
  const std::string impl =
      fmt::format("xentlab {} {} {}{}", to_string(st.backend()), st.name(), recipe.name(),
                  a.chunk_tokens > 0 ? fmt::format(" chunk_tokens={}", a.chunk_tokens) : "");
  write_candidate(a.out, a.force, outputs, impl);
  std::vector<std::string> names;
  for (const auto& [n, t] : outputs) names.push_back(n);
  fmt::print("candidate  {} ({}): {} in {:.3f} s\n", a.out, impl, fmt::join(names, ", "),
             o.seconds);
  return 0;
}

}  // namespace

void register_candidate(CLI::App& app) {
  auto a = std::make_shared<CandidateArgs>();
  CLI::App* c = app.add_subcommand(
      "candidate",
      "Run one of the lab's strategies on a golden file's problem and write its outputs as a "
      "candidate file for xentlab verify");
  c->add_option("golden", a->golden, "golden file (xentlab golden)")->required();
  c->add_option("out", a->out, "candidate file to write (docs/formats.md)")->required();
  c->add_option("--strategy", a->strategy, "naive, chunked, checkpointed or fused")->required();
  c->add_option("--recipe", a->recipe,
                "the arithmetic in/logits/accum/grad, e.g. bf16/bf16/fp32/bf16 (its input dtype "
                "is the golden problem's)")
      ->required();
  c->add_option("--backend", a->backend, "cpu (the emulation) or cuda (the kernels)")
      ->capture_default_str();
  c->add_option("--chunk-tokens", a->chunk_tokens,
                "tokens per chunk of chunked and checkpointed (0: the strategy's own)")
      ->capture_default_str();
  c->add_flag("--force", a->force, "overwrite an existing candidate file");
  add_memory_budget_option(c, a->memory_budget);
  c->callback([a]() {
    const int rc = run_candidate(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace xentlab::cli

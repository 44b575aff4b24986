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
#include "gpu/plans/vocab_shards.hpp"
#include "gpu/registry.hpp"
#include "harness/text.hpp"
#include "harness/verify/candidate.hpp"
#include "harness/verify/golden.hpp"
#include "harness/verify/memory.hpp"
#include "harness/verify/verify.hpp"
#include "numerics/error.hpp"
#include "numerics/no_device.hpp"
#include "numerics/recipe.hpp"

namespace xentlab::cli {
namespace {

struct CandidateArgs {
  std::string golden, out, out_positional, strategy, recipe, backend = "cpu", memory_budget;
  std::int64_t chunk_tokens = 0;
  std::int64_t ranks = 1;
  bool ranks_given = false;
  std::int64_t vocab_splits = 0;
  std::string local_strategy;  ///< --local-strategy (empty: not given)
  bool force = false;
};

// --ranks and --local-strategy (as xentlab audit's), before the golden file is read: P a number of
// ranks, given only with a strategy that shards the vocabulary (they would be ignored), which must
// run P ranks and compose the local part on this backend.
void check_vocab_parallel_options(const CandidateArgs& a, const Strategy& st) {
  if (a.ranks_given) try {
      check_vocab_ranks(a.ranks);
    } catch (const InputError& e) {
      throw InputError(fmt::format("--ranks: {}", e.what()));
    }
  if (!a.ranks_given && a.local_strategy.empty()) return;
  const std::string given =
      a.ranks_given ? fmt::format("--ranks {}", a.ranks) : "--local-strategy " + a.local_strategy;
  if (!strategy_traits(st.name()).shards_vocabulary) {
    const std::vector<std::string> names = vocabulary_sharding_strategies();
    throw InputError(fmt::format(
        "{} applies to the strategies that shard the vocabulary ({}), and --strategy is {} (e.g. "
        "--strategy {} {})",
        given, fmt::join(names, ", "), st.name(), names.empty() ? "" : names.front(), given));
  }
  const Status ranks_ok = st.can_run_ranks(a.ranks);
  if (!ranks_ok.ok())
    throw InputError(fmt::format("--ranks {}: {} on the {} backend: {}", a.ranks, st.name(),
                                 a.backend, ranks_ok.message));
  const Status local_ok = st.can_run_local(a.local_strategy);
  if (!local_ok.ok())
    throw InputError(fmt::format("--local-strategy {}: {}", a.local_strategy, local_ok.message));
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
  std::string no_device;
  if (backend == Backend::cuda && !cuda_device_available(&no_device))
    throw NoDeviceError("--backend cuda: " + no_device);
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
  check_vocab_parallel_options(a, st);
  if (a.vocab_splits < 0)
    throw InputError(fmt::format("--vocab-splits must be ≥ 0 (0: from the memory budget), got {}",
                                 a.vocab_splits));
  if (a.vocab_splits > 0 && !strategy_traits(st.name()).splits_vocabulary) {
    const std::vector<std::string> splitting = vocabulary_splitting_strategies();
    throw InputError(fmt::format(
        "--vocab-splits {}: {} does not split the vocabulary ({} do); leave the option out",
        a.vocab_splits, st.name(), fmt::join(splitting, ", ")));
  }
  if (same_output_file(a.out, a.golden))  // even with --force: the golden file is the input
    throw InputError(fmt::format("{} is the golden file {} itself: write the candidate elsewhere",
                                 a.out, a.golden));
  { AtomicOutput probe(a.out, a.force); }  // refuse an existing file before the work
  const std::int64_t budget = parse_memory_budget(a.memory_budget);
  check_golden_read_memory(a.golden, budget, "candidate");
  const Golden g = read_golden(a.golden);
  if (const std::string w = golden_checksum_warning(g); !w.empty())
    fmt::print(stderr, "xentlab: warning: {}\n", w);
  if (a.ranks_given) try {
      (void)vocab_shards(g.V, a.ranks);
    } catch (const InputError& e) {
      throw InputError(fmt::format("--ranks {}: {} of {}", a.ranks, e.what(), a.golden));
    }
  // What the run and the file's outputs hold, refused before the strategy runs when over the
  // budget.
  {
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
    req.ranks = static_cast<int>(a.ranks);
    req.local_strategy = a.local_strategy;
    req.vocab_splits = a.vocab_splits;
    req.want_grads = g.D > 0 ? (!g.dH.empty() || !g.dW.empty() || !g.db.empty()) : !g.dz.empty();
    check_memory_estimate(
        candidate_memory(g, st, req), MemoryBudget::from(budget),
        fmt::format("candidate {} {} on {}", st.name(), recipe.name(), a.golden),
        "run it on a golden file of a smaller problem, or give a larger --memory-budget on a "
        "machine that has it");
  }
  const StrategyCandidate c = run_strategy_candidate(
      g, st, recipe, a.chunk_tokens, static_cast<int>(a.ranks), a.local_strategy, a.vocab_splits);
  const auto& outputs = c.outputs;
  const std::string& impl = c.implementation;
  write_candidate(a.out, a.force, outputs, impl);
  std::vector<std::string> names;
  for (const auto& [n, t] : outputs) names.push_back(n);
  fmt::print("candidate  {} ({}): {} in {:.3f} s\n", a.out, impl, fmt::join(names, ", "),
             c.seconds);
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
  // The output is --out, as in audit and golden; a second positional argument is read as --out
  // (the spelling of earlier versions, kept working).
  // Named "output", not "out": CLI11 from 2.2 on refuses a positional named as an option's long
  // name ("out is already added") when the subcommand is registered, breaking every command.
  c->add_option("output", a->out_positional,
                "the candidate file as a second argument: the same as --out");
  c->add_option("--out,-o", a->out, "candidate file to write (docs/formats.md)");
  c->add_option("--strategy", a->strategy,
                "naive, chunked, checkpointed, fused, vocab_parallel (with --ranks) or "
                "vocab_chunked")
      ->required();
  c->add_option("--recipe", a->recipe,
                "the arithmetic in/logits/accum/grad, e.g. bf16/bf16/fp32/bf16 (its input dtype "
                "is the golden problem's)")
      ->required();
  c->add_option("--backend", a->backend, "cpu (the emulation) or cuda (the kernels)")
      ->capture_default_str();
  c->add_option("--chunk-tokens", a->chunk_tokens,
                "tokens per chunk of chunked and checkpointed, or per token group of fused's "
                "backward (0: the strategy's own)")
      ->capture_default_str();
  auto* ranks = c->add_option("--ranks", a->ranks,
                              "vocabulary-parallel ranks P of vocab_parallel (its shards: "
                              "docs/vocab_parallel.md), 1 to V; only with --strategy "
                              "vocab_parallel")
                    ->capture_default_str();
  c->add_option("--local-strategy", a->local_strategy,
                "the strategy each rank of vocab_parallel runs over its shard: naive, chunked, "
                "checkpointed or fused on the cpu backend, chunked on cuda (default chunked); only "
                "with --strategy vocab_parallel")
      ->check(non_empty());
  c->add_option("--vocab-splits", a->vocab_splits,
                "vocabulary splits of vocab_chunked, 1 to V (0: the fewest whose logits slab of "
                "all tokens fits 1 GiB); only with --strategy vocab_chunked")
      ->capture_default_str();
  c->add_flag("--force", a->force, "overwrite an existing candidate file");
  add_memory_budget_option(c, a->memory_budget);
  c->callback([a, ranks]() {
    a->ranks_given = ranks->count() > 0;
    if (!a->out.empty() && !a->out_positional.empty())
      throw InputError(
          fmt::format("the candidate file is named twice ({} and --out {}): give --out "
                      "alone",
                      a->out_positional, a->out));
    if (a->out.empty()) a->out = a->out_positional;
    if (a->out.empty())
      throw InputError(
          "no candidate file named: give --out FILE (xentlab candidate GOLDEN --out "
          "FILE --strategy S --recipe R)");
    const int rc = run_candidate(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace xentlab::cli

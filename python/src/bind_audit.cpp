// xentlab._xentlab: the audit (CPU emulation backend).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <string>
#include <vector>

#include "datasets/catalog.hpp"
#include "gpu/registry.hpp"
#include "harness/audit/audit.hpp"
#include "numerics/error.hpp"
#include "numerics/recipe.hpp"
#include "python/src/common.hpp"
#include "reference/reference.hpp"

namespace xentlab::python {
namespace {

nb::dict run_record(const audit::RunRecord& r) {
  nb::dict d;
  d["problem"] = r.problem;
  d["regime"] = r.regime;
  d["strategy"] = r.strategy;
  d["backend"] = r.backend;
  d["device"] = r.device;
  d["recipe"] = r.recipe.name();
  d["spec"] = r.spec;
  d["chunk_tokens"] = r.chunk_tokens;
  d["upstream"] = r.upstream;
  // A strategy that shards the vocabulary: its ranks and local part (0 and None otherwise).
  d["ranks"] = r.ranks;
  if (r.ranks > 0)
    d["local_strategy"] = r.local_strategy;
  else
    d["local_strategy"] = nb::none();
  // A strategy that splits the vocabulary on one device: the run's splits (0 otherwise).
  d["vocab_splits"] = r.vocab_splits;
  d["input_dtype"] = std::string(to_string(r.input));
  d["disposition"] = std::string(to_string(r.verdict.disposition));
  d["output"] = r.verdict.output;
  d["reason"] = r.verdict.reason;
  d["max_ratio"] = r.verdict.ratio;
  d["bound_meaningful"] = r.bound_meaningful;
  d["bound_note"] = r.bound_note;
  d["baseline_note"] = r.baseline_note;
  d["seconds"] = r.seconds;
  nb::dict outs;
  for (const auto& o : r.outputs) outs[o.name.c_str()] = stats_dict(o.stats);
  d["outputs"] = outs;
  return d;
}

nb::dict verdict_row(const audit::VerdictRow& v) {
  nb::dict d;
  d["regime"] = v.regime;
  d["output"] = v.output;
  d["input"] = v.input;
  d["err_fp32_logits"] = v.err_fp32_logits;
  d["err_bf16_logits"] = v.err_bf16_logits;
  d["err_reduced_accum_best"] = v.err_reduced_accum_best;
  d["reduced_accum_best_recipe"] = v.reduced_accum_best_recipe;
  d["floor"] = v.floor;
  d["logits_bf16_ok"] = v.logits_bf16_ok;
  d["accum_fp32_needed"] = v.accum_fp32_needed;
  d["accum_tested"] = v.accum_tested;
  d["logits_why"] = v.logits_why;
  d["accum_why"] = v.accum_why;
  for (const auto& [name, a] :
       {std::pair<const char*, const audit::VerdictRow::Accum*>{"accum_bf16", &v.accum_bf16},
        {"accum_fp16", &v.accum_fp16}}) {
    nb::dict x;
    x["tested"] = a->tested;
    x["harmless"] = a->harmless;
    x["err"] = a->err;
    x["twin_err"] = a->twin_err;
    x["recipe"] = a->recipe;
    x["worst_err"] = a->worst_err;
    x["worst_twin_err"] = a->worst_twin_err;
    x["worst_recipe"] = a->worst_recipe;
    d[name] = x;
  }
  return d;
}

struct AuditProblems {
  std::vector<audit::AuditProblem> items;
};

nb::dict run_audit(const AuditProblems& ps, const std::vector<std::string>& strategies,
                   const std::vector<std::string>& recipes, const std::string& backend,
                   std::int64_t rows, std::int64_t vocab_rows, std::uint64_t seed,
                   const std::string& policy, const std::string& tier, std::int64_t memory_budget,
                   std::optional<std::string> out, bool force, bool append,
                   std::int64_t chunk_tokens, const std::string& upstream,
                   std::optional<std::int64_t> ranks, std::optional<std::string> local_strategy,
                   std::optional<std::int64_t> vocab_splits) {
  audit::AuditConfig cfg;
  cfg.chunk_tokens = chunk_tokens;
  cfg.upstream = upstream;
  cfg.strategies = strategies;
  if (ranks || local_strategy) {
    // As the command's --ranks and --local-strategy: given without a strategy that shards the
    // vocabulary, they would be ignored.
    const std::string given = ranks ? fmt::format("ranks={}", *ranks)
                                    : fmt::format("local_strategy='{}'", *local_strategy);
    bool sharding = false;
    for (const std::string& s : strategies)
      sharding = sharding || strategy_traits(s).shards_vocabulary;
    if (!sharding) {
      const std::vector<std::string> names = vocabulary_sharding_strategies();
      throw InputError(fmt::format(
          "{} applies to the strategies that shard the vocabulary ({}), and strategies names "
          "none (e.g. strategies=['{}'], {})",
          given, fmt::join(names, ", "), names.empty() ? "" : names.front(), given));
    }
  }
  if (ranks) cfg.ranks = *ranks;
  if (local_strategy) cfg.local_strategy = *local_strategy;
  if (vocab_splits && *vocab_splits < 0)
    throw InputError(fmt::format(
        "vocab_splits must be >= 0 (0 = from the default slab budget), got {}", *vocab_splits));
  if (vocab_splits && *vocab_splits > 0) {
    // As the command's --vocab-splits: without a strategy that splits the vocabulary it would be
    // ignored (0 is the default, accepted with any strategies).
    bool splitting = false;
    for (const std::string& s : strategies)
      splitting = splitting || strategy_traits(s).splits_vocabulary;
    if (!splitting) {
      const std::vector<std::string> names = vocabulary_splitting_strategies();
      throw InputError(fmt::format(
          "vocab_splits={} applies to the strategies that split the vocabulary ({}), and "
          "strategies names none (e.g. strategies=['{}'], vocab_splits={})",
          *vocab_splits, fmt::join(names, ", "), names.empty() ? "" : names.front(),
          *vocab_splits));
    }
    cfg.vocab_splits = *vocab_splits;
  }
  for (const auto& r : recipes) cfg.recipes.push_back(parse_recipe(r));
  if (backend == "cpu") {
    cfg.backend = Backend::cpu_emulation;
    cfg.device = "cpu-emulation";
  } else {
    throw InputError(fmt::format(
        "backend '{}': the Python package audits on the CPU emulation (backend 'cpu'); the CUDA "
        "backend is `xentlab audit --backend cuda`",
        backend));
  }
  cfg.rows = rows;
  cfg.vocab_rows = vocab_rows;
  cfg.seed = seed;
  cfg.policy = policy;
  policy_by_name(policy);
  cfg.reference_tier = parse_reference_tier(tier);
  cfg.reference_memory = memory_budget;
  // append: a problem the file records as another is refused before the work.
  if (out && append) audit::check_append_problems(*out, ps.items, cfg);
  audit::AuditResult res;
  {
    nb::gil_scoped_release release;
    res = audit::run_audit(ps.items, cfg);
  }
  audit::require_some_run(res);
  if (out) {
    nb::gil_scoped_release release;
    audit::write_results(*out, res, cfg, force, append);
  }
  nb::dict d;
  nb::list runs, verdict;
  for (const auto& r : res.runs) runs.append(run_record(r));
  for (const auto& v : res.verdict) verdict.append(verdict_row(v));
  d["runs"] = runs;
  d["verdict"] = verdict;
  d["passed"] = res.passed;
  d["measured"] = res.measured;
  d["incorrect"] = res.incorrect;
  d["not_supported"] = res.not_supported;
  d["failed"] = res.failed;
  d["summary"] = audit::format_summary(res, false);
  d["markdown"] = audit::format_summary(res, true);
  return d;
}

}  // namespace

void bind_audit(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<AuditProblems>(m, "_AuditProblems")
      .def(nb::init<>())
      .def("add",
           [](AuditProblems& ps, const std::string& name, const std::string& regime,
              const DatasetInstance& d, const LossSpec& s) {
             ps.items.push_back({name, regime, d.problem, s});
           })
      .def("add_default_set",
           [](AuditProblems& ps, std::uint64_t seed, std::int64_t tokens, std::int64_t hidden,
              const std::vector<std::string>& only) {
             auto all = audit::default_problem_set(seed, tokens, hidden, only);
             for (const auto& w : only) {
               bool found = false;
               for (const auto& p : all) found = found || p.name == w;
               if (!found)
                 throw InputError(fmt::format(
                     "unknown problem '{}' of the embedded set (see xentlab audit --help; "
                     "catalog datasets and files go to --dataset)",
                     w));
             }
             for (auto& p : all) ps.items.push_back(std::move(p));
           })
      .def_prop_ro("names", [](const AuditProblems& ps) {
        std::vector<std::string> n;
        for (const auto& p : ps.items) n.push_back(p.name);
        return n;
      });
  m.def("run_audit", &run_audit, "problems"_a, "strategies"_a, "recipes"_a, "backend"_a, "rows"_a,
        "vocab_rows"_a, "seed"_a, "policy"_a, "tier"_a, "memory_budget"_a, "out"_a.none(),
        "force"_a, "append"_a, "chunk_tokens"_a, "upstream"_a, "ranks"_a.none(),
        "local_strategy"_a.none(), "vocab_splits"_a.none());
  m.def("strategy_names", [] { return strategy_names(Backend::cpu_emulation); });
  m.def("default_recipe_grid", [] {
    std::vector<std::string> names;
    for (const Recipe& r : default_recipe_grid()) names.push_back(r.name());
    return names;
  });
}

}  // namespace xentlab::python

#include "harness/audit/audit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "datasets/problem_ops.hpp"
#include "gpu/plans/vocab_shards.hpp"
#include "gpu/registry.hpp"
#include "harness/audit/blocked.hpp"
#include "judge/bounds_for.hpp"
#include "judge/emulation_check.hpp"
#include "numerics/error.hpp"
#include "numerics/memory.hpp"
#include "reference/reference.hpp"

namespace xentlab::audit {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const OutputRecord* find_output(const RunRecord& r, const std::string& name) {
  for (const auto& o : r.outputs)
    if (o.name == name) return &o;
  return nullptr;
}

// The reference and bounds of one problem in one input dtype.
struct Prepared {
  Problem problem;
  ReferenceResult ref;
  std::vector<std::int64_t> orig_rows;
  std::vector<double> upstream;  ///< reduction none: g over the sub-batch's rows; empty = ones
};

}  // namespace

AuditedRows audited_rows(const AuditProblem& ap, const AuditConfig& cfg) {
  AuditedRows r;
  const std::int64_t N = ap.problem.N;
  const std::int64_t rows = ap.rows >= 0 ? ap.rows : cfg.rows;
  if (rows > 0 && rows < N) {
    r.token_rows = sample_rows(N, rows, cfg.seed);
  } else {
    r.token_rows.resize(static_cast<std::size_t>(N));
    for (std::int64_t i = 0; i < N; ++i) r.token_rows[static_cast<std::size_t>(i)] = i;
  }
  const std::int64_t vocab_rows = ap.vocab_rows >= 0 ? ap.vocab_rows : cfg.vocab_rows;
  if (ap.problem.is_linear() && vocab_rows > 0 && vocab_rows < ap.problem.V)
    r.vocab_rows = sample_rows(ap.problem.V, vocab_rows, cfg.seed + 1);
  return r;
}

namespace {

Prepared prepare(const AuditProblem& ap, DType input, const AuditConfig& cfg,
                 std::int64_t reference_bytes) {
  Problem converted;
  try {
    converted = with_input_dtype(ap.problem, input, ap.spec.ignore_index);
  } catch (const InputError& e) {
    throw NoInputVersion(e.what());
  }
  Prepared p{std::move(converted), {}, {}, {}};
  AuditedRows chosen = audited_rows(ap, cfg);
  p.orig_rows = std::move(chosen.token_rows);
  if (static_cast<std::int64_t>(p.orig_rows.size()) < p.problem.N)
    p.problem = select_rows(p.problem, p.orig_rows, ap.spec.ignore_index);
  ReferenceOptions o;
  o.tier = cfg.reference_tier;
  o.max_bytes = reference_bytes > 0 ? reference_bytes : cfg.reference_memory;
  o.want_dz = !p.problem.is_linear();
  o.vocab_rows = std::move(chosen.vocab_rows);
  if (cfg.upstream == "random") p.upstream = random_upstream(p.problem.N, cfg.seed + 2);
  o.upstream = p.upstream;
  p.ref = compute_reference(p.problem, ap.spec, o);
  return p;
}

// The statistics of every output a run produced, in a fixed order (assessed_outputs).
std::vector<OutputRecord> outputs_of(const RunAssessment& a) {
  std::vector<OutputRecord> recs;
  for (const auto& [name, stats] : assessed_outputs(a)) recs.push_back({name, *stats});
  return recs;
}

/// A run that passed every check that applies but whose recipe has no finite a-priori bound on the
/// problem is measured, not passed: nothing bounds its error (docs/audit.md, "What runs", step 4).
void mark_measured(RunRecord& rec) {
  if (rec.verdict.disposition != Disposition::passed || rec.bound_meaningful) return;
  rec.verdict.disposition = Disposition::measured;
  const std::string why =
      fmt::format("measured, not judged: the recipe has no finite a-priori bound on this problem{}",
                  rec.bound_note.empty() ? "" : " (" + rec.bound_note + ")");
  // The checks' own words follow ("largest ratio … ≤ k" over the finite bounds), not "passed".
  std::string checks = rec.verdict.reason;
  if (checks.rfind("passed: ", 0) == 0) checks = checks.substr(8);
  if (checks.rfind("passed", 0) == 0) checks.clear();
  rec.verdict.reason = checks.empty() ? why : why + "; " + checks;
}

// A run record with its identity filled in (problem, strategy, recipe, …); verdict and
// statistics come later.
RunRecord new_record(const AuditProblem& ap, const Strategy& st, const Recipe& recipe, DType input,
                     const AuditConfig& cfg) {
  RunRecord rec;
  rec.problem = ap.name;
  rec.regime = ap.regime;
  rec.strategy = st.name();
  rec.backend = std::string(to_string(st.backend()));
  rec.device = cfg.device;
  rec.recipe = recipe;
  rec.spec = ap.spec.describe();
  rec.input = input;
  rec.chunk_tokens = cfg.chunk_tokens;
  rec.upstream = cfg.upstream;
  if (strategy_traits(st.name()).shards_vocabulary) {
    rec.ranks = cfg.ranks;
    rec.local_strategy = cfg.local_strategy.empty() ? kDefaultLocalStrategy : cfg.local_strategy;
    for (const VocabShard& s : vocab_shards(ap.problem.V, cfg.ranks))
      rec.shard_begins.push_back(s.begin);
  }
  return rec;
}

// Throws InputError for a configuration the audit cannot run (see run_audit); `chosen`, the
// strategies it runs.
void check_config(const std::vector<AuditProblem>& problems, const AuditConfig& cfg,
                  const std::vector<const Strategy*>& chosen) {
  if (problems.empty()) throw InputError("audit: no problems to audit");
  if (cfg.ranks < 1)
    throw InputError(
        fmt::format("audit: vocabulary-parallel ranks must be at least 1 (got {})", cfg.ranks));
  if (cfg.ranks > std::numeric_limits<int>::max())
    throw InputError(fmt::format(
        "audit: vocabulary-parallel ranks {} is past the largest int (each rank is a device)",
        cfg.ranks));
  for (const Strategy* st : chosen) {
    if (!strategy_traits(st->name()).shards_vocabulary) continue;
    const Status ranks_ok = st->can_run_ranks(cfg.ranks);
    if (!ranks_ok.ok())
      throw InputError(fmt::format("audit: {} ({}) with --ranks {}: {}", st->name(),
                                   to_string(st->backend()), cfg.ranks, ranks_ok.message));
    const Status local_ok = st->can_run_local(cfg.local_strategy);
    if (!local_ok.ok())
      throw InputError(fmt::format("audit: {} ({}) with --local-strategy {}: {}", st->name(),
                                   to_string(st->backend()), cfg.local_strategy, local_ok.message));
    for (const AuditProblem& ap : problems) try {
        (void)vocab_shards(ap.problem.V, cfg.ranks);
      } catch (const InputError& e) {
        throw InputError(fmt::format("audit: {} on problem {}: {}", st->name(), ap.name, e.what()));
      }
  }
  if (cfg.vocab_splits < 0)
    throw InputError(
        fmt::format("audit: vocab_splits must be >= 0 (0 = from the default slab budget), got {}",
                    cfg.vocab_splits));
  for (const Strategy* st : chosen) {
    if (!strategy_traits(st->name()).splits_vocabulary || cfg.vocab_splits == 0) continue;
    for (const AuditProblem& ap : problems)
      if (cfg.vocab_splits > ap.problem.V)
        throw InputError(fmt::format(
            "audit: {} on problem {}: vocabulary splits ({}) exceed the vocabulary ({} rows)",
            st->name(), ap.name, cfg.vocab_splits, ap.problem.V));
  }
  if (cfg.chunk_tokens < 0)
    throw InputError(fmt::format(
        "audit: chunk_tokens must be >= 0 token rows per chunk (0 = each strategy's default), "
        "got {}",
        cfg.chunk_tokens));
  if (cfg.upstream != "ones" && cfg.upstream != "random")
    throw InputError(fmt::format("audit: upstream must be ones or random, got '{}'", cfg.upstream));
  if (cfg.upstream == "random")
    for (const AuditProblem& ap : problems)
      if (ap.spec.reduction != Reduction::none)
        throw InputError(fmt::format(
            "audit: upstream random needs reduction none, and problem {} has reduction {} "
            "(give reduction none for every problem, e.g. xentlab audit --reduction none)",
            ap.name, to_string(ap.spec.reduction)));
}

// The strategies of `registered` that cfg.strategies names (those of the default set when it is
// empty), in registry order. Throws InputError for a name that is not registered.
std::vector<const Strategy*> choose_strategies(
    const std::vector<std::unique_ptr<Strategy>>& registered, const AuditConfig& cfg) {
  std::vector<const Strategy*> chosen;
  for (const auto& s : registered)
    if (cfg.strategies.empty() ? strategy_traits(s->name()).in_default_set
                               : std::find(cfg.strategies.begin(), cfg.strategies.end(),
                                           s->name()) != cfg.strategies.end())
      chosen.push_back(s.get());
  for (const auto& name : cfg.strategies) {
    bool known = false;
    for (const auto& s : registered) known = known || s->name() == name;
    if (!known) {
      std::string names;
      for (const auto& s : registered) names += (names.empty() ? "" : ", ") + s->name();
      throw InputError(fmt::format("audit: unknown strategy '{}' (registered: {})", name, names));
    }
  }
  return chosen;
}

// What every run of an audit shares: the configuration, the strategies, the recipes, the policy
// and the CPU emulations a device run is held to.
struct AuditPlan {
  explicit AuditPlan(const AuditConfig& c)
      : cfg(c), registered(make_strategies(c.backend, StrategySet::all)) {}
  const AuditConfig& cfg;
  std::vector<std::unique_ptr<Strategy>> registered;
  std::vector<const Strategy*> chosen;
  std::vector<Recipe> recipes;
  Policy policy;
  std::vector<std::unique_ptr<Strategy>> emulations;  ///< empty for a CPU-emulation audit
  std::int64_t total = 0, done = 0;
  bool timings = false;  ///< XENTLAB_AUDIT_TIMINGS: each run's wall time on stderr
  /// Token rows per block of each (problem, input dtype) audited in blocks (absent: at once).
  std::map<std::pair<std::string, DType>, std::int64_t> block_rows;
  /// The bytes the reference of a linear head may hold (its max_bytes) under a given budget.
  std::map<std::pair<std::string, DType>, std::int64_t> reference_bytes;

  void progress(const std::string& what) const {
    if (cfg.progress) cfg.progress(done, total, what);
  }
  const Strategy* emulation_of(const Strategy& st) const {
    for (const auto& e : emulations)
      if (e->name() == st.name()) return e.get();
    return nullptr;
  }
};

// Every run of the problem in input dtype `input` is not supported, for `reason`.
void record_not_supported(AuditPlan& plan, const AuditProblem& ap, DType input,
                          const std::string& reason, AuditResult& res) {
  for (const Recipe& recipe : plan.recipes) {
    if (recipe.input != input) continue;
    for (const Strategy* st : plan.chosen) {
      RunRecord rec = new_record(ap, *st, recipe, input, plan.cfg);
      rec.verdict = verdict_not_run(Disposition::not_supported, reason);
      res.runs.push_back(std::move(rec));
      ++plan.done;
    }
  }
}

// The problem is audited in other input dtypes only (AuditProblem::inputs): the reason of its runs
// of dtype `input`, naming the dtypes it is audited in.
std::string not_audited_in(const AuditProblem& ap, DType input) {
  std::string in;
  for (const DType t : ap.inputs) in += (in.empty() ? "" : ", ") + std::string(to_string(t));
  return fmt::format(
      "{} is audited with {} inputs only (a real model's head in the dtype its weights are "
      "stored in), not {}",
      ap.name, in, to_string(input));
}

// The problem's record: its sub-batch rows, compared vocabulary rows (a linear problem's; a logits
// problem has no dW/db) and the reference's per-token covariates.
ProblemRecord problem_record_of(const AuditProblem& ap, DType input, const Problem& problem,
                                const ReferenceResult& ref,
                                const std::vector<std::int64_t>& orig_rows) {
  ProblemRecord p;
  p.name = ap.name;
  p.regime = ap.regime;
  p.input = input;
  p.spec = ap.spec.describe();
  p.describe = problem.describe();
  p.targets_drawn_by = problem.targets_drawn_by;
  p.token_rows = orig_rows;
  if (problem.is_linear()) p.vocab_rows = ref.vocab_rows;
  p.loss = ref.loss;
  p.lse = ref.lse;
  p.p_target = ref.p_target;
  p.max_logit = ref.max_logit;
  p.entropy = ref.entropy;
  return p;
}
ProblemRecord problem_record(const AuditProblem& ap, DType input, const Prepared& pr) {
  return problem_record_of(ap, input, pr.problem, pr.ref, pr.orig_rows);
}

// The multiply-adds of a problem's logits (S·V·D; S·V for given logits): the size the baseline
// emulation is limited by (AuditConfig::baseline_max_macs).
double logits_macs(const Problem& pb) {
  return static_cast<double>(pb.N) * static_cast<double>(pb.V) *
         static_cast<double>(std::max<std::int64_t>(pb.D, 1));
}

// The baseline models' assessments of one recipe on a prepared problem, made by the first run
// of that recipe that needs them and shared by the recipe's other strategies: a model is a naive
// variant, whose run depends on the problem, its loss and the recipe only (not on a strategy's
// chunk width, ranks or SM count).
using ModelAssessments = std::optional<std::vector<RunAssessment>>;

// A device run's assessment `as` held to the correct implementations of its recipe that the CPU
// emulation models (judge/emulation_check.hpp): the emulation of the same strategy and the
// baseline models (sequential sums; tensor-core accumulation for 16-bit inputs with fp32
// accumulation), each run on the same request and assessed against the same reference.
Verdict judge_against_baseline_models(const AuditPlan& plan, const Prepared& pr,
                                      const AuditProblem& ap, const RunRequest& req,
                                      const Recipe& recipe, const Strategy& emulation,
                                      const RunAssessment& as, ModelAssessments& models) {
  if (!models) {  // kept only when every model ran (a throw leaves it for the next strategy)
    std::vector<RunAssessment> made;
    for (const auto& m : make_baseline_models(recipe))
      if (m->can_implement(pr.problem, ap.spec, recipe).ok())
        made.push_back(assess_run(pr.problem, ap.spec, recipe, m->run_arithmetic(req), m->run(req),
                                  pr.ref, plan.policy));
    models = std::move(made);
  }
  const RunAssessment own = assess_run(pr.problem, ap.spec, recipe, emulation.run_arithmetic(req),
                                       emulation.run(req), pr.ref, plan.policy);
  std::vector<const RunAssessment*> ptrs{&own};
  for (const auto& b : *models) ptrs.push_back(&b);
  return judge_against_emulation(as, ptrs, recipe.name());
}

// Runs one strategy on one recipe of a prepared problem and judges it: the record of the run
// (statistics, bounds, verdict). A strategy's refusal is a not-supported or failed record; an
// exception of the run a failed one.
RunRecord audit_run(const AuditPlan& plan, const AuditProblem& ap, DType input, const Prepared& pr,
                    const Recipe& recipe, const Strategy& st, ModelAssessments& models) {
  const AuditConfig& cfg = plan.cfg;
  RunRecord rec = new_record(ap, st, recipe, input, cfg);
  RunRequest req;
  req.problem = &pr.problem;
  req.spec = ap.spec;
  req.recipe = recipe;
  req.emulated_sms = cfg.device_sms;
  req.chunk_tokens = cfg.chunk_tokens;
  req.ranks = static_cast<int>(cfg.ranks);
  req.local_strategy = cfg.local_strategy;
  req.vocab_splits = cfg.vocab_splits;
  req.upstream = pr.upstream;
  rec.arith = st.run_arithmetic(req);
  if (strategy_traits(st.name()).splits_vocabulary) rec.vocab_splits = rec.arith.vocab_ranks;
  const Status can = st.can_implement(pr.problem, ap.spec, recipe);
  if (!can.ok()) {
    rec.verdict = verdict_not_run(
        can.code == Status::Code::not_supported ? Disposition::not_supported : Disposition::failed,
        can.message);
    return rec;
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    const StrategyOutputs out = st.run(req);
    rec.seconds =
        out.seconds > 0
            ? out.seconds
            : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rec.peak_extra_bytes = out.peak_extra_bytes;
    const auto t_assess = std::chrono::steady_clock::now();
    // The baseline-relative check below compares error profiles: a device run of a problem
    // within the emulation's limit (for the others the profiles would go unused; at the
    // Llama-3-8B head each costs seconds a run).
    const Strategy* emulation = plan.emulation_of(st);
    const double macs = logits_macs(pr.problem);
    const bool baseline = cfg.baseline && !plan.emulations.empty() && emulation != nullptr &&
                          macs <= cfg.baseline_max_macs;
    const RunAssessment as = assess_run(pr.problem, ap.spec, recipe, rec.arith, out, pr.ref,
                                        plan.policy, 0, {}, baseline);
    const auto t_baseline = std::chrono::steady_clock::now();
    rec.c_vocab = as.bounds.c_vocab;
    rec.bound_meaningful = as.bounds.meaningful;
    rec.bound_note = as.bounds.note;
    rec.outputs = outputs_of(as);
    rec.verdict = as.verdict;
    // Baseline-relative check against the CPU emulation of the same strategy and recipe.
    if (cfg.baseline && rec.verdict.disposition == Disposition::passed &&
        !plan.emulations.empty()) {
      if (macs > cfg.baseline_max_macs)
        rec.baseline_note = fmt::format(
            "baseline not run: the CPU emulation of this problem ({:.3g} multiply-adds of "
            "logits) is past its limit of {:.3g}; judged by its bound alone",
            macs, cfg.baseline_max_macs);
      else if (baseline)
        rec.verdict =
            judge_against_baseline_models(plan, pr, ap, req, recipe, *emulation, as, models);
    }
    mark_measured(rec);
    if (plan.timings)
      fmt::print(
          stderr,
          "audit timing: {} {} {}: run {:.2f} s (device {:.2f} s), assessment "
          "{:.2f} s (bounds {:.2f} s), baseline {:.2f} s\n",
          ap.name, st.name(), recipe.name(), std::chrono::duration<double>(t_assess - t0).count(),
          out.seconds, std::chrono::duration<double>(t_baseline - t_assess).count(),
          as.bounds_seconds,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t_baseline).count());
    rec.loss_abs_err.resize(out.loss.size());
    for (std::size_t q = 0; q < out.loss.size(); ++q)
      rec.loss_abs_err[q] = std::fabs(out.loss[q] - pr.ref.loss[q]);
  } catch (const std::exception& e) {
    rec.verdict = verdict_not_run(Disposition::failed, e.what());
  }
  return rec;
}

// Every run of one problem in one input dtype: the reference (its problem record), then each
// recipe of that input dtype × each chosen strategy.
void audit_problem_input(AuditPlan& plan, const AuditProblem& ap, DType input, AuditResult& res) {
  plan.progress(fmt::format("{} {}: reference", ap.name, to_string(input)));
  std::optional<Prepared> prepared;
  try {
    const auto allotted = plan.reference_bytes.find({ap.name, input});
    prepared.emplace(prepare(ap, input, plan.cfg,
                             allotted == plan.reference_bytes.end() ? 0 : allotted->second));
  } catch (const NoInputVersion& e) {
    // E.g. fp32 inputs beyond fp16's range: the problem has no fp16 version. The other dtypes
    // go on.
    record_not_supported(
        plan, ap, input,
        fmt::format("the problem's inputs have no {} version: {}", to_string(input), e.what()),
        res);
    return;
  }
  res.problems.push_back(problem_record(ap, input, *prepared));
  for (const Recipe& recipe : plan.recipes) {
    if (recipe.input != input) continue;
    ModelAssessments models;  // shared by the recipe's strategies
    for (const Strategy* st : plan.chosen) {
      plan.progress(fmt::format("{} {} {}", ap.name, st->name(), recipe.name()));
      ++plan.done;
      res.runs.push_back(audit_run(plan, ap, input, *prepared, recipe, *st, models));
    }
  }
}

// The memory plan of the audit, before any work: each (problem, input dtype) at once when its
// estimate (blocked.hpp, problem_memory) and the problems held fit the budget, else a logits
// problem in the largest blocks of token rows that fit; otherwise refused (InputError naming the
// estimate, its terms and the budget).
void plan_memory(AuditPlan& plan, const std::vector<AuditProblem>& problems,
                 const std::set<DType>& inputs) {
  const MemoryBudget budget = MemoryBudget::from(plan.cfg.reference_memory);
  double held = 0;
  for (const AuditProblem& ap : problems) held += problem_bytes(ap.problem);
  // What the process holds besides the problems, loaded by now (its code, a CUDA context where a
  // device backend was chosen), and the libraries' buffers to come. A default budget is the
  // memory available now, which what the process holds already left out: only the buffers count.
  const double process =
      (budget.given ? std::max(0.0, static_cast<double>(resident_memory_bytes()) - held) : 0.0) +
      kLibraryBuffersBytes;
  std::vector<const Strategy*> emus;
  for (const auto& e : plan.emulations) emus.push_back(e.get());
  for (const AuditProblem& ap : problems)
    for (DType input : inputs) {
      if (!ap.inputs.empty() &&
          std::find(ap.inputs.begin(), ap.inputs.end(), input) == ap.inputs.end())
        continue;
      const AuditedRows rows = audited_rows(ap, plan.cfg);
      const auto S = static_cast<std::int64_t>(rows.token_rows.size());
      const std::int64_t J = rows.vocab_rows.empty()
                                 ? ap.problem.V
                                 : static_cast<std::int64_t>(rows.vocab_rows.size());
      const bool baseline =
          plan.cfg.baseline && !plan.emulations.empty() &&
          logits_macs(ap.problem) * S / ap.problem.N <= plan.cfg.baseline_max_macs;
      const bool linear = ap.problem.is_linear();
      // A linear head's reference takes blocks as large as its max_bytes allows, from its least
      // plan to its largest: under a given budget it gets what the other terms leave (and is
      // counted at that), else it keeps its own default and is counted at its largest.
      double ref_most = 0;
      if (linear) {
        ReferenceOptions ro;
        ro.tier = plan.cfg.reference_tier;
        ref_most = reference_peak_bytes(S, ap.problem.V, ap.problem.D, J, ro);
      }
      const auto estimate = [&](std::int64_t B) {
        MemoryEstimate m =
            problem_memory(ap, input, S, J, B, plan.cfg, plan.chosen, emus, baseline);
        m.terms.insert(m.terms.begin(), {"the problems as loaded", held});
        m.terms.insert(m.terms.begin() + 1, {"the process and its libraries' buffers", process});
        if (linear)
          for (auto& [name, bytes] : m.terms)
            if (name == "the reference") {
              const double least = bytes, others = m.total() - least;
              bytes = budget.given ? std::min(ref_most, std::max(least, budget.bytes - others))
                                   : std::max(least, ref_most);
              if (budget.given)
                plan.reference_bytes[{ap.name, input}] = static_cast<std::int64_t>(bytes);
            }
        return m;
      };
      const MemoryEstimate whole = estimate(S);
      if (whole.total() <= static_cast<double>(budget.bytes)) continue;
      const std::string what = fmt::format(
          "the audit of {} ({} inputs, {} token rows × V={}{})", ap.name, to_string(input), S,
          ap.problem.V, ap.problem.is_linear() ? fmt::format(" × D={}", ap.problem.D) : "");
      if (ap.problem.is_linear())
        check_memory_estimate(whole, budget, what,
                              "audit fewer token or vocabulary rows (--rows, --vocab-rows), or "
                              "give a larger --memory-budget on a machine that has it");
      std::int64_t lo = 0, hi = S;  // the largest B in [1, S) that fits, by bisection
      while (hi - lo > 1) {
        const std::int64_t mid = lo + (hi - lo) / 2;
        (estimate(mid).total() <= static_cast<double>(budget.bytes) ? lo : hi) = mid;
      }
      if (lo == 0)
        check_memory_estimate(estimate(1), budget, what + " in blocks of 1 token row",
                              "give a larger --memory-budget on a machine that has it");
      plan.block_rows[{ap.name, input}] = lo;
      fmt::print(stderr,
                 "audit: {} would hold an estimated {} at once, over the memory budget of {}: "
                 "audited in blocks of {} token rows, estimated {}\n",
                 what, gib(whole.total()), budget.describe(), lo, estimate(lo).describe());
    }
}

// A logits problem audited in blocks of token rows (blocked.hpp): its records.
void audit_blocked(AuditPlan& plan, const AuditProblem& ap, DType input, std::int64_t B,
                   AuditResult& res) {
  const AuditConfig& cfg = plan.cfg;
  plan.progress(fmt::format("{} {}: in blocks of {} token rows", ap.name, to_string(input), B));
  const AuditedRows rows = audited_rows(ap, cfg);
  std::vector<double> upstream;
  if (cfg.upstream == "random")
    upstream = random_upstream(static_cast<std::int64_t>(rows.token_rows.size()), cfg.seed + 2);
  std::vector<const Strategy*> emus;
  for (const auto& e : plan.emulations) emus.push_back(e.get());
  BlockedAudit ba;
  try {
    ba = audit_in_blocks(ap, input, rows.token_rows, B, cfg, plan.recipes, plan.chosen, emus,
                         plan.policy, upstream);
  } catch (const NoInputVersion& e) {
    record_not_supported(
        plan, ap, input,
        fmt::format("the problem's inputs have no {} version: {}", to_string(input), e.what()),
        res);
    return;
  }
  ProblemRecord p = problem_record_of(ap, input, ap.problem, ba.ref, ba.orig_rows);
  res.problems.push_back(std::move(p));
  for (BlockedRun& br : ba.runs) {
    ++plan.done;
    RunRecord rec = new_record(ap, *br.strategy, br.recipe, input, cfg);
    rec.arith = br.arith;
    if (strategy_traits(br.strategy->name()).splits_vocabulary)
      rec.vocab_splits = br.arith.vocab_ranks;
    if (!br.can.ok()) {
      rec.verdict =
          verdict_not_run(br.can.code == Status::Code::not_supported ? Disposition::not_supported
                                                                     : Disposition::failed,
                          br.can.message);
    } else if (!br.error.empty()) {
      rec.verdict = verdict_not_run(Disposition::failed, br.error);
    } else {
      rec.seconds = br.seconds;
      rec.peak_extra_bytes = br.peak_extra_bytes;
      rec.c_vocab = br.as.bounds.c_vocab;
      rec.bound_meaningful = br.as.bounds.meaningful;
      rec.bound_note = br.as.bounds.note;
      rec.outputs = outputs_of(br.as);
      rec.verdict = br.as.verdict;
      if (br.has_emulation && rec.verdict.disposition == Disposition::passed)
        rec.verdict = judge_against_emulation(br.as, {&br.emulation_as}, rec.recipe.name());
      mark_measured(rec);
      rec.loss_abs_err = std::move(br.loss_abs_err);
    }
    res.runs.push_back(std::move(rec));
  }
}

void count_dispositions(AuditResult& res) {
  for (const auto& r : res.runs) {
    switch (r.verdict.disposition) {
      case Disposition::passed:
        ++res.passed;
        break;
      case Disposition::incorrect:
        ++res.incorrect;
        break;
      case Disposition::not_supported:
        ++res.not_supported;
        break;
      case Disposition::failed:
        ++res.failed;
        break;
      case Disposition::measured:
        ++res.measured;
        break;
    }
  }
}

}  // namespace

double RunRecord::normwise(const std::string& output) const {
  const OutputRecord* o = find_output(*this, output);
  if (!o) return kNaN;
  if (o->stats.nonfinite_where_ref_finite > 0 || o->stats.finiteness_mismatches > 0) return kInf;
  return o->stats.normwise_rel_err;
}

void require_some_run(const AuditResult& res) {
  if (res.passed + res.measured + res.incorrect + res.failed == 0)
    throw InputError(fmt::format(
        "no strategy supports any of the {} selected runs (every one is not supported: e.g. "
        "fp64 is no recipe dtype, the CUDA fused strategy takes linear problems only): nothing "
        "was audited and no file was written; see xentlab audit --help for the recipes",
        res.not_supported));
}

void check_problem_names(const std::vector<AuditProblem>& problems) {
  for (std::size_t i = 0; i < problems.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (problems[i].name == problems[j].name)
        throw InputError(fmt::format(
            "two problems of this audit are named '{}' ('{}' and '{}'): their runs would be "
            "recorded and compared as one problem's; audit them separately",
            problems[i].name, problems[j].problem.describe(), problems[i].problem.describe()));
}

AuditResult run_audit(const std::vector<AuditProblem>& problems, const AuditConfig& cfg) {
  check_problem_names(problems);
  AuditPlan plan(cfg);
  if (plan.registered.empty())
    throw InputError(
        fmt::format("audit: no strategies are registered for backend {}", to_string(cfg.backend)));
  plan.chosen = choose_strategies(plan.registered, cfg);
  check_config(problems, cfg, plan.chosen);
  // Every GPU run is judged against its emulated twin as well as the bound: refuse, before any
  // work, a strategy whose registry row has no CPU emulation.
  if (cfg.backend != Backend::cpu_emulation) {
    std::vector<std::string> names;
    for (const Strategy* s : plan.chosen) names.push_back(s->name());
    const std::vector<std::string> orphans = without_emulated_twin(names, strategy_table());
    if (!orphans.empty())
      throw InputError(fmt::format(
          "audit: {} strategy '{}' has no CPU emulation in the registry (gpu/registry.cpp), and "
          "the audit holds every {} run to its emulated twin as well as its bound; add its "
          "emulation (gpu/emulation/{}.cpp) or leave it out with --strategies",
          to_string(cfg.backend), orphans.front(), to_string(cfg.backend), orphans.front()));
  }
  plan.recipes = cfg.recipes.empty() ? default_recipe_grid() : cfg.recipes;
  plan.policy = policy_by_name(cfg.policy);
  if (cfg.backend != Backend::cpu_emulation)
    plan.emulations = make_strategies(Backend::cpu_emulation, StrategySet::all);
  plan.total = static_cast<std::int64_t>(problems.size()) *
               static_cast<std::int64_t>(plan.recipes.size()) *
               static_cast<std::int64_t>(plan.chosen.size());
  plan.timings = std::getenv("XENTLAB_AUDIT_TIMINGS") != nullptr;

  std::set<DType> inputs;
  for (const Recipe& r : plan.recipes) inputs.insert(r.input);
  plan_memory(plan, problems, inputs);  // refuses before any work what would not fit
  AuditResult res;
  for (const AuditProblem& ap : problems)
    for (DType input : inputs) {
      const auto blocked = plan.block_rows.find({ap.name, input});
      if (!ap.inputs.empty() &&
          std::find(ap.inputs.begin(), ap.inputs.end(), input) == ap.inputs.end())
        record_not_supported(plan, ap, input, not_audited_in(ap, input), res);
      else if (blocked != plan.block_rows.end())
        audit_blocked(plan, ap, input, blocked->second, res);
      else
        audit_problem_input(plan, ap, input, res);
    }
  count_dispositions(res);
  res.verdict = compute_verdict(res.runs);
  if (cfg.progress) cfg.progress(plan.total, plan.total, "done");
  return res;
}

}  // namespace xentlab::audit

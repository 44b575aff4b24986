#include "tools/audit/audit.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "datasets/problem_ops.hpp"
#include "gpu/bounds_for.hpp"
#include "gpu/registry.hpp"
#include "numerics/error.hpp"
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

// The problem has no version in an input dtype (e.g. fp32 values beyond fp16's range): its runs
// of that dtype are not-supported. Any other InputError (a reference refused over its memory
// budget, a tier not available) ends the audit with its own message.
struct NoInputVersion : InputError {
  using InputError::InputError;
};

Prepared prepare(const AuditProblem& ap, DType input, const AuditConfig& cfg) {
  Problem converted;
  try {
    converted = with_input_dtype(ap.problem, input, ap.spec.ignore_index);
  } catch (const InputError& e) {
    throw NoInputVersion(e.what());
  }
  Prepared p{std::move(converted), {}, {}, {}};
  const std::int64_t rows = ap.rows >= 0 ? ap.rows : cfg.rows;
  if (rows > 0 && rows < p.problem.N) {
    p.orig_rows = sample_rows(p.problem.N, rows, cfg.seed);
    p.problem = select_rows(p.problem, p.orig_rows, ap.spec.ignore_index);
  } else {
    for (std::int64_t i = 0; i < p.problem.N; ++i) p.orig_rows.push_back(i);
  }
  ReferenceOptions o;
  o.tier = cfg.reference_tier;
  o.max_bytes = cfg.reference_memory;
  o.want_dz = !p.problem.is_linear();
  const std::int64_t vocab_rows = ap.vocab_rows >= 0 ? ap.vocab_rows : cfg.vocab_rows;
  if (p.problem.is_linear() && vocab_rows > 0 && vocab_rows < p.problem.V)
    o.vocab_rows = sample_rows(p.problem.V, vocab_rows, cfg.seed + 1);
  if (cfg.upstream == "random") p.upstream = random_upstream(p.problem.N, cfg.seed + 2);
  o.upstream = p.upstream;
  p.ref = compute_reference(p.problem, ap.spec, o);
  return p;
}

// The statistics of every output a run produced, in a fixed order.
std::vector<OutputRecord> outputs_of(const RunAssessment& a) {
  std::vector<OutputRecord> recs{{"loss", a.loss}, {"lse", a.lse}, {"reduced", a.reduced_loss}};
  if (a.has_dz) recs.push_back({"dz", a.dz});
  if (a.has_dH) recs.push_back({"dH", a.dH});
  if (a.has_dW) recs.push_back({"dW", a.dW});
  if (a.has_db) recs.push_back({"db", a.db});
  return recs;
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
  rec.recipe = recipe.name();
  rec.spec = ap.spec.describe();
  rec.input_dtype = std::string(to_string(input));
  rec.chunk_tokens = cfg.chunk_tokens;
  rec.upstream = cfg.upstream;
  return rec;
}

}  // namespace

double RunRecord::normwise(const std::string& output) const {
  const OutputRecord* o = find_output(*this, output);
  if (!o) return kNaN;
  if (o->stats.nonfinite_where_ref_finite > 0 || o->stats.finiteness_mismatches > 0) return kInf;
  return o->stats.normwise_rel_err;
}

void require_some_run(const AuditResult& res) {
  if (res.passed + res.incorrect + res.failed == 0)
    throw InputError(fmt::format(
        "no strategy supports any of the {} selected runs (every one is not supported: e.g. "
        "fp64 is no recipe dtype, the CUDA fused strategy takes linear problems only): nothing "
        "was audited and no file was written; see xentlab audit --help for the recipes",
        res.not_supported));
}

AuditResult run_audit(const std::vector<AuditProblem>& problems, const AuditConfig& cfg) {
  if (problems.empty()) throw InputError("audit: no problems to audit");
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
  auto strategies = make_strategies(cfg.backend);
  if (strategies.empty())
    throw InputError(
        fmt::format("audit: no strategies are registered for backend {}", to_string(cfg.backend)));
  std::vector<const Strategy*> chosen;
  for (const auto& s : strategies)
    if (cfg.strategies.empty() ||
        std::find(cfg.strategies.begin(), cfg.strategies.end(), s->name()) != cfg.strategies.end())
      chosen.push_back(s.get());
  for (const auto& name : cfg.strategies) {
    bool known = false;
    for (const auto& s : strategies) known = known || s->name() == name;
    if (!known) {
      std::string names;
      for (const auto& s : strategies) names += (names.empty() ? "" : ", ") + s->name();
      throw InputError(fmt::format("audit: unknown strategy '{}' (registered: {})", name, names));
    }
  }
  // Every GPU run is judged against its emulated twin as well as the bound: refuse, before any
  // work, a strategy whose registry row has no CPU emulation.
  if (cfg.backend != Backend::cpu_emulation) {
    std::vector<std::string> names;
    for (const Strategy* s : chosen) names.push_back(s->name());
    const std::vector<std::string> orphans = without_emulated_twin(names, strategy_table());
    if (!orphans.empty())
      throw InputError(fmt::format(
          "audit: {} strategy '{}' has no CPU emulation in the registry (gpu/registry.cpp), and "
          "the audit holds every {} run to its emulated twin as well as its bound; add its "
          "emulation (gpu/emulation/{}.cpp) or leave it out with --strategies",
          to_string(cfg.backend), orphans.front(), to_string(cfg.backend), orphans.front()));
  }
  const std::vector<Recipe> recipes = cfg.recipes.empty() ? default_recipe_grid() : cfg.recipes;
  const Policy policy = policy_by_name(cfg.policy);
  std::vector<std::unique_ptr<Strategy>> baselines;
  if (cfg.backend != Backend::cpu_emulation) baselines = make_strategies(Backend::cpu_emulation);

  std::set<DType> inputs;
  for (const Recipe& r : recipes) inputs.insert(r.input);
  const std::int64_t total = static_cast<std::int64_t>(problems.size()) *
                             static_cast<std::int64_t>(recipes.size()) *
                             static_cast<std::int64_t>(chosen.size());
  AuditResult res;
  std::int64_t done = 0;
  // XENTLAB_AUDIT_TIMINGS=1: each run's wall time, split into the strategy and the assessment.
  const bool timings = std::getenv("XENTLAB_AUDIT_TIMINGS") != nullptr;
  for (const AuditProblem& ap : problems) {
    for (DType input : inputs) {
      if (cfg.progress)
        cfg.progress(done, total, fmt::format("{} {}: reference", ap.name, to_string(input)));
      std::optional<Prepared> prepared;
      try {
        prepared.emplace(prepare(ap, input, cfg));
      } catch (const NoInputVersion& e) {
        // E.g. fp32 inputs beyond fp16's range: the problem has no fp16 version. Every run of
        // this input dtype is not-supported, with the reason; the other dtypes go on.
        for (const Recipe& recipe : recipes) {
          if (recipe.input != input) continue;
          for (const Strategy* st : chosen) {
            RunRecord rec = new_record(ap, *st, recipe, input, cfg);
            rec.verdict = verdict_not_run(Disposition::not_supported,
                                          fmt::format("the problem's inputs have no {} version: {}",
                                                      to_string(input), e.what()));
            res.runs.push_back(std::move(rec));
            ++done;
          }
        }
        continue;
      }
      const Prepared& pr = *prepared;
      ProblemRecord prec{ap.name,
                         ap.regime,
                         std::string(to_string(input)),
                         ap.spec.describe(),
                         pr.problem.describe(),
                         pr.problem.targets_drawn_by,
                         pr.orig_rows,
                         pr.ref.loss,
                         pr.ref.lse,
                         pr.ref.p_target,
                         pr.ref.max_logit,
                         pr.ref.entropy};
      res.problems.push_back(std::move(prec));
      for (const Recipe& recipe : recipes) {
        if (recipe.input != input) continue;
        for (const Strategy* st : chosen) {
          RunRecord rec = new_record(ap, *st, recipe, input, cfg);
          rec.arith = st->arithmetic(recipe);
          if (cfg.progress)
            cfg.progress(done, total, fmt::format("{} {} {}", ap.name, st->name(), recipe.name()));
          ++done;
          const Status can = st->can_implement(pr.problem, ap.spec, recipe);
          if (!can.ok()) {
            rec.verdict =
                verdict_not_run(can.code == Status::Code::not_supported ? Disposition::not_supported
                                                                        : Disposition::failed,
                                can.message);
            res.runs.push_back(std::move(rec));
            continue;
          }
          try {
            RunRequest req;
            req.problem = &pr.problem;
            req.spec = ap.spec;
            req.recipe = recipe;
            req.emulated_sms = cfg.device_sms;
            req.chunk_tokens = cfg.chunk_tokens;
            req.upstream = pr.upstream;
            const auto t0 = std::chrono::steady_clock::now();
            const StrategyOutputs out = st->run(req);
            rec.seconds =
                out.seconds > 0
                    ? out.seconds
                    : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            rec.peak_extra_bytes = out.peak_extra_bytes;
            const auto t_assess = std::chrono::steady_clock::now();
            const RunAssessment as =
                assess_run(pr.problem, ap.spec, recipe, rec.arith, out, pr.ref, policy);
            if (timings)
              fmt::print(stderr,
                         "audit timing: {} {} {}: run {:.2f} s (device {:.2f} s), assessment "
                         "{:.2f} s (bounds {:.2f} s)\n",
                         ap.name, st->name(), recipe.name(),
                         std::chrono::duration<double>(t_assess - t0).count(), out.seconds,
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t_assess)
                             .count(),
                         as.bounds_seconds);
            rec.c_vocab = as.bounds.c_vocab;
            rec.bound_meaningful = as.bounds.meaningful;
            rec.bound_note = as.bounds.note;
            rec.outputs = outputs_of(as);
            rec.verdict = as.verdict;
            // Baseline-relative check against the CPU emulation of the same strategy and recipe.
            const double macs = static_cast<double>(pr.problem.N) *
                                static_cast<double>(pr.problem.V) *
                                static_cast<double>(std::max<std::int64_t>(pr.problem.D, 1));
            const bool baseline_fits = macs <= cfg.baseline_max_macs;
            if (cfg.baseline && rec.verdict.disposition == Disposition::passed &&
                !baselines.empty() && !baseline_fits)
              rec.baseline_note = fmt::format(
                  "baseline not run: the CPU emulation of this problem ({:.3g} multiply-adds of "
                  "logits) is past its limit of {:.3g}; judged by its bound alone",
                  macs, cfg.baseline_max_macs);
            if (cfg.baseline && rec.verdict.disposition == Disposition::passed &&
                !baselines.empty() && baseline_fits) {
              for (const auto& bs : baselines) {
                if (bs->name() != st->name()) continue;
                const RunAssessment ba = assess_run(pr.problem, ap.spec, recipe, rec.arith,
                                                    bs->run(req), pr.ref, policy);
                const auto brecs = outputs_of(ba);
                for (const auto& o : rec.outputs)
                  for (const auto& b : brecs)
                    if (b.name == o.name && rec.verdict.disposition == Disposition::passed) {
                      // Floor: the GPU's elementary functions are not glibc's. The CUDA C++
                      // Programming Guide bounds expf at 2 ULP and logf at 1 ULP (single precision,
                      // no fast-math); the emulation's glibc expf/logf are within 1 ULP. A
                      // per-token value formed from one of each may thus differ by up to
                      // 2 + 1 + 1 = 4 ULP = 8u between two correct implementations, and a mean
                      // inherits it: floor = 8·u_out·max|ref| (stats' rel_floor is 2^-20·max|ref|).
                      // Measured on the H200 (docs/audit.md): the fp32 mean loss of the GPU
                      // strategies 1.1 ULP from the reference where the emulation was 0.1 ULP away.
                      const double floor =
                          8.0 * unit_roundoff(o.stats.out_dtype) * o.stats.rel_floor * 0x1p20;
                      const Verdict v =
                          judge_against_baseline(o.name, o.stats, b.stats, floor, policy);
                      if (v.disposition != Disposition::passed) rec.verdict = v;
                    }
              }
            }
            rec.loss_abs_err.resize(out.loss.size());
            for (std::size_t q = 0; q < out.loss.size(); ++q)
              rec.loss_abs_err[q] = std::fabs(out.loss[q] - pr.ref.loss[q]);
          } catch (const std::exception& e) {
            rec.verdict = verdict_not_run(Disposition::failed, e.what());
          }
          res.runs.push_back(std::move(rec));
        }
      }
    }
  }
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
    }
  }
  res.verdict = compute_verdict(res.runs);
  if (cfg.progress) cfg.progress(total, total, "done");
  return res;
}

}  // namespace xentlab::audit

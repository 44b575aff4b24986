// The audit's HDF5 results file (schema: docs/formats.md, "Results file").
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <tuple>

#include "datasets/io/atomic_file.hpp"
#include "datasets/io/h5.hpp"
#include "gpu/plans/vocab_shards.hpp"
#include "gpu/registry.hpp"
#include "harness/audit/audit.hpp"
#include "numerics/error.hpp"
#include "numerics/recipe.hpp"
#include "numerics/version.hpp"

namespace xentlab::audit {
namespace {

// Version 2 adds the runs' chunk_tokens and upstream attributes; version 1 files are still read
// (and appended to: the file becomes version 2, its old runs without the two attributes).
constexpr std::int64_t kResultsFormatVersion = 2;

std::string now_utc() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void write_stats(h5::Group& g, const ErrorStats& s) {
  g.set_attr("n", s.n);
  g.set_attr("out_dtype", std::string(to_string(s.out_dtype)));
  g.set_attr("out_nan", s.out_nan);
  g.set_attr("out_posinf", s.out_posinf);
  g.set_attr("out_neginf", s.out_neginf);
  g.set_attr("finiteness_mismatches", s.finiteness_mismatches);
  g.set_attr("nonfinite_where_ref_finite", s.nonfinite_where_ref_finite);
  g.set_attr("max_abs_err", s.max_abs_err);
  g.set_attr("max_abs_err_index", s.max_abs_err_index);
  g.set_attr("max_abs_err_out", s.max_abs_err_out);
  g.set_attr("max_abs_err_ref", s.max_abs_err_ref);
  g.set_attr("rms_abs_err", s.rms_abs_err);
  g.set_attr("mean_abs_err", s.mean_abs_err);
  g.set_attr("max_rel_err", s.max_rel_err);
  g.set_attr("mean_rel_err", s.mean_rel_err);
  g.set_attr("rel_floor", s.rel_floor);
  g.set_attr("normwise_rel_err", s.normwise_rel_err);
  g.set_attr("frac_ulp_0", s.frac_ulp_0);
  g.set_attr("frac_ulp_le1", s.frac_ulp_le1);
  g.set_attr("frac_ulp_le2", s.frac_ulp_le2);
  g.set_attr("frac_ulp_le4", s.frac_ulp_le4);
  g.set_attr("max_ulp", s.max_ulp);
  g.set_attr("bias", s.bias);
  g.set_attr("bias_stderr", s.bias_stderr);
  g.set_attr("mean_value_err", s.mean_value_err);
  g.set_attr("p50", s.p50);
  g.set_attr("p90", s.p90);
  g.set_attr("p99", s.p99);
  g.set_attr("p999", s.p999);
  g.set_attr("pmax", s.pmax);
  // 0: merged over blocks of token rows, p50…p999 and p99_ratio are bucket upper edges.
  g.set_attr("percentiles_exact", std::int64_t{s.percentiles_exact ? 1 : 0});
  g.set_attr("has_bounds", s.has_bounds);
  g.set_attr("max_ratio", s.max_ratio);
  g.set_attr("p99_ratio", s.p99_ratio);
  g.set_attr("n_over_bound", s.n_over_bound);
  // Fixed log2 bins (mergeable): counts of |e| per bin, plus zero/underflow/overflow/nan.
  std::vector<std::int64_t> h(s.abs_err_hist.bins.begin(), s.abs_err_hist.bins.end());
  g.write("abs_err_hist", h);
  g.set_attr("hist_min_exp", std::int64_t{Histogram::kMinExp});
  g.set_attr("hist_zero", s.abs_err_hist.zero);
  g.set_attr("hist_underflow", s.abs_err_hist.underflow);
  g.set_attr("hist_overflow", s.abs_err_hist.overflow);
  g.set_attr("hist_nan", s.abs_err_hist.nan);
}

// --append: the problem recorded in `old` (group `name`) against this audit's. Throws InputError
// naming the difference: another spec or shape (describe: the problem's description at its
// audited rows and input dtype; empty: not compared), other audited token rows, other compared
// vocabulary rows, or targets drawn by another engine.
void check_same_problem(const h5::Group& old, const std::string& name, const std::string& spec,
                        const std::string& describe, const std::vector<std::int64_t>& token_rows,
                        const std::vector<std::int64_t>& vocab_rows, const std::string& drawn_by) {
  const std::string old_spec = old.attr_string("spec"), old_desc = old.attr_string("describe");
  const std::vector<std::int64_t> old_rows = old.open_dataset("token_rows").read_int64();
  const std::vector<std::int64_t> old_vrows = old.exists("vocab_rows")
                                                  ? old.open_dataset("vocab_rows").read_int64()
                                                  : std::vector<std::int64_t>{};
  const std::string old_drawn =
      old.has_attr("targets_drawn_by") ? old.attr_string("targets_drawn_by") : std::string();
  const bool other_desc = !describe.empty() && old_desc != describe;
  if (old_spec != spec || other_desc || old_rows != token_rows)
    throw InputError(fmt::format(
        "--append: the file already records problem {} as another problem ({}); its runs "
        "and these would be compared as one: write this audit to another file",
        name,
        old_spec != spec ? fmt::format("spec '{}', this audit '{}'", old_spec, spec)
        : other_desc     ? fmt::format("'{}', this audit '{}'", old_desc, describe)
        : old_rows.size() != token_rows.size()
            ? fmt::format("other audited token rows: {} rows there, {} in this audit (another "
                          "-N, --rows or --seed, or another problem under this name)",
                          old_rows.size(), token_rows.size())
            : fmt::format("other audited token rows: {} rows in both, not the same ones "
                          "(another -N or --seed, or another problem under this name)",
                          token_rows.size())));
  // A results file written before vocab_rows was recorded holds none: nothing to compare.
  if (old.exists("vocab_rows") && old_vrows != vocab_rows)
    throw InputError(fmt::format(
        "--append: the file already records problem {} with {} compared vocabulary rows, "
        "this audit compares {}{} (--vocab-rows, --seed, or another V): write this audit to "
        "another file",
        name, old_vrows.size(), vocab_rows.size(),
        old_vrows.size() == vocab_rows.size() ? ", not the same ones" : ""));
  if (old.has_attr("targets_drawn_by") && old_drawn != drawn_by)
    throw InputError(fmt::format(
        "--append: the file records problem {} with calibrated targets drawn by '{}', this "
        "audit's by '{}' (the two can differ at rounding boundaries): write this audit to "
        "another file",
        name, old_drawn, drawn_by));
}

// A run of a strategy that splits the vocabulary, by problem, input dtype, recipe and strategy.
using SplitsKey = std::tuple<std::string, std::string, std::string, std::string>;

// --append: the vocabulary splits of the runs the file holds that record them (vocab_chunked),
// by key (runs written before the splits were recorded hold none: nothing to compare).
std::map<SplitsKey, std::int64_t> held_vocab_splits(const h5::File& f) {
  std::map<SplitsKey, std::int64_t> held;
  if (!f.exists("runs")) return held;
  for (const auto& id : f.open_group("runs").children()) {
    const h5::Group run = f.open_group("runs/" + id);
    if (!run.has_attr("vocab_splits")) continue;
    held[{run.attr_string("problem"), run.attr_string("input_dtype"), run.attr_string("recipe"),
          run.attr_string("strategy")}] = run.attr_int("vocab_splits");
  }
  return held;
}

// --append: runs of one key in another number of vocabulary splits are another arithmetic that
// regress would compare as this one (it refuses two files of other splits). Throws InputError
// naming both numbers when the file holds the key's runs with splits other than `splits`.
void check_same_splits(const std::map<SplitsKey, std::int64_t>& held, const SplitsKey& key,
                       std::int64_t splits, std::int64_t given) {
  const auto it = held.find(key);
  if (it == held.end() || it->second == splits) return;
  throw InputError(fmt::format(
      "--append: the file holds {} runs of problem {}.{} ({}) in {} vocabulary splits, this "
      "audit's take {} (--vocab-splits {}); their runs and these would be compared as one: write "
      "this audit to another file",
      std::get<3>(key), std::get<0>(key), std::get<1>(key), std::get<2>(key), it->second, splits,
      given));
}

void write_all(h5::File& f, const AuditResult& res, const AuditConfig& cfg, std::int64_t first_id) {
  f.set_attr("format", "xentlab-results");
  f.set_attr("format_version", kResultsFormatVersion);
  f.set_attr("xentlab_version", kVersion);
  f.set_attr("updated", now_utc());
  h5::Group problems = f.exists("problems") ? f.open_group("problems") : f.create_group("problems");
  for (const ProblemRecord& p : res.problems) {
    const std::string name = fmt::format("{}.{}", p.name, to_string(p.input));
    if (problems.exists(name)) {  // appended runs of a problem already recorded: the same one?
      check_same_problem(problems.open_group(name), name, p.spec, p.describe, p.token_rows,
                         p.vocab_rows, p.targets_drawn_by);
      continue;
    }
    h5::Group g = problems.create_group(name);
    g.set_attr("problem", p.name);
    g.set_attr("regime", p.regime);
    g.set_attr("input_dtype", std::string(to_string(p.input)));
    g.set_attr("spec", p.spec);
    g.set_attr("describe", p.describe);
    if (!p.targets_drawn_by.empty()) g.set_attr("targets_drawn_by", p.targets_drawn_by);
    g.write("token_rows", p.token_rows);
    if (!p.vocab_rows.empty()) g.write("vocab_rows", p.vocab_rows);
    g.write("loss", p.loss);
    g.write("lse", p.lse);
    g.write("p_target", p.p_target);
    g.write("max_logit", p.max_logit);
    g.write("entropy", p.entropy);
  }
  h5::Group runs = f.exists("runs") ? f.open_group("runs") : f.create_group("runs");
  // /by_key/PROBLEM/RECIPE/STRATEGY: a soft link to each run, so that one line of h5py finds it
  // (f[f"by_key/{problem}/{recipe}/{strategy}"]; the recipe's "/" are group levels). A "/" in a
  // problem name (a file path) is written "|"; a second run of the same key (an appended audit
  // of another backend) is linked as STRATEGY@BACKEND (then STRATEGY@BACKEND.2, …).
  h5::Group by_key = f.exists("by_key") ? f.open_group("by_key") : f.create_group("by_key");
  const std::map<SplitsKey, std::int64_t> held = held_vocab_splits(f);
  for (const RunRecord& r : res.runs)
    if (r.vocab_splits > 0)
      check_same_splits(held,
                        {r.problem, std::string(to_string(r.input)), r.recipe.name(), r.strategy},
                        r.vocab_splits, cfg.vocab_splits);
  std::int64_t id = first_id;
  for (const RunRecord& r : res.runs) {
    const std::string run_name = fmt::format("{:06d}", id);
    std::string problem = r.problem;
    std::replace(problem.begin(), problem.end(), '/', '|');
    std::string key = fmt::format("{}/{}/{}", problem, r.recipe.name(), r.strategy);
    if (by_key.exists(key)) {
      const std::string base = key + "@" + r.backend;
      key = base;
      for (int n = 2; by_key.exists(key); ++n) key = fmt::format("{}.{}", base, n);
    }
    by_key.create_soft_link(key, "/runs/" + run_name);
    h5::Group g = runs.create_group(fmt::format("{:06d}", id++));
    g.set_attr("problem", r.problem);
    g.set_attr("regime", r.regime);
    g.set_attr("input_dtype", std::string(to_string(r.input)));
    g.set_attr("strategy", r.strategy);
    g.set_attr("backend", r.backend);
    g.set_attr("device", r.device);
    g.set_attr("recipe", r.recipe.name());
    g.set_attr("spec", r.spec);
    g.set_attr("seed", static_cast<std::int64_t>(cfg.seed));
    g.set_attr("policy", cfg.policy);
    g.set_attr("chunk_tokens", r.chunk_tokens);
    g.set_attr("upstream", r.upstream);
    if (r.ranks > 0) {  // a strategy that shards the vocabulary (vocab_parallel)
      g.set_attr("ranks", r.ranks);
      g.set_attr("local_strategy", r.local_strategy);
      g.write("shard_begins", r.shard_begins);
    }
    if (r.vocab_splits > 0) g.set_attr("vocab_splits", r.vocab_splits);  // vocab_chunked
    g.set_attr("disposition", std::string(to_string(r.verdict.disposition)));
    g.set_attr("decided_by", r.verdict.output);
    g.set_attr("reason", r.verdict.reason);
    g.set_attr("max_ratio", r.verdict.ratio);
    g.set_attr("seconds", r.seconds);
    g.set_attr("peak_extra_bytes", r.peak_extra_bytes);
    g.set_attr("vocab_order", std::string(to_string(r.arith.vocab_order)));
    g.set_attr("c_vocab", r.c_vocab);
    g.set_attr("bound_meaningful", r.bound_meaningful);
    g.set_attr("bound_note", r.bound_note);
    g.set_attr("baseline_note", r.baseline_note);
    if (!r.loss_abs_err.empty()) g.write("loss_abs_err", r.loss_abs_err);
    for (const OutputRecord& o : r.outputs) {
      h5::Group og = g.create_group(o.name);
      write_stats(og, o.stats);
    }
  }
  h5::Group vg = f.exists("verdict") ? f.open_group("verdict") : f.create_group("verdict");
  std::int64_t vid = static_cast<std::int64_t>(vg.children().size());
  for (const VerdictRow& v : res.verdict) {
    h5::Group g = vg.create_group(fmt::format("{:04d}", vid++));
    g.set_attr("regime", v.regime);
    g.set_attr("output", v.output);
    g.set_attr("input", v.input);
    g.set_attr("err_fp32_logits", v.err_fp32_logits);
    g.set_attr("err_bf16_logits", v.err_bf16_logits);
    g.set_attr("err_reduced_accum_best", v.err_reduced_accum_best);
    g.set_attr("reduced_accum_best_recipe", v.reduced_accum_best_recipe);
    g.set_attr("floor", v.floor);
    g.set_attr("logits_bf16_ok", v.logits_bf16_ok);
    g.set_attr("accum_fp32_needed", v.accum_fp32_needed);
    g.set_attr("accum_tested", v.accum_tested);
    g.set_attr("logits_why", v.logits_why);
    g.set_attr("accum_why", v.accum_why);
    for (const auto& [prefix, a] :
         {std::pair<const char*, const VerdictRow::Accum*>{"accum_bf16", &v.accum_bf16},
          {"accum_fp16", &v.accum_fp16}}) {
      g.set_attr(fmt::format("{}_tested", prefix), a->tested);
      g.set_attr(fmt::format("{}_harmless", prefix), a->harmless);
      g.set_attr(fmt::format("{}_err", prefix), a->err);
      g.set_attr(fmt::format("{}_twin_err", prefix), a->twin_err);
      g.set_attr(fmt::format("{}_recipe", prefix), a->recipe);
      g.set_attr(fmt::format("{}_worst_err", prefix), a->worst_err);
      g.set_attr(fmt::format("{}_worst_twin_err", prefix), a->worst_twin_err);
      g.set_attr(fmt::format("{}_worst_recipe", prefix), a->worst_recipe);
    }
  }
}

}  // namespace

h5::File open_results_file(const std::string& path) {
  h5::File f = h5::File::open_read(path);
  if (!f.has_attr("format") || f.attr_string("format") != "xentlab-results")
    throw FormatError(path +
                      " is not an xentlab results file (attribute format != xentlab-results)");
  const std::int64_t ver = f.attr_int("format_version");
  if (ver < 1 || ver > kResultsFormatVersion)
    throw FormatError(fmt::format("{}: results format version {} (this xentlab reads 1 to {})",
                                  path, ver, kResultsFormatVersion));
  return f;
}

void check_append_problems(const std::string& path, const std::vector<AuditProblem>& problems,
                           const AuditConfig& cfg) {
  if (!std::filesystem::exists(path)) return;
  const h5::File f = open_results_file(path);
  f.verify_digests();  // a damaged file is refused before the audit, naming the dataset
  if (!f.exists("problems")) return;
  const h5::Group recorded = f.open_group("problems");
  const std::map<SplitsKey, std::int64_t> held = held_vocab_splits(f);
  // The input dtypes this audit records a problem in: its recipes' (a problem without a version
  // in one of them is caught when writing).
  std::vector<DType> inputs;
  for (const Recipe& r : cfg.recipes.empty() ? default_recipe_grid() : cfg.recipes)
    if (std::find(inputs.begin(), inputs.end(), r.input) == inputs.end()) inputs.push_back(r.input);
  for (const AuditProblem& ap : problems)
    for (const DType input : inputs) {
      if (!ap.inputs.empty() &&
          std::find(ap.inputs.begin(), ap.inputs.end(), input) == ap.inputs.end())
        continue;  // audited in other dtypes only: nothing of it recorded in this one
      const std::string name = fmt::format("{}.{}", ap.name, to_string(input));
      if (!recorded.exists(name)) continue;
      AuditedRows rows = audited_rows(ap, cfg);
      if (ap.problem.is_linear() && rows.vocab_rows.empty()) {  // every row: recorded as such
        rows.vocab_rows.resize(static_cast<std::size_t>(ap.problem.V));
        for (std::int64_t j = 0; j < ap.problem.V; ++j)
          rows.vocab_rows[static_cast<std::size_t>(j)] = j;
      }
      check_same_problem(
          recorded.open_group(name), name, ap.spec.describe(),
          ap.problem.describe_as(static_cast<std::int64_t>(rows.token_rows.size()), input),
          rows.token_rows, rows.vocab_rows, ap.problem.targets_drawn_by);
      // The splits this audit's runs of a strategy that splits the vocabulary will take (as
      // their run_arithmetic: vocab_chunk_splits over the audited sub-batch, default budget).
      const auto S = static_cast<std::int64_t>(rows.token_rows.size());
      for (const std::string& s : cfg.strategies) {
        const StrategyEntry* e = find_strategy_entry(s);
        if (e == nullptr || !e->traits.splits_vocabulary || cfg.vocab_splits > ap.problem.V)
          continue;  // unknown names and splits past V: refused by run_audit, naming them
        for (const Recipe& r : cfg.recipes.empty() ? default_recipe_grid() : cfg.recipes)
          if (r.input == input)
            check_same_splits(
                held, {ap.name, std::string(to_string(input)), r.name(), s},
                vocab_chunk_splits(S, ap.problem.V, size_of(r.logits), 0, cfg.vocab_splits),
                cfg.vocab_splits);
      }
    }
}

void write_results(const std::string& path, const AuditResult& res, const AuditConfig& cfg,
                   bool force, bool append) {
  const bool exists = std::filesystem::exists(path);
  AtomicOutput out(path, force || (append && exists));
  std::int64_t first_id = 0;
  if (append && exists) {
    {
      const h5::File old = open_results_file(path);
      old.verify_digests();  // the runs appended to are the ones written (datasets/io/h5.hpp)
      first_id = old.exists("runs")
                     ? static_cast<std::int64_t>(old.open_group("runs").children().size())
                     : 0;
    }
    std::filesystem::copy_file(path, out.temp_path(),
                               std::filesystem::copy_options::overwrite_existing);
    h5::File f = h5::File::open_rw(out.temp_path());
    write_all(f, res, cfg, first_id);
    f.close();
  } else {
    h5::File f = h5::File::create(out.temp_path());
    f.set_attr("created", now_utc());
    write_all(f, res, cfg, 0);
    f.close();
  }
  out.commit();
}

}  // namespace xentlab::audit

// Regression check between two audit results files, and the fidelity of the CPU emulation to a
// device backend (see audit.hpp: regress, compare_backends).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "datasets/io/h5.hpp"
#include "harness/audit/audit.hpp"
#include "numerics/dtype.hpp"
#include "numerics/error.hpp"

namespace xentlab::audit {
namespace {

struct OutputSummary {
  double max_ratio = 0.0, normwise = 0.0;
  std::string out_dtype;
  std::string where;  ///< file:/runs/ID/OUTPUT, for messages
};
/// One run of a results file, as regress and compare_backends read it.
struct RunSummary {
  std::string problem, input_dtype, strategy, backend, recipe;
  std::string disposition, reason, spec;
  std::int64_t seed = 0;
  std::int64_t chunk_tokens = 0;  ///< 0 = default (and in version 1 files)
  std::string upstream = "ones";  ///< "ones" in version 1 files
  std::int64_t ranks = 0;         ///< vocabulary-parallel ranks (vocab_parallel runs), else 0
  std::string local_strategy;     ///< and their local part (absent before it was recorded: chunked)
  std::int64_t vocab_splits = 0;  ///< vocabulary splits (vocab_chunked runs), else 0
  std::vector<std::int64_t> token_rows;          ///< the problem's audited rows (empty when absent)
  std::map<std::string, OutputSummary> outputs;  // by output name
  /// passed or measured (docs/audit.md, "What runs", step 4): completed, no check found it wrong.
  bool consistent() const { return disposition == "passed" || disposition == "measured"; }
};

/// The runs of a results file in file order (FormatError for a foreign file or a missing
/// attribute, naming the object).
std::vector<RunSummary> load_runs(const std::string& path) {
  const h5::File f = open_results_file(path);
  std::vector<RunSummary> out;
  if (!f.exists("runs")) return out;
  const h5::Group runs = f.open_group("runs");
  std::map<std::string, std::vector<std::int64_t>> rows_of;  // problem group → token_rows
  for (const auto& id : runs.children()) {
    const h5::Group g = runs.open_group(id);
    RunSummary r;
    r.problem = g.attr_string("problem");
    r.input_dtype = g.attr_string("input_dtype");
    r.strategy = g.attr_string("strategy");
    r.backend = g.attr_string("backend");
    r.recipe = g.attr_string("recipe");
    r.disposition = g.attr_string("disposition");
    if (r.disposition != "passed" && r.disposition != "measured" && r.disposition != "incorrect" &&
        r.disposition != "not-supported" && r.disposition != "failed")
      throw FormatError(
          fmt::format("{}: disposition '{}' is not one of passed, measured, incorrect, "
                      "not-supported, failed",
                      g.where(), r.disposition));
    r.reason = g.attr_string("reason");
    r.spec = g.attr_string("spec");
    r.seed = g.attr_int("seed");
    // Version 2 attributes; a version 1 run had the defaults.
    if (g.has_attr("chunk_tokens")) r.chunk_tokens = g.attr_int("chunk_tokens");
    if (g.has_attr("upstream")) r.upstream = g.attr_string("upstream");
    if (g.has_attr("ranks")) {
      r.ranks = g.attr_int("ranks");
      r.local_strategy = g.has_attr("local_strategy") ? g.attr_string("local_strategy")
                                                      : std::string(kDefaultLocalStrategy);
    }
    if (g.has_attr("vocab_splits")) r.vocab_splits = g.attr_int("vocab_splits");
    const std::string pg = "problems/" + r.problem + "." + r.input_dtype;
    if (rows_of.count(pg) == 0 && f.exists(pg + "/token_rows"))
      rows_of[pg] = f.open_dataset(pg + "/token_rows").read_int64();
    r.token_rows = rows_of[pg];
    for (const auto& child : g.children()) {
      // The run's datasets (docs/audit.md); every other child is an output's group.
      if (child == "loss_abs_err" || child == "shard_begins") continue;
      const h5::Group og = g.open_group(child);
      r.outputs[child] = {og.attr_double("max_ratio"), og.attr_double("normwise_rel_err"),
                          og.attr_string("out_dtype"), og.where()};
    }
    if (r.consistent() && r.outputs.empty())
      throw FormatError(
          fmt::format("{}: a {} run without any output group (loss, lse, …): "
                      "a damaged or edited results file",
                      g.where(), r.disposition));
    out.push_back(std::move(r));
  }
  return out;
}

using Key = std::tuple<std::string, std::string, std::string, std::string, std::string>;

/// InputError when two runs of one name audited different problems (spec, seed, upstream
/// gradient or audited token rows differ) or in another chunk width, number of
/// vocabulary-parallel ranks or of vocabulary splits (another arithmetic):
/// comparing their errors would compare nothing. `what` names the command.
void require_same_problem(const char* what, const std::string& path_a, const std::string& path_b,
                          const std::string& name, const RunSummary& a, const RunSummary& b) {
  if (a.spec == b.spec && a.seed == b.seed && a.token_rows == b.token_rows &&
      a.upstream == b.upstream && a.chunk_tokens == b.chunk_tokens && a.ranks == b.ranks &&
      a.local_strategy == b.local_strategy && a.vocab_splits == b.vocab_splits)
    return;
  throw InputError(fmt::format(
      "{}: {} and {} hold runs of one name that differ in their problem or their run "
      "parameters ({}: {}); audit both with the same options",
      what, path_a, path_b, name,
      a.spec != b.spec   ? fmt::format("spec '{}' against '{}'", a.spec, b.spec)
      : a.seed != b.seed ? fmt::format("seed {} against {}", a.seed, b.seed)
      : a.upstream != b.upstream
          ? fmt::format("upstream {} against {} (--upstream)", a.upstream, b.upstream)
      : a.chunk_tokens != b.chunk_tokens
          ? fmt::format("chunk_tokens {} against {} (--chunk-tokens)", a.chunk_tokens,
                        b.chunk_tokens)
      : a.ranks != b.ranks ? fmt::format("ranks {} against {} (--ranks)", a.ranks, b.ranks)
      : a.local_strategy != b.local_strategy
          ? fmt::format("local part {} against {} (--local-strategy)", a.local_strategy,
                        b.local_strategy)
      : a.vocab_splits != b.vocab_splits
          ? fmt::format("vocabulary splits {} against {} (--vocab-splits)", a.vocab_splits,
                        b.vocab_splits)
          : std::string("different audited token rows (--rows, --tokens)")));
}

/// Runs keyed by (problem, input dtype, strategy, backend, recipe); a later run of the same key
/// (appended file) supersedes.
std::map<Key, RunSummary> runs_by_key(const std::string& path) {
  std::map<Key, RunSummary> out;
  for (RunSummary& r : load_runs(path))
    out[Key{r.problem, r.input_dtype, r.strategy, r.backend, r.recipe}] = std::move(r);
  return out;
}

}  // namespace

RegressReport regress(const std::string& base_path, const std::string& cur_path) {
  RegressReport rep;
  const auto base = runs_by_key(base_path);
  const auto cur = runs_by_key(cur_path);
  int regressions = 0, grown = 0;
  std::int64_t common = 0;
  for (const auto& [k, b] : base) common += cur.count(k);
  if (common == 0 && !base.empty() && !cur.empty())
    throw InputError(fmt::format(
        "regress: {} and {} share no run (baseline backend {}, current backend {}): compare two "
        "audits of the same set on the same backend",
        base_path, cur_path, std::get<3>(base.begin()->first), std::get<3>(cur.begin()->first)));
  for (const auto& [k, b] : base) {
    const std::string name = fmt::format("{} {} {} {} {}", std::get<0>(k), std::get<1>(k),
                                         std::get<2>(k), std::get<3>(k), std::get<4>(k));
    auto it = cur.find(k);
    if (it == cur.end()) {
      if (b.consistent()) {
        rep.lines.push_back(
            fmt::format("REGRESSION {}: {} in the baseline, missing now", name, b.disposition));
        ++regressions;
      }
      continue;
    }
    const RunSummary& c = it->second;
    require_same_problem("regress", base_path, cur_path, name, b, c);
    if (b.consistent() && !c.consistent()) {
      rep.lines.push_back(fmt::format("REGRESSION {}: {} in the baseline, {} now: {}", name,
                                      b.disposition, c.disposition, c.reason));
      ++regressions;
      continue;
    }
    for (const auto& [out, bv] : b.outputs) {
      auto jt = c.outputs.find(out);
      if (jt == c.outputs.end()) continue;
      const auto& cv = jt->second;
      if (bv.max_ratio <= 1.0 && !(cv.max_ratio <= 1.0)) {  // NaN counts as beyond
        rep.lines.push_back(
            fmt::format("REGRESSION {} {}: error now {:.3g}× its bound (baseline {:.3g}×)", name,
                        out, cv.max_ratio, bv.max_ratio));
        ++regressions;
      } else if (cv.normwise > 2.0 * bv.normwise && cv.normwise > 0) {
        if (c.disposition == "measured") {
          // No bound holds a measured run: its error growing beyond 2× is the regression.
          rep.lines.push_back(fmt::format(
              "REGRESSION {} {}: normwise error {:.3g}, over 2× the baseline's {:.3g} (a measured "
              "run: its recipe has no bound to hold it)",
              name, out, cv.normwise, bv.normwise));
          ++regressions;
        } else {
          rep.lines.push_back(fmt::format(
              "note {} {}: normwise error {:.3g} (baseline {:.3g}), still within its bound", name,
              out, cv.normwise, bv.normwise));
          ++grown;
        }
      }
    }
  }
  rep.baseline_runs = static_cast<std::int64_t>(base.size());
  rep.current_runs = static_cast<std::int64_t>(cur.size());
  rep.regressions = regressions;
  rep.grown = grown;
  return rep;
}

namespace {

using RunKey = std::tuple<std::string, std::string, std::string, std::string>;

struct OneBackend {
  std::string backend;
  std::map<RunKey, RunSummary> runs;  // keyed without the backend
};

/// The runs of one results file keyed without the backend. InputError when the file mixes
/// backends; FormatError (naming file, run and output) for an unknown output dtype, or a
/// normwise error of a passed run that is not a finite number ≥ 0.
OneBackend load_one_backend(const std::string& path) {
  OneBackend out;
  for (RunSummary& r : load_runs(path)) {
    if (!out.runs.empty() && r.backend != out.backend)
      throw InputError(
          fmt::format("{}: runs of two backends ({}, {}); compare files of one "
                      "backend each",
                      path, out.backend, r.backend));
    out.backend = r.backend;
    for (const auto& [name, o] : r.outputs) {
      try {
        (void)parse_dtype(o.out_dtype);
      } catch (const InputError&) {
        throw FormatError(
            fmt::format("{}: out_dtype '{}' is not a dtype of this xentlab", o.where, o.out_dtype));
      }
      if (r.consistent() && !(std::isfinite(o.normwise) && o.normwise >= 0.0))
        throw FormatError(
            fmt::format("{}: normwise_rel_err = {} in a {} run (expected a "
                        "finite number ≥ 0)",
                        o.where, o.normwise, r.disposition));
    }
    out.runs[RunKey{r.problem, r.input_dtype, r.strategy, r.recipe}] = std::move(r);
  }
  return out;
}

std::string key_name(const RunKey& k) {
  return fmt::format("{} {} {} {}", std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k));
}

}  // namespace

FidelityReport compare_backends(const std::string& model_path, const std::string& device_path,
                                double factor) {
  if (!(factor >= 1.0) || !std::isfinite(factor))
    throw InputError(fmt::format("fidelity: factor {} must be a finite number ≥ 1", factor));
  FidelityReport rep;
  const OneBackend model = load_one_backend(model_path);
  const OneBackend device = load_one_backend(device_path);
  rep.model_backend = model.backend;
  rep.device_backend = device.backend;
  if (model.runs.empty() || device.runs.empty())
    throw InputError(fmt::format("fidelity: {} has no runs; nothing to compare",
                                 model.runs.empty() ? model_path : device_path));
  if (model.backend != "cpu-emulation")
    throw InputError(fmt::format(
        "fidelity: the first file must hold CPU-emulation runs, {} holds '{}' runs{}", model_path,
        model.backend,
        device.backend == "cpu-emulation" ? " (the two files are given the wrong way round)" : ""));
  if (device.backend == "cpu-emulation")
    throw InputError(
        fmt::format("fidelity: both files hold CPU-emulation runs ({}, {}); the "
                    "second must be a device audit (xentlab audit --backend cuda)",
                    model_path, device_path));
  std::map<std::pair<std::string, std::string>, std::vector<double>> ratios;
  for (const auto& [k, d] : device.runs) {
    auto it = model.runs.find(k);
    if (it == model.runs.end()) {
      ++rep.device_only;
      continue;
    }
    const RunSummary& m = it->second;
    require_same_problem("fidelity", model_path, device_path, key_name(k), m, d);
    const bool mp = m.consistent(), dp = d.consistent();
    if (d.disposition == "not-supported" || m.disposition == "not-supported") {
      ++rep.not_supported;
      continue;
    }
    if (mp != dp) {
      rep.disagreements.push_back(fmt::format("DISAGREE {}: emulation {}, device {}", key_name(k),
                                              m.disposition, d.disposition));
      continue;
    }
    if (!mp) continue;  // neither passed: both runs report their own problem
    ++rep.matched;
    for (const auto& [out, mv] : m.outputs)
      if (d.outputs.count(out) == 0)
        rep.disagreements.push_back(
            fmt::format("DISAGREE {} {}: in the emulation's run only", key_name(k), out));
    for (const auto& [out, dv] : d.outputs) {
      auto jt = m.outputs.find(out);
      if (jt == m.outputs.end()) {
        rep.disagreements.push_back(
            fmt::format("DISAGREE {} {}: in the device's run only", key_name(k), out));
        continue;
      }
      const OutputSummary& mv = jt->second;
      if (mv.out_dtype != dv.out_dtype)
        throw InputError(
            fmt::format("fidelity: {} {}: output dtype {} in the emulation, {} on "
                        "the device",
                        key_name(k), out, mv.out_dtype, dv.out_dtype));
      ++rep.outputs;
      const double floor = 8.0 * unit_roundoff(parse_dtype(dv.out_dtype));
      // ratio device / emulation; 0/0 agrees; x/0 is +inf and 0/x is 0.
      const double q =
          mv.normwise > 0.0 ? dv.normwise / mv.normwise : (dv.normwise > 0.0 ? INFINITY : 1.0);
      ratios[{std::get<2>(k), out}].push_back(q);
      const bool above_floor = dv.normwise > floor || mv.normwise > floor;
      if (above_floor && (q > factor || q < 1.0 / factor))
        rep.disagreements.push_back(fmt::format(
            "DISAGREE {} {}: device {:.3g}, emulation {:.3g} (ratio {:.3g}, outside [1/{:g}, "
            "{:g}])",
            key_name(k), out, dv.normwise, mv.normwise, q, factor, factor));
    }
  }
  for (const auto& [k, m] : model.runs)
    if (device.runs.count(k) == 0) ++rep.model_only;
  if (rep.matched == 0)
    throw InputError(fmt::format(
        "fidelity: no run passed on both backends in {} and {} ({} device runs without an "
        "emulation run, {} emulation runs without a device run, {} not supported on one side); "
        "nothing to compare",
        model_path, device_path, rep.device_only, rep.model_only, rep.not_supported));
  for (auto& [key, v] : ratios) {
    std::sort(v.begin(), v.end());
    FidelityRow r;
    r.strategy = key.first;
    r.output = key.second;
    r.n = static_cast<std::int64_t>(v.size());
    r.min = v.front();
    r.max = v.back();
    r.median = v.size() % 2 == 1 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    rep.rows.push_back(r);
  }
  return rep;
}

}  // namespace xentlab::audit

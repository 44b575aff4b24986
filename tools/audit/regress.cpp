// Regression check between two audit results files, and the fidelity of the CPU emulation to a
// device backend (see audit.hpp: regress, compare_backends).
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "datasets/h5.hpp"
#include "numerics/dtype.hpp"
#include "numerics/error.hpp"
#include "tools/audit/audit.hpp"

namespace xentlab::audit {
namespace {

struct OutputSummary {
  double max_ratio = 0.0, normwise = 0.0;
  std::string out_dtype;
};
struct RunSummary {
  std::string disposition, reason;
  std::map<std::string, OutputSummary> outputs;  // by output name
};
using Key = std::tuple<std::string, std::string, std::string, std::string, std::string>;

std::map<Key, RunSummary> load_runs(const std::string& path) {
  const h5::File f = open_results_file(path);
  std::map<Key, RunSummary> out;
  if (!f.exists("runs")) return out;
  const h5::Group runs = f.open_group("runs");
  for (const auto& id : runs.children()) {
    const h5::Group g = runs.open_group(id);
    Key k{g.attr_string("problem"), g.attr_string("input_dtype"), g.attr_string("strategy"),
          g.attr_string("backend"), g.attr_string("recipe")};
    RunSummary s{g.attr_string("disposition"), g.attr_string("reason"), {}};
    for (const auto& child : g.children()) {
      if (child == "loss_abs_err") continue;
      const h5::Group og = g.open_group(child);
      s.outputs[child] = {og.attr_double("max_ratio"), og.attr_double("normwise_rel_err"),
                          og.attr_string("out_dtype")};
    }
    out[k] = std::move(s);  // a later run of the same key (appended file) supersedes
  }
  return out;
}

}  // namespace

RegressReport regress(const std::string& base_path, const std::string& cur_path) {
  RegressReport rep;
  const auto base = load_runs(base_path);
  const auto cur = load_runs(cur_path);
  int regressions = 0, grown = 0;
  for (const auto& [k, b] : base) {
    const std::string name = fmt::format("{} {} {} {} {}", std::get<0>(k), std::get<1>(k),
                                         std::get<2>(k), std::get<3>(k), std::get<4>(k));
    auto it = cur.find(k);
    if (it == cur.end()) {
      if (b.disposition == "passed") {
        rep.lines.push_back(fmt::format("REGRESSION {}: passed in the baseline, missing now", name));
        ++regressions;
      }
      continue;
    }
    const RunSummary& c = it->second;
    if (b.disposition == "passed" && c.disposition != "passed") {
      rep.lines.push_back(fmt::format("REGRESSION {}: passed in the baseline, {} now: {}", name, c.disposition, c.reason));
      ++regressions;
      continue;
    }
    for (const auto& [out, bv] : b.outputs) {
      auto jt = c.outputs.find(out);
      if (jt == c.outputs.end()) continue;
      const auto& cv = jt->second;
      if (bv.max_ratio <= 1.0 && !(cv.max_ratio <= 1.0)) {  // NaN counts as beyond
        rep.lines.push_back(fmt::format("REGRESSION {} {}: error now {:.3g}× its bound (baseline {:.3g}×)", name, out,
                   cv.max_ratio, bv.max_ratio));
        ++regressions;
      } else if (cv.normwise > 2.0 * bv.normwise && cv.normwise > 0) {
        rep.lines.push_back(fmt::format("note {} {}: normwise error {:.3g} (baseline {:.3g}), still within its bound", name,
                   out, cv.normwise, bv.normwise));
        ++grown;
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

/// The runs of one file keyed without the backend, and that backend (InputError when mixed).
std::map<RunKey, RunSummary> runs_of_one_backend(const std::string& path, std::string& backend) {
  std::map<RunKey, RunSummary> out;
  backend.clear();
  for (auto& [k, s] : load_runs(path)) {
    const std::string& b = std::get<3>(k);
    if (!backend.empty() && b != backend)
      throw InputError(fmt::format("{}: runs of two backends ({}, {}); compare files of one "
                                   "backend each",
                                   path, backend, b));
    backend = b;
    out[RunKey{std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<4>(k)}] = std::move(s);
  }
  return out;
}

}  // namespace

FidelityReport compare_backends(const std::string& model_path, const std::string& device_path,
                                double factor) {
  if (!(factor >= 1.0))
    throw InputError(fmt::format("fidelity: factor {} must be at least 1", factor));
  FidelityReport rep;
  const auto model = runs_of_one_backend(model_path, rep.model_backend);
  const auto device = runs_of_one_backend(device_path, rep.device_backend);
  if (!model.empty() && rep.model_backend == rep.device_backend)
    throw InputError(fmt::format("fidelity: both files hold runs of backend '{}' ({}, {}); "
                                 "compare a CPU-emulation audit with a device audit",
                                 rep.model_backend, model_path, device_path));
  std::map<std::pair<std::string, std::string>, std::vector<double>> ratios;
  for (const auto& [k, d] : device) {
    if (d.disposition != "passed") continue;
    auto it = model.find(k);
    if (it == model.end() || it->second.disposition != "passed") {
      ++rep.unmatched;
      continue;
    }
    ++rep.matched;
    for (const auto& [out, dv] : d.outputs) {
      auto jt = it->second.outputs.find(out);
      if (jt == it->second.outputs.end()) continue;
      const OutputSummary& mv = jt->second;
      if (!(dv.normwise > 0.0) || !(mv.normwise > 0.0)) continue;
      const double q = dv.normwise / mv.normwise;
      ratios[{std::get<2>(k), out}].push_back(q);
      const double floor = 8.0 * unit_roundoff(parse_dtype(dv.out_dtype));
      const bool above_floor = dv.normwise > floor || mv.normwise > floor;
      if (above_floor && (q > factor || q < 1.0 / factor))
        rep.disagreements.push_back(fmt::format(
            "DISAGREE {} {} {} {} {}: device {:.3g}, model {:.3g} (ratio {:.3g}, outside "
            "[1/{:g}, {:g}])",
            std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k), out, dv.normwise,
            mv.normwise, q, factor, factor));
    }
  }
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

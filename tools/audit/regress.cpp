// Regression check between two audit results files (see audit.hpp: regress).
#include <fmt/core.h>

#include <map>
#include <tuple>

#include "datasets/h5.hpp"
#include "numerics/error.hpp"
#include "tools/audit/audit.hpp"

namespace xentlab::audit {
namespace {

struct RunSummary {
  std::string disposition, reason;
  std::map<std::string, std::pair<double, double>> outputs;  // name → (max_ratio, normwise)
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
      s.outputs[child] = {og.attr_double("max_ratio"), og.attr_double("normwise_rel_err")};
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
      if (bv.first <= 1.0 && !(cv.first <= 1.0)) {  // NaN counts as beyond
        rep.lines.push_back(fmt::format("REGRESSION {} {}: error now {:.3g}× its bound (baseline {:.3g}×)", name, out,
                   cv.first, bv.first));
        ++regressions;
      } else if (cv.second > 2.0 * bv.second && cv.second > 0) {
        rep.lines.push_back(fmt::format("note {} {}: normwise error {:.3g} (baseline {:.3g}), still within its bound", name,
                   out, cv.second, bv.second));
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

}  // namespace xentlab::audit

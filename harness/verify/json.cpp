// verify's JSON report (harness/verify/verify.hpp verify_json; keys: docs/json.md, "verify").
#include <fmt/format.h>

#include <utility>

#include "harness/json_report.hpp"
#include "harness/verify/verify.hpp"
#include "numerics/error.hpp"

namespace xentlab {
namespace {

using json_report::Json;
using json_report::real;

Json profile_json(const ErrorProfile& p) {
  Json j;
  j["n"] = p.n;
  j["normwise"] = real(p.normwise);
  j["rel_q"] = real(p.rel_q);
  j["rel_p50"] = real(p.rel_p50);
  j["rel_p99"] = real(p.rel_p99);
  j["rel_floor"] = real(p.rel_floor);
  j["bias"] = real(p.bias);
  j["scale"] = real(p.scale);
  j["scale_spread"] = real(p.scale_spread);
  j["max_ref"] = real(p.max_ref);
  j["norm_ref"] = real(p.norm_ref);
  j["ulp_dtype"] = std::string(to_string(p.ulp_dtype));
  Json hist = Json::array();
  for (const double f : p.ulp_hist) hist.push_back(real(f));
  j["ulp_hist"] = std::move(hist);
  return j;
}

Json profiles_json(const std::vector<std::pair<std::string, ErrorProfile>>& profiles) {
  Json j = Json::object();
  for (const auto& [name, p] : profiles) j[name] = profile_json(p);
  return j;
}

Json differential_json(const DifferentialResult& d) {
  Json j;
  j["status"] = d.status;
  j["message"] = d.message;
  const bool compared = d.status == "passed" || d.status == "incorrect";
  j["candidate"] = compared ? profile_json(d.candidate) : Json(nullptr);
  j["baseline"] = compared ? profile_json(d.baseline) : Json(nullptr);
  j["floor_normwise"] = compared ? real(d.floor_normwise) : Json(nullptr);
  j["floor_rel"] = compared ? real(d.floor_rel) : Json(nullptr);
  j["limit_normwise"] = compared ? real(d.limit_normwise) : Json(nullptr);
  j["limit_rel_q"] = compared && d.quantile_compared ? real(d.limit_rel_q) : Json(nullptr);
  j["quantile_compared"] = d.quantile_compared;
  // The scale test (docs/verify.md, "The criterion"): the candidate's projection is
  // candidate.scale; null where it did not run (fewer than 8 elements).
  j["limit_scale"] = compared && d.scale_compared ? real(d.limit_scale) : Json(nullptr);
  j["scale_compared"] = d.scale_compared;
  return j;
}

Json output_json(const OutputReport& o) {
  Json j;
  j["name"] = o.name;
  j["status"] = o.status;
  j["message"] = o.message;
  j["dtype"] = o.dtype_known ? Json(std::string(to_string(o.dtype))) : Json(nullptr);
  j["shape"] = o.shape;
  j["bound_status"] = o.bound_status.empty() ? Json(nullptr) : Json(o.bound_status);
  j["differential_only"] = o.differential_only;
  j["statistics"] = o.stats ? json_report::stats_json(*o.stats) : Json(nullptr);
  if (o.index >= 0) {
    Json e;
    e["index"] = o.index;
    e["element"] = o.element;
    e["candidate"] = real(o.candidate);
    e["reference"] = real(o.reference);
    e["error"] = real(o.error);
    e["tolerance"] = real(o.tolerance);
    j["deciding_element"] = std::move(e);
  } else {
    j["deciding_element"] = nullptr;
  }
  j["differential"] = differential_json(o.differential);
  return j;
}

Json policy_json(const VerifyReport& r) {
  const VerifyPolicy& p = r.applied_policy;
  Json j;
  j["name"] = p.name;
  j["description"] = r.policy;
  j["explicit_tolerance"] = p.explicit_tol;
  j["atol"] = p.explicit_tol ? real(p.atol) : Json(nullptr);
  j["rtol"] = p.explicit_tol ? real(p.rtol) : Json(nullptr);
  j["recipe"] = r.policy_recipe ? Json(r.policy_recipe->name()) : Json(nullptr);
  j["vocab_order"] =
      p.explicit_tol ? Json(nullptr) : Json(std::string(to_string(p.arith.vocab_order)));
  j["token_order"] =
      p.explicit_tol ? Json(nullptr) : Json(std::string(to_string(p.arith.token_order)));
  j["judge"] = json_report::policy_json(p.judge);
  Json d;
  d["k"] = real(kDifferentialK);
  d["quantile"] = real(kDifferentialQuantile);
  d["min_elements"] = kDifferentialMinElements;
  j["differential"] = std::move(d);
  return j;
}

Json baseline_json(const Baseline& b) {
  Json j;
  j["recipe"] = b.recipe.name();
  j["strategies"] = b.strategy;
  j["status"] = b.status;
  j["description"] = b.describe();
  j["token_rows"] = b.token_rows;
  j["vocab_rows"] = b.vocab_rows;
  j["sampled"] = b.sampled;
  j["golden_rows"] = b.golden_rows;
  j["seed"] = b.seed;
  j["seconds"] = real(b.seconds);
  j["profiles"] = profiles_json(b.profiles);
  return j;
}

}  // namespace

std::string_view verdict_word(const VerifyReport& r) {
  if (!r.verdict.empty()) return r.verdict;  // judge/output_verdict.hpp to_string(Outcome)
  return to_string(r.passed ? Disposition::passed : Disposition::failed);
}

json_report::Json verify_json(const VerifyReport& r, const json_report::Invocation& inv) {
  // The inputs are files with their digests (docs/json.md): a candidate held in memory has
  // neither, and its label is no path to hash (a file of that name would be another's).
  if (r.candidate_in_memory)
    throw InputError(fmt::format(
        "verify_json: {} was judged in memory (verify_outputs); the JSON report names the "
        "candidate file and its SHA-256: write it (write_candidate) and verify_candidate that",
        r.candidate));
  Json doc = json_report::report_head(inv);
  Json in;
  in["golden"] = {{"path", r.golden},
                  {"sha256", json_report::file_sha256(r.golden)},
                  {"provenance", r.provenance}};
  in["candidate"] = {
      {"path", r.candidate},
      {"sha256", json_report::file_sha256(r.candidate)},
      {"implementation", r.implementation.empty() ? Json(nullptr) : Json(r.implementation)}};
  doc["inputs"] = std::move(in);
  doc["verdict"] = std::string(verdict_word(r));
  doc["passed"] = r.passed;
  doc["reason"] = r.reason;
  doc["check"] = std::string(to_string(r.check));
  doc["required"] = r.required;
  doc["policy"] = policy_json(r);
  doc["baseline"] = r.baseline ? baseline_json(*r.baseline) : Json(nullptr);
  Json outputs = Json::array();
  for (const OutputReport& o : r.outputs) outputs.push_back(output_json(o));
  doc["outputs"] = std::move(outputs);
  Json explain = Json::array();
  for (const RecipeMatch& m : r.explain) {
    Json e;
    e["recipe"] = m.recipe.name();
    e["status"] = m.status;
    e["consistent"] = m.status == "ok" ? Json(m.consistent) : Json(nullptr);
    e["distance"] = m.status == "ok" ? real(m.distance) : Json(nullptr);
    e["profiles"] = profiles_json(m.profiles);
    explain.push_back(std::move(e));
  }
  doc["explain"] = std::move(explain);
  return doc;
}

}  // namespace xentlab

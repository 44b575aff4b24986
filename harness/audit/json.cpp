// The audit's JSON report (harness/audit/audit.hpp audit_json; keys: docs/json.md, "audit").
#include <utility>

#include "harness/audit/audit.hpp"
#include "harness/json_report.hpp"

namespace xentlab::audit {
namespace {

using json_report::Json;
using json_report::real;

Json verdict_json(const Verdict& v) {
  Json j;
  j["disposition"] = std::string(to_string(v.disposition));
  j["output"] = v.output.empty() ? Json(nullptr) : Json(v.output);
  j["reason"] = v.reason;
  j["ratio"] = real(v.ratio);
  j["index"] = v.index;
  j["error"] = real(v.error);
  j["bound"] = real(v.bound);
  j["bias"] = real(v.bias);
  j["bias_limit"] = real(v.bias_limit);
  return j;
}

Json arithmetic_json(const DeclaredArithmetic& a) {
  Json j;
  j["vocab_order"] = std::string(to_string(a.vocab_order));
  j["block_threads"] = a.block_threads;
  j["tile"] = a.tile;
  j["token_order"] = std::string(to_string(a.token_order));
  j["gemm_k_split"] = a.gemm_k_split;
  j["vocab_ranks"] = a.vocab_ranks;
  j["rescaled_ranks"] = a.rescaled_ranks;
  j["note"] = a.note;
  return j;
}

Json run_json(const RunRecord& r) {
  Json j;
  j["problem"] = r.problem;
  j["regime"] = r.regime;
  j["strategy"] = r.strategy;
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["recipe"] = r.recipe.name();
  j["input"] = std::string(to_string(r.input));
  j["spec"] = r.spec;
  j["chunk_tokens"] = r.chunk_tokens;
  j["ranks"] = r.ranks;
  j["shard_begins"] = r.shard_begins;
  j["vocab_splits"] = r.vocab_splits;
  j["upstream"] = r.upstream;
  j["arithmetic"] = arithmetic_json(r.arith);
  j["verdict"] = verdict_json(r.verdict);
  j["seconds"] = real(r.seconds);
  j["peak_extra_bytes"] = r.peak_extra_bytes;
  j["c_vocab"] = real(r.c_vocab);
  j["bound_meaningful"] = r.bound_meaningful;
  j["bound_note"] = r.bound_note;
  j["baseline_note"] = r.baseline_note;
  Json outs = Json::array();
  for (const OutputRecord& o : r.outputs)
    outs.push_back({{"name", o.name}, {"statistics", json_report::stats_json(o.stats)}});
  j["outputs"] = std::move(outs);
  return j;
}

Json accum_json(const VerdictRow::Accum& a) {
  Json j;
  j["tested"] = a.tested;
  j["harmless"] = a.harmless;
  j["recipe"] = a.recipe;
  j["err"] = real(a.err);
  j["twin_err"] = real(a.twin_err);
  j["worst_recipe"] = a.worst_recipe;
  j["worst_err"] = real(a.worst_err);
  j["worst_twin_err"] = real(a.worst_twin_err);
  return j;
}

Json verdict_row_json(const VerdictRow& v) {
  Json j;
  j["regime"] = v.regime;
  j["output"] = v.output;
  j["input"] = v.input;
  j["err_fp32_logits"] = real(v.err_fp32_logits);
  j["err_bf16_logits"] = real(v.err_bf16_logits);
  j["err_reduced_accum_best"] = real(v.err_reduced_accum_best);
  j["reduced_accum_best_recipe"] = v.reduced_accum_best_recipe;
  j["floor"] = real(v.floor);
  j["logits_bf16_ok"] = v.logits_bf16_ok;
  j["accum_fp32_needed"] = v.accum_fp32_needed;
  j["accum_tested"] = v.accum_tested;
  j["logits_why"] = v.logits_why;
  j["accum_why"] = v.accum_why;
  j["accum_bf16"] = accum_json(v.accum_bf16);
  j["accum_fp16"] = accum_json(v.accum_fp16);
  return j;
}

Json config_json(const AuditConfig& c) {
  Json j;
  j["backend"] = std::string(to_string(c.backend));
  j["device"] = c.device;
  j["seed"] = c.seed;
  j["rows"] = c.rows;
  j["vocab_rows"] = c.vocab_rows;
  j["chunk_tokens"] = c.chunk_tokens;
  j["ranks"] = c.ranks;
  j["vocab_splits"] = c.vocab_splits;
  j["upstream"] = c.upstream;
  j["strategies"] = c.strategies;
  Json recipes = Json::array();
  for (const Recipe& r : c.recipes.empty() ? default_recipe_grid() : c.recipes)
    recipes.push_back(r.name());
  j["recipes"] = std::move(recipes);
  j["reference_tier"] = std::string(to_string(c.reference_tier));
  j["reference_memory_bytes"] = c.reference_memory;
  return j;
}

}  // namespace

json_report::Json audit_json(const AuditResult& result, const AuditConfig& config,
                             const json_report::Invocation& inv, const AuditFiles& files) {
  Json doc = json_report::report_head(inv);
  doc["files"] = {{"results", files.results}, {"markdown", files.markdown}};
  doc["config"] = config_json(config);
  const Policy policy = policy_by_name(config.policy);
  doc["policy"] = json_report::policy_json(policy);
  // The baseline-relative check against the CPU emulation of the same strategy and recipe: on a
  // device backend, for passed runs of problems up to baseline_max_macs.
  const bool device = config.backend != Backend::cpu_emulation;
  doc["baseline"] = {{"applies", config.baseline && device},
                     {"factor", real(policy.baseline_factor)},
                     {"max_macs", real(config.baseline_max_macs)}};
  doc["counts"] = {{"runs", static_cast<std::int64_t>(result.runs.size())},
                   {"passed", result.passed},
                   {"measured", result.measured},
                   {"incorrect", result.incorrect},
                   {"failed", result.failed},
                   {"not_supported", result.not_supported}};
  Json problems = Json::array();
  for (const ProblemRecord& p : result.problems)
    problems.push_back({{"name", p.name},
                        {"regime", p.regime},
                        {"input", std::string(to_string(p.input))},
                        {"spec", p.spec},
                        {"describe", p.describe},
                        {"targets_drawn_by",
                         p.targets_drawn_by.empty() ? Json(nullptr) : Json(p.targets_drawn_by)},
                        {"token_rows", p.token_rows},
                        {"vocab_rows", p.vocab_rows}});
  doc["problems"] = std::move(problems);
  Json runs = Json::array();
  for (const RunRecord& r : result.runs) runs.push_back(run_json(r));
  doc["runs"] = std::move(runs);
  Json rows = Json::array();
  for (const VerdictRow& v : result.verdict) rows.push_back(verdict_row_json(v));
  doc["precision_rule"] = std::move(rows);
  return doc;
}

}  // namespace xentlab::audit

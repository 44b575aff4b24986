// Terminal and Markdown summaries of an audit.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "harness/audit/audit.hpp"

namespace xentlab::audit {
namespace {

char letter(Disposition d) {
  switch (d) {
    case Disposition::passed:
      return 'P';
    case Disposition::incorrect:
      return 'I';
    case Disposition::not_supported:
      return 'n';
    case Disposition::failed:
      return 'F';
    case Disposition::measured:
      return 'M';
  }
  return '?';
}

std::string num(double x) {
  if (std::isnan(x)) return "-";
  if (std::isinf(x)) return "non-finite";
  return fmt::format("{:.2e}", x);
}

/// The count line. "passed" means consistent with the recipe's finite a-priori bound; a run whose
/// recipe has no finite bound (bf16 accumulation over a large vocabulary) is "measured": only
/// finiteness, the bias and (on a device) the baseline could be checked, so its errors are
/// reported, not judged — counted apart, with the largest loss error among them.
std::string runs_line(const AuditResult& res) {
  double worst_measured = NAN;
  for (const auto& r : res.runs) {
    if (r.verdict.disposition != Disposition::measured) continue;
    const double e = r.normwise("loss");
    if (!std::isnan(e))
      worst_measured = std::isnan(worst_measured) ? e : std::max(worst_measured, e);
  }
  std::string s = fmt::format(
      "\nruns: {} passed (within the finite a-priori bound of their recipe's arithmetic)",
      res.passed);
  if (res.measured > 0)
    s += fmt::format(
        ", {} measured (their recipe has no finite bound: errors reported, not judged; loss errors "
        "up to {})",
        res.measured, num(worst_measured));
  s += fmt::format(", {} incorrect, {} not supported, {} failed\n", res.incorrect,
                   res.not_supported, res.failed);
  s += "(passed = consistent with the recipe's declared arithmetic, not accurate: the errors are "
       "in the table, "
       "the answers below compare the recipes)\n";
  return s;
}

std::string factor(double err, double base) {
  if (std::isnan(err) || std::isnan(base)) return "-";
  if (std::isinf(err)) return "non-finite";
  if (base <= 0) return err <= 0 ? "×1" : "×inf";
  const double f = err / base;
  return f >= 100 ? fmt::format("×{:.0e}", f) : fmt::format("×{:.3g}", f);
}

/// "a ×1.2, b ×3" for at most four entries, then "and N more".
std::string name_list(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size() && i < 4; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > 4) s += fmt::format(" and {} more", items.size() - 4);
  return s;
}

/// The verdict's rows of one output counted: the regimes (problem × input dtype) where bf16 logits
/// may be used, and those where a reduced accumulation was tested and where it was harmful. The
/// per-output lines closing the verdict and the answer opening the summary both read these.
struct RuleTally {
  int regimes = 0, logits_ok = 0, accum_tested = 0, accum_needed = 0;
};

/// By output, in name order (the order of the verdict's closing lines).
std::map<std::string, RuleTally> tally_rule(const std::vector<VerdictRow>& rows) {
  std::map<std::string, RuleTally> by_output;
  for (const auto& v : rows) {
    RuleTally& t = by_output[v.output];
    ++t.regimes;
    t.logits_ok += v.logits_bf16_ok;
    t.accum_tested += v.accum_tested;
    t.accum_needed += v.accum_fp32_needed;
  }
  return by_output;
}

/// Whether the rule holds for one output, and why not.
struct RuleStatus {
  const char* word;  ///< HOLDS, REFUTED or UNTESTED
  const char* why;   ///< empty when it holds
  bool untested;     ///< no reduced-accumulation recipe ran (logits may be bf16 everywhere)
};

RuleStatus rule_status(const RuleTally& t) {
  if (t.logits_ok != t.regimes) return {"REFUTED", "bf16 logits cost accuracy somewhere", false};
  if (t.accum_tested == 0) return {"UNTESTED", "no reduced-accumulation recipe ran", true};
  if (t.accum_needed != t.accum_tested)
    return {"REFUTED", "reduced accumulation was harmless somewhere", false};
  return {"HOLDS", "", false};
}

/// "yes (all 8)", "no (0 of 8)", "in 3 of 8": k of n regimes.
std::string k_of_n(int k, int n) {
  if (n == 0) return "untested";
  if (k == n) return fmt::format("yes (all {})", n);
  if (k == 0) return fmt::format("no (0 of {})", n);
  return fmt::format("in {} of {}", k, n);
}

/// The short answer that opens the summary: per output, may the logits be bf16 and must the
/// accumulation be fp32 (in how many regimes), and whether the rule holds. The same counts as the
/// verdict's closing lines (tally_rule, rule_status): no second computation.
std::string short_answer(const std::vector<VerdictRow>& rows, bool md) {
  const std::map<std::string, RuleTally> tally = tally_rule(rows);
  std::string s = md ? "## Answer: \"logits may be bf16 while accumulation must be fp32\"\n\n"
                     : "ANSWER: \"logits may be bf16 while accumulation must be fp32\"\n";
  if (tally.empty())
    return s + (md ? "" : "  ") +
           "no answer: no problem ran both X/fp32/fp32/X and X/bf16/fp32/X (the verdict compares "
           "them)\n\n";
  const char* note =
      "(per output, in how many regimes, a regime being one problem in one input dtype; the "
      "criteria and the reasons: the VERDICT at the end)";
  if (md)
    s += fmt::format(
        "{}\n\n| output | logits may be bf16 | accumulation must be fp32 | the rule "
        "|\n|---|---|---|---|\n",
        note);
  else
    s += fmt::format("{}\n  {:<6} {:<20} {:<27} {}\n", note, "output", "logits may be bf16",
                     "accumulation must be fp32", "the rule");
  // The outputs in the order of the runs' columns (loss, dz, dH, dW), then any other.
  std::vector<std::string> order{"loss", "dz", "dH", "dW"};
  for (const auto& [out, t] : tally)
    if (std::find(order.begin(), order.end(), out) == order.end()) order.push_back(out);
  for (const std::string& out : order) {
    const auto it = tally.find(out);
    if (it == tally.end()) continue;
    const RuleTally& t = it->second;
    const RuleStatus st = rule_status(t);
    const std::string rule =
        st.why[0] == '\0' ? std::string(st.word) : fmt::format("{}: {}", st.word, st.why);
    if (md)
      s += fmt::format("| {} | {} | {} | {} |\n", out, k_of_n(t.logits_ok, t.regimes),
                       k_of_n(t.accum_needed, t.accum_tested), rule);
    else
      s += fmt::format("  {:<6} {:<20} {:<27} {}\n", out, k_of_n(t.logits_ok, t.regimes),
                       k_of_n(t.accum_needed, t.accum_tested), rule);
  }
  return s + "\n";
}

/// Plain-language answers to the two questions of the verdict, per output, before its table:
/// may the logits be bf16 (and what it costs), must accumulation be fp32 (bf16 and fp16 apart).
std::string plain_answers(const std::vector<VerdictRow>& rows, bool md) {
  if (rows.empty()) return "";
  std::vector<std::string> outputs;
  for (const auto& v : rows)
    if (std::find(outputs.begin(), outputs.end(), v.output) == outputs.end())
      outputs.push_back(v.output);
  const std::string item = md ? "- " : "  ";
  std::string s = md ? "\n## Answers\n\n"
                     : "\nANSWERS (×: the normwise error ÷ that of the same recipe with fp32 "
                       "logits, or with fp32 accumulation "
                       "(for accumulation: the recipe that makes it harmless, or the worst where "
                       "it is harmful); errors worst over the strategies)\n";
  s += md ? "**May the logits be bf16?** (yes where the error stays within 2× that of fp32 logits, "
            "or — marked ≤u — "
            "within one rounding of the input dtype)\n\n"
          : "May the logits be bf16? (yes where the error stays within 2x that of fp32 logits, or "
            "-- marked <=u -- "
            "within one rounding of the input dtype)\n";
  for (const auto& out : outputs) {
    std::vector<std::string> yes, no;
    for (const auto& v : rows) {
      if (v.output != out) continue;
      // "≤u": a yes by the floor (within one rounding of the input dtype), not by the factor
      const bool by_floor = v.logits_bf16_ok && v.err_bf16_logits > 2 * v.err_fp32_logits;
      const std::string e =
          fmt::format("{}.{} {}{}", v.regime, v.input, factor(v.err_bf16_logits, v.err_fp32_logits),
                      by_floor ? " ≤u" : "");
      (v.logits_bf16_ok ? yes : no).push_back(e);
    }
    const std::size_t n = yes.size() + no.size();
    std::string line = fmt::format("{}{}: ", item, out);
    if (no.empty())
      line += fmt::format("yes, in all {} regimes ({})", n, name_list(yes));
    else if (yes.empty())
      line += fmt::format("NO, in all {} regimes ({})", n, name_list(no));
    else
      line += fmt::format("only in {} of {} regimes ({}); NO in {}", yes.size(), n, name_list(yes),
                          name_list(no));
    s += line + "\n";
  }
  s += md ? "\n**Must accumulation be fp32?** (a reduced accumulation is harmless where its error "
            "stays within 2× "
            "that of its fp32-accumulation twin, or within one rounding of the input dtype)\n\n"
          : "Must accumulation be fp32? (a reduced accumulation is harmless where its error stays "
            "within 2x that of "
            "its fp32-accumulation twin, or within one rounding of the input dtype)\n";
  for (const bool bf16 : {true, false}) {
    for (const auto& out : outputs) {
      std::vector<std::string> harmful, harmless;
      for (const auto& v : rows) {
        const VerdictRow::Accum& a = bf16 ? v.accum_bf16 : v.accum_fp16;
        if (v.output != out || !a.tested) continue;
        // Harmless: the factor of the recipe that makes it so (its best); harmful: its worst.
        const bool by_floor = a.harmless && a.err > 2 * a.twin_err;
        if (a.harmless)
          harmless.push_back(fmt::format("{}.{} {}{}", v.regime, v.input, factor(a.err, a.twin_err),
                                         by_floor ? " ≤u" : ""));
        else
          harmful.push_back(fmt::format("{}.{} up to {}", v.regime, v.input,
                                        factor(a.worst_err, a.worst_twin_err)));
      }
      const std::size_t n = harmful.size() + harmless.size();
      if (n == 0) continue;
      std::string line = fmt::format("{}{} accumulation, {}: ", item, bf16 ? "bf16" : "fp16", out);
      if (harmless.empty())
        line += fmt::format("yes, fp32 is needed: harmful in all {} regimes ({})", n,
                            name_list(harmful));
      else if (harmful.empty())
        line += fmt::format("no: harmless in all {} regimes ({})", n, name_list(harmless));
      else
        line += fmt::format("depends on the regime: harmful in {} of {} ({}); harmless in {}",
                            harmful.size(), n, name_list(harmful), name_list(harmless));
      s += line + "\n";
    }
  }
  return s;
}

}  // namespace

std::string format_summary(const AuditResult& res, bool md) {
  // The answer first; the runs, the plain-language answers and the verdict's criteria follow.
  std::string s = short_answer(res.verdict, md);
  // Per problem × input dtype × recipe: dispositions per strategy and the worst errors.
  std::vector<std::string> strategies;
  for (const auto& r : res.runs)
    if (std::find(strategies.begin(), strategies.end(), r.strategy) == strategies.end())
      strategies.push_back(r.strategy);
  // One distinct letter per strategy (naive n, chunked c, checkpointed h, fused f, …).
  std::string strat_hdr;
  for (const auto& st : strategies)
    for (char ch : st)
      if (strat_hdr.find(ch) == std::string::npos) {
        strat_hdr += ch;
        break;
      }
  const std::string grad_hdr = "dH/dz";
  if (md) {
    s += "| problem | recipe | " + fmt::format("{}", fmt::join(strategies, " | ")) +
         " | loss err | " + grad_hdr + " err | dW err | max ratio |\n|---|---|";
    for (std::size_t k = 0; k < strategies.size(); ++k) s += "---|";
    s += "---|---|---|---|\n";
  } else {
    s += fmt::format("{:<22} {:<20} {:<6} {:>10} {:>10} {:>10} {:>10}\n", "problem", "recipe",
                     strat_hdr, "loss err", "dH/dz err", "dW err", "max ratio");
  }
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<const RunRecord*>> groups;
  std::vector<std::tuple<std::string, std::string, std::string>> order;
  for (const auto& r : res.runs) {
    auto key = std::make_tuple(r.problem + "." + std::string(to_string(r.input)), r.recipe.name(),
                               std::string());
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(&r);
  }
  for (const auto& key : order) {
    const auto& rs = groups[key];
    std::string letters, cells;
    double el = NAN, eg = NAN, ew = NAN, ratio = 0;
    bool unbounded = false;  // some run's declared arithmetic has no finite bound
    auto worst = [](double acc, double v) {
      return std::isnan(v) ? acc : (std::isnan(acc) ? v : std::max(acc, v));
    };
    for (const auto& st : strategies) {
      const RunRecord* run = nullptr;
      for (const RunRecord* r : rs)
        if (r->strategy == st) run = r;
      const char c = run ? letter(run->verdict.disposition) : ' ';
      letters += c;
      cells += fmt::format(" {} |", run ? std::string(to_string(run->verdict.disposition)) : "");
      if (!run) continue;
      el = worst(el, run->normwise("loss"));
      eg = worst(eg, worst(run->normwise("dH"), run->normwise("dz")));
      ew = worst(ew, run->normwise("dW"));
      ratio = std::max(ratio, run->verdict.ratio);
      unbounded = unbounded || !run->bound_meaningful;
    }
    // "no bound": the declared arithmetic has no finite a-priori bound (c·u_accum ≥ 1), so only
    // the finite parts were held to one; the verdict judges such recipes by their errors.
    const std::string ratio_cell = unbounded ? "no bound" : num(ratio);
    if (md)
      s += fmt::format("| {} | {} |{} {} | {} | {} | {} |\n", std::get<0>(key), std::get<1>(key),
                       cells, num(el), num(eg), num(ew), ratio_cell);
    else
      s += fmt::format("{:<22} {:<20} {:<6} {:>10} {:>10} {:>10} {:>10}\n", std::get<0>(key),
                       std::get<1>(key), letters, num(el), num(eg), num(ew), ratio_cell);
  }
  if (!md)
    s += fmt::format(
        "(columns {} = {}; P passed (consistent with the recipe), M measured (no finite bound: "
        "errors reported, not judged), I incorrect, n not supported, F failed; errors are "
        "normwise relative, worst over strategies; ratio = max |e|/bound; \"no bound\": the "
        "recipe's declared "
        "arithmetic has no finite a-priori bound, docs/audit.md)\n",
        strat_hdr, fmt::join(strategies, ", "));
  s += runs_line(res);
  s += plain_answers(res.verdict, md);

  // The verdict.
  s += md ? "\n## Verdict: \"logits may be bf16 while accumulation must be fp32\"\n\n"
          : "\nVERDICT: \"logits may be bf16 while accumulation must be fp32\"\n";
  // No regime to compare (recipes restricted by --recipes): the reason, not an empty table.
  if (res.verdict.empty())
    return s + (md ? "" : "  ") +
           "no regime: no problem ran both X/fp32/fp32/X and X/bf16/fp32/X (the recipes the "
           "verdict compares)\n";
  if (md)
    s += "| regime | input | output | err fp32 logits | err bf16 logits | logits may be bf16 | "
         "best reduced-accum err | accum must be fp32 |\n"
         "|---|---|---|---|---|---|---|---|\n";
  else
    s += fmt::format("{:<22} {:<5} {:<5} {:>10} {:>10} {:>6} {:>12} {:>6}\n", "regime", "input",
                     "out", "fp32-lgt", "bf16-lgt", "bf16ok", "best-redacc", "fp32!");
  for (const auto& v : res.verdict) {
    if (md)
      s += fmt::format("| {} | {} | {} | {} | {} | {} | {} ({}) | {} |\n", v.regime, v.input,
                       v.output, num(v.err_fp32_logits), num(v.err_bf16_logits),
                       v.logits_bf16_ok ? "yes" : "**no**", num(v.err_reduced_accum_best),
                       v.reduced_accum_best_recipe,
                       !v.accum_tested       ? "untested"
                       : v.accum_fp32_needed ? "yes"
                                             : "**no**");
    else
      s += fmt::format("{:<22} {:<5} {:<5} {:>10} {:>10} {:>6} {:>12} {:>6}\n", v.regime, v.input,
                       v.output, num(v.err_fp32_logits), num(v.err_bf16_logits),
                       v.logits_bf16_ok ? "yes" : "NO", num(v.err_reduced_accum_best),
                       !v.accum_tested       ? "-"
                       : v.accum_fp32_needed ? "yes"
                                             : "NO");
  }
  s += md ? "\n" : "";
  for (const auto& [out, t] : tally_rule(res.verdict)) {
    const RuleStatus st = rule_status(t);
    const std::string what = st.why[0] == '\0' ? std::string(st.word)
                             : st.untested
                                 ? fmt::format("is {} for accumulation ({})", st.word, st.why)
                                 : fmt::format("is {} ({})", st.word, st.why);
    s += fmt::format(
        "{}{}: logits may be bf16 in {}/{} regimes; accumulation must be fp32 in {}/{} tested: the "
        "rule {}\n",
        md ? "- " : "  ", out, t.logits_ok, t.regimes, t.accum_needed, t.accum_tested, what);
  }
  // The reasons, one per regime/output where the rule fails.
  for (const auto& v : res.verdict) {
    if (!v.logits_bf16_ok)
      s += fmt::format("{}{} {} {}: bf16 logits: {}\n", md ? "  - " : "    ", v.regime, v.input,
                       v.output, v.logits_why);
    if (v.accum_tested && !v.accum_fp32_needed)
      s += fmt::format("{}{} {} {}: accumulation: {}\n", md ? "  - " : "    ", v.regime, v.input,
                       v.output, v.accum_why);
  }
  return s;
}

}  // namespace xentlab::audit

// The verdict on the rule "logits may be bf16 while accumulation must be fp32", from the runs.
// Criteria (docs/audit.md, "The verdict"), per problem (data regime), input dtype X and output O:
//   err(R) = the worst normwise relative error of output O over the strategies that ran recipe R
//            (+inf when an output is non-finite where the reference is finite).
//   floor  = u_X, the unit roundoff of the input (and gradient) dtype: "X-level accuracy".
//   "logits may be bf16" holds when every run of X/bf16/fp32/X passed its own bound and
//       err(X/bf16/fp32/X) ≤ max(f · err(X/fp32/fp32/X), floor), f = the policy's baseline factor
//       (2).
//   "accumulation must be fp32" holds when every recipe with accum ∈ {bf16, fp16} either has an
//       incorrect run or err > max(f · err(its fp32-accum twin), floor).
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "harness/audit/audit.hpp"
#include "numerics/error.hpp"

namespace xentlab::audit {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct RecipeRuns {
  double worst = kNaN;  // worst normwise error of the output over strategies that produced it
  bool any_incorrect = false;
  bool all_passed = true;
  int ran = 0;
};

// The runs of one recipe, per output.
struct RecipeOutputs {
  Recipe recipe;
  std::map<std::string, RecipeRuns> outputs;
};

// The runs of one problem in one input dtype, by recipe name (the verdict's order of recipes).
struct InputRuns {
  DType input = DType::bf16;
  std::map<std::string, RecipeOutputs> recipes;
};

}  // namespace

std::vector<VerdictRow> compute_verdict(const std::vector<RunRecord>& runs) {
  const double factor = policy_by_name("default").baseline_factor;
  // (problem, input dtype name) → recipe → output → aggregate
  std::map<std::pair<std::string, std::string>, InputRuns> agg;
  for (const RunRecord& r : runs) {
    if (r.verdict.disposition == Disposition::not_supported ||
        r.verdict.disposition == Disposition::failed)
      continue;
    InputRuns& per_input = agg[{r.problem, std::string(to_string(r.input))}];
    per_input.input = r.input;
    RecipeOutputs& per_recipe = per_input.recipes[r.recipe.name()];
    per_recipe.recipe = r.recipe;
    for (const char* out : {"loss", "dz", "dH", "dW"}) {
      const double e = r.normwise(out);
      if (std::isnan(e)) continue;
      RecipeRuns& rr = per_recipe.outputs[out];
      rr.worst = std::isnan(rr.worst) ? e : std::max(rr.worst, e);
      rr.any_incorrect = rr.any_incorrect || r.verdict.disposition == Disposition::incorrect;
      rr.all_passed = rr.all_passed && consistent(r.verdict.disposition);
      ++rr.ran;
    }
  }
  std::vector<VerdictRow> rows;
  for (const auto& [key, per_input] : agg) {
    const std::string& X = key.second;
    const DType xd = per_input.input;
    const auto& per_recipe = per_input.recipes;
    const std::string A = fmt::format("{0}/fp32/fp32/{0}", X),
                      B = fmt::format("{0}/bf16/fp32/{0}", X);
    for (const char* out : {"loss", "dz", "dH", "dW"}) {
      auto get = [&](const std::string& recipe) -> const RecipeRuns* {
        auto it = per_recipe.find(recipe);
        if (it == per_recipe.end()) return nullptr;
        auto jt = it->second.outputs.find(out);
        return jt == it->second.outputs.end() ? nullptr : &jt->second;
      };
      const RecipeRuns* a = get(A);
      const RecipeRuns* b = get(B);
      if (!a || !b) continue;
      VerdictRow v;
      v.regime = key.first;
      v.output = out;
      v.input = X;
      v.floor = unit_roundoff(xd);
      v.err_fp32_logits = a->worst;
      v.err_bf16_logits = b->worst;
      const double lim_b = std::max(factor * a->worst, v.floor);
      v.logits_bf16_ok = b->all_passed && b->worst <= lim_b;
      v.logits_why = fmt::format("{}: err {:.3g} {} max({}×{:.3g}, u={:.3g}){}", B, b->worst,
                                 b->worst <= lim_b ? "≤" : ">", factor, a->worst, v.floor,
                                 b->all_passed ? "" : "; a run was not within its bound");
      // Reduced accumulation recipes and their fp32-accum twins.
      v.accum_fp32_needed = true;
      int compared = 0;
      for (const auto& [recipe, runs_of] : per_recipe) {
        const Recipe& r = runs_of.recipe;
        if (r.input != xd || r.accum == DType::fp32 || r.accum == DType::fp64) continue;
        auto it = runs_of.outputs.find(out);
        if (it == runs_of.outputs.end()) continue;
        Recipe twin = r;
        twin.accum = DType::fp32;
        const RecipeRuns* t = get(twin.name());
        if (!t) continue;
        ++compared;
        const RecipeRuns& c = it->second;
        const double lim = std::max(factor * t->worst, v.floor);
        const bool bad = c.any_incorrect || !(c.worst <= lim);
        VerdictRow::Accum& per_dtype = r.accum == DType::bf16 ? v.accum_bf16 : v.accum_fp16;
        per_dtype.tested = true;
        // The best recipe: a harmless one before a harmful one (the summary prints it as what
        // makes the accumulation harmless), then the smaller ratio to its twin (cross-multiplied).
        const bool better =
            per_dtype.recipe.empty() || (!bad && !per_dtype.harmless) ||
            (!bad == per_dtype.harmless && c.worst * per_dtype.twin_err < per_dtype.err * t->worst);
        per_dtype.harmless = per_dtype.harmless || !bad;
        if (better) {
          per_dtype.err = c.worst;
          per_dtype.twin_err = t->worst;
          per_dtype.recipe = recipe;
        }
        // Cross-multiplied ratios: no division by a zero twin error.
        if (per_dtype.worst_recipe.empty() ||
            !(c.worst * per_dtype.worst_twin_err <= per_dtype.worst_err * t->worst)) {
          per_dtype.worst_err = c.worst;
          per_dtype.worst_twin_err = t->worst;
          per_dtype.worst_recipe = recipe;
        }
        if (std::isnan(v.err_reduced_accum_best) || c.worst < v.err_reduced_accum_best) {
          v.err_reduced_accum_best = c.worst;
          v.reduced_accum_best_recipe = recipe;
        }
        if (!bad) {
          v.accum_fp32_needed = false;
          v.accum_why =
              fmt::format("{}: err {:.3g} ≤ max({}×{:.3g}, u={:.3g}) and within its bound", recipe,
                          c.worst, factor, t->worst, v.floor);
        }
      }
      v.accum_tested = compared > 0;
      if (compared == 0) {
        v.accum_fp32_needed = false;
        v.accum_why = "no reduced-accumulation recipe ran";
      } else if (v.accum_fp32_needed) {
        v.accum_why = fmt::format(
            "all {} reduced-accumulation recipes incorrect or > max({}× fp32 twin, u); "
            "best {} err {:.3g}",
            compared, factor, v.reduced_accum_best_recipe, v.err_reduced_accum_best);
      }
      rows.push_back(std::move(v));
    }
  }
  return rows;
}

}  // namespace xentlab::audit

// The memory estimates of verify and candidate (harness/verify/memory.hpp).
#include "harness/verify/memory.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "datasets/io/h5.hpp"
#include "judge/differential.hpp"
#include "numerics/error.hpp"

namespace xentlab {
namespace {

double bytes_of(const std::vector<double>& v) {
  return 8.0 * static_cast<double>(v.size());
}
double bytes_of(const std::vector<std::int64_t>& v) {
  return 8.0 * static_cast<double>(v.size());
}

// The number of elements of output `name` the golden file compares, and of its full shape.
std::pair<double, double> compared_elements(const Golden& g, const std::string& name) {
  RefOutput ro;
  ref_output(g, name, ro);
  double n = 1, full = 1;
  for (const auto d : ro.shape) n *= static_cast<double>(d);
  for (const auto d : ro.full_shape) full *= static_cast<double>(d);
  return {ro.ref == nullptr || ro.ref->empty() ? 0.0 : n, full};
}

}  // namespace

double golden_file_bytes(const std::string& path) {
  const h5::File f = h5::File::open_read(path);
  double total = 0;
  for (const char* group : {"problem", "reference", "covariates", "spec"}) {
    if (!f.exists(group)) continue;
    const h5::Group g = f.open_group(group);
    for (const std::string& name : g.children()) {
      h5::DatasetInfo inf;
      try {
        inf = g.open_dataset(name).info();
      } catch (const std::exception&) {
        continue;  // a group, not a dataset
      }
      const bool stored = std::string(group) == "problem" && name != "targets";
      total += static_cast<double>(inf.numel()) * (stored ? inf.element_bytes : 8.0);
    }
  }
  return total;
}

double golden_bytes(const Golden& g) {
  const Problem& p = g.problem;
  double b = 8.0 * static_cast<double>(p.targets.size()) + bytes_of(g.upstream) +
             bytes_of(g.token_rows) + bytes_of(g.vocab_rows);
  b += static_cast<double>(p.is_linear() ? p.H.nbytes() + p.W.nbytes() : p.logits.nbytes());
  if (p.bias) b += static_cast<double>(p.bias->nbytes());
  for (const std::vector<double>* v : {&g.loss,
                                       &g.loss_bound,
                                       &g.lse,
                                       &g.lse_bound,
                                       &g.dH,
                                       &g.dH_bound,
                                       &g.dH_cond,
                                       &g.dW,
                                       &g.dW_bound,
                                       &g.dW_cond,
                                       &g.db,
                                       &g.db_bound,
                                       &g.db_cond,
                                       &g.dz,
                                       &g.dz_bound,
                                       &g.max_logit,
                                       &g.p_target,
                                       &g.entropy,
                                       &g.sum_p_abs_z,
                                       &g.grad_scale,
                                       &g.target_logit,
                                       &g.max_abs_logit,
                                       &g.mean_abs_logit,
                                       &g.gemm_abs})
    b += bytes_of(*v);
  return b;
}

void check_golden_read_memory(const std::string& path, std::int64_t budget_bytes,
                              const std::string& command) {
  const MemoryBudget budget = MemoryBudget::from(budget_bytes);
  MemoryEstimate m;
  m.add("the golden file as read", golden_file_bytes(path));
  check_memory_estimate(m, budget, fmt::format("{} of {}", command, path),
                        "write a golden file of fewer token or vocabulary rows (golden --rows, "
                        "--vocab-rows), or give a larger --memory-budget on a machine that has it");
}

MemoryEstimate verify_memory(const Golden& g, const std::string& candidate_path,
                             const VerifyPolicy& pol, const VerifyOptions& o) {
  const h5::File f = h5::File::open_read(candidate_path);
  std::vector<StoredOutput> stored;
  for (const std::string& name : candidate_output_names()) {
    if (!f.exists(name)) continue;
    const h5::DatasetInfo inf = f.open_dataset(name).info();
    stored.push_back({name, inf.numel(), static_cast<double>(inf.element_bytes)});
  }
  return verify_memory(g, stored, pol, o);
}

MemoryEstimate verify_memory(const Golden& g, const std::vector<StoredOutput>& stored,
                             const VerifyPolicy& pol, const VerifyOptions& o) {
  MemoryEstimate m;
  m.add("the golden file as read", golden_bytes(g));
  const double V = static_cast<double>(g.V), D = static_cast<double>(g.D);
  const double S = static_cast<double>(g.S), J = static_cast<double>(g.J);
  // The a-priori bounds of every output the golden file holds (formed here unless given: given,
  // they are the caller's, as a baseline given is).
  if (!pol.explicit_tol && !o.bounds_given)
    m.add("the policy's a-priori bounds",
          g.D > 0 ? 8.0 * (S * D + 2.0 * J * D + 2.0 * J + 4.0 * S) : 16.0 * S * V + 32.0 * S);
  // The candidate's outputs, one at a time: as stored, as doubles (the full shape's, then the
  // rows compared), the tolerance, and the differential check's copies and relative errors.
  double one = 0, kept = 0;
  for (const StoredOutput& s : stored) {
    const double n = static_cast<double>(s.numel);
    const double compared = compared_elements(g, s.name).first;
    one = std::max(one, n * (s.element_bytes + 8.0) + (n != compared ? 8.0 * compared : 0.0) +
                            32.0 * compared);
    kept += 8.0 * compared;
  }
  // Then in turn: the policy's baseline (before the outputs are judged), the outputs, and
  // --explain's baselines beside the outputs kept for it. Only the largest adds to the rest.
  const bool diff_check = o.check != VerifyCheck::bound && !pol.explicit_tol;
  const double baseline =
      diff_check && !o.baseline_given
          ? baseline_memory_bytes(g, *policy_recipe(pol, g.problem.input_dtype()), o.baseline)
          : 0.0;
  double explain = 0;
  if (o.explain && !o.explain_given)
    for (const Recipe& r : explain_recipes(g))
      explain = std::max(explain, baseline_memory_bytes(g, r, o.baseline));
  if (o.explain) explain += kept;
  if (baseline >= one && baseline >= explain)
    m.add("the emulated baseline (its largest run)", baseline);
  else if (one >= explain)
    m.add("one output of the candidate at a time", one);
  else
    m.add("--explain's baselines and the outputs kept for them", explain);
  return m;
}

MemoryEstimate candidate_memory(const Golden& g, const Strategy& st, const RunRequest& req) {
  MemoryEstimate m;
  m.add("the golden file as read", golden_bytes(g));
  m.add(fmt::format("{}'s workspace", st.name()), static_cast<double>(st.workspace_size(req)));
  const double N = static_cast<double>(g.N), V = static_cast<double>(g.V),
               D = static_cast<double>(g.D);
  const double grads =
      req.want_grads ? (g.D > 0 ? N * D + V * D + (g.problem.bias ? V : 0.0) : N * V) : 0.0;
  m.add("its outputs as doubles", 8.0 * (2.0 * N + grads));
  m.add("the outputs written", static_cast<double>(size_of(req.recipe.accum)) * 2.0 * N +
                                   static_cast<double>(size_of(req.recipe.grad)) * grads);
  return m;
}

}  // namespace xentlab

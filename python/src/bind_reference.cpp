// xentlab._xentlab: the certified reference.
#include <string>
#include <utility>
#include <vector>

#include "datasets/catalog.hpp"
#include "numerics/loss_spec.hpp"
#include "numerics/memory.hpp"
#include "python/src/common.hpp"
#include "reference/reference.hpp"

namespace xentlab::python {
namespace {

nb::dict reference(const DatasetInstance& ds, const LossSpec& spec, const std::string& tier,
                   std::vector<std::int64_t> token_rows, std::vector<std::int64_t> vocab_rows,
                   bool want_dz, bool want_grads, std::int64_t memory_budget, int threads) {
  ReferenceOptions o;
  o.tier = parse_reference_tier(tier);
  o.token_rows = std::move(token_rows);
  o.vocab_rows = std::move(vocab_rows);
  o.want_dz = want_dz;
  const bool linear = ds.problem.is_linear();
  o.want_dH = o.want_dW = o.want_db = linear && want_grads;
  if (memory_budget > 0) MemoryBudget::from(memory_budget);  // beyond memory and swap: refused
  o.max_bytes = memory_budget;
  o.threads = threads;
  ReferenceResult r;
  {
    nb::gil_scoped_release release;
    r = compute_reference(ds.problem, spec, o);
  }
  const auto S = r.token_rows.size(), J = r.vocab_rows.size();
  const auto Dz = static_cast<std::size_t>(r.D), Vz = static_cast<std::size_t>(r.V);
  nb::dict d;
  d["tier"] = std::string(to_string(r.tier));
  d["N"] = r.N;
  d["V"] = r.V;
  d["D"] = r.D;
  d["n_valid"] = r.n_valid;
  d["partial"] = r.partial;
  d["token_rows"] = i64(r.token_rows);
  d["vocab_rows"] = i64(r.vocab_rows);
  d["reduced_loss"] = r.reduced_loss;
  d["reduced_loss_bound"] = r.reduced_loss_bound;
  for (const auto& [k, v] : {std::pair<const char*, const std::vector<double>*>{"loss", &r.loss},
                             {"loss_bound", &r.loss_bound},
                             {"lse", &r.lse},
                             {"lse_bound", &r.lse_bound},
                             {"ce", &r.ce},
                             {"z_term", &r.z_term},
                             {"max_logit", &r.max_logit},
                             {"p_target", &r.p_target},
                             {"entropy", &r.entropy},
                             {"sum_p_abs_z", &r.sum_p_abs_z},
                             {"grad_scale", &r.grad_scale}})
    d[k] = f64(*v);
  if (!r.db.empty()) {
    d["db"] = f64(r.db);
    d["db_bound"] = f64(r.db_bound);
  }
  if (!r.dH.empty()) {
    d["dH"] = f64(r.dH, {S, Dz});
    d["dH_bound"] = f64(r.dH_bound, {S, Dz});
    d["dH_cond"] = f64(r.dH_cond, {S, Dz});
  }
  if (!r.dW.empty()) {
    d["dW"] = f64(r.dW, {J, Dz});
    d["dW_bound"] = f64(r.dW_bound, {J, Dz});
    d["dW_cond"] = f64(r.dW_cond, {J, Dz});
  }
  if (!r.dz.empty()) {
    d["dz"] = f64(r.dz, {S, Vz});
    d["dz_bound"] = f64(r.dz_bound, {S, Vz});
  }
  return d;
}

}  // namespace

void bind_reference(nb::module_& m) {
  using namespace nb::literals;
  m.def("reference", &reference, "problem"_a, "spec"_a, "tier"_a, "token_rows"_a, "vocab_rows"_a,
        "dz"_a, "gradients"_a, "memory_budget"_a, "threads"_a);
}

}  // namespace xentlab::python

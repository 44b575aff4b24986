// verify's tolerance (judge/tolerance.hpp, docs/verify.md).
#include "judge/tolerance.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "judge/bounds_for.hpp"
#include "numerics/error.hpp"

namespace xentlab {
namespace {

Recipe recipe_of(const VerifyPolicy& p, DType input) {
  if (p.recipe) return *p.recipe;
  Recipe r;
  r.input = input;
  r.logits = p.x;
  r.accum = DType::fp32;
  r.grad = p.x;
  return r;
}

const double* data_or_null(const std::vector<double>& v) {
  return v.empty() ? nullptr : v.data();
}

}  // namespace

void policy_bounds(const Golden& g, const VerifyPolicy& pol, PolicyBounds& pb) {
  RowCovariates cov;
  set_reference_quantities(cov, g);
  cov.max_abs_logit = g.max_abs_logit.data();
  cov.mean_abs_logit = g.mean_abs_logit.data();
  cov.target_logit = g.target_logit.data();
  cov.gemm_abs = data_or_null(g.gemm_abs);
  cov.reduced_loss = g.reduced_loss.value_or(0.0);
  cov.dz = data_or_null(g.dz);
  if (!g.db.empty() && !g.db_cond.empty()) {
    cov.db = g.db.data();
    cov.db_cond = g.db_cond.data();
  }
  // Labelled only once formed: bounds whose forming threw (out of memory at the Llama-3-8B head)
  // are never taken for the policy's (VerifyOptions::bounds_given refuses them).
  pb.policy.clear();
  pb.b = bounds_for_covariates(g.problem, g.spec, recipe_of(pol, g.problem.input_dtype()),
                               pol.arith, cov, 1);
  pb.policy = pol.describe(g.problem.input_dtype());
}

template <class Vec>
BoundView view_of(const Vec& v) {
  return {v.data(), v.size()};
}
BoundView bound_of(const PolicyBounds& pb, const std::string& name, std::vector<double>& scalar) {
  if (name == "loss") return view_of(pb.b.loss);
  if (name == "lse") return view_of(pb.b.lse);
  if (name == "dH") return view_of(pb.b.dH);
  if (name == "dW") return view_of(pb.b.dW);
  if (name == "db") return view_of(pb.b.db);
  if (name == "dz") return view_of(pb.b.dz);
  scalar = {pb.b.reduced_loss};
  return view_of(scalar);
}

// Tolerance per element: policy bound (or atol + rtol·|ref|) + u_out·|ref| + the reference's bound.
HostArray<double> tolerance_from(const Golden& g, const VerifyPolicy& pol, const PolicyBounds& pb,
                                 const std::string& name, DType out_dtype, const RefOutput& ro) {
  (void)g;
  const std::vector<double>& ref = *ro.ref;
  const std::vector<double>& rb = *ro.ref_bound;
  HostArray<double> tol(ref.size());
  std::vector<double> scalar_b;
  const BoundView pbv = pol.explicit_tol ? BoundView{} : bound_of(pb, name, scalar_b);
  const double u_out = unit_roundoff(out_dtype);
  // Element by element (the same values on any number of threads).
#pragma omp parallel for schedule(static) if (ref.size() >= (std::size_t{1} << 20))
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double a = std::isfinite(ref[i]) ? std::fabs(ref[i]) : 0.0;
    const double base = pol.explicit_tol ? pol.atol + pol.rtol * a
                        : (pbv.data && pbv.size() == ref.size())
                            ? pbv[i]
                            : std::numeric_limits<double>::infinity();
    tol[i] = base + (pol.explicit_tol ? 0.0 : u_out * a) + (i < rb.size() ? rb[i] : 0.0);
    // A non-finite reference (the NaN mean of an all-ignored batch, the −inf lse of a fully masked
    // row) is matched by kind, not by magnitude (judge/stats.hpp): no tolerance applies.
    if (!std::isfinite(ref[i]) || std::isnan(tol[i])) tol[i] = 0.0;
  }
  return tol;
}

std::vector<double> verify_tolerance(const Golden& g, const VerifyPolicy& pol,
                                     const std::string& name, DType out_dtype) {
  PolicyBounds pb;
  if (!pol.explicit_tol) policy_bounds(g, pol, pb);
  RefOutput ro;
  ref_output(g, name, ro);
  if (!ro.ref) throw InputError(fmt::format("verify_tolerance: unknown output '{}'", name));
  const HostArray<double> t = tolerance_from(g, pol, pb, name, out_dtype, ro);
  return std::vector<double>(t.begin(), t.end());
}

std::string VerifyPolicy::describe(DType input_dtype) const {
  if (explicit_tol) return fmt::format("explicit: |e| ≤ {:g} + {:g}·|ref|", atol, rtol);
  const Recipe r = recipe_of(*this, input_dtype);
  return fmt::format(
      "{}: recipe {}, vocab reduction {}, token reduction {}, k={:g}{}, plus u_out·|ref| and "
      "the reference's bound",
      name, r.name(), to_string(arith.vocab_order), to_string(arith.token_order), judge.k,
      judge.bias_check ? ", bias test" : "");
}

VerifyPolicy make_verify_policy(const std::string& name, const std::string& strictness,
                                std::optional<double> k) {
  VerifyPolicy p;
  p.name = name;
  if (name.find('/') != std::string::npos) {
    p.recipe = parse_recipe(name);
  } else {
    try {
      p.x = parse_dtype(name);
    } catch (const InputError&) {
      throw InputError(
          fmt::format("unknown verify policy '{}' (a dtype: bf16, fp16, fp32; or a recipe "
                      "in/logits/accum/grad such as bf16/bf16/fp32/bf16)",
                      name));
    }
    if (p.x == DType::fp64)
      throw InputError(
          "verify policy fp64: candidates are judged as fp32, fp16 or bf16 arithmetic");
  }
  // Worst case over reduction orders: a sequential sum has the largest constant c(n) = n − 1.
  p.arith.vocab_order = ReductionOrder::sequential;
  p.arith.token_order = ReductionOrder::sequential;
  p.arith.note = "unknown arithmetic: worst-case (sequential) reduction orders";
  // "audit" is the audit's own policy (a recipe without a finite bound measured, not failed):
  // a candidate is never judged by it.
  if (strictness != "default" && strictness != "strict" && strictness != "lenient")
    throw InputError(fmt::format(
        "unknown strictness '{}' (expected default, strict or lenient{})", strictness,
        strictness == "audit" ? "; audit is the policy of xentlab audit, not of a verdict on a "
                                "candidate"
                              : ""));
  p.judge = policy_by_name(strictness);
  if (k) {
    check_tolerance_number("--k", *k, false);
    p.judge.k = *k;
  }
  return p;
}

void check_tolerance_number(const std::string& option, double value, bool zero_ok) {
  if (std::isfinite(value) && (zero_ok ? value >= 0 : value > 0)) return;
  throw InputError(
      fmt::format("{} must be a finite number {} 0, got {}", option, zero_ok ? "≥" : ">", value));
}

VerifyPolicy make_explicit_policy(double atol, double rtol) {
  check_tolerance_number("--atol", atol, true);
  check_tolerance_number("--rtol", rtol, true);
  VerifyPolicy p;
  p.name = "explicit";
  p.explicit_tol = true;
  p.atol = atol;
  p.rtol = rtol;
  p.judge = policy_by_name("default");
  p.judge.k = 1.0;
  p.judge.bias_check = false;
  return p;
}

std::optional<Recipe> policy_recipe(const VerifyPolicy& policy, DType input_dtype) {
  if (policy.explicit_tol) return std::nullopt;
  return recipe_of(policy, input_dtype);
}
}  // namespace xentlab

#pragma once
// verify's tolerance (docs/verify.md derives it): a candidate of unknown arithmetic is judged as a
// correct implementation of the recipe  input/X/fp32/X  (inputs as stored; logits, dz and output
// gradients held in the policy's dtype X; every reduction in fp32) with *worst-case* reduction
// orders (sequential: c(n) = n − 1 bounds every summation order), using the a-priori bounds of
// judge/bounds.hpp evaluated on the golden file's covariates. To that bound we add, per element,
// u_out·|ref| (the candidate may round its result once into the dtype it stored it in) and the
// reference's own certified bound. Explicit --atol/--rtol replace the bound by atol + rtol·|ref|
// (no bias test).
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "datasets/formats/golden.hpp"
#include "judge/bounds.hpp"
#include "judge/policy.hpp"
#include "numerics/arithmetic.hpp"
#include "numerics/host_array.hpp"
#include "numerics/recipe.hpp"

namespace xentlab {

struct VerifyPolicy {
  std::string name;  ///< "bf16", "fp16", "fp32", a recipe "in/logits/accum/grad", or "explicit"
  std::optional<Recipe> recipe;  ///< unset: input dtype taken from the golden file, X/fp32/X
  DType x = DType::fp32;         ///< the policy's dtype X (when recipe is unset)
  DeclaredArithmetic arith;      ///< worst-case orders (sequential) unless given
  Policy judge;                  ///< k, bias test (judge/policy.hpp policy_by_name)
  bool explicit_tol = false;
  double atol = 0, rtol = 0;
  /// "policy bf16: recipe bf16/bf16/fp32/bf16, sequential vocab and token reductions, k=1, …"
  std::string describe(DType input_dtype) const;
};

/// Builds a policy: name is a dtype ("bf16", "fp16", "fp32") or a recipe; strictness one of
/// judge/policy.hpp's policies (default, strict, lenient); k overrides the multiplier. Throws
/// InputError naming the unknown name.
VerifyPolicy make_verify_policy(const std::string& name, const std::string& strictness = "default",
                                std::optional<double> k = std::nullopt);
/// Explicit tolerance |e| ≤ atol + rtol·|ref| (atol, rtol ≥ 0, finite).
VerifyPolicy make_explicit_policy(double atol, double rtol);
/// Throws InputError "<option> must be a finite number ≥ 0, got <value>" (> 0 when !zero_ok):
/// the check of --k, --atol and --rtol, shared by the policies and the command line.
void check_tolerance_number(const std::string& option, double value, bool zero_ok);

/// The recipe a policy declares for a golden problem of input dtype input_dtype (input/X/fp32/X
/// for a dtype policy); nullopt for an explicit --atol/--rtol policy.
std::optional<Recipe> policy_recipe(const VerifyPolicy& policy, DType input_dtype);

/// The per-element tolerance verify applies to output `name` (in the golden's compared shape) for
/// a candidate stored in out_dtype, before the policy's multiplier k. Throws InputError for an
/// unknown output name.
std::vector<double> verify_tolerance(const Golden& golden, const VerifyPolicy& policy,
                                     const std::string& name, DType out_dtype);

/// The a-priori bounds of the policy's recipe on the golden file's covariates (policy_bounds).
struct PolicyBounds {
  Bounds b;
  /// The policy they are of (VerifyPolicy::describe of the golden's input dtype): bounds formed
  /// once are reused only for that policy (VerifyOptions::bounds_given).
  std::string policy;
};
/// Fills pb: the quantities the golden file stores of its certified reference (not a
/// ReferenceResult recomputed here), through the judge's one function from covariates to bounds
/// (judge/bounds_for.hpp bounds_for_covariates). One token chunk: the golden bound of dW is that
/// of a candidate that adds its token rows in one fp32 GEMM.
void policy_bounds(const Golden& g, const VerifyPolicy& pol, PolicyBounds& pb);

/// The policy bound of one output: a view of Bounds' array (std::vector or HostArray).
struct BoundView {
  const double* data = nullptr;
  std::size_t n = 0;
  std::size_t size() const { return n; }
  double operator[](std::size_t i) const { return data[i]; }
};
/// The bound of output `name` in pb (reduced_loss: a view of `scalar`, which it fills).
BoundView bound_of(const PolicyBounds& pb, const std::string& name, std::vector<double>& scalar);

/// Tolerance per element: the policy bound (or atol + rtol·|ref|) + u_out·|ref| + the
/// reference's bound; 0 where the reference is not finite (matched by kind). A HostArray: 4.2 GB
/// for dW at the Llama-3-8B head, zero-filled in parallel.
HostArray<double> tolerance_from(const Golden& g, const VerifyPolicy& pol, const PolicyBounds& pb,
                                 const std::string& name, DType out_dtype, const RefOutput& ro);

}  // namespace xentlab

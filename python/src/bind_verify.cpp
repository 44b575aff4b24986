// xentlab._xentlab: verify (scoring a candidate against a golden file) and candidate files.
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/verify/golden.hpp"
#include "harness/verify/memory.hpp"
#include "harness/verify/verify.hpp"
#include "numerics/error.hpp"
#include "python/src/common.hpp"

namespace xentlab::python {

nb::dict stats_dict(const ErrorStats& e) {
  nb::dict d;
  d["n"] = e.n;
  d["dtype"] = std::string(to_string(e.out_dtype));
  d["max_abs_err"] = e.max_abs_err;
  d["max_abs_err_index"] = e.max_abs_err_index;
  d["max_rel_err"] = e.max_rel_err;
  d["max_rel_err_index"] = e.max_rel_err_index;
  d["normwise_rel_err"] = e.normwise_rel_err;
  d["rms_abs_err"] = e.rms_abs_err;
  d["mean_abs_err"] = e.mean_abs_err;
  d["max_ulp"] = e.max_ulp;
  d["frac_ulp_le1"] = e.frac_ulp_le1;
  d["bias"] = e.bias;
  d["bias_stderr"] = e.bias_stderr;
  d["max_ratio"] = e.max_ratio;
  d["max_ratio_index"] = e.max_ratio_index;
  d["max_ratio_err"] = e.max_ratio_err;
  d["max_ratio_bound"] = e.max_ratio_bound;
  d["n_over_bound"] = e.n_over_bound;
  d["nonfinite_where_ref_finite"] = e.nonfinite_where_ref_finite;
  d["first_mismatch_index"] = e.first_mismatch_index;
  return d;
}

namespace {

nb::dict output_dict(const OutputReport& o) {
  nb::dict d;
  d["name"] = o.name;
  d["status"] = o.status;
  d["message"] = o.message;
  d["dtype"] =
      o.dtype_known ? nb::object(nb::str(std::string(to_string(o.dtype)).c_str())) : nb::none();
  d["shape"] = o.shape;
  d["stats"] = o.stats ? nb::object(stats_dict(*o.stats)) : nb::none();
  d["index"] = o.index;
  d["element"] = o.element;
  d["candidate"] = o.candidate;
  d["reference"] = o.reference;
  d["error"] = o.error;
  d["tolerance"] = o.tolerance;
  // The differential check (docs/verify.md): its verdict, and the candidate's and the emulated
  // baseline's normwise error and relative-error quantile with the limits they were held to.
  d["bound_status"] = o.bound_status;
  d["differential_only"] = o.differential_only;
  nb::dict df;
  df["status"] = o.differential.status;
  df["message"] = o.differential.message;
  df["normwise"] = o.differential.candidate.normwise;
  df["baseline_normwise"] = o.differential.baseline.normwise;
  df["limit_normwise"] = o.differential.limit_normwise;
  df["rel_q"] = o.differential.candidate.rel_q;
  df["baseline_rel_q"] = o.differential.baseline.rel_q;
  df["limit_rel_q"] = o.differential.limit_rel_q;
  df["quantile_compared"] = o.differential.quantile_compared;
  d["differential"] = df;
  return d;
}

VerifyPolicy policy_of(std::optional<std::string> name, const std::string& strictness,
                       std::optional<double> k, std::optional<double> atol,
                       std::optional<double> rtol, const Golden& g) {
  if (atol || rtol) return make_explicit_policy(atol.value_or(0.0), rtol.value_or(0.0));
  return make_verify_policy(name ? *name : std::string(to_string(g.problem.input_dtype())),
                            strictness, k);
}

nb::dict verify(const Golden& g, const std::string& candidate, const VerifyPolicy& pol,
                const std::vector<std::string>& required, const std::string& check, bool explain,
                std::int64_t baseline_rows, std::uint64_t baseline_seed,
                const std::string& baseline_backend, std::int64_t memory_budget) {
  VerifyOptions opt;
  opt.memory_budget = memory_budget;
  opt.required = required;
  opt.check = parse_verify_check(check);  // InputError naming the value, as the command's
  opt.explain = explain;
  opt.baseline.rows = baseline_rows;
  opt.baseline.seed = baseline_seed;
  // The device is asked for only where a baseline runs, as the command asks.
  const bool runs_baseline = !pol.explicit_tol && (opt.check != VerifyCheck::bound || explain);
  opt.baseline.backends = baseline_backends(baseline_backend, runs_baseline, "baseline_backend");
  VerifyReport r;
  {
    nb::gil_scoped_release release;
    r = verify_candidate(g, candidate, pol, opt);
  }
  nb::dict d;
  d["golden"] = r.golden;
  d["candidate"] = r.candidate;
  d["policy"] = r.policy;
  d["provenance"] = r.provenance;
  d["implementation"] = r.implementation;
  d["required"] = r.required;
  nb::list outs;
  for (const auto& o : r.outputs) outs.append(output_dict(o));
  d["outputs"] = outs;
  d["passed"] = r.passed;
  d["verdict"] = r.verdict;
  d["reason"] = r.reason;
  d["text"] = format_report(r);
  d["_report"] = nb::cast(std::move(r));
  return d;
}

}  // namespace

void bind_verify(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<VerifyPolicy>(m, "_VerifyPolicy")
      .def_ro("name", &VerifyPolicy::name)
      .def_prop_ro("k", [](const VerifyPolicy& p) { return p.explicit_tol ? 1.0 : p.judge.k; })
      .def("describe", [](const VerifyPolicy& p, const std::string& input_dtype) {
        return p.describe(parse_dtype(input_dtype));
      });
  nb::class_<VerifyReport>(m, "_VerifyReport");
  m.def(
      "verify_policy_name_check", [](const std::string& name) { (void)make_verify_policy(name); },
      "name"_a, "InputError (ValueError) naming a policy name verify does not know");
  m.def("verify_policy", &policy_of, "name"_a.none(), "strictness"_a, "k"_a.none(), "atol"_a.none(),
        "rtol"_a.none(), "golden"_a);
  m.def("check_tolerance_number", &check_tolerance_number, "option"_a, "value"_a, "zero_ok"_a);
  m.def("parse_required_outputs", &parse_required_outputs);
  m.def("candidate_output_names", &candidate_output_names);
  m.def("verify", &verify, "golden"_a, "candidate"_a, "policy"_a, "required"_a, "check"_a,
        "explain"_a, "baseline_rows"_a, "baseline_seed"_a, "baseline_backend"_a, "memory_budget"_a);
  m.def("check_golden_read_memory", &check_golden_read_memory, "path"_a, "budget"_a, "command"_a,
        "InputError (ValueError) when reading the golden file alone would exceed the budget");
  m.def("check_junit_output", &check_junit_output, "path"_a, "force"_a);
  m.def("write_junit", [](const std::string& path, bool force, const VerifyReport& r) {
    write_junit(path, force, r);
  });
  m.def(
      "write_candidate",
      [](const std::string& path, bool force, const std::vector<std::string>& names,
         const std::vector<AnyArray>& arrays, const std::vector<bool>& bits,
         const std::string& implementation) {
        std::vector<std::pair<std::string, Tensor>> outs;
        for (std::size_t i = 0; i < names.size(); ++i) {
          const AnyArray& a = arrays[i];
          require_host(a, names[i]);
          Tensor t;
          if (a.ndim() == 0) {
            Tensor s(float_dtype(a, names[i], bits[i]), {}, names[i]);
            std::memcpy(s.data(), a.data(), s.nbytes());
            t = std::move(s);
          } else {
            t = tensor_from(a, names[i], a.ndim() >= 2, bits[i]);
          }
          outs.emplace_back(names[i], std::move(t));
        }
        write_candidate(path, force, outs, implementation);
      },
      "path"_a, "force"_a, "names"_a, "arrays"_a, "bits"_a, "implementation"_a);
}

}  // namespace xentlab::python

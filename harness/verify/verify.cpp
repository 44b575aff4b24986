// `xentlab verify` (harness/verify/verify.hpp): reads a candidate file and judges each output.
#include "harness/verify/verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "datasets/io/h5.hpp"
#include "harness/verify/memory.hpp"
#include "judge/output_verdict.hpp"
#include "numerics/error.hpp"
#include "numerics/version.hpp"

namespace xentlab {

VerifyReport verify_candidate(const Golden& g, const std::string& candidate_path,
                              const VerifyPolicy& pol, const std::vector<std::string>& required) {
  VerifyOptions o;
  o.required = required;
  return verify_candidate(g, candidate_path, pol, o);
}

namespace {

// Opens the candidate file and checks its format, its version and the loss semantics it declares
// against the golden file's; fills rep.implementation. Throws FormatError naming the mismatch.
h5::File open_candidate(const Golden& g, const std::string& candidate_path, VerifyReport& rep) {
  h5::File f = h5::File::open_read(candidate_path);
  if (!f.has_attr("format"))
    throw FormatError(
        fmt::format("{}: not a xentlab candidate file (no 'format' attribute at the root; "
                    "write format=\"{}\", format_version={})",
                    candidate_path, kCandidateFormat, kCandidateVersion));
  const std::string fmt_name = f.attr_string("format");
  if (fmt_name != kCandidateFormat)
    throw FormatError(fmt::format(
        "{}: its format attribute is '{}', not '{}'{}", candidate_path, fmt_name, kCandidateFormat,
        fmt_name == kGoldenFormat ? " (a golden file was given as the candidate)" : ""));
  const std::int64_t ver = f.attr_int("format_version");
  if (ver < 1 || ver > kCandidateVersion)
    throw FormatError(
        fmt::format("{}: candidate format_version {}; this xentlab ({}) reads versions 1 to {}",
                    candidate_path, ver, kVersion, kCandidateVersion));
  if (f.has_attr("implementation")) rep.implementation = f.attr_string("implementation");
  // Every object at the root is one of the outputs (docs/formats.md): a misnamed one ("dh",
  // "grad_W", "Loss") would otherwise be left out of the verdict without a word.
  const std::vector<std::string>& known = candidate_output_names();
  for (const std::string& name : f.children())
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string all, inside;
      for (const auto& k : known) {
        all += (all.empty() ? "" : ", ") + k;
        // Outputs written into a group (a candidate laid out like the golden file's /reference).
        if (f.exists(name + "/" + k)) inside += (inside.empty() ? "" : ", ") + k;
      }
      throw FormatError(fmt::format(
          "{}: '{}' is not an output verify knows (the outputs, by these names: {}; "
          "docs/formats.md){}",
          candidate_path, name, all,
          inside.empty() ? ""
                         : fmt::format("; it is a group holding {}: write the outputs as "
                                       "datasets at the file's root, not in a group",
                                       inside)));
    }
  // Version 2: the loss semantics the candidate declares it implemented must be the golden
  // file's (a candidate that divided by its own token count where the golden file has a
  // normaliser is judged against another loss, and every gradient would fail for that reason).
  if (ver >= 2 && f.has_attr("reduction")) {
    const std::string red = f.attr_string("reduction");
    if (red != to_string(g.spec.reduction))
      throw FormatError(fmt::format(
          "{}: the candidate declares reduction '{}', the golden file {} has reduction '{}'",
          candidate_path, red, g.path, to_string(g.spec.reduction)));
  }
  if (ver >= 2 && f.has_attr("normalizer")) {
    const std::int64_t n = f.attr_int("normalizer");
    if (n != g.spec.normalizer)
      throw FormatError(fmt::format(
          "{}: the candidate declares normalizer {}, the golden file {} has {} (0 = the batch's "
          "own count of valid tokens)",
          candidate_path, n, g.path, g.spec.normalizer));
  }
  return f;
}

// Where the candidate's outputs come from: its file, or tensors held in memory (verify_outputs).
class CandidateSource {
 public:
  virtual ~CandidateSource() = default;
  virtual bool holds(const std::string& name) const = 0;
  // Output `name` (held): in `storage` or wherever the source keeps it; nullptr with `unusable`
  // set for a dataset whose dtype is not a float format verify reads. Data that cannot be read
  // (damaged, truncated, not matching their digest) throw FormatError.
  virtual const Tensor* read(const std::string& name, Tensor& storage,
                             std::string& unusable) const = 0;
};

class FileSource final : public CandidateSource {
 public:
  explicit FileSource(const h5::File& f) : f_(f) {}
  bool holds(const std::string& name) const override { return f_.exists(name); }
  const Tensor* read(const std::string& name, Tensor& storage,
                     std::string& unusable) const override {
    const h5::Dataset d = f_.open_dataset(name);
    try {
      (void)d.tensor_dtype();
    } catch (const FormatError& e) {
      unusable = e.what();
      return nullptr;
    }
    storage = d.read_tensor();
    return &storage;
  }

 private:
  const h5::File& f_;
};

class MemorySource final : public CandidateSource {
 public:
  explicit MemorySource(const CandidateOutputs& o) : o_(o) {}
  bool holds(const std::string& name) const override { return find(name) != nullptr; }
  const Tensor* read(const std::string& name, Tensor&, std::string&) const override {
    return find(name);
  }

 private:
  const Tensor* find(const std::string& name) const {
    for (const auto& [n, t] : o_)
      if (n == name) return &t;
    return nullptr;
  }
  const CandidateOutputs& o_;
};

// What judging one output of the candidate needs.
struct OutputContext {
  const Golden& g;
  const VerifyPolicy& pol;
  const PolicyBounds& pb;
  const VerifyReport& rep;  ///< its required outputs and baseline
  bool bound_check, diff_check, explain;
  bool required(const std::string& name) const {
    return std::find(rep.required.begin(), rep.required.end(), name) != rep.required.end();
  }
};

// Whether every check that judged output o would also pass an output of zeros (judge/
// output_verdict.hpp): the bound check when |ref_i| ≤ k·tol_i everywhere, the differential check
// when a zero output's profile (normwise 1, every relative error 1, scale −1) is within its limits
// or, judged by rounding, when every reference rounds to 0 within its tolerance.
std::vector<double> rounding_tolerance(const OutputContext& c, const std::string& name,
                                       const RefOutput& ro);

bool vacuous(const OutputContext& c, const OutputReport& o, const RefOutput& ro,
             const HostArray<double>& tol, bool bound_check, bool diff_judges) {
  if (!bound_check && !diff_judges) return false;
  const std::vector<double>& ref = *ro.ref;
  const auto n = static_cast<std::int64_t>(ref.size());
  // A reference of zeros only: zeros are the answer, and every check that ran tells them from
  // anything else.
  if (std::none_of(ref.begin(), ref.end(), [](double x) { return std::isfinite(x) && x != 0; }))
    return false;
  if (bound_check && !zero_output_passes(ref.data(), tol.data(), n, c.pol.judge.k)) return false;
  if (diff_judges) {
    const DifferentialResult& d = o.differential;
    if (d.rounding) {
      const std::vector<double> zeros(ref.size(), 0.0);
      const std::vector<double> t = rounding_tolerance(c, o.name, ro);
      if (rounding_check(o.name, zeros, ref, t, o.dtype, "").status != "passed") return false;
    } else {
      const Baseline& b = *c.rep.baseline;
      const DType dt = b.output_dtype(o.name);
      // The zero output's error is −ref: its normwise error is exactly 1 and its scale exactly
      // −1, and its normwise floor is at most that of max|ref| = ‖ref‖₂, on any of the output's
      // elements (those of a sampled baseline's rows, which the check compares). Where these fail
      // the baseline's limits (the baseline of any recipe that computes the output at all), the
      // zero output fails without the pass over its elements (5·10⁸ of them for the Llama-3-8B
      // head's dW); its quantile is left to the full profile below.
      ErrorProfile z;
      z.n = std::count_if(ref.begin(), ref.end(), [](double x) { return std::isfinite(x); });
      z.normwise = 1;
      z.scale = -1;
      z.max_ref = z.norm_ref = 1;
      if (compare_with_baseline(z, d.baseline, dt, b.recipe.name()).status != "passed")
        return false;
      // The full comparison, on the elements the check compared (a sampled baseline's rows).
      const std::vector<double> zeros(ref.size(), 0.0);
      if (differential_check(c.g, b, o.name, zeros, ref).status != "passed") return false;
    }
  }
  return true;
}

// Why output o is inconclusive for vacuous checks: what passes, and the largest reference.
std::string vacuous_message(const OutputContext& c, const OutputReport& o,
                            const std::vector<double>& ref, bool diff_judges) {
  double max_ref = 0;
  for (const double x : ref)
    if (std::isfinite(x)) max_ref = std::max(max_ref, std::fabs(x));
  const std::string what =
      c.pol.explicit_tol
          ? fmt::format(
                "the explicit tolerance |e| ≤ {:g} + {:g}·|ref| is at least |ref| "
                "everywhere (max|{}| = {:.3g})",
                c.pol.atol, c.pol.rtol, o.name, max_ref)
          : fmt::format(
                "the recipe's own error on this problem is as large as {} itself (max|{}| "
                "= {:.3g}{})",
                o.name, o.name, max_ref,
                diff_judges ? fmt::format("; its baseline's normwise error {:.3g}",
                                          o.differential.baseline.normwise)
                            : "");
  return fmt::format(
      "vacuous: an output of zeros would pass too — {}; a tighter tolerance, or a golden problem "
      "the recipe can compute, is needed to judge it",
      what);
}

// How far from the reference the recipe's own value of a loss-like output may be, for
// rounding_check: k times the largest element-wise relative error of the baseline (correct
// implementations of the recipe, measured on this problem) where it holds the output, else k
// times the a-priori bound; plus the reference's own bound.
std::vector<double> rounding_tolerance(const OutputContext& c, const std::string& name,
                                       const RefOutput& ro) {
  const Recipe rc = *policy_recipe(c.pol, c.g.problem.input_dtype());
  const HostArray<double> from_bounds = tolerance_from(c.g, c.pol, c.pb, name, rc.accum, ro);
  std::vector<double> t(from_bounds.begin(), from_bounds.end());  // a loss-like output: N values
  const ErrorProfile* bp =
      c.rep.baseline && c.rep.baseline->status == "ok" ? c.rep.baseline->profile(name) : nullptr;
  const std::vector<double>& ref = *ro.ref;
  // The criterion's floor (judge/differential.hpp compare_with_baseline): one ULP of the recipe's
  // format and kElementaryUlps of fp32, relative.
  const double floor =
      2 * unit_roundoff(rc.accum) + kElementaryUlps * 2 * unit_roundoff(DType::fp32);
  for (std::size_t i = 0; i < t.size(); ++i) {
    const double rb = ro.ref_bound && i < ro.ref_bound->size() ? (*ro.ref_bound)[i] : 0.0;
    const double r = std::max(std::fabs(ref[i]), bp ? bp->rel_floor : 0.0);
    t[i] = bp ? c.pol.judge.k * bp->rel_max * r + floor * r + rb : c.pol.judge.k * t[i];
  }
  return t;
}

// Why neither check can judge output `name`: the golden file gives no a-priori bound for it, and
// the differential check does not run or its baseline holds no such output (the CUDA strategies
// form db only for a problem with a bias) — not judged, not failed for a bound that is merely
// missing. nullopt where a check can judge it, and where a value is non-finite where the
// reference is finite (which fails without any bound: the checks of judge_candidate_output).
std::optional<std::string> no_check_judges(const OutputContext& c, const std::string& name,
                                           const std::vector<double>& out,
                                           const std::vector<double>& ref, DType out_dtype) {
  if (c.pol.explicit_tol) return std::nullopt;
  std::vector<double> scalar_b;
  if (bound_of(c.pb, name, scalar_b).size() == ref.size()) return std::nullopt;
  const Baseline* b = c.diff_check && c.rep.baseline ? &*c.rep.baseline : nullptr;
  if (b && b->status == "ok" && b->profile(name)) return std::nullopt;
  if (compute_error_stats(out.data(), ref.data(), static_cast<std::int64_t>(ref.size()), out_dtype)
          .finiteness_mismatches > 0)
    return std::nullopt;
  return fmt::format(
      "no a-priori bound for {} from this golden file{}{}", name,
      name == "db" ? " (it lacks db_cond: S·V was too large to form dz)" : "",
      !b ? ""
      : b->status == "ok"
          ? fmt::format(", and the differential baseline has no {}{}", name,
                        name == "db" && !c.g.problem.bias
                            ? " (the problem has no bias; its CUDA strategies form none)"
                            : "")
          : fmt::format(", and the differential baseline did not run ({})", b->status));
}

// Output o.name, which the candidate lacks: failed where required, not judged where expected
// (no pass by omission), nullopt (not reported) otherwise.
std::optional<OutputReport> missing_output(const OutputContext& c, const RefOutput& ro,
                                           OutputReport o) {
  const std::string& name = o.name;
  const Golden& g = c.g;
  if (c.required(name)) {
    o.status = "failed";
    o.message = fmt::format("required (--require), but the candidate holds no {}", name);
    return o;
  }
  // No pass by omission: without --require, every gradient the golden file can check (dH, dW,
  // dz, and db of a problem with a bias: the golden file's db of a problem without one is the
  // gradient of a zero bias, which such an implementation does not compute) is expected, and
  // one the candidate lacks leaves the verdict open. The loss is expected in one of its forms
  // (overall_verdict: loss or reduced_loss); lse is the candidate's to give or not.
  const bool gradient = name == "dH" || name == "dW" || name == "dz" || name == "db";
  const bool expected =
      !ro.ref->empty() && gradient && (name != "db" || g.problem.bias.has_value());
  if (c.rep.required.empty() && expected) {
    o.status = "not judged";
    o.message = fmt::format(
        "the candidate holds no {} (the golden file can check it; --require names the outputs "
        "to judge, e.g. --require loss,lse for a forward-only implementation)",
        name);
    return o;
  }
  return std::nullopt;
}

// Output `name` of the candidate file f judged by the bound check and the differential check;
// nullopt when the candidate lacks it and it is not required. With c.explain, the values
// compared are appended to `compared`.
std::optional<OutputReport> judge_candidate_output(const OutputContext& c, const CandidateSource& f,
                                                   const std::string& name,
                                                   std::vector<ComparedOutput>& compared) {
  const Golden& g = c.g;
  const VerifyPolicy& pol = c.pol;
  const PolicyBounds& pb = c.pb;
  const bool bound_check = c.bound_check, diff_check = c.diff_check;
  OutputReport o;
  o.name = name;
  RefOutput ro;
  ref_output(g, name, ro);
  o.shape = ro.shape;
  if (!f.holds(name)) return missing_output(c, ro, std::move(o));
  if (ro.ref->empty()) {
    o.status = "not judged";
    o.no_reference = true;
    o.message =
        fmt::format("the golden file holds no reference {} ({})", name,
                    g.partial ? "token rows were sampled" : "not computed for this problem");
    return o;
  }
  // Data that cannot be read (damaged, truncated, not matching their digest) make the file
  // invalid (FormatError, exit 2), not a failed output.
  Tensor storage;
  std::string unusable;
  const Tensor* const read = f.read(name, storage, unusable);
  if (!read) {
    o.status = "failed";
    o.message = fmt::format("unusable dtype: {}", unusable);
    return o;
  }
  const Tensor& t = *read;
  o.dtype = t.dtype();
  o.dtype_known = true;
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  t.read(0, t.numel(), out.data());
  const bool scalar = name == "reduced_loss";
  if (scalar ? t.numel() != 1 : t.shape() != ro.shape) {
    if (!scalar && t.shape() == ro.full_shape) {
      const std::int64_t cols = ro.shape.size() == 2 ? ro.shape[1] : 1;
      out = select_rows(out, cols, *ro.rows);
    } else {
      o.status = "failed";
      o.message = fmt::format("shape {} does not match the golden file's {}{}",
                              shape_text(t.shape()), shape_text(ro.shape),
                              scalar || ro.shape == ro.full_shape
                                  ? ""
                                  : fmt::format(" (or the full {})", shape_text(ro.full_shape)));
      return o;
    }
  }
  const std::vector<double>& ref = *ro.ref;
  if (const std::optional<std::string> why = no_check_judges(c, name, out, ref, o.dtype)) {
    o.status = "not judged";
    o.message = *why;
    return o;
  }
  const HostArray<double> tol = tolerance_from(g, pol, pb, name, o.dtype, ro);
  o.stats = compute_error_stats(out.data(), ref.data(), static_cast<std::int64_t>(ref.size()),
                                o.dtype, tol.data());
  if (diff_check) {
    // A loss-like output stored coarser than the recipe delivers it (a bf16 loss where the
    // recipe's is fp32) is judged as one correct rounding of the recipe's value; every other
    // output by its error profile against the baseline's.
    const Recipe rc = *policy_recipe(pol, g.problem.input_dtype());
    const DType recipe_dtype =
        name == "loss" || name == "lse" || name == "reduced_loss" ? rc.accum : rc.grad;
    const Baseline& b = *c.rep.baseline;
    if (judged_by_rounding(name, o.dtype, recipe_dtype) && (b.status != "ok" || !b.profile(name))) {
      // Without the baseline's measure of the recipe's error on this output (a sum over tokens
      // against a sampled baseline) a rounding check would rest on the a-priori bound alone.
      o.differential = differential_check(g, b, name, out, ref);  // not judged, saying why
    } else if (judged_by_rounding(name, o.dtype, recipe_dtype)) {
      o.differential =
          rounding_check(name, out, ref, rounding_tolerance(c, name, ro), o.dtype, rc.name());
    } else {
      o.differential = differential_check(g, *c.rep.baseline, name, out, ref);
    }
  }
  if (c.explain) compared.push_back({name, out});
  // The bound check. An infinite bound is "no bound" when the differential check judges the
  // output instead; without it, the policy decides (incorrect under default and strict).
  const bool diff_judges = diff_check && o.differential.status != "not judged";
  Policy bound_policy = pol.judge;
  if (diff_judges) bound_policy.require_meaningful_bound = false;
  // --check differential: the finiteness check alone (statistics without bounds).
  const std::optional<ErrorStats> finiteness_only =
      bound_check ? std::nullopt
                  : std::optional<ErrorStats>(compute_error_stats(
                        out.data(), ref.data(), static_cast<std::int64_t>(ref.size()), o.dtype));
  const Verdict v =
      judge({{name, bound_check ? &*o.stats : &*finiteness_only, name == "loss"}}, bound_policy);
  const bool infinite = o.stats->n_infinite_bound > 0;
  o.bound_status = !bound_check                           ? "not run"
                   : v.disposition != Disposition::passed ? "incorrect"
                   : infinite                             ? "no bound"
                                                          : "passed";
  const bool bound_ok = v.disposition == Disposition::passed;
  o.differential_only = bound_ok && diff_judges && (infinite || !bound_check);
  OutputChecks checks;
  checks.bound = v;
  checks.bound_checked = bound_check;
  checks.baseline_judged = diff_judges;
  checks.baseline =
      o.differential.status == "passed" ? Disposition::passed : Disposition::incorrect;
  // The differential check is wanted wherever it runs; it cannot judge a sum over tokens from a
  // baseline of sampled rows (what the bound alone passes is then inconclusive).
  checks.baseline_wanted = diff_check;
  checks.vacuous = vacuous(c, o, ro, tol, bound_check, diff_judges);
  o.status = std::string(to_string(judge_output(checks)));
  if (o.status == "not judged" || (o.status == "inconclusive" && !checks.vacuous))
    o.message = fmt::format("the differential check cannot judge it: {}", o.differential.message);
  if (o.status == "inconclusive" && checks.vacuous)
    o.message = vacuous_message(c, o, ref, diff_judges);
  if (bound_ok && o.status == "failed") o.message = "differential: " + o.differential.message;
  if (!bound_ok) {
    o.message = v.reason;
    o.index = v.index;
    if (v.index >= 0 && v.index < static_cast<std::int64_t>(ref.size())) {
      const auto k = static_cast<std::size_t>(v.index);
      o.element = element_name(g, name, ro.shape, v.index);
      o.candidate = out[k];
      o.reference = ref[k];
      o.error = std::fabs(out[k] - ref[k]);
      o.tolerance = pol.judge.k * tol[k];
    }
  }
  return o;
}

// "dW failed: dW[3, 5] (…): candidate …, reference …, |e| = … > tolerance … (ratio …)", or the
// output's message where no element decided.
std::string output_reason(const OutputReport& o) {
  const bool finite = std::isfinite(o.candidate) && std::isfinite(o.reference);
  if (o.element.empty() || !finite)
    return fmt::format(
        "{} {}: {}{}", o.name, o.status,
        o.element.empty()
            ? ""
            : fmt::format("{}: candidate {}, reference {}: ", o.element, o.candidate, o.reference),
        o.message);
  return fmt::format(
      "{} {}: {}: candidate {:.17g}, reference {:.17g}, |e| = {:.3g} > tolerance {:.3g} (ratio "
      "{:.3g})",
      o.name, o.status, o.element, o.candidate, o.reference, o.error, o.tolerance,
      o.tolerance > 0 ? o.error / o.tolerance : INFINITY);
}

// The overall verdict, the worst of the outputs' (judge/output_verdict.hpp): failed if one
// failed; else inconclusive or not judged if one is (an output the golden file can check that
// the candidate lacks included: no pass by omission); passed when every output the golden file
// can check passed. Outputs the golden file holds no reference of do not count. A required
// output that could not be checked fails.
void overall_verdict(VerifyReport& rep, bool bound_check, bool diff_check) {
  for (auto& o : rep.outputs)
    if (o.status == "not judged" &&
        std::find(rep.required.begin(), rep.required.end(), o.name) != rep.required.end()) {
      o.status = "failed";
      o.no_reference = false;  // what was asked for counts, with or without a reference
      o.message = fmt::format("required (--require), but not checked: {}", o.message);
    }
  // Without --require the loss is expected in one of its forms: per token or reduced.
  const auto held = [&](const char* n) {  // in the candidate (judged, or without a reference)
    return std::any_of(rep.outputs.begin(), rep.outputs.end(), [&](const OutputReport& o) {
      return o.name == n && (o.status != "not judged" || o.no_reference);
    });
  };
  if (rep.required.empty() && !held("loss") && !held("reduced_loss")) {
    OutputReport o;
    o.name = "loss";
    o.status = "not judged";
    o.message =
        "the candidate holds neither loss nor reduced_loss (the golden file can check them; "
        "--require names the outputs to judge)";
    rep.outputs.insert(rep.outputs.begin(), std::move(o));
  }
  Outcome verdict = Outcome::passed;
  int compared = 0;
  std::string first_failed, first_open, not_checkable;
  for (const auto& o : rep.outputs) {
    if (o.no_reference) {
      not_checkable += (not_checkable.empty() ? "" : ", ") + o.name;
      continue;
    }
    const Outcome oc = o.status == "passed"         ? Outcome::passed
                       : o.status == "failed"       ? Outcome::failed
                       : o.status == "inconclusive" ? Outcome::inconclusive
                                                    : Outcome::not_judged;
    compared += oc == Outcome::passed || oc == Outcome::failed || oc == Outcome::inconclusive;
    if (oc == Outcome::failed && first_failed.empty()) first_failed = output_reason(o);
    if ((oc == Outcome::inconclusive || oc == Outcome::not_judged) && first_open.empty())
      first_open = output_reason(o);
    verdict = worse(verdict, oc);
  }
  if (compared == 0 && verdict != Outcome::failed) {
    verdict = Outcome::not_judged;
    std::string names;
    for (const auto& n : candidate_output_names()) names += (names.empty() ? "" : ", ") + n;
    const auto undecided =
        std::find_if(rep.outputs.begin(), rep.outputs.end(), [](const OutputReport& o) {
          return o.status == "not judged" && !o.no_reference && o.bound_status == "not run";
        });
    rep.reason =
        undecided != rep.outputs.end()
            ? fmt::format("no output could be judged: {} {}", undecided->name, undecided->message)
        : first_open.empty()
            ? fmt::format(
                  "the candidate holds no output that the golden file can check (looked for {})",
                  names)
            : fmt::format("no output could be judged: {}", first_open);
  } else if (verdict == Outcome::failed) {
    rep.reason = first_failed;
  } else if (verdict != Outcome::passed) {
    rep.reason = first_open;
  } else {
    int both = 0, diff_only = 0, bound_only = 0;
    for (const auto& o : rep.outputs) {
      if (o.status != "passed") continue;
      if (o.differential_only)
        ++diff_only;
      else if (o.differential.status == "passed")
        ++both;
      else
        ++bound_only;
    }
    if (!diff_check) {
      rep.reason = fmt::format("{} output(s) within tolerance", compared);
    } else {
      std::vector<std::string> parts;
      if (both)
        parts.push_back(fmt::format("{} within the bound and the differential check", both));
      if (bound_only)
        parts.push_back(fmt::format("{} within the bound (no differential baseline)", bound_only));
      if (diff_only)
        parts.push_back(
            fmt::format("{} by the differential check alone ({})", diff_only,
                        bound_check ? "no finite a-priori bound" : "--check differential"));
      std::string t;
      for (const auto& q : parts) t += (t.empty() ? "" : ", ") + q;
      rep.reason = fmt::format("{} output(s) passed: {}", compared, t);
    }
  }
  if (!not_checkable.empty())
    rep.reason +=
        fmt::format(" ({} not judged: the golden file holds no reference)", not_checkable);
  rep.verdict = std::string(to_string(verdict));
  rep.passed = verdict == Outcome::passed;
}

// The report's head: what is judged against what, under which policy; the checks' options.
VerifyReport start_report(const Golden& g, const std::string& candidate, const VerifyPolicy& pol,
                          const VerifyOptions& options) {
  VerifyReport rep;
  rep.required = parse_required_outputs(options.required);
  rep.check = options.check;
  if (options.check == VerifyCheck::differential && pol.explicit_tol)
    throw InputError(
        "--check differential needs a recipe to emulate: an explicit --atol/--rtol tolerance "
        "declares none (give --policy instead)");
  rep.golden = g.path;
  rep.candidate = candidate;
  rep.policy = pol.describe(g.problem.input_dtype());
  rep.applied_policy = pol;
  rep.policy_recipe = policy_recipe(pol, g.problem.input_dtype());
  rep.provenance = g.provenance;
  return rep;
}

void check_verify_memory(const MemoryEstimate& m, const Golden& g, const std::string& candidate,
                         const VerifyOptions& options) {
  check_memory_estimate(m, MemoryBudget::from(options.memory_budget),
                        fmt::format("verify of {} against {}", candidate, g.path),
                        "verify against a golden file of fewer token or vocabulary rows, sample "
                        "the baseline (--baseline-rows), or give a larger --memory-budget on a "
                        "machine that has it");
}

// The bounds, the baseline and every output of the candidate judged into rep.
void judge_candidate(const Golden& g, const CandidateSource& src, const VerifyPolicy& pol,
                     const VerifyOptions& options, std::chrono::steady_clock::time_point t_bounds,
                     VerifyReport& rep) {
  const bool bound_check = options.check != VerifyCheck::differential;
  const bool diff_check = options.check != VerifyCheck::bound && !pol.explicit_tol;
  PolicyBounds own;
  const PolicyBounds* given = pol.explicit_tol ? nullptr : options.bounds_given;
  if (given && given->policy != rep.policy)
    throw InputError(fmt::format("the a-priori bounds given are of policy {}, this one is {}",
                                 given->policy, rep.policy));
  if (!pol.explicit_tol && !given) policy_bounds(g, pol, own);
  const PolicyBounds& pb = given ? *given : own;
  if (options.baseline.progress)
    options.baseline.progress(fmt::format(
        "opened the candidate and formed the policy's bounds in {:.1f} s",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_bounds).count()));
  if (diff_check) {
    const Recipe r = *policy_recipe(pol, g.problem.input_dtype());
    if (options.baseline_given && !(options.baseline_given->recipe == r))
      throw InputError(fmt::format("the baseline given is of recipe {}, the policy's is {}",
                                   options.baseline_given->recipe.name(), r.name()));
    rep.baseline =
        options.baseline_given ? *options.baseline_given : emulate_baseline(g, r, options.baseline);
  }
  // The candidate's values of each compared output, kept for --explain.
  std::vector<ComparedOutput> compared_values;
  rep.outputs.reserve(candidate_output_names().size());
  const OutputContext ctx{g, pol, pb, rep, bound_check, diff_check, options.explain};
  for (const std::string& name : candidate_output_names()) {
    const auto t0 = std::chrono::steady_clock::now();
    if (std::optional<OutputReport> o = judge_candidate_output(ctx, src, name, compared_values)) {
      rep.outputs.push_back(std::move(*o));
      if (options.baseline.progress)
        options.baseline.progress(fmt::format(
            "judged {} in {:.1f} s", name,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
    }
  }
  overall_verdict(rep, bound_check, diff_check);
  if (options.explain) {
    std::vector<Baseline> computed;
    if (!options.explain_given)
      for (const Recipe& r : explain_recipes(g))
        computed.push_back(emulate_baseline(g, r, options.baseline));
    rep.explain = match_recipes(g, compared_values,
                                options.explain_given ? *options.explain_given : computed);
  }
}

}  // namespace

VerifyReport verify_candidate(const Golden& g, const std::string& candidate_path,
                              const VerifyPolicy& pol, const VerifyOptions& options) {
  VerifyReport rep = start_report(g, candidate_path, pol, options);
  const auto t_bounds = std::chrono::steady_clock::now();
  const h5::File f = open_candidate(g, candidate_path, rep);
  check_verify_memory(verify_memory(g, candidate_path, pol, options), g, candidate_path, options);
  judge_candidate(g, FileSource(f), pol, options, t_bounds, rep);
  return rep;
}

VerifyReport verify_outputs(const Golden& g, const CandidateOutputs& outputs,
                            const std::string& implementation, const VerifyPolicy& pol,
                            const VerifyOptions& options) {
  const std::string label = fmt::format("(in memory: {})", implementation);
  VerifyReport rep = start_report(g, label, pol, options);
  const auto t_bounds = std::chrono::steady_clock::now();
  rep.implementation = implementation;
  rep.candidate_in_memory = true;
  // As a file would be refused (open_candidate), or not written (write_candidate: one dataset a
  // name): a misnamed output would be left out of the verdict, a second of one name never judged.
  const std::vector<std::string>& known = candidate_output_names();
  std::vector<StoredOutput> stored;
  for (const auto& [name, t] : outputs) {
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw InputError(fmt::format("verify_outputs: '{}' is not an output verify knows", name));
    for (const StoredOutput& s : stored)
      if (s.name == name)
        throw InputError(fmt::format(
            "verify_outputs: the candidate holds two outputs named '{}' (one would go unjudged)",
            name));
    stored.push_back({name, t.numel(), static_cast<double>(size_of(t.dtype()))});
  }
  check_verify_memory(verify_memory(g, stored, pol, options), g, label, options);
  judge_candidate(g, MemorySource(outputs), pol, options, t_bounds, rep);
  return rep;
}

}  // namespace xentlab

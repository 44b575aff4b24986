#include "tools/golden/verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "datasets/atomic_file.hpp"
#include "datasets/h5.hpp"
#include "gpu/registry.hpp"
#include "judge/bounds_for.hpp"
#include "judge/output_verdict.hpp"
#include "numerics/error.hpp"
#include "numerics/version.hpp"

namespace xentlab {
namespace {

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "(";
  for (std::size_t k = 0; k < s.size(); ++k) t += fmt::format("{}{}", k ? ", " : "", s[k]);
  return t + (s.size() == 1 ? ",)" : ")");
}

// The golden's reference, bound and compared shape of one output; the full-problem shape a
// candidate may use instead, with the rows to select from it.
struct RefOutput {
  const std::vector<double>* ref = nullptr;
  const std::vector<double>* ref_bound = nullptr;
  std::vector<std::int64_t> shape, full_shape;
  const std::vector<std::int64_t>* rows = nullptr;  // rows of full_shape to select (null: none)
  std::vector<double> scalar_ref, scalar_bound;     // reduced_loss
};

// Fills r in place (r.ref may point at r's own scalar vectors: r must not be moved afterwards).
void ref_output(const Golden& g, const std::string& name, RefOutput& r) {
  if (name == "loss" || name == "lse") {
    r.ref = name == "loss" ? &g.loss : &g.lse;
    r.ref_bound = name == "loss" ? &g.loss_bound : &g.lse_bound;
    r.shape = {g.S};
    r.full_shape = {g.N};
    r.rows = &g.token_rows;
  } else if (name == "dH") {
    r.ref = &g.dH;
    r.ref_bound = &g.dH_bound;
    r.shape = {g.S, g.D};
    r.full_shape = {g.N, g.D};
    r.rows = &g.token_rows;
  } else if (name == "dz") {
    r.ref = &g.dz;
    r.ref_bound = &g.dz_bound;
    r.shape = {g.S, g.V};
    r.full_shape = {g.N, g.V};
    r.rows = &g.token_rows;
  } else if (name == "dW") {
    r.ref = &g.dW;
    r.ref_bound = &g.dW_bound;
    r.shape = {g.J, g.D};
    r.full_shape = {g.V, g.D};
    r.rows = &g.vocab_rows;
  } else if (name == "db") {
    r.ref = &g.db;
    r.ref_bound = &g.db_bound;
    r.shape = {g.J};
    r.full_shape = {g.V};
    r.rows = &g.vocab_rows;
  } else if (name == "reduced_loss") {
    if (g.reduced_loss) {
      r.scalar_ref = {*g.reduced_loss};
      r.scalar_bound = {*g.reduced_loss_bound};
    }
    r.ref = &r.scalar_ref;
    r.ref_bound = &r.scalar_bound;
    r.shape = {};
    r.full_shape = {1};
  }
}

// Selects rows of a (rows, cols...) array.
std::vector<double> select(const std::vector<double>& full, std::int64_t cols,
                           const std::vector<std::int64_t>& rows) {
  std::vector<double> out(rows.size() * static_cast<std::size_t>(cols));
  for (std::size_t q = 0; q < rows.size(); ++q)
    std::copy_n(full.begin() + rows[q] * cols, cols,
                out.begin() + static_cast<std::ptrdiff_t>(q) * cols);
  return out;
}

// a-priori bounds of the policy's recipe on the golden file's covariates: the quantities it
// stores of its certified reference (not a ReferenceResult recomputed here), through the judge's
// one function from covariates to bounds (judge/bounds_for.hpp bounds_for_covariates). One token
// chunk: the golden bound of dW is that of a candidate that adds its token rows in one fp32 GEMM.
struct PolicyBounds {
  Bounds b;
};

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

void policy_bounds(const Golden& g, const VerifyPolicy& pol, PolicyBounds& pb) {
  RowCovariates cov;
  cov.token_rows = &g.token_rows;
  cov.vocab_rows = &g.vocab_rows;
  cov.lse = g.lse.data();
  cov.loss = g.loss.data();
  cov.sum_p_abs_z = g.sum_p_abs_z.data();
  cov.max_logit = g.max_logit.data();
  cov.max_abs_logit = g.max_abs_logit.data();
  cov.mean_abs_logit = g.mean_abs_logit.data();
  cov.target_logit = g.target_logit.data();
  cov.p_target = g.p_target.data();
  cov.grad_scale = g.grad_scale.data();
  cov.gemm_abs = data_or_null(g.gemm_abs);
  cov.reduced_loss = g.reduced_loss.value_or(0.0);
  cov.dz = data_or_null(g.dz);
  if (!g.dH.empty()) {
    cov.dH = g.dH.data();
    cov.dH_cond = g.dH_cond.data();
  }
  if (!g.dW.empty()) {
    cov.dW = g.dW.data();
    cov.dW_cond = g.dW_cond.data();
  }
  if (!g.db.empty() && !g.db_cond.empty()) {
    cov.db = g.db.data();
    cov.db_cond = g.db_cond.data();
  }
  pb.b = bounds_for_covariates(g.problem, g.spec, recipe_of(pol, g.problem.input_dtype()),
                               pol.arith, cov, 1);
}

// The policy bound of one output: a view of Bounds' array (std::vector or HostArray).
struct BoundView {
  const double* data = nullptr;
  std::size_t n = 0;
  std::size_t size() const { return n; }
  double operator[](std::size_t i) const { return data[i]; }
};
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

// "dW[row 3 (vocab 4711), col 5]" for flat index i of the compared shape.
std::string element_name(const Golden& g, const std::string& name,
                         const std::vector<std::int64_t>& shape, std::int64_t i) {
  if (shape.empty()) return name;
  const bool vocab = name == "dW" || name == "db";
  const auto& rows = vocab ? g.vocab_rows : g.token_rows;
  const std::int64_t cols = shape.size() == 2 ? shape[1] : 1;
  const std::int64_t q = i / cols, c = i % cols;
  const std::string row =
      fmt::format("{} {}", vocab ? "vocab row" : "token", rows[static_cast<std::size_t>(q)]);
  return shape.size() == 2 ? fmt::format("{}[{}, {}] ({})", name, rows[static_cast<std::size_t>(q)],
                                         c, fmt::format("{}, col {}, flat index {}", row, c, i))
                           : fmt::format("{}[{}] ({}, flat index {})", name,
                                         rows[static_cast<std::size_t>(q)], row, i);
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

// Tolerance per element: policy bound (or atol + rtol·|ref|) + u_out·|ref| + the reference's bound.
std::vector<double> tolerance_from(const Golden& g, const VerifyPolicy& pol, const PolicyBounds& pb,
                                   const std::string& name, DType out_dtype, const RefOutput& ro) {
  (void)g;
  const std::vector<double>& ref = *ro.ref;
  const std::vector<double>& rb = *ro.ref_bound;
  std::vector<double> tol(ref.size());
  std::vector<double> scalar_b;
  const BoundView pbv = pol.explicit_tol ? BoundView{} : bound_of(pb, name, scalar_b);
  const double u_out = unit_roundoff(out_dtype);
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double a = std::isfinite(ref[i]) ? std::fabs(ref[i]) : 0.0;
    const double base = pol.explicit_tol ? pol.atol + pol.rtol * a
                        : (pbv.data && pbv.size() == ref.size())
                            ? pbv[i]
                            : std::numeric_limits<double>::infinity();
    tol[i] = base + (pol.explicit_tol ? 0.0 : u_out * a) + (i < rb.size() ? rb[i] : 0.0);
    // A non-finite reference (the NaN mean of an all-ignored batch, the −inf lse of a fully masked
    // row) is matched by kind, not by magnitude (numerics/stats.hpp): no tolerance applies.
    if (!std::isfinite(ref[i]) || std::isnan(tol[i])) tol[i] = 0.0;
  }
  return tol;
}

// Positions in sorted of each of values (each present).
std::vector<std::int64_t> positions_of(const std::vector<std::int64_t>& sorted,
                                       const std::vector<std::int64_t>& values) {
  std::vector<std::int64_t> pos;
  pos.reserve(values.size());
  for (const std::int64_t v : values)
    pos.push_back(std::lower_bound(sorted.begin(), sorted.end(), v) - sorted.begin());
  return pos;
}

// The candidate's values and the golden reference of output `name` on the elements the baseline
// was measured on (its token rows, or its vocabulary rows for dW/db).
std::pair<std::vector<double>, std::vector<double>> on_baseline_elements(
    const Golden& g, const Baseline& b, const std::string& name, const std::vector<double>& out,
    const std::vector<double>& ref) {
  if (name == "reduced_loss") return {out, ref};
  const bool vocab = name == "dW" || name == "db";
  const std::int64_t cols = name == "dH" || name == "dW" ? g.D : name == "dz" ? g.V : 1;
  const std::vector<std::int64_t> pos =
      vocab ? positions_of(g.vocab_rows, b.vocab_rows) : positions_of(g.token_rows, b.token_rows);
  return {select(out, cols, pos), select(ref, cols, pos)};
}

// The candidate's profile against the baseline's, and the decision (docs/verify.md).
DifferentialResult compare_profiles(const ErrorProfile& c, const ErrorProfile& base, DType out,
                                    const std::string& recipe) {
  DifferentialResult d;
  d.candidate = c;
  d.baseline = base;
  // One ULP of the recipe's output format: 2u relative per element; normwise, one ULP at the
  // largest element, 2u·max|ref|/‖ref‖₂. Not of the candidate's storage format: an output stored
  // coarser than the recipe delivers it is itself a lowered precision.
  const double u = unit_roundoff(out);
  d.floor_rel = 2 * u;
  d.floor_normwise = c.norm_ref > 0 ? 2 * u * c.max_ref / c.norm_ref : 2 * u;
  d.limit_normwise = kDifferentialK * base.normwise + d.floor_normwise;
  d.limit_rel_q = kDifferentialK * base.rel_q + d.floor_rel;
  d.quantile_compared = c.n >= kDifferentialMinElements && base.n >= kDifferentialMinElements;
  std::string why;
  if (c.normwise > d.limit_normwise)
    why = fmt::format(
        "normwise relative error {:.3g} > {:g} × {:.3g} + {:.2g} (recipe {} "
        "emulated: {:.1f}× its error)",
        c.normwise, kDifferentialK, base.normwise, d.floor_normwise, recipe,
        base.normwise > 0 ? c.normwise / base.normwise : INFINITY);
  else if (d.quantile_compared && c.rel_q > d.limit_rel_q)
    why = fmt::format(
        "{:g}-quantile of the element-wise relative error {:.3g} > {:g} × {:.3g} + "
        "{:.2g} (recipe {} emulated: {:.1f}× its error)",
        kDifferentialQuantile, c.rel_q, kDifferentialK, base.rel_q, d.floor_rel, recipe,
        base.rel_q > 0 ? c.rel_q / base.rel_q : INFINITY);
  d.status = why.empty() ? "passed" : "incorrect";
  d.message = why.empty()
                  ? fmt::format("normwise {:.3g} ≤ {:.3g}{}", c.normwise, d.limit_normwise,
                                d.quantile_compared ? fmt::format(", q{:g} {:.3g} ≤ {:.3g}",
                                                                  100 * kDifferentialQuantile,
                                                                  c.rel_q, d.limit_rel_q)
                                                    : "")
                  : why;
  return d;
}

DifferentialResult differential_check(const Golden& g, const Baseline& b, const std::string& name,
                                      const std::vector<double>& out,
                                      const std::vector<double>& ref) {
  DifferentialResult d;
  const ErrorProfile* base = b.status == "ok" ? b.profile(name) : nullptr;
  if (!base) {
    d.status = "not judged";
    const bool sum = name == "reduced_loss" || name == "dW" || name == "db";
    d.message = b.status != "ok" ? fmt::format("the emulation did not run: {}", b.status)
                : sum && b.sampled
                    ? fmt::format(
                          "{} is a sum over all tokens and the baseline's tokens are sampled "
                          "(--baseline-rows {} runs them all)",
                          name, g.S)
                : name == "db" ? "the emulation returns db only for a problem with a bias"
                               : fmt::format("the emulated baseline has no {}", name);
    return d;
  }
  const auto [c_out, c_ref] = on_baseline_elements(g, b, name, out, ref);
  const DType dt = b.output_dtype(name);
  return compare_profiles(
      error_profile(c_out.data(), c_ref.data(), static_cast<std::int64_t>(c_ref.size()), dt), *base,
      dt, b.recipe.name());
}

// A candidate's output as read: its name and values in the compared shape.
struct ComparedOutput {
  std::string name;
  std::vector<double> values;
};

// --explain: the candidate's profile against every recipe of the default grid with the golden
// problem's input dtype.
std::vector<RecipeMatch> match_recipes(const Golden& g, const std::vector<ComparedOutput>& compared,
                                       const std::vector<Baseline>& baselines) {
  std::vector<RecipeMatch> ms;
  for (const Baseline& b : baselines) {
    RecipeMatch m;
    const Recipe r = b.recipe;
    m.recipe = r;
    m.status = b.status;
    m.profiles = b.profiles;
    if (b.status != "ok") {
      ms.push_back(std::move(m));
      continue;
    }
    int judged = 0;
    m.consistent = true;
    for (const auto& [name, out] : compared) {
      const ErrorProfile* base = b.profile(name);
      if (!base) continue;
      RefOutput ro;
      ref_output(g, name, ro);
      const auto [c_out, c_ref] = on_baseline_elements(g, b, name, out, *ro.ref);
      const DType dt = b.output_dtype(name);
      const DifferentialResult d = compare_profiles(
          error_profile(c_out.data(), c_ref.data(), static_cast<std::int64_t>(c_ref.size()), dt),
          *base, dt, r.name());
      ++judged;
      // Consistent: the candidate passes the recipe's differential check, and is not
      // kExplainAccuracyFactor times more accurate than it (then it is another, more accurate
      // recipe), on the normwise error and (where compared) on the quantile.
      const auto within = [](double a, double b, double f) {
        return a <= kDifferentialK * b + f && b <= kExplainAccuracyFactor * a;
      };
      m.consistent = m.consistent &&
                     within(d.candidate.normwise, base->normwise, d.floor_normwise) &&
                     (!d.quantile_compared || within(d.candidate.rel_q, base->rel_q, d.floor_rel));
      // Distance: log2 ratios of the error scales (each with its floor), the total variation of
      // the ULP histograms, and the difference of the systematic fractions bias/normwise.
      const auto lr = [](double a, double b, double f) {
        return std::fabs(std::log2((a + f) / (b + f)));
      };
      double tv = 0;
      for (int k = 0; k < kUlpBuckets; ++k)
        tv += std::fabs(d.candidate.ulp_hist[static_cast<std::size_t>(k)] -
                        base->ulp_hist[static_cast<std::size_t>(k)]);
      const auto sys = [](const ErrorProfile& p) {
        return p.normwise > 0 ? p.bias / p.normwise : 0.0;
      };
      m.distance += lr(d.candidate.normwise, base->normwise, d.floor_normwise) +
                    (d.quantile_compared ? lr(d.candidate.rel_q, base->rel_q, d.floor_rel) : 0.0) +
                    tv / 2 + std::fabs(sys(d.candidate) - sys(*base));
    }
    if (judged == 0) {
      m.consistent = false;
      m.status = "no output of the candidate has a baseline";
    }
    ms.push_back(std::move(m));
  }
  std::stable_sort(ms.begin(), ms.end(), [](const RecipeMatch& a, const RecipeMatch& b) {
    if (a.consistent != b.consistent) return a.consistent;
    if ((a.status == "ok") != (b.status == "ok")) return a.status == "ok";
    return a.distance < b.distance;
  });
  return ms;
}

}  // namespace

std::vector<Recipe> explain_recipes(const Golden& g) {
  const DType in = g.problem.input_dtype();
  std::vector<Recipe> recipes;
  for (const Recipe& r : default_recipe_grid())
    if (r.input == in) recipes.push_back(r);
  if (recipes.size() > 1) return recipes;
  // The grid's recipes read on the stored inputs (an fp32 problem has one recipe of its own).
  recipes.clear();
  for (Recipe r : default_recipe_grid()) {
    r.input = in;
    if (std::find(recipes.begin(), recipes.end(), r) == recipes.end()) recipes.push_back(r);
  }
  return recipes;
}

std::vector<double> verify_tolerance(const Golden& g, const VerifyPolicy& pol,
                                     const std::string& name, DType out_dtype) {
  PolicyBounds pb;
  if (!pol.explicit_tol) policy_bounds(g, pol, pb);
  RefOutput ro;
  ref_output(g, name, ro);
  if (!ro.ref) throw InputError(fmt::format("verify_tolerance: unknown output '{}'", name));
  return tolerance_from(g, pol, pb, name, out_dtype, ro);
}

const std::vector<std::string>& candidate_output_names() {
  static const std::vector<std::string> n = {"loss", "lse", "reduced_loss", "dH", "dW", "db", "dz"};
  return n;
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

std::vector<std::string> parse_required_outputs(const std::vector<std::string>& names) {
  const std::vector<std::string>& known = candidate_output_names();
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (std::find(known.begin(), known.end(), n) == known.end()) {
      std::string all;
      for (const auto& k : known) all += (all.empty() ? "" : ", ") + k;
      throw InputError(fmt::format("--require: unknown output '{}' (the outputs: {})", n, all));
    }
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw InputError(fmt::format("--require: '{}' is named twice", n));
    out.push_back(n);
  }
  return out;
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

VerifyReport verify_candidate(const Golden& g, const std::string& candidate_path,
                              const VerifyPolicy& pol, const std::vector<std::string>& required) {
  VerifyOptions o;
  o.required = required;
  return verify_candidate(g, candidate_path, pol, o);
}

VerifyReport verify_candidate(const Golden& g, const std::string& candidate_path,
                              const VerifyPolicy& pol, const VerifyOptions& options) {
  VerifyReport rep;
  rep.required = parse_required_outputs(options.required);
  rep.check = options.check;
  const bool bound_check = options.check != VerifyCheck::differential;
  const bool diff_check = options.check != VerifyCheck::bound && !pol.explicit_tol;
  if (options.check == VerifyCheck::differential && pol.explicit_tol)
    throw InputError(
        "--check differential needs a recipe to emulate: an explicit --atol/--rtol tolerance "
        "declares none (give --policy instead)");
  rep.golden = g.path;
  rep.candidate = candidate_path;
  rep.policy = pol.describe(g.problem.input_dtype());
  rep.provenance = g.provenance;
  const h5::File f = h5::File::open_read(candidate_path);
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

  PolicyBounds pb;
  if (!pol.explicit_tol) policy_bounds(g, pol, pb);
  if (diff_check) {
    const Recipe r = recipe_of(pol, g.problem.input_dtype());
    if (options.baseline_given && !(options.baseline_given->recipe == r))
      throw InputError(fmt::format("the baseline given is of recipe {}, the policy's is {}",
                                   options.baseline_given->recipe.name(), r.name()));
    rep.baseline =
        options.baseline_given ? *options.baseline_given : emulate_baseline(g, r, options.baseline);
  }
  // The candidate's values of each compared output, kept for --explain.
  std::vector<ComparedOutput> compared_values;

  std::vector<JudgedOutput> judged;
  std::vector<std::size_t> judged_index;
  rep.outputs.reserve(candidate_output_names().size());
  const auto is_required = [&](const std::string& name) {
    return std::find(rep.required.begin(), rep.required.end(), name) != rep.required.end();
  };
  for (const std::string& name : candidate_output_names()) {
    OutputReport o;
    o.name = name;
    RefOutput ro;
    ref_output(g, name, ro);
    o.shape = ro.shape;
    if (!f.exists(name)) {
      if (is_required(name)) {
        o.status = "failed";
        o.message = fmt::format("required (--require), but the candidate holds no {}", name);
        rep.outputs.push_back(std::move(o));
      }
      continue;
    }
    const h5::Dataset d = f.open_dataset(name);
    const h5::DatasetInfo inf = d.info();
    if (ro.ref->empty()) {
      o.status = "skipped";
      o.message =
          fmt::format("the golden file holds no reference {} ({})", name,
                      g.partial ? "token rows were sampled" : "not computed for this problem");
      rep.outputs.push_back(o);
      continue;
    }
    Tensor t;
    try {
      t = d.read_tensor();
    } catch (const FormatError& e) {
      o.status = "failed";
      o.message = fmt::format("unusable dtype: {}", e.what());
      rep.outputs.push_back(o);
      continue;
    }
    o.dtype = t.dtype();
    o.dtype_known = true;
    std::vector<double> out(static_cast<std::size_t>(t.numel()));
    t.read(0, t.numel(), out.data());
    const bool scalar = name == "reduced_loss";
    if (scalar ? t.numel() != 1 : inf.shape != ro.shape) {
      if (!scalar && inf.shape == ro.full_shape) {
        const std::int64_t cols = ro.shape.size() == 2 ? ro.shape[1] : 1;
        out = select(out, cols, *ro.rows);
      } else {
        o.status = "failed";
        o.message = fmt::format("shape {} does not match the golden file's {}{}",
                                shape_text(inf.shape), shape_text(ro.shape),
                                scalar || ro.shape == ro.full_shape
                                    ? ""
                                    : fmt::format(" (or the full {})", shape_text(ro.full_shape)));
        rep.outputs.push_back(o);
        continue;
      }
    }
    const std::vector<double>& ref = *ro.ref;
    if (!pol.explicit_tol) {
      std::vector<double> scalar_b;
      const BoundView pbv = bound_of(pb, name, scalar_b);
      if (pbv.size() != ref.size() && !diff_check) {
        o.status = "skipped";
        o.message =
            fmt::format("no a-priori bound for {} from this golden file{}", name,
                        name == "db" ? " (it lacks db_cond: S·V was too large to form dz)" : "");
        rep.outputs.push_back(std::move(o));
        continue;
      }
    }
    const std::vector<double> tol = tolerance_from(g, pol, pb, name, o.dtype, ro);
    o.stats = compute_error_stats(out.data(), ref.data(), static_cast<std::int64_t>(ref.size()),
                                  o.dtype, tol.data());
    if (diff_check) o.differential = differential_check(g, *rep.baseline, name, out, ref);
    if (options.explain) compared_values.push_back({name, out});
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
    const std::optional<Disposition> judged = judge_output(checks);
    o.status = judged ? std::string(to_string(*judged)) : "skipped";
    if (o.status == "skipped")
      o.message = fmt::format("the differential check cannot judge it: {}", o.differential.message);
    if (bound_ok && o.status == "incorrect") o.message = "differential: " + o.differential.message;
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
    rep.outputs.push_back(std::move(o));
  }
  // A required output that could not be checked (no reference, no bound) fails: what was asked
  // for was not shown.
  for (auto& o : rep.outputs)
    if (o.status == "skipped" && is_required(o.name)) {
      o.status = "failed";
      o.message = fmt::format("required (--require), but not checked: {}", o.message);
    }
  // Overall: every compared output passes, nothing failed, and at least one output was compared.
  int compared = 0;
  rep.passed = true;
  for (const auto& o : rep.outputs) {
    if (o.status == "skipped") continue;
    ++compared;
    if (o.status != "passed") {
      if (rep.passed) {
        const bool finite = std::isfinite(o.candidate) && std::isfinite(o.reference);
        rep.reason =
            o.element.empty() || !finite
                ? fmt::format("{} {}: {}{}", o.name, o.status,
                              o.element.empty()
                                  ? ""
                                  : fmt::format("{}: candidate {}, reference {}: ", o.element,
                                                o.candidate, o.reference),
                              o.message)
                : fmt::format(
                      "{} {}: {}: candidate {:.17g}, reference {:.17g}, |e| = {:.3g} > "
                      "tolerance {:.3g} (ratio {:.3g})",
                      o.name, o.status, o.element, o.candidate, o.reference, o.error, o.tolerance,
                      o.tolerance > 0 ? o.error / o.tolerance : INFINITY);
      }
      rep.passed = false;
    }
  }
  if (compared == 0) {
    rep.passed = false;
    std::string names;
    for (const auto& n : candidate_output_names()) names += (names.empty() ? "" : ", ") + n;
    const auto undecided = std::find_if(
        rep.outputs.begin(), rep.outputs.end(),
        [](const OutputReport& o) { return o.status == "skipped" && o.bound_status == "not run"; });
    rep.reason =
        undecided != rep.outputs.end()
            ? fmt::format("no output could be judged: {} {}", undecided->name, undecided->message)
            : fmt::format(
                  "the candidate holds no output that the golden file can check (looked for {})",
                  names);
  } else if (rep.passed) {
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
  if (options.explain) {
    std::vector<Baseline> computed;
    if (!options.explain_given)
      for (const Recipe& r : explain_recipes(g))
        computed.push_back(emulate_baseline(g, r, options.baseline));
    rep.explain = match_recipes(g, compared_values,
                                options.explain_given ? *options.explain_given : computed);
  }
  return rep;
}

std::string format_report(const VerifyReport& r) {
  std::string s;
  s += fmt::format(
      "golden     {}\n           {}\ncandidate  {}{}\npolicy     {}\ncheck      {}\n\n", r.golden,
      r.provenance, r.candidate, r.implementation.empty() ? "" : " (" + r.implementation + ")",
      r.policy, to_string(r.check));
  if (!r.required.empty()) {
    std::string names;
    for (const auto& n : r.required) names += (names.empty() ? "" : ", ") + n;
    s.insert(s.size() - 1, fmt::format("required   {}\n", names));
  }
  s += fmt::format("{:<13}{:<6}{:<14}{:>11}{:>10}{:>11}{:>11}{:>9}{:>8}  {}\n", "output", "dtype",
                   "shape", "max|e|", "max rel", "normwise", "max e/tol", "ulp<=1", "nonfin",
                   "status");
  for (const auto& o : r.outputs) {
    if (!o.stats) {
      s += fmt::format("{:<13}{:<6}{:<14}{:>11}{:>10}{:>11}{:>11}{:>9}{:>8}  {}: {}\n", o.name,
                       o.dtype_known ? std::string(to_string(o.dtype)) : "-", shape_text(o.shape),
                       "-", "-", "-", "-", "-", "-", o.status, o.message);
      continue;
    }
    const ErrorStats& e = *o.stats;
    s += fmt::format("{:<13}{:<6}{:<14}{:>11.3g}{:>10.3g}{:>11.3g}{:>11.3g}{:>8.1f}%{:>8}  {}\n",
                     o.name, to_string(o.dtype), shape_text(o.shape), e.max_abs_err, e.max_rel_err,
                     e.normwise_rel_err, e.max_ratio, 100.0 * e.frac_ulp_le1,
                     e.out_nan + e.out_posinf + e.out_neginf, o.status);
  }
  if (r.baseline) {
    s += fmt::format(
        "\ndifferential check: error ≤ {:g} × the emulated recipe's + one ULP of its "
        "output format; q{:g} = {:g}-quantile of |e_i|/|ref_i|\nbaseline   {}\n",
        kDifferentialK, 100 * kDifferentialQuantile, kDifferentialQuantile,
        r.baseline->describe() + (r.baseline->status == "ok"
                                      ? fmt::format(", {:.2f} s", r.baseline->seconds)
                                      : std::string()));
    s += fmt::format("{:<13}{:>11}{:>11}{:>11}{:>11}{:>11}{:>11}  {:<10}{}\n", "output", "normwise",
                     "baseline", "limit", fmt::format("q{:g}", 100 * kDifferentialQuantile),
                     "baseline", "limit", "bound", "differential");
    for (const auto& o : r.outputs) {
      if (!o.stats) continue;
      const DifferentialResult& d = o.differential;
      if (d.status == "passed" || d.status == "incorrect")
        s += fmt::format("{:<13}{:>11.3g}{:>11.3g}{:>11.3g}{:>11}{:>11}{:>11}  {:<10}{}\n", o.name,
                         d.candidate.normwise, d.baseline.normwise, d.limit_normwise,
                         d.quantile_compared ? fmt::format("{:.3g}", d.candidate.rel_q) : "-",
                         d.quantile_compared ? fmt::format("{:.3g}", d.baseline.rel_q) : "-",
                         d.quantile_compared ? fmt::format("{:.3g}", d.limit_rel_q) : "-",
                         o.bound_status, d.status);
      else
        s += fmt::format("{:<13}{:>11}{:>11}{:>11}{:>11}{:>11}{:>11}  {:<10}{}: {}\n", o.name, "-",
                         "-", "-", "-", "-", "-", o.bound_status, d.status, d.message);
    }
  }
  if (!r.explain.empty()) {
    s += "\nexplain: the candidate's error profile against the emulation of each recipe (same "
         "rows; distance: log2 ratios of the errors, ULP-histogram distance, bias)\n";
    s += fmt::format("{:<22}{:<12}{:>10}  {}\n", "recipe", "consistent", "distance",
                     "baseline normwise per output");
    std::string consistent;
    for (const auto& m : r.explain) {
      std::string nw;
      for (const auto& [name, p] : m.profiles) nw += fmt::format("{}={:.3g} ", name, p.normwise);
      if (m.status != "ok") {
        s += fmt::format("{:<22}{:<12}{:>10}  not run: {}\n", m.recipe.name(), "-", "-", m.status);
        continue;
      }
      s += fmt::format("{:<22}{:<12}{:>10.3f}  {}\n", m.recipe.name(), m.consistent ? "yes" : "no",
                       m.distance, nw);
      if (m.consistent) consistent += (consistent.empty() ? "" : ", ") + m.recipe.name();
    }
    s += consistent.empty() ? "behaves like none of the recipes of the grid\n"
                            : fmt::format("behaves like: {} (closest first)\n", consistent);
  }
  for (const auto& o : r.outputs)
    if (o.status == "incorrect" || o.status == "failed")
      s += fmt::format(
          "  {} {}: {}\n", o.name, o.status,
          o.element.empty()
              ? o.message
              : fmt::format("{}: candidate {:.9g}, reference {:.9g}, |e| = {:.3g}, "
                            "tolerance {:.3g}. {}",
                            o.element, o.candidate, o.reference, o.error, o.tolerance, o.message));
  s += fmt::format("\n{}: {}\n", r.passed ? "PASSED" : "FAILED", r.reason);
  return s;
}

namespace {

// Whether path is an existing regular file that opens as the JUnit report write_junit writes
// (what an earlier run of verify left): after an optional UTF-8 byte order mark, white space and
// XML declaration, the root <testsuites> and in it first <testsuite name="xentlab.verify". Any
// other file, XML included (a build file, another tool's report), is not.
bool is_verify_report(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  std::string head(512, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  std::size_t i = head.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  const auto skip_space = [&] {
    while (i < head.size() && std::isspace(static_cast<unsigned char>(head[i]))) ++i;
  };
  const auto take = [&](const char* text) {
    const std::size_t n = std::strlen(text);
    if (head.compare(i, n, text) != 0) return false;
    i += n;
    return true;
  };
  skip_space();
  if (take("<?xml")) {
    const std::size_t end = head.find("?>", i);
    if (end == std::string::npos) return false;
    i = end + 2;
    skip_space();
  }
  if (!take("<testsuites")) return false;
  const std::size_t end = head.find('>', i);
  if (end == std::string::npos) return false;
  i = end + 1;
  skip_space();
  return take("<testsuite name=\"xentlab.verify\"");
}

// The force to give AtomicOutput: an existing report of verify is replaced without asking.
bool junit_force(const std::string& path, bool force) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return force;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(fmt::format("--junit {}: is a folder", path));
  if (!force && !is_verify_report(path))
    throw InputError(fmt::format(
        "--junit {}: the file exists and is not a JUnit report of xentlab verify (the report of "
        "an earlier run is replaced); pass --force to overwrite it",
        path));
  return true;
}

}  // namespace

void check_junit_output(const std::string& path, bool force) {
  AtomicOutput(path, junit_force(path, force)).check_writable();
}

void write_junit(const std::string& path, bool force, const VerifyReport& r) {
  AtomicOutput out(path, junit_force(path, force));
  int failures = 0, skipped = 0;
  for (const auto& o : r.outputs) {
    failures += o.status == "incorrect" || o.status == "failed";
    skipped += o.status == "skipped";
  }
  const bool none = r.outputs.empty() || skipped == static_cast<int>(r.outputs.size());
  {
    std::ofstream x(out.temp_path());
    if (!x) throw InputError(fmt::format("{}: cannot write {}", path, out.temp_path()));
    x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    x << fmt::format(
        "<testsuites><testsuite name=\"xentlab.verify\" tests=\"{}\" failures=\"{}\" "
        "skipped=\"{}\">\n",
        r.outputs.size() + (none ? 1 : 0), failures + (none ? 1 : 0), skipped);
    x << fmt::format(
        "  <properties><property name=\"golden\" value=\"{}\"/><property name=\"candidate\" "
        "value=\"{}\"/>"
        "<property name=\"policy\" value=\"{}\"/>",
        xml_escape(r.golden), xml_escape(r.candidate), xml_escape(r.policy));
    x << fmt::format("<property name=\"check\" value=\"{}\"/>", to_string(r.check));
    if (r.baseline) {
      x << fmt::format("<property name=\"baseline\" value=\"{}\"/>",
                       xml_escape(r.baseline->describe()));
      std::string rows;
      for (const auto t : r.baseline->token_rows)
        rows += (rows.empty() ? "" : " ") + std::to_string(t);
      x << fmt::format("<property name=\"baseline_token_rows\" value=\"{}\"/>", rows);
      for (const auto& [name, p] : r.baseline->profiles)
        x << fmt::format(
            "<property name=\"baseline_{}\" value=\"normwise {:.6g} q{:g} {:.6g} bias {:.6g} n "
            "{}\"/>",
            name, p.normwise, 100 * kDifferentialQuantile, p.rel_q, p.bias, p.n);
    }
    x << "</properties>\n";
    for (const auto& o : r.outputs) {
      x << fmt::format("  <testcase classname=\"xentlab.verify\" name=\"{}\">", xml_escape(o.name));
      if (o.status == "skipped")
        x << fmt::format("<skipped message=\"{}\"/>", xml_escape(o.message));
      if (o.status == "incorrect" || o.status == "failed") {
        const std::string msg =
            o.element.empty()
                ? o.message
                : fmt::format(
                      "{}: candidate {:.17g}, reference {:.17g}, |e| {:.3g} > tolerance {:.3g}",
                      o.element, o.candidate, o.reference, o.error, o.tolerance);
        x << fmt::format("<failure type=\"{}\" message=\"{}\">{}</failure>", o.status,
                         xml_escape(msg), xml_escape(o.message));
      }
      if (o.stats) {
        std::string out = fmt::format("bound: {}; {}", o.bound_status, o.stats->summary());
        if (o.differential.status != "not run")
          out +=
              fmt::format("\ndifferential: {}: {}", o.differential.status, o.differential.message);
        x << fmt::format("<system-out>{}</system-out>", xml_escape(out));
      }
      x << "</testcase>\n";
    }
    if (none)
      x << fmt::format(
          "  <testcase classname=\"xentlab.verify\" name=\"outputs\"><failure "
          "message=\"{}\"/></testcase>\n",
          xml_escape(r.reason));
    x << "</testsuite></testsuites>\n";
    if (!x.flush()) throw InputError(fmt::format("{}: write failed", path));
  }
  out.commit();
}

void write_candidate(const std::string& path, bool force,
                     const std::vector<std::pair<std::string, Tensor>>& outputs,
                     const std::string& implementation) {
  AtomicOutput out(path, force);
  h5::File f = h5::File::create(out.temp_path());
  f.set_attr("format", kCandidateFormat);
  f.set_attr("format_version", kCandidateVersion);
  f.set_attr("implementation", implementation);
  for (const auto& [name, t] : outputs) f.write_tensor(name, t);
  f.close();
  out.commit();
}

std::vector<Backend> baseline_backends(const std::string& value, bool ask_device,
                                       const std::string& option) {
  if (value != "cpu" && value != "auto" && value != "cuda" && value != "all")
    throw InputError(fmt::format("{} must be cpu, cuda, all or auto, got '{}'", option, value));
  if (value == "cpu" || !ask_device) return {Backend::cpu_emulation};
  std::string why;
  const bool have_gpu = cuda_device_available(&why);
  if (value == "auto")
    return have_gpu ? std::vector<Backend>{Backend::cpu_emulation, Backend::cuda}
                    : std::vector<Backend>{Backend::cpu_emulation};
  if (!have_gpu) throw InputError(fmt::format("{} {}: {}", option, value, why));
  return value == "cuda" ? std::vector<Backend>{Backend::cuda}
                         : std::vector<Backend>{Backend::cpu_emulation, Backend::cuda};
}

}  // namespace xentlab

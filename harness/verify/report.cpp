// verify's report: the table of format_report and the JUnit XML of write_junit
// (harness/verify/verify.hpp).
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "datasets/io/atomic_file.hpp"
#include "harness/verify/verify.hpp"
#include "numerics/error.hpp"

namespace xentlab {
namespace {

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

}  // namespace

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "(";
  for (std::size_t k = 0; k < s.size(); ++k) t += fmt::format("{}{}", k ? ", " : "", s[k]);
  return t + (s.size() == 1 ? ",)" : ")");
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

std::string format_report(const VerifyReport& r) {
  std::string s;
  s += fmt::format(
      "golden     {}\n           {}\ncandidate  {}{}\npolicy     {}\ncheck      {}\n\n", r.golden,
      r.provenance, r.candidate,
      // A candidate held in memory has the implementation in its label already.
      r.implementation.empty() || r.candidate_in_memory ? "" : " (" + r.implementation + ")",
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
    // The error columns are over the finite pairs: where the candidate holds non-finite values
    // the reference does not, they say so instead of a max|e| of the finite rest (0 for an
    // all-NaN output).
    const std::int64_t nonfin = e.out_nan + e.out_posinf + e.out_neginf;
    const bool bad = e.nonfinite_where_ref_finite > 0;
    const auto col = [&](double v, int w) {
      return bad ? fmt::format("{:>{}}", e.out_nan > 0 ? "nan" : "inf", w)
                 : fmt::format("{:>{}.3g}", v, w);
    };
    s += fmt::format("{:<13}{:<6}{:<14}{}{}{}{}{:>8.1f}%{:>8}  {}\n", o.name, to_string(o.dtype),
                     shape_text(o.shape), col(e.max_abs_err, 11), col(e.max_rel_err, 10),
                     col(e.normwise_rel_err, 11), col(e.max_ratio, 11), 100.0 * e.frac_ulp_le1,
                     nonfin, o.status);
  }
  if (r.baseline) {
    s += fmt::format(
        "\ndifferential check: error ≤ {:g} × the least accurate correct implementation's + "
        "one ULP of the recipe's format and {:g} of fp32, and a scale test; q{:g} = "
        "{:g}-quantile of |e_i|/|ref_i| (docs/verify.md, \"The criterion\")\nbaseline   {}\n",
        kDifferentialK, kElementaryUlps, 100 * kDifferentialQuantile, kDifferentialQuantile,
        r.baseline->describe() + (r.baseline->status == "ok"
                                      ? fmt::format(", {:.2f} s", r.baseline->seconds)
                                      : std::string()));
    s += fmt::format("{:<13}{:>11}{:>11}{:>11}{:>11}{:>11}{:>11}  {:<10}{}\n", "output", "normwise",
                     "baseline", "limit", fmt::format("q{:g}", 100 * kDifferentialQuantile),
                     "baseline", "limit", "bound", "differential");
    for (const auto& o : r.outputs) {
      if (!o.stats) continue;
      const DifferentialResult& d = o.differential;
      if (d.rounding)
        s += fmt::format("{:<13}{:>11.3g}{:>11}{:>11}{:>11}{:>11}{:>11}  {:<10}{} (rounding: {})\n",
                         o.name, d.candidate.normwise, "-", "-", "-", "-", "-", o.bound_status,
                         d.status, d.message);
      else if (d.status == "passed" || d.status == "incorrect")
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
    if (o.status != "passed" && !o.no_reference)
      s += fmt::format(
          "  {} {}: {}\n", o.name, o.status,
          o.element.empty()
              ? o.message
              : fmt::format("{}: candidate {:.9g}, reference {:.9g}, |e| = {:.3g}, "
                            "tolerance {:.3g}. {}",
                            o.element, o.candidate, o.reference, o.error, o.tolerance, o.message));
  std::string verdict = r.verdict.empty() ? (r.passed ? "passed" : "failed") : r.verdict;
  for (char& ch : verdict) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  s += fmt::format("\n{}: {}\n", verdict, r.reason);
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
  // failed → <failure>; inconclusive and not judged (what the golden file can check but the
  // checks could not decide) → <error>: the test did not complete; no reference → <skipped>.
  int failures = 0, errors = 0, skipped = 0;
  for (const auto& o : r.outputs) {
    failures += o.status == "failed";
    skipped += o.no_reference;
    errors += !o.no_reference && (o.status == "inconclusive" || o.status == "not judged");
  }
  const bool none = r.outputs.empty() || skipped == static_cast<int>(r.outputs.size());
  {
    std::ofstream x(out.temp_path());
    if (!x) throw InputError(fmt::format("{}: cannot write {}", path, out.temp_path()));
    x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    x << fmt::format(
        "<testsuites><testsuite name=\"xentlab.verify\" tests=\"{}\" failures=\"{}\" "
        "errors=\"{}\" skipped=\"{}\">\n",
        r.outputs.size() + (none ? 1 : 0), failures + (none && r.verdict == "failed" ? 1 : 0),
        errors + (none && r.verdict != "failed" ? 1 : 0), skipped);
    x << fmt::format(
        "  <properties><property name=\"golden\" value=\"{}\"/><property name=\"candidate\" "
        "value=\"{}\"/>"
        "<property name=\"policy\" value=\"{}\"/>",
        xml_escape(r.golden), xml_escape(r.candidate), xml_escape(r.policy));
    x << fmt::format("<property name=\"check\" value=\"{}\"/>", to_string(r.check));
    x << fmt::format("<property name=\"verdict\" value=\"{}\"/>", xml_escape(r.verdict));
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
      if (o.no_reference)
        x << fmt::format("<skipped message=\"{}\"/>", xml_escape(o.message));
      else if (o.status == "inconclusive" || o.status == "not judged")
        x << fmt::format("<error type=\"{}\" message=\"{}\"/>", o.status, xml_escape(o.message));
      if (o.status == "failed") {
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
          "  <testcase classname=\"xentlab.verify\" name=\"outputs\"><{} "
          "message=\"{}\"/></testcase>\n",
          r.verdict == "failed" ? "failure" : "error", xml_escape(r.reason));
    x << "</testsuite></testsuites>\n";
    if (!x.flush()) throw InputError(fmt::format("{}: write failed", path));
  }
  out.commit();
}
}  // namespace xentlab

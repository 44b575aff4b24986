// The shared part of the JSON reports (harness/json_report.hpp): head, numbers, statistics,
// policy, and the output file's rules.
#include "harness/json_report.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "datasets/io/atomic_file.hpp"
#include "datasets/io/sha256.hpp"
#include "harness/build_commit.hpp"
#include "numerics/error.hpp"
#include "numerics/version.hpp"

namespace xentlab::json_report {
namespace {

// A string, or null when it is empty (a fact the program could not learn).
Json text_or_null(const std::string& s) {
  return s.empty() ? Json(nullptr) : Json(s);
}

// "model name" of the first processor in /proc/cpuinfo (Linux); empty elsewhere.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon == std::string::npos) break;
      const std::size_t b = line.find_first_not_of(" \t", colon + 1);
      return b == std::string::npos ? std::string() : line.substr(b);
    }
  return {};
}

Json machine_json() {
  Json m;
  char host[256] = {};
  m["hostname"] = ::gethostname(host, sizeof host - 1) == 0 ? Json(std::string(host)) : Json();
  struct utsname u {};
  m["os"] = ::uname(&u) == 0 ? Json(fmt::format("{} {} {}", u.sysname, u.release, u.machine))
                             : Json(nullptr);
  m["cpu"] = text_or_null(cpu_model());
  const unsigned n = std::thread::hardware_concurrency();
  m["logical_cpus"] = n > 0 ? Json(n) : Json(nullptr);
  return m;
}

// Whether path is a report this program wrote for `command`: a regular file of at most 1 GiB that
// parses as a JSON object with "format" kFormat and that "command". Anything else is not.
bool is_own_report(const std::string& path, std::string_view command) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  const auto size = fs::file_size(path, ec);
  if (ec || size > (std::uintmax_t{1} << 30)) return false;
  std::ifstream in(path, std::ios::binary);
  const Json doc = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return false;
  const auto f = doc.find("format");
  const auto c = doc.find("command");
  return f != doc.end() && c != doc.end() && *f == kFormat && *c == std::string(command);
}

// The force to give AtomicOutput: an existing report of this command is replaced without asking.
bool output_force(const std::string& path, bool force, std::string_view command) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw InputError("--json: empty path");
  if (fs::is_directory(path, ec)) throw InputError(fmt::format("--json {}: is a folder", path));
  if (!fs::exists(fs::symlink_status(path, ec))) return force;
  if (!force && !is_own_report(path, command))
    throw InputError(fmt::format(
        "--json {}: the file exists and is not a JSON report of xentlab {} (the report of an "
        "earlier run is replaced); pass --force to overwrite it",
        path, command));
  return true;
}

}  // namespace

Json real(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Json report_head(const Invocation& inv) {
  Json doc;
  doc["format"] = kFormat;
  doc["schema_version"] = kSchemaVersion;
  doc["command"] = inv.command;
  Json p;
  p["xentlab_version"] = kVersion;
  p["commit"] = text_or_null(kBuildCommit);
  // Only known together with the commit.
  p["source_modified"] = std::string(kBuildCommit).empty() ? Json(nullptr) : Json(kBuildModified);
  p["command_line"] = inv.command_line;
  p["started_utc"] = inv.started_utc;
  p["finished_utc"] = utc_now();
  p["machine"] = machine_json();
  doc["provenance"] = std::move(p);
  return doc;
}

std::string file_sha256(const std::string& path) {
  return sha256_file_hex(path);
}

Json stats_json(const ErrorStats& s) {
  Json j;
  j["n"] = s.n;
  j["out_dtype"] = std::string(to_string(s.out_dtype));
  j["out_nan"] = s.out_nan;
  j["out_posinf"] = s.out_posinf;
  j["out_neginf"] = s.out_neginf;
  j["ref_nan"] = s.ref_nan;
  j["ref_posinf"] = s.ref_posinf;
  j["ref_neginf"] = s.ref_neginf;
  j["finiteness_mismatches"] = s.finiteness_mismatches;
  j["nonfinite_where_ref_finite"] = s.nonfinite_where_ref_finite;
  j["first_mismatch_index"] = s.first_mismatch_index;
  j["n_finite_pairs"] = s.n_finite_pairs;
  j["max_abs_err"] = real(s.max_abs_err);
  j["max_abs_err_index"] = s.max_abs_err_index;
  j["max_abs_err_out"] = real(s.max_abs_err_out);
  j["max_abs_err_ref"] = real(s.max_abs_err_ref);
  j["rms_abs_err"] = real(s.rms_abs_err);
  j["mean_abs_err"] = real(s.mean_abs_err);
  j["rel_floor"] = real(s.rel_floor);
  j["max_rel_err"] = real(s.max_rel_err);
  j["max_rel_err_index"] = s.max_rel_err_index;
  j["mean_rel_err"] = real(s.mean_rel_err);
  j["normwise_rel_err"] = real(s.normwise_rel_err);
  j["ulp_count"] = s.ulp_count;
  j["frac_ulp_0"] = real(s.frac_ulp_0);
  j["frac_ulp_le1"] = real(s.frac_ulp_le1);
  j["frac_ulp_le2"] = real(s.frac_ulp_le2);
  j["frac_ulp_le4"] = real(s.frac_ulp_le4);
  j["max_ulp"] = real(s.max_ulp);
  j["max_ulp_index"] = s.max_ulp_index;
  j["bias"] = real(s.bias);
  j["bias_stderr"] = real(s.bias_stderr);
  j["mean_out"] = real(s.mean_out);
  j["mean_ref"] = real(s.mean_ref);
  j["mean_value_err"] = real(s.mean_value_err);
  j["p50"] = real(s.p50);
  j["p90"] = real(s.p90);
  j["p99"] = real(s.p99);
  j["p999"] = real(s.p999);
  j["pmax"] = real(s.pmax);
  j["has_bounds"] = s.has_bounds;
  j["max_ratio"] = real(s.max_ratio);
  j["max_ratio_index"] = s.max_ratio_index;
  j["max_ratio_err"] = real(s.max_ratio_err);
  j["max_ratio_bound"] = real(s.max_ratio_bound);
  j["p99_ratio"] = real(s.p99_ratio);
  j["n_over_bound"] = s.n_over_bound;
  j["n_infinite_bound"] = s.n_infinite_bound;
  j["sqrt_sum_bound_sq"] = real(s.sqrt_sum_bound_sq);
  j["mean_bound"] = real(s.mean_bound);
  return j;
}

Json policy_json(const Policy& p) {
  Json j;
  j["name"] = p.name;
  j["k"] = real(p.k);
  j["bias_check"] = p.bias_check;
  j["k_bias"] = real(p.k_bias);
  j["bias_sigmas"] = real(p.bias_sigmas);
  j["require_meaningful_bound"] = p.require_meaningful_bound;
  j["baseline_factor"] = real(p.baseline_factor);
  return j;
}

void check_json_output(const std::string& path, bool force, std::string_view command) {
  const bool replace = output_force(path, force, command);
  try {
    AtomicOutput(path, replace).check_writable();
  } catch (const InputError& e) {  // "PATH: the folder … does not exist", "PATH: cannot create …"
    throw InputError(fmt::format("--json {}", e.what()));
  }
}

void write_json_output(const std::string& path, bool force, std::string_view command,
                       const Json& document) {
  AtomicOutput out(path, output_force(path, force, command));
  // Invalid UTF-8 in a string (a file name in another encoding) is replaced (U+FFFD), not thrown.
  const std::string text =
      document.dump(2, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
  errno = 0;
  {
    std::ofstream f(out.temp_path(), std::ios::binary);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    f.close();
    if (!f) {
      const int err = errno;
      throw OutputError(fmt::format("--json {}: cannot write the report: {}", path,
                                    err != 0 ? std::strerror(err) : "unknown error"));
    }
  }
  out.commit();
}

}  // namespace xentlab::json_report

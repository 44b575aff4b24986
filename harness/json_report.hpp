#pragma once
// The machine-readable report of `xentlab verify`, `audit` and `bench` (--json FILE): one JSON
// document per invocation, format "xentlab-report", schema docs/json.md and
// docs/schema/xentlab-report.schema.json. This file holds what the three share: the document's
// head (format, schema version, command, provenance), the encoding of real numbers, of error
// statistics and of a policy, and the output file's rules (atomic write; an earlier report of the
// same command is replaced, any other file only with --force). Each command builds its own body
// (harness/verify/verify.hpp verify_json, harness/audit/audit.hpp audit_json,
// harness/bench/report.hpp bench_json).
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "judge/policy.hpp"
#include "judge/stats.hpp"

namespace xentlab::json_report {

/// Keys keep the order they are written in (the order docs/json.md lists them).
using Json = nlohmann::ordered_json;

inline constexpr const char* kFormat = "xentlab-report";
/// Raised when a key is removed or changes meaning; a key added leaves it as it is.
inline constexpr int kSchemaVersion = 1;

/// A real number: finite values as JSON numbers; NaN, +Inf and −Inf (which JSON cannot hold) as
/// the strings "nan", "inf" and "-inf" (Python's float() reads all four forms).
Json real(double x);

/// What the report records of the invocation besides what the program knows by itself (version,
/// commit, machine).
struct Invocation {
  std::string command;       ///< "verify", "audit" or "bench"
  std::string command_line;  ///< the arguments, shell-quoted (cli/commands.hpp)
  std::string started_utc;   ///< ISO 8601, when the command started (utc_now())
};

/// Current UTC time, ISO 8601 to the second ("YYYY-MM-DDThh:mm:ssZ").
std::string utc_now();

/// The head every report starts with: format, schema_version, command and provenance (xentlab
/// version, the git commit it was built from and whether the tree had uncommitted changes, the
/// command line, start and finish times, the machine: host name, operating system, CPU model and
/// logical CPUs). The caller adds the command's keys after it.
Json report_head(const Invocation& inv);

/// An existing file's SHA-256 (64 lowercase hexadecimal digits, as sha256sum prints it).
/// Throws InputError naming the file when it cannot be read.
std::string file_sha256(const std::string& path);

/// Every field of ErrorStats but the histograms, under the member's own name (non-finite values
/// as real() writes them).
Json stats_json(const ErrorStats& s);

/// A policy of judge/policy.hpp: name, k, bias_check, k_bias, bias_sigmas,
/// require_meaningful_bound, baseline_factor.
Json policy_json(const Policy& p);

/// The check before any work: throws InputError naming the path when it is a folder, when it
/// exists and is not a report of this command (unless force), or when its folder does not take a
/// file (AtomicOutput::check_writable: a missing folder, permissions, a read-only file system).
/// An existing report of the same command (a JSON object with "format" "xentlab-report" and that
/// "command") is replaced without --force: CI re-runs write to the same path.
void check_json_output(const std::string& path, bool force, std::string_view command);

/// Writes the document (two-space indentation, UTF-8, a final newline) to a temporary file beside
/// path and renames it into place, with the rules of check_json_output (made again here). Throws
/// InputError for a refusal, OutputError when the file cannot be written (a full disk; no file is
/// left behind, an existing one is kept).
void write_json_output(const std::string& path, bool force, std::string_view command,
                       const Json& document);

}  // namespace xentlab::json_report

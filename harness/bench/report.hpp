#pragma once
// `xentlab bench` on the host side (no CUDA): the result rows and every output format (terminal
// table, Markdown, CSV, HDF5). The options, their validation and the presets are
// harness/bench/options.hpp; byte sizes (parse_bytes, format_bytes) are harness/text.hpp. The
// measurement itself is harness/bench/timing.hpp (built only with the CUDA backend); everything
// here is plain C++, so the CPU tests exercise it with synthetic rows.
// Formats: docs/formats.md, "Benchmark results"; method: docs/benchmarks.md.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/bench/options.hpp"
#include "harness/json_report.hpp"
#include "harness/text.hpp"
#include "judge/policy.hpp"
#include "numerics/recipe.hpp"

namespace xentlab::bench {

/// The strategy that "throughput relative to naive" divides by (a concept of the table, not a
/// filter: the strategies themselves always come from the registry).
inline constexpr const char* kBaselineStrategy = "naive";
/// The judge's policy every measured row is assessed by (judge/policy.hpp policy_by_name): the
/// audit's.
inline constexpr const char* kJudgePolicy = "audit";

/// Median and spread of repeated times (ms). Quartiles interpolate linearly between order
/// statistics (numpy's default); the median of an even count is the mean of the middle two.
struct TimingStats {
  std::int64_t n = 0;
  double median = 0.0, min = 0.0, max = 0.0, q1 = 0.0, q3 = 0.0;
};
TimingStats summarize_times(std::vector<double> ms);

/// What happened to one strategy × recipe. A measured row is ok, or incorrect when the judge
/// (judge/sampled_check.hpp assess_sampled_run, the audit's bounds and policy) finds its checked
/// outputs beyond their a-priori bounds: the dispositions of judge/policy.hpp (passed is "ok",
/// a run without a reference check is ok too), plus does-not-fit, a refusal for memory.
enum class RowStatus : std::uint8_t { ok, incorrect, does_not_fit, not_supported, failed };
/// "ok", "incorrect", "does-not-fit", "not-supported", "failed".
std::string_view to_string(RowStatus s);
/// ok or incorrect: the row was run and timed (its times, memory and errors are measured).
bool measured(RowStatus s);
/// The row status of a measured run judged `d` (ok for passed, incorrect for incorrect; the
/// others as named).
RowStatus row_status(Disposition d);

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// One strategy × recipe. Errors are normwise relative (‖out − ref‖₂/‖ref‖₂, ErrorStats::
/// normwise_rel_err, as the judge computed them) over the sampled token rows; NaN where not
/// measured.
struct BenchRow {
  std::string strategy, recipe;
  RowStatus status = RowStatus::ok;
  std::string message;           ///< why it did not run, why it is incorrect, or a note on a check
  TimingStats time;              ///< forward + backward, ms, warm-up excluded
  std::vector<double> times_ms;  ///< every timed run, in order
  double tflops = kNaN;          ///< 6·N·V·D / median
  double rel_to_naive = kNaN;    ///< naive's median / this median, same recipe
  /// Repeat runs give the same bits, as the registry declares it (StrategyTraits::deterministic,
  /// held by the GPU tests' repeat-run comparisons); empty where not known.
  std::optional<bool> deterministic;
  /// --gemms-alone: the strategy's own GEMMs timed alone in the same rounds (n = 0: not timed),
  /// and this median / their median (≥ 1: what its loss kernels and their traffic add).
  TimingStats gemms_time;
  double rel_to_gemms = kNaN;
  std::int64_t peak_extra_bytes = -1;     ///< measured: the tracker's peak beyond inputs/outputs
  std::int64_t planned_extra_bytes = -1;  ///< the workspace plan (for a refusal: what it needs)
  std::int64_t chunk_rows = 0;            ///< tokens per chunk of the plan
  std::int64_t vocab_splits = 0;    ///< vocabulary splits of a strategy that splits it (else 0)
  std::int64_t io_bytes = 0;        ///< inputs (one copy) + loss, lse and gradients
  double reduced_loss_full = kNaN;  ///< the strategy's mean loss over all N tokens
  double err_loss = kNaN;           ///< per-token loss, sampled rows of the full-size run
  double err_lse = kNaN;            ///< per-token lse, same rows
  double err_reduced_loss = kNaN;   ///< |mean over sampled rows − reference| / |reference|
  double err_dH = kNaN;             ///< dH rows of the full-size run
  double err_dW_sub = kNaN;         ///< dW of the sub-problem run, sampled vocabulary rows
};

/// The machine and the conditions of a bench invocation.
struct BenchMeta {
  std::string gpu_name;
  std::string driver;       ///< kernel driver version (/proc/driver/nvidia/version), or ""
  int cuda_driver_api = 0;  ///< cudaDriverGetVersion, e.g. 13000
  int cuda_runtime = 0;     ///< cudaRuntimeGetVersion
  int sm_major = 0, sm_minor = 0, multiprocessors = 0;
  int sm_clock_mhz = 0, mem_clock_mhz = 0;  ///< rated peak clocks (cudaDeviceGetAttribute)
  std::int64_t l2_bytes = 0, memory_bytes = 0;
  std::string date_utc;  ///< ISO 8601, start of the run
  std::string xentlab_version;
  double gemm_tflops = kNaN;  ///< cuBLAS bf16 GEMM 8192³ (fp32 compute), same process, alone
  /// The same GEMM issued back to back (bench::cublas_bf16_gemm_sustained_tflops): the rate a run
  /// long enough to be held at the card's power cap sees; the report gives 6·N·V·D and 8·N·V·D
  /// at it.
  double gemm_sustained_tflops = kNaN;
  int input_copies = 1;  ///< inputs rotated among this many copies (beyond L2)
  std::int64_t sample_rows = 0, vocab_rows = 0;  ///< as used (after clamping)
};

struct BenchReport {
  BenchOptions options;
  BenchMeta meta;
  std::vector<BenchRow> rows;
};

/// rel_to_naive of every ok row from the ok baseline row of the same recipe (NaN without one).
void fill_relative_throughput(std::vector<BenchRow>& rows);

/// Number of input copies so that the rotated working set is at least twice the L2 cache
/// (1 when one copy already is; at most 64).
int rotation_copies(std::int64_t input_bytes, std::int64_t l2_bytes);

/// "6.2e-03" for a measured error, "—" for NaN.
std::string format_error(double e);
/// The terminal table (fixed-width columns, one line per row, then the refusals' messages).
std::string format_table(const BenchReport& r);
/// Markdown: conditions, the measured table, and for a preset with a quoted table the quoted and
/// measured columns side by side.
std::string format_markdown(const BenchReport& r);

/// CSV (RFC 4180: fields with a comma, quote or newline are quoted, quotes doubled). The header is
/// the same for every row; each row repeats the conditions so rows of many runs can be appended.
std::string csv_header();
std::string csv_row(const BenchReport& r, const BenchRow& row);
/// Throws InputError before any work when `path` cannot take the rows: its folder is missing or
/// does not take the temporary file (created and removed here), it cannot be read, or it exists
/// with another header (an older format, another file; a UTF-8 BOM or CRLF line endings are named
/// as such; only the first 64 KiB are read). An empty file counts as new.
void check_csv_target(const std::string& path);
/// Appends the rows (a new or empty file gets the header; a last line without its newline gets
/// one first), through a temporary copy renamed into place, under the FileLock of `path`.
void append_csv(const std::string& path, const BenchReport& r);

/// The same checks for an HDF5 results file (format "xentlab-bench", /sessions a group).
void check_h5_target(const std::string& path);
/// Adds one session group with its rows (docs/formats.md), numbered one past the largest existing
/// session, through a temporary copy + rename under the FileLock of `path`.
void append_h5(const std::string& path, const BenchReport& r);

/// The JSON report of `xentlab bench --json` (docs/json.md, "bench"): the head of
/// json_report::report_head (started: meta.date_utc; command line: options.command_line), the
/// options, the device, the judge's policy (kJudgePolicy), every row (status as to_string
/// writes it; times in ms, memory in bytes, errors normwise relative: "nan" where not measured)
/// and a preset's quoted table.
json_report::Json bench_json(const BenchReport& r);

/// What write_outputs did.
struct OutputReport {
  std::string stdout_text;            ///< the Markdown when it has no file (or its file failed),
                                      ///< and one line per output written
  std::vector<std::string> failures;  ///< one line per output that failed: option, path, reason
};
/// Writes every output of a finished run: the Markdown to options.markdown (else into
/// stdout_text), the rows appended to options.csv and options.h5, the JSON report to
/// options.json (json_report::write_json_output: an earlier report of bench is replaced, another
/// file only with force). Each output is attempted even
/// when another one failed, and a Markdown file that cannot be written is replaced by the Markdown
/// in stdout_text, so that a measurement is never lost to an output error.
OutputReport write_outputs(const BenchReport& r, bool force);

/// The exit status of `xentlab bench` for a finished run (the audit's convention): 1 when an
/// output failed (out.failures) or a row is incorrect or failed, else 0 (refusals are rows).
int exit_status(const BenchReport& r, const OutputReport& out);

/// Writes text to path through a temporary file + rename (an existing file only with force).
void write_text_atomic(const std::string& path, const std::string& text, bool force);

/// Current UTC time, ISO 8601 ("YYYY-MM-DDThh:mm:ssZ").
std::string now_utc();

}  // namespace xentlab::bench

// `xentlab bench`, host side: rows and their formats (see report.hpp).
#include "harness/bench/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "datasets/io/atomic_file.hpp"
#include "datasets/io/h5.hpp"
#include "harness/text.hpp"
#include "numerics/error.hpp"

namespace xentlab::bench {
namespace fs = std::filesystem;
namespace {

constexpr std::int64_t kBenchFormatVersion = 1;
constexpr const char* kBenchFormat = "xentlab-bench";

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

/// Linear interpolation at fraction q of sorted values (numpy's default percentile).
double quantile_sorted(const std::vector<double>& v, double q) {
  if (v.empty()) return kNaN;
  const double pos = q * static_cast<double>(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

std::string ms_cell(double v) {
  return std::isnan(v) ? "—" : fmt::format("{:.2f}", v);
}
std::string gib_cell(std::int64_t b) {
  return b < 0 ? "—" : fmt::format("{:.3f}", static_cast<double>(b) / 1073741824.0);
}
std::string num_cell(double v, const char* spec) {
  return std::isnan(v) ? "—" : fmt::format(fmt::runtime(spec), v);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}
std::string csv_num(double v) {
  return std::isnan(v) ? "" : fmt::format("{:.9g}", v);
}

/// One line of text for a table cell (messages may hold newlines or pipes).
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '|') c = ' ';
  return s;
}

std::string device_line(const BenchMeta& m) {
  return fmt::format(
      "{} (sm_{}{}, {} SMs, {}, L2 {}), driver {} (CUDA driver API {}.{}, runtime {}.{}), rated "
      "clocks SM {} MHz / memory {} MHz",
      m.gpu_name, m.sm_major, m.sm_minor, m.multiprocessors, format_bytes(m.memory_bytes),
      format_bytes(m.l2_bytes), m.driver.empty() ? "unknown" : m.driver, m.cuda_driver_api / 1000,
      m.cuda_driver_api % 1000 / 10, m.cuda_runtime / 1000, m.cuda_runtime % 1000 / 10,
      m.sm_clock_mhz, m.mem_clock_mhz);
}

std::string conditions_line(const BenchReport& r) {
  const BenchOptions& o = r.options;
  return fmt::format(
      "N={} V={} D={}; forward+backward, median of {} after {} warm-up, {}; memory budget {}; "
      "chunk tokens {}; reference check on {} sampled token rows (dW: sub-problem of those rows, "
      "{} vocabulary rows), seed {}",
      o.N, o.V, o.D, o.repeats, o.warmup,
      r.meta.input_copies <= 1
          ? std::string("inputs in one copy (at least 2× L2 by themselves)")
          : fmt::format("inputs rotated among {} copies (to exceed 2× L2; 64 at most)",
                        r.meta.input_copies),
      o.memory_budget > 0 ? format_bytes(o.memory_budget) : "strategy default",
      o.chunk_tokens > 0 ? std::to_string(o.chunk_tokens) : "from the budget", r.meta.sample_rows,
      r.meta.vocab_rows, o.seed);
}

/// The GEMM rates and the strategies' GEMM work at the sustained one: "787.5 TFLOP/s alone, 655.0
/// sustained (…)". A run too short to be held at the power cap can beat the latter (H200,
/// N = 8192: naive 35.01 ms against 38.17 for its 6·N·V·D at the sustained rate).
std::string gemm_line(const BenchReport& r) {
  const BenchMeta& m = r.meta;
  std::string s = num_cell(m.gemm_tflops, "{:.1f}") + " TFLOP/s alone";
  // Only a measured rate (finite, positive) gives times; NaN: not measured.
  if (!(std::isfinite(m.gemm_sustained_tflops) && m.gemm_sustained_tflops > 0)) return s;
  const double nvd = double(r.options.N) * double(r.options.V) * double(r.options.D);
  const auto at_rate_ms = [&](double k) {
    return k * nvd / (m.gemm_sustained_tflops * 1e12) * 1e3;
  };
  return s + fmt::format(
                 ", {:.1f} sustained (issued back to back, as a long run sees it under a power "
                 "cap); at the sustained rate 6·N·V·D takes {:.2f} ms (naive, chunked), 8·N·V·D "
                 "{:.2f} ms (checkpointed, fused)",
                 m.gemm_sustained_tflops, at_rate_ms(6), at_rate_ms(8));
}

}  // namespace

// ---- timing, rows ---------------------------------------------------------------------------

TimingStats summarize_times(std::vector<double> ms) {
  TimingStats t;
  t.n = static_cast<std::int64_t>(ms.size());
  if (ms.empty()) {
    t.median = t.min = t.max = t.q1 = t.q3 = kNaN;
    return t;
  }
  std::sort(ms.begin(), ms.end());
  t.min = ms.front();
  t.max = ms.back();
  t.median = quantile_sorted(ms, 0.5);
  t.q1 = quantile_sorted(ms, 0.25);
  t.q3 = quantile_sorted(ms, 0.75);
  return t;
}

std::string_view to_string(RowStatus s) {
  switch (s) {
    case RowStatus::ok:
      return "ok";
    case RowStatus::incorrect:
      return to_string(Disposition::incorrect);
    case RowStatus::does_not_fit:
      return "does-not-fit";
    case RowStatus::not_supported:
      return "not-supported";
    case RowStatus::failed:
      return "failed";
  }
  return "?";
}

bool measured(RowStatus s) {
  return s == RowStatus::ok || s == RowStatus::incorrect;
}

RowStatus row_status(Disposition d) {
  switch (d) {
    case Disposition::passed:
    case Disposition::measured:  // ran, nothing found wrong; its recipe has no finite bound
      return RowStatus::ok;
    case Disposition::incorrect:
      return RowStatus::incorrect;
    case Disposition::not_supported:
      return RowStatus::not_supported;
    case Disposition::failed:
      return RowStatus::failed;
  }
  return RowStatus::failed;
}

void fill_relative_throughput(std::vector<BenchRow>& rows) {
  for (BenchRow& r : rows) {
    r.rel_to_naive = kNaN;
    if (!measured(r.status)) continue;
    for (const BenchRow& b : rows)
      if (b.strategy == kBaselineStrategy && b.recipe == r.recipe && measured(b.status) &&
          b.time.median > 0 && r.time.median > 0)
        r.rel_to_naive = b.time.median / r.time.median;
  }
}

int rotation_copies(std::int64_t input_bytes, std::int64_t l2_bytes) {
  if (input_bytes <= 0) return 1;
  const std::int64_t want = 2 * std::max<std::int64_t>(l2_bytes, 0);
  const std::int64_t k = (want + input_bytes - 1) / input_bytes;
  return static_cast<int>(std::clamp<std::int64_t>(k, 1, 64));
}

// ---- text formats -----------------------------------------------------------------------------

std::string format_error(double e) {
  return std::isnan(e) ? "—" : fmt::format("{:.1e}", e);
}

/// "yes", "no", or a dash where the registry does not say.
std::string deterministic_cell(const BenchRow& row) {
  if (!row.deterministic) return "—";
  return *row.deterministic ? "yes" : "no";
}

/// --gemms-alone: per row, the strategy's own GEMMs timed alone beside it (terminal or Markdown).
std::string gemms_table(const BenchReport& r, bool markdown) {
  if (!r.options.gemms_alone) return "";
  std::string s =
      markdown ? "\n## Its own GEMMs\n\nEach strategy's GEMMs alone (its shapes, operands and "
                 "workspace; no loss kernels), timed in the same interleaved rounds: × GEMMs = "
                 "its median / theirs.\n\n| strategy | recipe | median ms | GEMMs alone ms | "
                 "× GEMMs |\n|---|---|---|---|---|\n"
               : fmt::format(
                     "\nits own GEMMs alone (same rounds; × GEMMs = median / theirs)\n"
                     "{:<13} {:<20} {:>9} {:>9} {:>8}\n",
                     "strategy", "recipe", "median ms", "GEMMs ms", "× GEMMs");
  for (const BenchRow& row : r.rows) {
    const bool ok = measured(row.status);
    const std::string med = ok ? ms_cell(row.time.median) : "—";
    const std::string gm = row.gemms_time.n > 0 ? ms_cell(row.gemms_time.median) : "—";
    const std::string x = num_cell(row.rel_to_gemms, "{:.3f}");
    s += markdown
             ? fmt::format("| {} | {} | {} | {} | {} |\n", row.strategy, row.recipe, med, gm, x)
             : fmt::format("{:<13} {:<20} {:>9} {:>9} {:>8}\n", row.strategy, row.recipe, med, gm,
                           x);
  }
  return s;
}

std::string format_table(const BenchReport& r) {
  std::string s;
  s += fmt::format("device   {}\n", device_line(r.meta));
  s += fmt::format("run      {}, xentlab {}, {}\n", r.meta.date_utc, r.meta.xentlab_version,
                   r.options.preset.empty() ? "no preset" : "preset " + r.options.preset);
  s += fmt::format("problem  {}\n", conditions_line(r));
  s += fmt::format("cuBLAS   bf16 GEMM 8192^3 (fp32 compute): {}\n\n", gemm_line(r));
  s += fmt::format(
      "{:<13} {:<20} {:<13} {:>9} {:>19} {:>8} {:>10} {:>6} {:>4} {:>8} {:>8} {:>8} {:>8} {:>8}\n",
      "strategy", "recipe", "status", "median ms", "min–max ms", "TFLOP/s", "extra GiB", "vs nv",
      "det.", "loss", "lse", "red.loss", "dH", "dW(sub)");
  for (const BenchRow& row : r.rows) {
    const bool ok = measured(row.status);
    const std::string spread =
        ok ? fmt::format("{:.2f}–{:.2f}", row.time.min, row.time.max) : std::string("—");
    s += fmt::format(
        "{:<13} {:<20} {:<13} {:>9} {:>19} {:>8} {:>10} {:>6} {:>4} {:>8} {:>8} {:>8} {:>8} "
        "{:>8}\n",
        row.strategy, row.recipe, to_string(row.status), ok ? ms_cell(row.time.median) : "—",
        spread, num_cell(row.tflops, "{:.1f}"),
        gib_cell(ok ? row.peak_extra_bytes : row.planned_extra_bytes),
        num_cell(row.rel_to_naive, "{:.2f}"), deterministic_cell(row), format_error(row.err_loss),
        format_error(row.err_lse), format_error(row.err_reduced_loss), format_error(row.err_dH),
        format_error(row.err_dW_sub));
  }
  s += gemms_table(r, false);
  bool any_note = false;
  for (const BenchRow& row : r.rows) {
    if (row.message.empty()) continue;
    if (!any_note) s += "\n";
    any_note = true;
    s += fmt::format("  {} {}: {}\n", row.strategy, row.recipe, row.message);
  }
  s += "\nextra GiB: measured peak beyond inputs and gradients (refused rows: the bytes the plan "
       "needs); vs nv: naive's median / this one; errors normwise relative against the certified "
       "reference on the sampled rows (red.loss: relative error of their mean loss; dW(sub): a run "
       "on the sub-problem of those rows); det.: bit-identical on repeat, as the registry declares "
       "it\n";
  return s;
}

std::string format_markdown(const BenchReport& r) {
  std::string s = "# xentlab bench\n\n";
  s += fmt::format("- device: {}\n", device_line(r.meta));
  s += fmt::format("- date: {}; xentlab {}; command: `{}`\n", r.meta.date_utc,
                   r.meta.xentlab_version, r.options.command_line);
  s += fmt::format("- problem: {}\n", conditions_line(r));
  s += fmt::format("- cuBLAS bf16 GEMM 8192³ (fp32 compute) in the same process: {}\n\n",
                   gemm_line(r));
  s += "| strategy | recipe | status | median ms | min–max ms | TFLOP/s (6·N·V·D) | peak extra GiB "
       "| "
       "chunk | vs naive | deterministic | loss err | lse err | mean-loss err | dH err | dW err "
       "(sub-problem) |\n";
  s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const BenchRow& row : r.rows) {
    const bool ok = measured(row.status);
    s += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        row.strategy, row.recipe, to_string(row.status), ok ? ms_cell(row.time.median) : "—",
        ok ? fmt::format("{:.2f}–{:.2f}", row.time.min, row.time.max) : "—",
        num_cell(row.tflops, "{:.1f}"),
        ok ? gib_cell(row.peak_extra_bytes)
           : fmt::format("needs {}", gib_cell(row.planned_extra_bytes)),
        row.chunk_rows > 0
            ? std::to_string(row.chunk_rows) +
                  (row.vocab_splits > 0 ? fmt::format(" × {} vocabulary splits", row.vocab_splits)
                                        : "")
            : "—",
        num_cell(row.rel_to_naive, "{:.2f}×"), deterministic_cell(row), format_error(row.err_loss),
        format_error(row.err_lse), format_error(row.err_reduced_loss), format_error(row.err_dH),
        format_error(row.err_dW_sub));
  }
  bool any_note = false;
  for (const BenchRow& row : r.rows) {
    if (row.message.empty()) continue;
    if (!any_note) s += "\n";
    any_note = true;
    s += fmt::format("- {} {}: {}\n", row.strategy, row.recipe, one_line(row.message));
  }
  s += "\nPeak extra: device bytes beyond the inputs (H, W, targets) and outputs (loss, lse, dH, "
       "dW), measured by the tracking allocator (cuBLAS workspace included). Errors: normwise "
       "relative ‖out − ref‖₂/‖ref‖₂ against the certified CPU reference on the sampled token rows "
       "of the full-size run (loss, lse, dH); mean-loss: |mean of those rows' losses, reduced as "
       "the strategy reduces tokens − reference| / |reference|; dW: the same strategy and recipe "
       "run on the sub-problem made of the sampled rows, on the sampled vocabulary rows.\n";
  s += gemms_table(r, true);

  if (!r.options.preset.empty()) {
    const Preset& p = find_preset(r.options.preset);
    if (!p.quoted.empty()) {
      s += fmt::format(
          "\n## Quoted vs measured ({})\n\nQuoted: {}. Measured: this run, N={} V={} "
          "D={}; \"peak\" is the extra memory beyond inputs and gradients, with the "
          "total including them (one copy) in parentheses.\n\n",
          p.name, p.quoted_source, r.options.N, r.options.V, r.options.D);
      s += "| strategy | recipe | quoted peak memory | measured peak extra (total) | quoted "
           "throughput vs naive | measured vs naive |\n|---|---|---|---|---|---|\n";
      for (const Recipe& rc : r.options.recipes)
        for (const QuotedRow& q : p.quoted) {
          const BenchRow* m = nullptr;
          for (const BenchRow& row : r.rows)
            if (row.strategy == q.strategy && row.recipe == rc.name()) m = &row;
          std::string mem = "not measured (not in this build or filtered out)", rel = "—";
          if (m != nullptr && measured(m->status)) {
            mem = fmt::format("{} ({})", format_bytes(m->peak_extra_bytes),
                              format_bytes(m->peak_extra_bytes + m->io_bytes));
            rel = num_cell(m->rel_to_naive, "{:.2f}×");
          } else if (m != nullptr) {
            mem = fmt::format("{}: needs {}", to_string(m->status),
                              format_bytes(m->planned_extra_bytes));
          }
          s += fmt::format("| {} | {} | {} | {} | {} | {} |\n", q.strategy, rc.name(),
                           q.peak_memory, mem, q.throughput_vs_naive, rel);
        }
    }
  }
  return s;
}

// ---- CSV ---------------------------------------------------------------------------------------

std::string csv_header() {
  return "date_utc,xentlab_version,gpu,driver,cuda_driver_api,cuda_runtime,sm_clock_mhz,"
         "mem_clock_mhz,gemm_tflops,command,preset,N,V,D,strategy,recipe,status,repeats,warmup,"
         "input_copies,median_ms,min_ms,max_ms,q1_ms,q3_ms,tflops,rel_to_naive,peak_extra_bytes,"
         "planned_extra_bytes,io_bytes,chunk_rows,memory_budget,chunk_tokens,sample_rows,"
         "vocab_rows,seed,reduced_loss_full,err_loss,err_lse,err_reduced_loss,err_dH,err_dW_sub,"
         "message";
}

std::string csv_row(const BenchReport& r, const BenchRow& row) {
  const BenchMeta& m = r.meta;
  const BenchOptions& o = r.options;
  const bool ok = measured(row.status);
  std::vector<std::string> f = {
      m.date_utc,
      m.xentlab_version,
      m.gpu_name,
      m.driver,
      std::to_string(m.cuda_driver_api),
      std::to_string(m.cuda_runtime),
      std::to_string(m.sm_clock_mhz),
      std::to_string(m.mem_clock_mhz),
      csv_num(m.gemm_tflops),
      o.command_line,
      o.preset,
      std::to_string(o.N),
      std::to_string(o.V),
      std::to_string(o.D),
      row.strategy,
      row.recipe,
      std::string(to_string(row.status)),
      std::to_string(ok ? row.time.n : 0),
      std::to_string(o.warmup),
      std::to_string(m.input_copies),
      csv_num(ok ? row.time.median : kNaN),
      csv_num(ok ? row.time.min : kNaN),
      csv_num(ok ? row.time.max : kNaN),
      csv_num(ok ? row.time.q1 : kNaN),
      csv_num(ok ? row.time.q3 : kNaN),
      csv_num(row.tflops),
      csv_num(row.rel_to_naive),
      row.peak_extra_bytes >= 0 ? std::to_string(row.peak_extra_bytes) : "",
      row.planned_extra_bytes >= 0 ? std::to_string(row.planned_extra_bytes) : "",
      std::to_string(row.io_bytes),
      std::to_string(row.chunk_rows),
      std::to_string(o.memory_budget),
      std::to_string(o.chunk_tokens),
      std::to_string(m.sample_rows),
      std::to_string(m.vocab_rows),
      std::to_string(o.seed),
      csv_num(row.reduced_loss_full),
      csv_num(row.err_loss),
      csv_num(row.err_lse),
      csv_num(row.err_reduced_loss),
      csv_num(row.err_dH),
      csv_num(row.err_dW_sub),
      row.message};
  std::string s;
  for (std::size_t i = 0; i < f.size(); ++i) s += (i ? "," : "") + csv_field(f[i]);
  return s;
}

namespace {

/// At most this much of an existing CSV is read to find its header line.
constexpr std::size_t kMaxHeaderBytes = 64 * 1024;

/// Copies an existing destination to the temporary of `out`, made owner-writable (copy_file keeps
/// a read-only file's mode, and the copy must take the new rows; the rename needs only the
/// folder). Returns the destination's permissions, restored on the temporary before the rename.
fs::perms copy_for_append(const std::string& path, const AtomicOutput& out) {
  const fs::perms mode = fs::status(path).permissions();
  fs::copy_file(path, out.temp_path(), fs::copy_options::overwrite_existing);
  fs::permissions(out.temp_path(), fs::perms::owner_read | fs::perms::owner_write,
                  fs::perm_options::add);
  return mode;
}

/// Whether the file's last byte is a newline (true for an empty file).
bool ends_with_newline(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in || in.tellg() <= 0) return true;
  in.seekg(-1, std::ios::end);
  char c = 0;
  in.get(c);
  return c == '\n';
}

}  // namespace

void check_csv_target(const std::string& path) {
  AtomicOutput probe(path, true);  // folder exists, not a device or folder
  probe.check_writable();          // the folder takes the temporary file
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError(fmt::format("{}: cannot read: {}", path,
                                 errno != 0 ? std::strerror(errno) : "unknown error"));
  std::string head(kMaxHeaderBytes, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (in.bad()) throw InputError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  head.resize(static_cast<std::size_t>(in.gcount()));
  if (head.empty()) return;  // an empty file is taken as new: the header is written
  const std::size_t nl = head.find('\n');
  if (nl == std::string::npos && head.size() == kMaxHeaderBytes)
    throw InputError(fmt::format(
        "{}: no line end in its first {} KiB: not an xentlab bench CSV; choose another --csv file",
        path, kMaxHeaderBytes / 1024));
  std::string first = head.substr(0, nl);
  if (first == csv_header()) return;
  std::vector<std::string> why;
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  if (first.rfind(kBom, 0) == 0) {
    first.erase(0, kBom.size());
    why.push_back("starts with a UTF-8 byte-order mark (remove the first 3 bytes)");
  }
  if (!first.empty() && first.back() == '\r') {
    first.pop_back();
    why.push_back("has CRLF (Windows) line endings (convert them to LF, e.g. with dos2unix)");
  }
  if (first == csv_header())
    throw InputError(
        fmt::format("{}: an xentlab bench CSV that {}; rows appended to it would "
                    "not match: fix the file or choose another --csv file",
                    path, join(why, " and ")));
  throw InputError(
      fmt::format("{}: exists with another header (not an xentlab bench CSV of this "
                  "version); choose another --csv file",
                  path));
}

void append_csv(const std::string& path, const BenchReport& r) {
  const FileLock lock(path);  // concurrent appends wait: the read-modify-rename is serialized
  check_csv_target(path);     // the file as it is now, under the lock
  AtomicOutput out(path, true);
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  const bool has_header = exists && fs::file_size(path, ec) > 0 && !ec;
  std::optional<fs::perms> mode;
  if (exists) mode = copy_for_append(path, out);
  {
    std::ofstream f(out.temp_path(), std::ios::app | std::ios::binary);
    if (!has_header)
      f << csv_header() << "\n";
    else if (!ends_with_newline(path))
      f << "\n";  // a last line without its line end: the first row must not be glued onto it
    for (const BenchRow& row : r.rows) f << csv_row(r, row) << "\n";
    f.close();
    if (!f) throw InputError(fmt::format("{}: cannot write the CSV rows", path));
  }
  if (mode) fs::permissions(out.temp_path(), *mode);
  out.commit();
}

void write_text_atomic(const std::string& path, const std::string& text, bool force) {
  AtomicOutput out(path, force);
  {
    std::ofstream f(out.temp_path());
    f << text;
    f.close();
    if (!f) throw InputError(fmt::format("{}: cannot write", path));
  }
  out.commit();
}

OutputReport write_outputs(const BenchReport& r, bool force) {
  OutputReport rep;
  const BenchOptions& o = r.options;
  auto attempt = [&rep](const char* option, const std::string& path, auto&& write) {
    try {
      write();
      return true;
    } catch (const std::exception& e) {
      rep.failures.push_back(fmt::format("{} {}: not written: {}", option, path, e.what()));
      return false;
    }
  };
  const std::string md = format_markdown(r);
  if (o.markdown.empty())
    rep.stdout_text += "\n" + md;
  else if (attempt("--markdown", o.markdown, [&] { write_text_atomic(o.markdown, md, force); }))
    rep.stdout_text += fmt::format("markdown: {}\n", o.markdown);
  else
    rep.stdout_text +=
        fmt::format("\n(the Markdown, which could not be written to {})\n\n{}", o.markdown, md);
  if (!o.csv.empty() && attempt("--csv", o.csv, [&] { append_csv(o.csv, r); }))
    rep.stdout_text += fmt::format("csv: {} ({} rows appended)\n", o.csv, r.rows.size());
  if (!o.h5.empty() && attempt("--h5", o.h5, [&] { append_h5(o.h5, r); }))
    rep.stdout_text += fmt::format("h5: {} (one session, {} rows)\n", o.h5, r.rows.size());
  if (!o.json.empty() && attempt("--json", o.json, [&] {
        json_report::write_json_output(o.json, force, "bench", bench_json(r));
      }))
    rep.stdout_text += fmt::format("json: {}\n", o.json);
  return rep;
}

int exit_status(const BenchReport& r, const OutputReport& out) {
  if (!out.failures.empty()) return 1;
  for (const BenchRow& row : r.rows)
    if (row.status == RowStatus::incorrect || row.status == RowStatus::failed) return 1;
  return 0;
}

// ---- HDF5 --------------------------------------------------------------------------------------

std::string now_utc() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

namespace {

/// The number of the next /sessions group of a bench file: one past the largest numbered group in
/// /sessions (0 when there is none), so a gap in the numbering cannot make it collide. InputError
/// when /sessions is not a group.
std::int64_t next_session(const h5::File& f, const std::string& path) {
  if (!f.exists("sessions")) return 0;
  std::vector<std::string> names;
  try {
    names = f.open_group("sessions").children();
  } catch (const FormatError&) {
    throw InputError(fmt::format(
        "{}: /sessions is not a group (a damaged or foreign bench file); choose another --h5 file",
        path));
  }
  std::int64_t next = 0;
  for (const std::string& n : names)
    if (!n.empty() && n.size() <= 15 && n.find_first_not_of("0123456789") == std::string::npos)
      next = std::max<std::int64_t>(next, std::stoll(n) + 1);
  return next;
}

}  // namespace

void check_h5_target(const std::string& path) {
  AtomicOutput probe(path, true);
  probe.check_writable();
  if (!fs::exists(path)) return;
  const h5::File f = h5::File::open_read(path);
  if (!f.has_attr("format") || f.attr_string("format") != kBenchFormat)
    throw InputError(
        fmt::format("{}: exists and is not an xentlab bench file (attribute format != "
                    "{}); choose another --h5 file",
                    path, kBenchFormat));
  if (f.attr_int("format_version") != kBenchFormatVersion)
    throw InputError(fmt::format("{}: bench format version {} (this xentlab writes {})", path,
                                 f.attr_int("format_version"), kBenchFormatVersion));
  next_session(f, path);
}

void append_h5(const std::string& path, const BenchReport& r) {
  const FileLock lock(path);  // concurrent appends wait: the read-modify-rename is serialized
  check_h5_target(path);      // the file as it is now, under the lock
  const bool exists = fs::exists(path);
  AtomicOutput out(path, true);
  std::optional<fs::perms> mode;
  if (exists) mode = copy_for_append(path, out);
  h5::File f = exists ? h5::File::open_rw(out.temp_path()) : h5::File::create(out.temp_path());
  if (!exists) {
    f.set_attr("format", kBenchFormat);
    f.set_attr("format_version", kBenchFormatVersion);
    f.set_attr("created", now_utc());
  }
  f.set_attr("updated", now_utc());
  const std::int64_t number = next_session(f, path);
  h5::Group sessions = f.exists("sessions") ? f.open_group("sessions") : f.create_group("sessions");
  h5::Group g = sessions.create_group(fmt::format("{:06d}", number));
  const BenchMeta& m = r.meta;
  const BenchOptions& o = r.options;
  g.set_attr("date_utc", m.date_utc);
  g.set_attr("xentlab_version", m.xentlab_version);
  g.set_attr("command", o.command_line);
  g.set_attr("preset", o.preset);
  g.set_attr("gpu", m.gpu_name);
  g.set_attr("driver", m.driver);
  g.set_attr("cuda_driver_api", m.cuda_driver_api);
  g.set_attr("cuda_runtime", m.cuda_runtime);
  g.set_attr("sm", fmt::format("{}.{}", m.sm_major, m.sm_minor));
  g.set_attr("multiprocessors", m.multiprocessors);
  g.set_attr("sm_clock_mhz", m.sm_clock_mhz);
  g.set_attr("mem_clock_mhz", m.mem_clock_mhz);
  g.set_attr("l2_bytes", m.l2_bytes);
  g.set_attr("memory_bytes", m.memory_bytes);
  g.set_attr("gemm_tflops", m.gemm_tflops);
  g.set_attr("gemm_sustained_tflops", m.gemm_sustained_tflops);
  g.set_attr("N", o.N);
  g.set_attr("V", o.V);
  g.set_attr("D", o.D);
  g.set_attr("repeats", o.repeats);
  g.set_attr("warmup", o.warmup);
  g.set_attr("input_copies", m.input_copies);
  g.set_attr("memory_budget", o.memory_budget);
  g.set_attr("chunk_tokens", o.chunk_tokens);
  g.set_attr("sample_rows", m.sample_rows);
  g.set_attr("vocab_rows", m.vocab_rows);
  g.set_attr("seed", static_cast<std::int64_t>(o.seed));
  h5::Group rows = g.create_group("rows");
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const BenchRow& row = r.rows[i];
    h5::Group q = rows.create_group(fmt::format("{:04d}", i));
    q.set_attr("strategy", row.strategy);
    q.set_attr("recipe", row.recipe);
    q.set_attr("status", std::string(to_string(row.status)));
    q.set_attr("message", row.message);
    q.set_attr("repeats", row.time.n);
    q.set_attr("median_ms", row.time.median);
    q.set_attr("min_ms", row.time.min);
    q.set_attr("max_ms", row.time.max);
    q.set_attr("q1_ms", row.time.q1);
    q.set_attr("q3_ms", row.time.q3);
    q.set_attr("tflops", row.tflops);
    q.set_attr("rel_to_naive", row.rel_to_naive);
    q.set_attr("deterministic",
               std::int64_t{row.deterministic ? (*row.deterministic ? 1 : 0) : -1});
    q.set_attr("gemms_median_ms", row.gemms_time.n > 0 ? row.gemms_time.median : kNaN);
    q.set_attr("rel_to_gemms", row.rel_to_gemms);
    q.set_attr("peak_extra_bytes", row.peak_extra_bytes);
    q.set_attr("planned_extra_bytes", row.planned_extra_bytes);
    q.set_attr("io_bytes", row.io_bytes);
    q.set_attr("chunk_rows", row.chunk_rows);
    q.set_attr("vocab_splits", row.vocab_splits);
    q.set_attr("reduced_loss_full", row.reduced_loss_full);
    q.set_attr("err_loss", row.err_loss);
    q.set_attr("err_lse", row.err_lse);
    q.set_attr("err_reduced_loss", row.err_reduced_loss);
    q.set_attr("err_dH", row.err_dH);
    q.set_attr("err_dW_sub", row.err_dW_sub);
    if (!row.times_ms.empty()) q.write("times_ms", row.times_ms);
  }
  f.close();
  if (mode) fs::permissions(out.temp_path(), *mode);
  out.commit();
}

}  // namespace xentlab::bench

#pragma once
// `xentlab selftest`: proof by mutation of verify (docs/selftest.md). It writes small golden files,
// makes candidates that are correct (every registered strategy in its recipes, the certified
// reference rounded to fp32, an fp32 implementation with sequential sums, a bf16-loss one) and
// candidates with one fault each (harness/selftest/faults.hpp), judges each, held in memory, by
// verify's checks (harness/verify/verify.hpp verify_outputs: verify_candidate's without the file)
// under the policy named for it, and counts: the
// correct candidates that pass or fail, the faults caught or missed. It reads only the overall
// verdict and the per-output statuses, so it keeps measuring as the judge changes.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpu/strategy.hpp"

namespace xentlab {
struct VerifyReport;  // harness/verify/verify.hpp
}

namespace xentlab::selftest {

/// The fewest token rows of the main golden file (--tokens): below it some faults of the catalogue
/// are none (measured: at N = 16 a loss 1e-3 too large under the bf16 policy passes; at 32 and
/// 48 every fault is caught).
inline constexpr std::int64_t kMinTokens = 32;

struct SelftestOptions {
  /// The main golden file's problem: a catalog dataset (xentlab datasets) and its shape (0: the
  /// dataset's own). The goldens of the loss-spec faults (ignored rows with a normaliser;
  /// reduction none with an upstream gradient) are always the small calibrated problem below.
  std::string dataset = "calibrated";
  std::int64_t N = 64, V = 1024, D = 128;
  std::uint64_t seed = 1;
  /// Whose strategies make the strategy candidates: the CPU emulation, and/or the CUDA kernels
  /// (skipped, with the reason in the report, where this build or machine has no GPU).
  std::vector<Backend> backends{Backend::cpu_emulation};
  /// Whose strategies and models make verify's differential baseline (judge/differential.hpp
  /// BaselineOptions::backends): the CPU emulation (the default: the same verdicts on every
  /// machine), or the CUDA kernels and the CUDA sequential-sum model, which take the Llama-3 head
  /// at thousands of tokens in seconds where the emulation takes hours.
  std::vector<Backend> baseline_backends{Backend::cpu_emulation};
  /// Where the golden files go (candidates are judged in memory); empty: a fresh temporary
  /// folder, removed at the end.
  std::string workdir;
  /// Hears one line per step of long work (a golden file written, a candidate judged).
  std::function<void(const std::string&)> progress;
};

/// One candidate and what verify said of it.
struct SelftestEntry {
  std::string name;         ///< "naive cpu-emulation bf16/bf16/fp32/bf16", "dW × 0.5", …
  bool fault = false;       ///< a faulty candidate (else a correct one)
  std::string description;  ///< one line: what it is, or what the fault models
  std::string golden;       ///< which golden file: "mean", "ignored+normaliser", "none+upstream"
  std::string policy;       ///< verify's --policy
  bool expect_pass = true;  ///< correct candidates pass, faults fail
  /// "passed" or "failed" (verify's overall verdict), or "error" when the candidate could not be
  /// made or judged (the reason says why; counted against the selftest).
  std::string verdict;
  /// Every output that did not pass, in verify's report order, with the check that failed it
  /// ("dW incorrect (bound+differential)"); the first is the deciding one.
  std::vector<std::string> failing;
  std::string deciding;  ///< failing's first ("" when it passed)
  std::string reason;    ///< verify's overall verdict text, or the error
  double seconds = 0;    ///< making and judging it
  /// A scale fault (MadeCandidate::scale_delta, scaled): its relative size and the outputs it
  /// scales; 0 and empty for another candidate.
  double scale_delta = 0;
  std::vector<std::string> scaled;
  /// A scale fault that passed within what the check resolves on this problem
  /// (selftest::below_resolution): why, with the limits; empty otherwise.
  std::string below_resolution;
  /// As expected: a correct candidate passed, or a fault was caught (failed).
  bool as_expected() const { return verdict == (expect_pass ? "passed" : "failed"); }
};

/// The confusion matrix.
struct SelftestMatrix {
  int correct_passed = 0, correct_failed = 0;  ///< correct candidates ("error" counts as failed)
  int faults_caught = 0, faults_missed = 0;    ///< faulty candidates ("error" counts as missed)
  /// Verdict inconclusive (the golden problem cannot tell the output from a wrong one:
  /// docs/verify.md, "Verdicts"): for a correct candidate no rejection, for a fault not caught.
  int correct_inconclusive = 0, faults_inconclusive = 0;
  /// Scale faults that passed within what the check resolves on the problem (their error no
  /// larger than every limit applied to the outputs they scale): not caught, and not counted as
  /// missed — the problem cannot tell them from the recipe's own error.
  int faults_below_resolution = 0;
};

struct SelftestResult {
  std::vector<std::string> goldens;  ///< one line per golden file: its name, problem and spec
  std::vector<std::string> notes;    ///< backends or candidates left out, and why
  std::vector<SelftestEntry> entries;
  SelftestMatrix matrix() const;
  /// Every fault caught and no correct candidate failed.
  bool ok() const;
  /// Not ok only because of faults below the problem's resolution: no correct candidate failed,
  /// no fault missed or inconclusive, at least one below resolution (exit status 5).
  bool unresolved_only() const;
};

/// Whether a scale fault of relative size |delta| on outputs `scaled` that verify passed (report
/// rep) was within what the differential check resolves on the problem. The check accepts an
/// output whose error is within a limit L of the recipe's own error (normwise, and the scale
/// test's signed projection); a correct candidate may sit anywhere in [−L, L], so a fault that
/// adds δ is caught whatever that candidate's own error only where δ > 2L: at δ ≤ 2L a correct
/// candidate whose error points the other way hides it. Below resolution: for every one of
/// those outputs in the report, judged by the profile comparison (not by rounding_check) and
/// passed, |delta| ≤ 2× its normwise limit and, where the scale test ran, ≤ 2× its scale limit,
/// and the report's measured normwise error and scale of the output within those limits (else
/// the check passed what its own numbers fail: a miss).
/// Then the reason, naming the limits ("… a larger problem resolves it"); else "" (a fault the
/// check should have seen: missed). "" too when no scaled output was compared.
std::string below_resolution(const VerifyReport& rep, double delta,
                             const std::vector<std::string>& scaled);

/// Runs the selftest. Throws InputError for bad options (an unknown dataset, a logits dataset,
/// a shape the dataset refuses) before any candidate is judged; a candidate that cannot be made
/// or judged is an entry with verdict "error", not an exception.
SelftestResult run_selftest(const SelftestOptions& options);

/// The confusion matrix and the table (one line per candidate), as the command prints them.
std::string format_result(const SelftestResult& r);

/// The result as JSON (the goldens, the matrix, one object per entry), written atomically; an
/// existing file only with force.
void write_result_json(const std::string& path, bool force, const SelftestResult& r);

}  // namespace xentlab::selftest

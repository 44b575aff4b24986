#pragma once
// xentlab audit: every strategy × recipe on a set of problems, compared with the certified
// reference; statistics, bounds and dispositions per run; the verdict on the precision rule.
//
// Sub-batch semantics: a problem of N tokens is audited on a seeded sample of `rows` token rows
// (the sub-batch is the problem every strategy and the reference run on, so dW and the reduced loss
// are comparable), with dW/db compared on a seeded sample of `vocab_rows` vocabulary rows. The
// vocabulary and hidden size are never reduced: the reductions over V — where precision is lost —
// are the full ones.
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "datasets/generators.hpp"
#include "datasets/io/h5.hpp"
#include "datasets/problem.hpp"
#include "gpu/strategy.hpp"
#include "harness/json_report.hpp"
#include "judge/bounds.hpp"
#include "judge/policy.hpp"
#include "judge/stats.hpp"
#include "numerics/recipe.hpp"
#include "reference/reference.hpp"

namespace xentlab::audit {

/// One problem of the audit with its loss options and the regime it stands for.
struct AuditProblem {
  std::string name;    ///< e.g. "calibrated"
  std::string regime;  ///< one line: what data regime it stands for
  Problem problem;
  LossSpec spec;
  std::int64_t rows = -1;        ///< sub-batch rows for this problem; −1 = AuditConfig::rows
  std::int64_t vocab_rows = -1;  ///< vocabulary rows compared for dW/db; −1 = AuditConfig's
  /// The input dtypes it is audited in; empty = every input dtype of the recipes. The runs of
  /// other input dtypes are not supported, with the reason. A real model's head is audited in
  /// the dtype its weights are stored in.
  std::vector<DType> inputs = {};
};

/// The embedded default problem set (about a minute of CPU emulation on 2 cores): the real model
/// stories260K on its own sampled text, and calibrated, confident, offset, masked and
/// all-options (softcap, label smoothing, z-loss, ignored rows) problems at V = 128256.
/// `tokens` rows are generated per synthetic problem; `only` (names, empty = all) generates just
/// those (a name not in the set is skipped: the caller reports it). progress_for, when given,
/// makes the progress callback of each linear problem's generation from its name. Throws what the
/// generators throw.
/// With real_shapes (an audit on a GPU), the set also holds the Llama-3-8B head at a training
/// shape: "llama3-8b", V = 128256, D = 4096, N = kRealShapeTokens, calibrated targets, audited on
/// every token row with full dW and db (too large for the CPU emulation, so never in a CPU set).
/// before_generating, when given, hears each problem's shape before it is generated (and may
/// throw to refuse it: the audit checks the reference's memory there, so a problem over the
/// budget is refused before minutes of generation). targets, when given, draws the real-shape
/// head's calibrated targets (the GPU: TargetEngine); the small problems keep the CPU's.
inline constexpr std::int64_t kRealShapeTokens = 8192;
struct ProblemShape {
  std::string name;
  std::int64_t N = 0, V = 0, D = 0;         ///< D = 0: given logits
  std::int64_t rows = -1, vocab_rows = -1;  ///< as AuditProblem
};
std::vector<AuditProblem> default_problem_set(
    std::uint64_t seed, std::int64_t tokens = 16, std::int64_t hidden = 64,
    const std::vector<std::string>& only = {},
    const std::function<GenerationProgress(const std::string&)>& progress_for = {},
    bool real_shapes = false,
    const std::function<void(const ProblemShape&)>& before_generating = {},
    const std::shared_ptr<const TargetEngine>& targets = {});

struct AuditConfig {
  std::vector<std::string> strategies;  ///< names; empty = every registered strategy
  std::vector<Recipe> recipes;          ///< empty = default_recipe_grid()
  Backend backend = Backend::cpu_emulation;
  std::int64_t rows = 8;          ///< token rows of the sub-batch (0 = all)
  std::int64_t vocab_rows = 256;  ///< vocabulary rows compared for dW/db (0 = all)
  std::uint64_t seed = 1;
  std::string policy = "default";  ///< judge/policy.hpp policy_by_name
  std::string device;              ///< device description recorded with each run
  /// GPU backend: also hold each passed run to the baseline-relative check against the CPU
  /// emulation of the same strategy and recipe (error ≤ factor × emulation error + floor).
  bool baseline = true;
  /// The largest problem the baseline emulates, in multiply-adds of its logits (S·V·D; S·V for
  /// given logits). A run on a larger problem is judged by its bound alone, and says so
  /// (RunRecord::baseline_note): the emulation rounds every product and partial sum in software —
  /// 9–14 s a run (forward and backward) for 2.1·10⁹ multiply-adds of logits on the 2-core
  /// machine (calibrated, N = 256, D = 64) — so the Llama-3-8B head at N = 8192
  /// (4.3·10¹² of them) would take hours a run. The nightly's 128K sub-batch (8 rows: 4.2·10⁹)
  /// stays under the limit.
  double baseline_max_macs = 0x1p32;
  /// SM count of the GPU (0 = none): the CPU emulation of fused models that device's launch.
  int device_sms = 0;
  /// Token rows per chunk of chunked and checkpointed, and per token group of fused's backward
  /// (RunRequest::chunk_tokens; naive does not chunk tokens and ignores it); 0 = their default.
  /// Must be ≥ 0. The bounds hold for any chunk width (bounds_for_reference takes the worst case,
  /// one chunk per token row).
  std::int64_t chunk_tokens = 0;
  /// Vocabulary-parallel ranks P of the strategies that shard the vocabulary
  /// (StrategyTraits::shards_vocabulary: vocab_parallel; RunRequest::ranks); the others ignore
  /// it. Must be ≥ 1 and, when such a strategy is chosen, ≤ every problem's V.
  std::int64_t ranks = 1;
  /// The local part of those strategies (RunRequest::local_strategy: the strategy each rank runs
  /// over its shard; "" = kDefaultLocalStrategy); each must compose it on its backend
  /// (Strategy::can_run_local), else run_audit refuses before any work.
  std::string local_strategy;
  /// Vocabulary splits P of the strategies that split the vocabulary on one device
  /// (StrategyTraits::splits_vocabulary: vocab_chunked; RunRequest::vocab_splits); 0 = the fewest
  /// whose logits slab of the sub-batch fits the default budget (one split at the audit's
  /// sub-batches). Must be ≥ 0 and, when such a strategy is chosen, ≤ every problem's V.
  std::int64_t vocab_splits = 0;
  /// Reduction none: the upstream gradient of every run and of the reference, "ones" (empty) or
  /// "random" (random_upstream over the sub-batch's rows, seed `seed` + 2). "random" with a
  /// problem whose reduction is not none is refused.
  std::string upstream = "ones";
  /// The certified reference's tier and memory budget (bytes, 0 = available memory).
  ReferenceTier reference_tier = ReferenceTier::automatic;
  std::int64_t reference_memory = 0;
  /// Progress: (runs done, runs total, what is running now).
  std::function<void(std::int64_t, std::int64_t, const std::string&)> progress;
};

/// Statistics of one output of one run.
struct OutputRecord {
  std::string name;  ///< loss, lse, reduced, dz, dH, dW, db
  ErrorStats stats;
};

struct RunRecord {
  std::string problem, regime, strategy, backend, device;
  Recipe recipe;
  std::string spec;               ///< LossSpec::describe() of the problem's loss options
  DType input = DType::bf16;      ///< input dtype of the problem's version run (recipe.input)
  std::int64_t chunk_tokens = 0;  ///< as requested (AuditConfig::chunk_tokens; 0 = default)
  /// A strategy that shards the vocabulary: its ranks P (AuditConfig::ranks) and the first
  /// vocabulary row of each rank's shard (vocab_shards); 0 and empty for the other strategies.
  std::int64_t ranks = 0;
  std::vector<std::int64_t> shard_begins;
  std::string local_strategy;  ///< and its local part (kDefaultLocalStrategy when none named)
  /// A strategy that splits the vocabulary: the splits P of the run (its declaration's
  /// vocab_ranks); 0 for the other strategies and for runs that did not run.
  std::int64_t vocab_splits = 0;
  std::string upstream = "ones";  ///< reduction none: "ones" or "random" (AuditConfig)
  DeclaredArithmetic arith;
  Verdict verdict;
  std::vector<OutputRecord> outputs;
  double seconds = 0.0;
  std::int64_t peak_extra_bytes = 0;
  double c_vocab = 0.0;
  bool bound_meaningful = true;
  std::string bound_note;
  /// Why the baseline-relative check did not run on a passed GPU run (empty where it ran or does
  /// not apply): the problem is past AuditConfig::baseline_max_macs.
  std::string baseline_note;
  // Per token (S): for the plots (error against covariates).
  std::vector<double> loss_abs_err;
  /// Error of a named output: normwise relative error, or +inf when the output is non-finite
  /// where the reference is finite; NaN when the output is absent.
  double normwise(const std::string& output) const;
};

/// Per-token covariates of a problem's reference (one set per input dtype), for the plots.
struct ProblemRecord {
  std::string name, regime;
  DType input = DType::bf16;  ///< the input dtype of this version of the problem
  std::string spec, describe;
  std::string targets_drawn_by;          ///< Problem::targets_drawn_by (empty: not calibrated)
  std::vector<std::int64_t> token_rows;  ///< rows of the original problem in the sub-batch
  /// vocabulary rows whose dW/db were compared, sorted (empty: no dW/db, a logits problem)
  std::vector<std::int64_t> vocab_rows;
  std::vector<double> loss, lse, p_target, max_logit, entropy;
};

/// One row of the verdict on "logits may be bf16 while accumulation must be fp32".
struct VerdictRow {
  std::string regime;            ///< problem name
  std::string output;            ///< loss, dH, dW
  std::string input;             ///< input dtype of the recipes compared
  double err_fp32_logits = NAN;  ///< normwise error, X/fp32/fp32/X
  double err_bf16_logits = NAN;  ///< X/bf16/fp32/X
  double err_reduced_accum_best =
      NAN;  ///< best (smallest) normwise error of a bf16/fp16-accum recipe
  std::string reduced_accum_best_recipe;
  double floor = NAN;              ///< u of the output's storage dtype: one rounding of the output
  bool logits_bf16_ok = false;     ///< bf16 logits within max(2× fp32-logits error, floor), passed
  bool accum_fp32_needed = false;  ///< every reduced-accum recipe incorrect or > 2× its fp32 twin
  bool accum_tested = false;       ///< at least one reduced-accum recipe and its twin ran
  std::string logits_why, accum_why;
  /// One accumulation dtype (bf16 or fp16) answered on its own: its best recipe (smallest error)
  /// against that recipe's fp32-accumulation twin.
  struct Accum {
    bool tested = false;    ///< a recipe of this accumulation dtype and its twin ran
    bool harmless = false;  ///< some recipe of it within max(2× its twin's error, floor), passed
    /// The best recipe's error and its twin's: a harmless one where there is one (the one with the
    /// smallest err / twin err among them), else the one with the smallest err / twin err.
    double err = NAN, twin_err = NAN;
    std::string recipe;
    /// The recipe of this accumulation dtype that costs most (largest err / twin err).
    double worst_err = NAN, worst_twin_err = NAN;
    std::string worst_recipe;
  };
  Accum accum_bf16, accum_fp16;
};

struct AuditResult {
  std::vector<ProblemRecord> problems;
  std::vector<RunRecord> runs;
  std::vector<VerdictRow> verdict;
  std::int64_t incorrect = 0, failed = 0, not_supported = 0, passed = 0;
  std::int64_t measured = 0;  ///< consistent runs whose recipe has no finite bound on the problem
};

/// Runs the audit over the problems: the strategies named by AuditConfig::strategies (any row of
/// the registry), or without names those of the default set (StrategyTraits::in_default_set).
/// Throws InputError for unknown strategy names or an empty set, a negative chunk_tokens, ranks
/// < 1 or (with a strategy that shards the vocabulary) > a problem's V or a local part it does not
/// compose, an upstream other than ones or random, or upstream random beside a problem whose
/// reduction is not none, or two problems of one name (check_problem_names).
AuditResult run_audit(const std::vector<AuditProblem>& problems, const AuditConfig& config);

/// Throws InputError naming the name when two problems share one (a results file records a
/// problem, and keys its runs, by name). run_audit calls it first.
void check_problem_names(const std::vector<AuditProblem>& problems);

/// Throws InputError when no run of the result was audited (every one not supported): nothing
/// to write or judge. The command and the Python package call it before writing results.
void require_some_run(const AuditResult& result);

/// The verdict rows from the runs (docs/audit.md, "The verdict", gives the criteria).
std::vector<VerdictRow> compute_verdict(const std::vector<RunRecord>& runs);

/// The rows of a problem its runs are compared on, as the audit chooses them from the seed: the
/// sub-batch's token rows (every row when AuditProblem::rows / AuditConfig::rows is 0 or ≥ N) and,
/// for a linear problem, the sampled vocabulary rows of dW and db (empty: every row).
struct AuditedRows {
  std::vector<std::int64_t> token_rows, vocab_rows;
};
AuditedRows audited_rows(const AuditProblem& problem, const AuditConfig& config);

/// --append, before the work: throws InputError when the existing results file records one of the
/// problems (by name and input dtype) as another problem: another spec, other audited token or
/// vocabulary rows, or calibrated targets drawn by another engine, or when the file holds runs of
/// a strategy that splits the vocabulary this audit runs, of one of the problems and a recipe of
/// this audit, in another number of splits than this audit's will take; throws FormatError naming
/// the dataset when the file's data do not match their sha256 digests (datasets/io/h5.hpp).
/// write_results checks the same again with the problems' shapes; this check spares an audit that
/// would end on it.
void check_append_problems(const std::string& path, const std::vector<AuditProblem>& problems,
                           const AuditConfig& config);

/// Writes the results file (atomic: temporary + rename; existing file kept unless force; with
/// append, the runs are added to an existing results file, after checking every dataset of it
/// against its sha256 digest: FormatError naming the first that differs). Schema:
/// docs/formats.md, "results".
void write_results(const std::string& path, const AuditResult& result, const AuditConfig& config,
                   bool force, bool append);

/// Comparison of two results files, run by run (matched on problem, input dtype, strategy,
/// backend, recipe). A regression: a run that passed (or was measured) in the baseline is now
/// neither (incorrect, failed, not supported) or missing; an output whose largest error was within
/// its bound (max_ratio ≤ 1) is now beyond it; or, in a measured run (no bound), an output whose
/// normwise error grew beyond 2× the baseline's. Error growth that stays within the bound is noted,
/// not counted: the bound is the line.
struct RegressReport {
  std::vector<std::string> lines;  ///< one per regression or note
  std::int64_t baseline_runs = 0, current_runs = 0, regressions = 0, grown = 0;
};
/// Throws FormatError for a file that is not an xentlab results file.
RegressReport regress(const std::string& baseline_path, const std::string& current_path);

/// Fidelity of the CPU emulation to a device backend (docs/audit.md): a CPU-emulation audit and a
/// device audit of the same problems and options, matched run by run on (problem, input dtype,
/// strategy, recipe). A matched pair disagrees when exactly one of the two runs passed (a run
/// not supported on either side is counted apart), or when, both passed, an output's ratio
/// device normwise error / emulation normwise error lies outside [1/factor, factor] while either
/// error exceeds the floor 8·u(output dtype): below it two correct implementations may differ
/// (CUDA's and glibc's expf/logf, 2 + 1 + 1 ULP). 0/0 counts as 1, x/0 as +inf.
struct FidelityRow {
  std::string strategy, output;
  std::int64_t n = 0;                         ///< outputs compared
  double median = 0.0, min = 0.0, max = 0.0;  ///< of the ratios
};
struct FidelityReport {
  std::string model_backend, device_backend;
  std::int64_t matched = 0;        ///< run pairs that both passed (their outputs compared)
  std::int64_t outputs = 0;        ///< outputs compared
  std::int64_t not_supported = 0;  ///< pairs with a run not supported on one side
  std::int64_t device_only = 0, model_only = 0;  ///< runs without a partner
  std::vector<FidelityRow> rows;                 ///< per (strategy, output), in name order
  std::vector<std::string> disagreements;        ///< one line per disagreeing run or output
};
/// Throws FormatError for a file that is not an xentlab results file or holds an unusable run
/// (an unknown output dtype; a passed run's error not a finite number ≥ 0), naming the file and
/// run; InputError when a file has no runs or mixes backends, when the first file is not the CPU
/// emulation's or the second is, when a matched pair differs in spec, seed or audited rows or
/// in an output's dtype, when no run passed on both sides (nothing compared), or when factor is
/// not a finite number ≥ 1.
FidelityReport compare_backends(const std::string& model_path, const std::string& device_path,
                                double factor = 2.0);

/// Opens an existing results file for reading after checking that it is one (format
/// "xentlab-results", the format version this xentlab writes). Throws FormatError naming the file.
h5::File open_results_file(const std::string& path);

/// Terminal table of the runs (one line each) and the verdict section.
std::string format_summary(const AuditResult& result, bool markdown);

/// The files an audit wrote, named in its JSON report.
struct AuditFiles {
  std::string results, markdown;
};
/// The JSON report of `xentlab audit --json` (docs/json.md, "audit"): the head of
/// json_report::report_head, the files written, the configuration, the policy
/// (judge/policy.hpp policy_by_name(config.policy); throws its InputError for an unknown name),
/// the baseline-relative check, the counts, the problems, every run (its disposition as the judge
/// spells it, the reason, per-output statistics) and the precision-rule verdict. The per-token
/// covariates of the plots are in the results file only. Write it with
/// json_report::write_json_output.
json_report::Json audit_json(const AuditResult& result, const AuditConfig& config,
                             const json_report::Invocation& inv, const AuditFiles& files);

}  // namespace xentlab::audit

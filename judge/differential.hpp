#pragma once
// verify's differential check (docs/verify.md, "The differential check", derives each constant):
// each output's error profile against the emulated baseline of the policy's recipe — the CPU
// emulation (gpu/emulation) of every strategy implementing it, run on the golden problem — and
// `--explain`, which ranks the recipes by how close their profiles are to the candidate's. The
// bound (judge/tolerance.hpp) finds bugs, the differential check a silently lowered precision.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "datasets/formats/golden.hpp"
#include "gpu/strategy.hpp"
#include "judge/policy.hpp"
#include "numerics/dtype.hpp"
#include "numerics/recipe.hpp"

namespace xentlab {

/// Which checks verify applies (`--check`): the a-priori bound, the differential check against
/// the emulated baseline, or both (the default).
enum class VerifyCheck : std::uint8_t { bound, differential, both };
/// "bound", "differential" or "both"; throws InputError naming the value and the choices.
VerifyCheck parse_verify_check(std::string_view text);
std::string_view to_string(VerifyCheck c);

// The differential check (docs/verify.md, "The differential check", derives each constant).
// An output passes when, for its normwise relative error and for the kDifferentialQuantile-quantile
// of its element-wise relative errors,
//     candidate error ≤ kDifferentialK · baseline error + floor,
// the baseline being a correct implementation of the policy's recipe (the CPU emulation) on the
// same golden problem, and the floor one ULP of the format the recipe delivers the output in
// (normwise: one ULP of the largest reference element, 2u·max|ref|/‖ref‖₂; element-wise: 2u). An
// output stored coarser than that (an fp32 lse stored in bf16) is judged as the lowered precision
// it is, where the bound check allows one rounding into the storage dtype.
/// (k, the quantile and the minimum element count: judge/policy.hpp, with the policies.)
/// Work of the emulated baseline, in multiply-adds of the logits GEMM summed over the strategies
/// it runs (S·V·D each, or S·V for a logits problem): above it the baseline runs on a seeded
/// sample of token rows (at least kBaselineMinRows). Measured on the 2-core machine: 2^31 in 2.1 s
/// (16 rows of V = 32000, D = 1024, four strategies), so 2^33 is about 8 s.
inline constexpr std::int64_t kBaselineWork = std::int64_t{1} << 33;
/// Fewest token rows of a sampled baseline.
inline constexpr std::int64_t kBaselineMinRows = 4;
/// Buckets of the ULP histogram of ErrorProfile: distance 0, 1, [2,4), [4,8), …, ≥ 2^(n−2).
inline constexpr int kUlpBuckets = 24;

/// The error profile of one output against the certified reference: what the differential check
/// and `--explain` compare. Computed over the pairs where both values are finite.
struct ErrorProfile {
  std::int64_t n = 0;   ///< elements compared
  double normwise = 0;  ///< ‖e‖₂/‖ref‖₂ (0 when both are 0)
  double rel_q = 0;     ///< kDifferentialQuantile-quantile of |e_i|/max(|ref_i|, rel_floor)
  double rel_p50 = 0, rel_p99 = 0;
  double rel_floor = 0;  ///< 2^-20·max|ref| (as judge/stats.hpp)
  double bias = 0;       ///< mean signed error / rms(ref): a systematic shift, dimensionless
  double max_ref = 0, norm_ref = 0;            ///< max|ref_i| and ‖ref‖₂
  DType ulp_dtype = DType::fp32;               ///< the format the ULP distances are counted in
  std::array<double, kUlpBuckets> ulp_hist{};  ///< fractions of elements per ULP bucket
};
/// The profile of out (n values) against ref, ULP distances counted in ulp_dtype (out rounded
/// into it first). Throws InputError for n < 0.
ErrorProfile error_profile(const double* out, const double* ref, std::int64_t n, DType ulp_dtype);

/// How the emulated baseline is sampled.
struct BaselineOptions {
  /// Token rows of the golden file the baseline runs on: 0 = all when their work is at most
  /// kBaselineWork, else a seeded sample of that work (at least kBaselineMinRows rows); k > 0: at
  /// most k rows.
  std::int64_t rows = 0;
  std::uint64_t seed = 1;  ///< of the samples
  /// The backends whose strategies make the baseline: the CPU emulation (IEEE arithmetic in the
  /// recipe's formats), and where a GPU is present the CUDA kernels, whose tensor-core GEMMs
  /// accumulate fp32 differently (docs/verify.md, "Tensor-core accumulation"). Per output the
  /// largest error over all of them. A backend this build lacks contributes no strategy.
  std::vector<Backend> backends{Backend::cpu_emulation};
  /// Strategies left out of the baseline, by name (on every backend): a baseline of the *other*
  /// correct implementations, against which one of them is judged (leave-one-out).
  std::vector<std::string> exclude;
};

/// The backends named by a baseline-backend value (`option` names it in messages, e.g.
/// "--baseline-backend" or "baseline_backend"): "cpu" the CPU emulation (the default of verify:
/// the same verdict on every machine), "cuda" the lab's CUDA kernels, "all" both, "auto" both
/// where this build has the CUDA backend and a GPU is present, else the emulation. With
/// `ask_device` false (no baseline will run) the value is checked and no device is asked for: the
/// emulation is returned. Throws InputError for another value, and for "cuda"/"all" without a
/// usable GPU (naming why).
std::vector<Backend> baseline_backends(const std::string& value, bool ask_device,
                                       const std::string& option);

/// The emulated baseline of one recipe on a golden problem: the CPU emulation of every strategy of
/// the registry that implements the recipe (their reduction orders and chunked accumulations are
/// all correct implementations of it), run on the golden file's problem, and per output the
/// error profile of the least accurate of them (largest normwise error; the largest quantiles)
/// against the golden file's certified reference. When the golden token rows are sampled, loss,
/// lse, dH and dz are compared on the sampled rows; dW, db and the reduced loss, sums over all
/// tokens, are not (a sum over the sample is another quantity: docs/verify.md).
struct Baseline {
  Recipe recipe;
  /// "naive, chunked, checkpointed, fused (cpu-emulation; per output the largest error)"
  std::string strategy;
  std::string status;                    ///< "ok", or why it could not run
  std::vector<std::int64_t> token_rows;  ///< problem rows it ran on
  std::vector<std::int64_t> vocab_rows;  ///< vocabulary rows of dW/db compared (none if sampled)
  bool sampled = false;                  ///< token rows are a sample of the golden file's
  std::int64_t golden_rows = 0;          ///< S of the golden file
  std::uint64_t seed = 1;
  double seconds = 0;
  /// Profiles, by output name (loss, lse, reduced_loss, dH, dW, db, dz: those the golden holds).
  std::vector<std::pair<std::string, ErrorProfile>> profiles;
  /// The dtype the recipe delivers each output in (loss, lse: the accumulator's; gradients: grad).
  DType loss_dtype = DType::fp32, grad_dtype = DType::fp32;
  const ErrorProfile* profile(const std::string& name) const;
  DType output_dtype(const std::string& name) const;
  /// "recipe bf16/bf16/fp32/bf16, naive, … (cpu-emulation; …), 64 of 256 token rows (seed 1), …"
  /// (not the time: a report is the same on a re-run)
  std::string describe() const;
};
/// Runs the baseline of recipe on the golden problem. A recipe the emulation does not implement,
/// or a run it refuses or cannot hold in memory, gives status ≠ "ok" saying why (no exception);
/// throws InputError for bad options (rows < 0).
Baseline emulate_baseline(const Golden& golden, const Recipe& recipe,
                          const BaselineOptions& options = {});

/// The most emulate_baseline holds for this golden file and recipe beside the golden file itself,
/// in bytes: the references it compares with and, of the strategies it runs in turn, the largest
/// workspace (Strategy::workspace_size of its request) with that run's outputs as doubles and the
/// copies its profiles make. 0 when no strategy implements the recipe. Throws as
/// emulate_baseline for bad options.
double baseline_memory_bytes(const Golden& golden, const Recipe& recipe,
                             const BaselineOptions& options = {});

/// The differential check of one output.
struct DifferentialResult {
  std::string status = "not run";  ///< "passed", "incorrect", "not judged" (why in message)
  std::string message;
  ErrorProfile candidate, baseline;  ///< on the same elements (rows of the baseline)
  double floor_normwise = 0, floor_rel = 0;
  double limit_normwise = 0, limit_rel_q = 0;  ///< k·baseline + floor
  bool quantile_compared = false;              ///< n ≥ kDifferentialMinElements
};

/// One recipe of `--explain`: the candidate's profile against that recipe's emulated baseline.
struct RecipeMatch {
  Recipe recipe;
  /// every output judged passes the recipe's differential check and is not
  /// kExplainAccuracyFactor× more accurate than the recipe's baseline
  bool consistent = false;
  /// Σ over outputs: |log2 ratio| of the normwise errors and of the quantiles (each with its
  /// floor), the total variation of the ULP histograms, and |difference| of bias/normwise
  double distance = 0;
  std::string status;  ///< "ok", or why the emulation did not run
  std::vector<std::pair<std::string, ErrorProfile>> profiles;  ///< the recipe's baseline
};

/// The recipes --explain emulates for a golden problem (see VerifyOptions::explain).
std::vector<Recipe> explain_recipes(const Golden& golden);

/// The differential check of output `name`: the candidate's values `out` and the golden
/// reference `ref` (the golden's compared shape) against the baseline b.
DifferentialResult differential_check(const Golden& g, const Baseline& b, const std::string& name,
                                      const std::vector<double>& out,
                                      const std::vector<double>& ref);

/// A candidate's output as read: its name and values in the compared shape.
struct ComparedOutput {
  std::string name;
  std::vector<double> values;
};

/// --explain: the candidate's profile against every recipe's baseline, most similar first.
std::vector<RecipeMatch> match_recipes(const Golden& g, const std::vector<ComparedOutput>& compared,
                                       const std::vector<Baseline>& baselines);

}  // namespace xentlab

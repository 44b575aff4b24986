#pragma once
// verify's differential check (docs/verify.md, "The criterion", derives each constant):
// each output's error profile against the emulated baseline of the policy's recipe — the CPU
// emulation (gpu/emulation) of every strategy implementing it, run on the golden problem — and
// `--explain`, which ranks the recipes by how close their profiles are to the candidate's. The
// bound (judge/tolerance.hpp) finds bugs, the differential check a silently lowered precision.
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "datasets/formats/golden.hpp"
#include "gpu/strategy.hpp"
#include "judge/policy.hpp"
#include "judge/profile.hpp"
#include "numerics/dtype.hpp"
#include "numerics/recipe.hpp"

namespace xentlab {

/// Which checks verify applies (`--check`): the a-priori bound, the differential check against
/// the emulated baseline, or both (the default).
enum class VerifyCheck : std::uint8_t { bound, differential, both };
/// "bound", "differential" or "both"; throws InputError naming the value and the choices.
VerifyCheck parse_verify_check(std::string_view text);
std::string_view to_string(VerifyCheck c);

// The differential check (docs/verify.md, "The criterion", derives each constant): an output's
// error profile against the least accurate of the correct implementations of the policy's recipe
// (the CPU emulation of the lab's strategies and of the baseline models) on the same golden
// problem, by compare_with_baseline; a loss-like output stored coarser than the recipe delivers
// it, by rounding_check.
/// (k, the quantile and the minimum element count: judge/policy.hpp, with the policies.)
/// Fewest token rows of a sampled baseline (--baseline-rows).
inline constexpr std::int64_t kBaselineMinRows = 4;
/// How the emulated baseline is sampled.
struct BaselineOptions {
  /// Token rows of the golden file the baseline runs on: 0 = all (the default: every element of
  /// every output is compared); k > 0: a seeded sample of at most k rows, against which the sums
  /// over tokens (dW, db, reduced_loss) cannot be judged (they are then inconclusive).
  std::int64_t rows = 0;
  std::uint64_t seed = 1;  ///< of the samples
  /// The backends whose strategies make the baseline: the CPU emulation (IEEE arithmetic in the
  /// recipe's formats), and where a GPU is present the CUDA kernels, whose tensor-core GEMMs
  /// accumulate fp32 differently (docs/verify.md, "The tensor-core model"). Per output the
  /// largest error over all of them. A backend this build lacks contributes no strategy.
  std::vector<Backend> backends{Backend::cpu_emulation};
  /// Strategies left out of the baseline, by name (on every backend): a baseline of the *other*
  /// correct implementations, against which one of them is judged (leave-one-out).
  std::vector<std::string> exclude;
  /// Called with a line before each strategy runs ("baseline: naive (cpu-emulation) on 512
  /// token rows"); empty: silent.
  std::function<void(const std::string&)> progress;
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
  /// Per output the most accurate of the implementations (smallest normwise error and
  /// quantiles): what `--explain` holds a candidate's accuracy to (a candidate 4× more accurate
  /// than every correct implementation of the recipe is another recipe).
  std::vector<std::pair<std::string, ErrorProfile>> best;
  /// The dtype the recipe delivers each output in (loss, lse: the accumulator's; gradients: grad).
  DType loss_dtype = DType::fp32, grad_dtype = DType::fp32;
  const ErrorProfile* profile(const std::string& name) const;
  /// The most accurate implementation's profile of `name` (best), else profile(name).
  const ErrorProfile* best_profile(const std::string& name) const;
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
/// workspace (Strategy::workspace_size of its request) with that run's outputs as doubles (twice
/// for a device run whose rows are cut to a sample) and the scratch of its profiles. 0 when no
/// strategy implements the recipe. Throws as emulate_baseline for bad options.
double baseline_memory_bytes(const Golden& golden, const Recipe& recipe,
                             const BaselineOptions& options = {});

/// The differential check of one output.
struct DifferentialResult {
  std::string status = "not run";  ///< "passed", "incorrect", "not judged" (why in message)
  std::string message;
  ErrorProfile candidate, baseline;  ///< on the same elements (rows of the baseline)
  double floor_normwise = 0, floor_rel = 0;
  double limit_normwise = 0, limit_rel_q = 0;  ///< k·baseline + floor
  /// |candidate.scale| ≤ k·(|baseline.scale| + kScaleSigmas·baseline.scale_spread) + u_out
  double limit_scale = 0;
  bool quantile_compared = false;  ///< n ≥ kDifferentialMinElements
  bool scale_compared = false;     ///< n ≥ kScaleMinElements (the scale test ran)
  /// Judged by rounding_check (an output stored coarser than the recipe delivers it), not by the
  /// profile comparison: the normwise, quantile and scale limits are not used.
  bool rounding = false;
};

/// Whether verify judges output `name`, stored in `stored`, by rounding_check: a loss-like output
/// (loss, lse, reduced_loss) stored in a format coarser than the recipe delivers it in (a bf16
/// loss of a recipe whose loss is fp32, as PyTorch's bf16 F.cross_entropy returns it).
bool judged_by_rounding(const std::string& name, DType stored, DType recipe_dtype);

/// The check of a loss-like output stored coarser than the recipe delivers it: every finite value
/// must be one correct rounding into `stored` of a value within `tol_i` of the reference, i.e.
/// rnd(ref_i − tol_i) ≤ out_i ≤ rnd(ref_i + tol_i) (rounding to nearest is monotone). tol is how
/// far the recipe's own value may be (verify: k times the baseline's largest relative error plus
/// the criterion's floor, and the reference's own bound); the candidate's profile is kept for the
/// report. A neighbour of the correct rounding fails (15.875 for 15.92388 in bf16, where 15.9375
/// passes). Throws InputError when the sizes differ.
DifferentialResult rounding_check(const std::string& name, const std::vector<double>& out,
                                  const std::vector<double>& ref, const std::vector<double>& tol,
                                  DType stored, const std::string& recipe);

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

/// The baseline-relative criterion — the one of verify's differential check and of the audit's
/// check of a device run against its emulation (docs/verify.md, "The criterion"): the
/// candidate's profile c passes against the baseline's when
///     normwise ≤ k·baseline's + floor_n,  q90 ≤ k·baseline's + floor (n ≥ 64 both),
///     |scale| ≤ k·(|baseline's| + kScaleSigmas·baseline's spread) + u (n ≥ kScaleMinElements),
/// k = kDifferentialK, u the unit roundoff of `out` (the format the recipe delivers the output
/// in), floor = 2u + kElementaryUlps ULP of fp32 per element and floor_n = the larger of
/// floor·max|ref|/‖ref‖₂ (one element) and δ_rms = kElementaryUlpsRms ULP of fp32 on every
/// element, plus 2u·√min(1, δ_rms/2u) (the roundings it flips) for an output coarser than fp32.
DifferentialResult compare_with_baseline(const ErrorProfile& c, const ErrorProfile& base, DType out,
                                         const std::string& recipe);
/// Merges p into a baseline profile (the least accurate of several correct implementations): the
/// profile of the larger normwise error, with the largest quantiles, the larger |scale| and
/// spread. first: into is empty (it becomes p).
void merge_into_baseline(ErrorProfile& into, const ErrorProfile& p, bool first);

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

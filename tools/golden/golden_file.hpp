#pragma once
// Golden files (`xentlab golden`): a problem, bit-exact in its dtype, with the loss spec, the
// certified reference's outputs in float64 (all rows, or seeded samples of token and vocabulary
// rows with their indices), the reference's per-element error bounds, per-token covariates and
// provenance. Schema: docs/formats.md (format "xentlab-golden", format_version 2; version 1 files,
// which have no upstream gradient and no normaliser, are still read).
//
// Lives in tools/ (not datasets/) because writing one runs the reference, which depends on
// datasets/.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "datasets/catalog.hpp"
#include "datasets/problem.hpp"
#include "numerics/loss_spec.hpp"
#include "reference/reference.hpp"

namespace xentlab {

inline constexpr const char* kGoldenFormat = "xentlab-golden";
inline constexpr std::int64_t kGoldenVersion = 2;  ///< written; versions 1 and 2 are read
inline constexpr const char* kCandidateFormat = "xentlab-candidate";
/// Written by the project's examples; versions 1 and 2 are read. Version 2 adds the optional root
/// attributes `reduction` and `normalizer`: the loss semantics the candidate implemented, checked
/// against the golden file's.
inline constexpr std::int64_t kCandidateVersion = 2;

struct GoldenOptions {
  std::int64_t rows = 0;        ///< token rows to sample (0 or ≥ N: all). Sampling drops dW/db.
  std::int64_t vocab_rows = 0;  ///< vocabulary rows of dW/db to sample (0 or ≥ V: all)
  std::uint64_t sample_seed = 1;
  bool gradients = true;  ///< dH/dW/db (linear) or dz (logits problems)
  /// Largest S·V for which dz is formed (the dz of logits problems, and Σ_i|dz_ij| = db_cond).
  std::int64_t max_dz_elements = std::int64_t{1} << 26;
  int threads = 0;
  ReferenceTier tier = ReferenceTier::automatic;  ///< the reference's tier
  std::int64_t memory_budget = 0;                 ///< bytes for the reference (0 = available)
  /// Called after each block of reference rows: (rows done, rows total).
  std::function<void(std::int64_t, std::int64_t)> progress;
  /// Reduction none: the upstream gradient dL/dloss_i per token (N, finite), stored in the file
  /// (/spec/upstream) when not all ones; empty = ones. Refused with another reduction.
  std::vector<double> upstream;
  std::string command;  ///< the command line, for provenance
  bool force = false;   ///< overwrite an existing file
};

/// What was written, for the CLI's summary.
struct GoldenSummary {
  std::int64_t S = 0, J = 0;
  double reduced_loss = 0, reduced_loss_bound = 0;
  bool partial = false;
  std::vector<std::string> outputs;  ///< the reference outputs stored ("loss", "lse", "dH", …)
  double seconds = 0;
};

/// Runs the reference on ds.problem with spec and writes the golden file atomically (temporary
/// name + rename; an existing file only with options.force). Throws InputError/FormatError.
GoldenSummary write_golden(const std::string& path, const DatasetInstance& ds, const LossSpec& spec,
                           const GoldenOptions& options);

/// A golden file read back (the parts verify needs; the problem is read too).
struct Golden {
  std::string path;
  Problem problem;
  LossSpec spec;  ///< with the normaliser (spec.normalizer; 0 in version 1 files)
  /// Reduction none: dL/dloss_i per token (N) from /spec/upstream; empty = ones (the file has
  /// none, as every version 1 file).
  std::vector<double> upstream;
  std::int64_t N = 0, V = 0, D = 0, S = 0, J = 0, n_valid = 0;
  bool partial = false;
  std::vector<std::int64_t> token_rows, vocab_rows;
  std::optional<double> reduced_loss, reduced_loss_bound;
  // Reference outputs, bounds and conditions, present when stored (empty otherwise).
  std::vector<double> loss, loss_bound, lse, lse_bound, dH, dH_bound, dH_cond, dW, dW_bound,
      dW_cond, db, db_bound, db_cond, dz, dz_bound;
  // Per-token covariates (S).
  std::vector<double> max_logit, p_target, entropy, sum_p_abs_z, grad_scale, target_logit,
      max_abs_logit, mean_abs_logit, gemm_abs;
  /// "generator=… dataset=… seed=… created=… xentlab=… format_version=…", then a line "loss: …"
  /// with the loss spec (and whether an upstream gradient is stored).
  std::string provenance;
};

/// Reads and checks a golden file: HDF5, format attribute "xentlab-golden", format_version 1 or 2,
/// every required group and dataset present with consistent shapes. Throws FormatError naming the
/// file, the object and what is wrong (a foreign file, another version, a missing dataset, …).
Golden read_golden(const std::string& path);

}  // namespace xentlab

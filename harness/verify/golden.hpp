#pragma once
// `xentlab golden`: runs the certified reference on a problem and writes a golden file: the
// problem, bit-exact in its dtype, with the loss spec, the reference's outputs in float64 (all
// rows, or seeded samples of token and vocabulary rows with their indices), the reference's
// per-element error bounds, per-token covariates and provenance. The format and its reader:
// datasets/formats/golden.hpp (docs/formats.md).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "datasets/catalog.hpp"
#include "datasets/formats/golden.hpp"
#include "datasets/io/h5.hpp"
#include "numerics/loss_spec.hpp"
#include "numerics/memory.hpp"
#include "reference/reference.hpp"

namespace xentlab {

struct GoldenOptions {
  std::int64_t rows = 0;        ///< token rows to sample (0 or ≥ N: all). Sampling drops dW/db.
  std::int64_t vocab_rows = 0;  ///< vocabulary rows of dW/db to sample (0 or ≥ V: all)
  std::uint64_t sample_seed = 1;
  bool gradients = true;  ///< dH/dW/db (linear) or dz (logits problems)
  /// Largest S·V for which dz is formed (the dz of logits problems, and Σ_i|dz_ij| = db_cond).
  std::int64_t max_dz_elements = std::int64_t{1} << 26;
  int threads = 0;
  ReferenceTier tier = ReferenceTier::automatic;  ///< the reference's tier
  /// Bytes the golden file's work may hold: the problem, the covariates, the reference and the
  /// file's buffers (golden_memory); 0 = the memory available now. Refused before any work when
  /// the estimate exceeds it; the reference takes what the rest leaves of it.
  std::int64_t memory_budget = 0;
  /// Called after each block of reference rows: (rows done, rows total).
  std::function<void(std::int64_t, std::int64_t)> progress;
  /// Reduction none: the upstream gradient dL/dloss_i per token (N, finite), stored in the file
  /// (/spec/upstream) when not all ones; empty = ones. Refused with another reduction.
  std::vector<double> upstream;
  std::string command;  ///< the command line, for provenance
  bool force = false;   ///< overwrite an existing file
  /// How the datasets are stored: uncompressed (the default), or chunked through shuffle and
  /// gzip (xentlab golden --compress; read by any HDF5 reader, h5py included, without a plugin).
  h5::Compression compression;
};

/// What was written, for the CLI's summary.
struct GoldenSummary {
  std::int64_t S = 0, J = 0;
  double reduced_loss = 0, reduced_loss_bound = 0;
  bool partial = false;
  std::vector<std::string> outputs;  ///< the reference outputs stored ("loss", "lse", "dH", …)
  double seconds = 0;
  /// The datasets' bytes: raw (elements × element size) and as stored (fewer when compressed).
  h5::StorageTotals storage;
  MemoryEstimate memory;  ///< golden_memory of the problem (generation not counted)
  MemoryBudget budget;    ///< what it was checked against
};

/// The sizes of a golden file's problem, known before it is generated or loaded.
struct GoldenShape {
  std::int64_t N = 0, V = 0, D = 0;  ///< D = 0: given logits
  DType dtype = DType::fp32;         ///< the stored inputs' dtype
  bool bias = false;
  /// What making the problem holds beyond the problem itself (a catalog head's calibrated
  /// targets: head_generation_bytes); 0 for a problem already in memory.
  double generation_bytes = 0;
  static GoldenShape of(const Problem& p);
};

/// The most the golden file's work holds at once, in bytes, as named terms: the problem, plus the
/// largest of its stages (the generation, the exact covariates, the reference with its outputs
/// and bounds), plus the upstream gradient, the row samples and the file's buffers. The reference
/// is counted at what it takes within the budget (`budget`: reference_peak_bytes, less where the
/// rest leaves less, down to reference_memory_bytes).
MemoryEstimate golden_memory(const GoldenShape& shape, const GoldenOptions& options,
                             std::int64_t budget);

/// Throws InputError (exit 2) naming the estimate, its terms and the budget when golden_memory
/// exceeds options.memory_budget (0: the memory available now): before any work. `what`: "the
/// golden file of llama3-8b" and the like.
void check_golden_memory(const GoldenShape& shape, const GoldenOptions& options,
                         const std::string& what);

/// Runs the reference on ds.problem with spec and writes the golden file atomically (temporary
/// name + rename; an existing file only with options.force). Throws InputError/FormatError, and
/// InputError before any work when check_golden_memory refuses it.
GoldenSummary write_golden(const std::string& path, const DatasetInstance& ds, const LossSpec& spec,
                           const GoldenOptions& options);
}  // namespace xentlab

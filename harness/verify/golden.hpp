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
  std::int64_t memory_budget = 0;                 ///< bytes for the reference (0 = available)
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
};

/// Runs the reference on ds.problem with spec and writes the golden file atomically (temporary
/// name + rename; an existing file only with options.force). Throws InputError/FormatError.
GoldenSummary write_golden(const std::string& path, const DatasetInstance& ds, const LossSpec& spec,
                           const GoldenOptions& options);
}  // namespace xentlab

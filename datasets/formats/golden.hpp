#pragma once
// The golden and candidate file formats (docs/formats.md): the Golden record read back from a
// golden file (format "xentlab-golden", format_version 2; version 1 files, which have no upstream
// gradient and no normaliser, are still read), the reference output of each name with its
// compared shape, and the output names a candidate may hold. Writing a golden file runs the
// reference: harness/verify/golden.hpp.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "datasets/io/h5.hpp"
#include "datasets/problem.hpp"
#include "numerics/loss_spec.hpp"

namespace xentlab {

inline constexpr const char* kGoldenFormat = "xentlab-golden";
inline constexpr std::int64_t kGoldenVersion = 2;  ///< written; versions 1 and 2 are read
inline constexpr const char* kCandidateFormat = "xentlab-candidate";
/// Written by the project's examples; versions 1 and 2 are read. Version 2 adds the optional root
/// attributes `reduction` and `normalizer`: the loss semantics the candidate implemented, checked
/// against the golden file's.
inline constexpr std::int64_t kCandidateVersion = 2;

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
  /// The file declares sha256 digests (root attribute checksums) and every dataset matched its
  /// own; false for a file written before xentlab stored digests: nothing could be checked
  /// (golden_checksum_warning).
  bool checksums = false;
  /// The file carries a manifest (root attribute manifest: every object and attribute as written)
  /// and matched it; false for a file written before xentlab stored one.
  bool manifest = false;
};

/// "" for a golden file with checksums and a manifest; else the warning the commands print for
/// it: "PATH: no checksums: written by an older xentlab …" or "PATH: no manifest: …".
std::string golden_checksum_warning(const Golden& g);

/// Reads and checks a golden file: HDF5, format attribute "xentlab-golden", format_version 1 or 2,
/// every required group and dataset present with consistent shapes, and, where the file declares
/// checksums (every file xentlab writes now), every dataset's data matching its sha256 digest
/// (datasets/io/h5.hpp), and, where it carries a manifest, no object or attribute deleted, added
/// or edited since it was written (h5::File::verify_manifest). Any layout and filter h5py or
/// h5repack writes is read (contiguous, chunked, gzip, shuffle, fletcher32). Throws FormatError
/// naming the file, the object and what is wrong (a foreign file, another version, a missing
/// dataset, data that do not match their digest, a filter this HDF5 library lacks, …).
Golden read_golden(const std::string& path);

/// The outputs a candidate may hold (any subset), in report order.
const std::vector<std::string>& candidate_output_names();

/// The output names of a --require list, checked: each one of candidate_output_names(), none
/// twice. Throws InputError naming the first that is not.
std::vector<std::string> parse_required_outputs(const std::vector<std::string>& names);

// The golden's reference, bound and compared shape of one output; the full-problem shape a
// candidate may use instead, with the rows to select from it.
struct RefOutput {
  const std::vector<double>* ref = nullptr;
  const std::vector<double>* ref_bound = nullptr;
  std::vector<std::int64_t> shape, full_shape;
  const std::vector<std::int64_t>* rows = nullptr;  // rows of full_shape to select (null: none)
  std::vector<double> scalar_ref, scalar_bound;     // reduced_loss
};

/// Fills r with the golden reference of output `name` (one of candidate_output_names(); r.ref
/// stays null for another name). r.ref may point at r's own scalar vectors: r must not be moved
/// afterwards.
void ref_output(const Golden& g, const std::string& name, RefOutput& r);

/// The rows `rows` of a row-major (rows, cols) array.
std::vector<double> select_rows(const std::vector<double>& full, std::int64_t cols,
                                const std::vector<std::int64_t>& rows);

/// The loss spec of a golden file's /spec group (and the upstream gradient, when not empty), as
/// read_golden reads it back.
void write_spec(h5::Group& g, const LossSpec& s, const std::vector<double>& upstream);

}  // namespace xentlab

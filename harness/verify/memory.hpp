#pragma once
// The memory estimates of verify and candidate (and so of Python's check()): what reading a golden
// file, a candidate's outputs, the tolerances and the emulated baseline hold, checked against a
// budget before any work (numerics/memory.hpp; golden's own: harness/verify/golden.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/formats/golden.hpp"
#include "gpu/strategy.hpp"
#include "harness/verify/verify.hpp"
#include "numerics/memory.hpp"

namespace xentlab {

/// The bytes read_golden holds for the golden file at `path`, from its metadata alone (before it
/// is read): the problem's arrays in their stored dtype, the targets and row indices as int64, the
/// reference's outputs, bounds and covariates as doubles. Throws FormatError as h5 for a file
/// that is not HDF5.
double golden_file_bytes(const std::string& path);
/// The bytes a Golden holds (its vectors and its problem's tensors).
double golden_bytes(const Golden& golden);

/// Throws InputError (exit 2) when reading the golden file at `path` alone would exceed the
/// budget (0: the memory available now), before it is read: "<command> of <path> would hold …".
void check_golden_read_memory(const std::string& path, std::int64_t budget,
                              const std::string& command);

/// The most verify_candidate holds: the golden file as read and the policy's a-priori bounds
/// (unless options.bounds_given), plus the largest of its stages in turn: the emulated baseline of
/// the policy's recipe (baseline_memory_bytes), one output of the candidate at a time (as stored,
/// as doubles, the rows compared, the tolerance and the differential check's copies), and
/// --explain's baselines beside the outputs kept for them.
MemoryEstimate verify_memory(const Golden& golden, const std::string& candidate_path,
                             const VerifyPolicy& policy, const VerifyOptions& options);
/// One output of a candidate as stored: its name, elements and bytes per element.
struct StoredOutput {
  std::string name;
  std::int64_t numel = 0;
  double element_bytes = 0;
};
/// verify_memory of a candidate whose outputs are `stored` (one held in memory: verify_outputs).
MemoryEstimate verify_memory(const Golden& golden, const std::vector<StoredOutput>& stored,
                             const VerifyPolicy& policy, const VerifyOptions& options);

/// The most `xentlab candidate` holds: the golden file as read, the strategy's workspace
/// (Strategy::workspace_size of the request), its outputs as doubles and as the tensors written.
MemoryEstimate candidate_memory(const Golden& golden, const Strategy& strategy,
                                const RunRequest& request);

}  // namespace xentlab

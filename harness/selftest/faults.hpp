#pragma once
// The selftest's candidates (harness/selftest/selftest.hpp): the correct ones that are not the
// registry's strategies, and the catalogue of faults — each a short function that builds a faulty
// candidate from a correct one, with a one-line description of the bug it models.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "datasets/formats/golden.hpp"
#include "datasets/tensor.hpp"
#include "gpu/strategy.hpp"

namespace xentlab::selftest {

/// A candidate's outputs, by name, as write_candidate takes them.
using Outputs = std::vector<std::pair<std::string, Tensor>>;

/// Which golden file a candidate needs (its loss spec).
enum class GoldenKind {
  mean,               ///< the main golden: the dataset's spec (reduction mean)
  ignore_normalizer,  ///< ignored rows and a normaliser (reduction mean)
  none_upstream,      ///< reduction none with a seeded upstream gradient
};
const char* to_string(GoldenKind k);

/// A candidate made by the selftest (not by a strategy): its name, what it is, the policy it is
/// judged under, whether it is a fault, and how it is made from the golden file.
struct MadeCandidate {
  std::string name, description, policy;
  bool fault = false;
  std::vector<GoldenKind> goldens;  ///< the golden files it is judged on
  std::function<Outputs(const Golden&)> make;
  double max_work = 0;  ///< the largest N·V·D it is made for (0: any); left out, noted, above
  /// Above max_work it is made on the GPU instead (the CUDA sequential-sum model), where one is
  /// present; left out, noted, without one.
  bool gpu_above_max_work = false;
  /// A fault that scales outputs `scaled` of a correct candidate by (1 + scale_delta) or
  /// (1 − scale_delta): |scale_delta| the relative size of the error it adds (0: another kind of
  /// fault). The selftest tells such a fault that passes because it is within what the check
  /// resolves on the problem from one the check should have seen (below_resolution).
  double scale_delta = 0;
  std::vector<std::string> scaled = {};
};

/// The largest N·V·D of a strategy candidate on the CPU emulation: 32× the default problem's 2^23,
/// about ten seconds per candidate on two cores. Above it strategy candidates run on CUDA only.
inline constexpr double kEmulationWork = 0x1p28;

/// Where the selftest runs a strategy to make a candidate of golden g: the CPU emulation up to
/// kEmulationWork, above it the CUDA kernels where this build and machine have them (the emulation
/// would take hours at the Llama-3 head), else the emulation.
Backend candidate_backend(const Golden& g);

/// The correct candidates: the reference rounded to fp32 (policy fp32), an fp32 implementation
/// with sequential sums in two orders of the loss (policy fp32; above kSequentialWork the lse − z_t
/// order is the CUDA sequential-sum model's, on a GPU), and the fp32 candidate with loss, lse and
/// reduced_loss rounded to bf16 (policy bf16), on every golden file.
std::vector<MadeCandidate> correct_candidates();
/// The faults, each from the fp32 candidate (policy fp32), on the golden whose spec it needs; and
/// three of them from a correct candidate of the bf16 policy (a strategy in its recipe).
std::vector<MadeCandidate> fault_catalogue();

/// The golden file's reference outputs rounded to fp32 (a candidate as accurate as fp32 storage
/// allows; db only where the problem has a bias). Throws InputError for a golden file of sampled
/// rows (dW, db and rows are missing).
Outputs fp32_reference(const Golden& g);

}  // namespace xentlab::selftest

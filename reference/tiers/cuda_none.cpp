// The cuda tier where this build has no CUDA toolkit: never available.
#include "numerics/error.hpp"
#include "numerics/no_device.hpp"
#include "reference/row.hpp"

namespace xentlab {

bool cuda_reference_available(std::string* why_not) {
  if (why_not) *why_not = no_cuda_backend_reason();
  return false;
}

std::shared_ptr<const TargetEngine> make_cuda_target_engine() {
  throw InputError(
      "calibrated targets on the GPU are not available: this build has no CUDA toolkit");
}

namespace detail {

void cuda_tier(const Problem&, const LossSpec&, const ReferenceOptions&, ReferenceResult&,
               std::int64_t, bool) {
  throw InputError("the cuda reference tier is not available: this build has no CUDA toolkit");
}

double cuda_dgemm_rate() {
  throw InputError("the cuda reference tier is not available: this build has no CUDA toolkit");
}

}  // namespace detail
}  // namespace xentlab

// The selftest model's GPU products in a build without CUDA (harness/selftest/model_gemms.hpp).
#include <stdexcept>

#include "harness/selftest/model_gemms.hpp"

namespace xentlab::selftest {

std::unique_ptr<Gemms<double>> cuda_gemms(const double*, std::int64_t, std::int64_t) {
  throw std::runtime_error(
      "the selftest's model on a GPU: this build has no CUDA (configure with -DXENTLAB_CUDA=ON "
      "where a CUDA toolkit is installed)");
}

}  // namespace xentlab::selftest

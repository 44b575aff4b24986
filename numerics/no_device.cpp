// The user's words for a missing CUDA device (no_device.hpp).
#include "numerics/no_device.hpp"

#include <dlfcn.h>

namespace xentlab {

std::string no_cuda_device_reason(bool insufficient_driver, bool no_device,
                                  const std::string& runtime_message) {
  if (no_device) return "no CUDA device: the NVIDIA driver reports none";
  if (insufficient_driver) {
    // The runtime loads the driver's library libcuda.so.1; where none can be loaded the machine
    // has no NVIDIA driver (no GPU), and "insufficient" would send the user after a driver update.
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr)
      return "no CUDA device: no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded)";
    dlclose(driver);
    return "no CUDA device: the NVIDIA driver is older than this build's CUDA runtime (" +
           runtime_message + ")";
  }
  return "no CUDA device: " + runtime_message;
}

std::string no_cuda_backend_reason() {
  return "no CUDA device: this build of xentlab has no CUDA backend (configure with "
         "-DXENTLAB_CUDA=ON where a CUDA toolkit is installed)";
}

}  // namespace xentlab

#pragma once
// "No CUDA device" in the user's words, and its exception (exit status 4 of every command).
#include <stdexcept>
#include <string>

namespace xentlab {

/// No usable CUDA device where the command needs one (`--backend cuda`, `--reference cuda`,
/// `--baseline-backend cuda`, bench), or a build without the CUDA backend: exit status 4. The
/// message says "no CUDA device" and why (no_cuda_device_reason).
class NoDeviceError : public std::runtime_error {
 public:
  explicit NoDeviceError(const std::string& what) : std::runtime_error(what) {}
};

/// Why the CUDA runtime found no device, in the user's words, starting "no CUDA device": on a
/// machine without an NVIDIA driver the runtime answers "CUDA driver version is insufficient for
/// CUDA runtime version" (`insufficient_driver`), which means an old driver only where one can be
/// loaded (libcuda.so.1); else the runtime's own message. `no_device`: the runtime counted none.
std::string no_cuda_device_reason(bool insufficient_driver, bool no_device,
                                  const std::string& runtime_message);

/// The same words for a build without the CUDA backend ("no CUDA device: this build …").
std::string no_cuda_backend_reason();

}  // namespace xentlab

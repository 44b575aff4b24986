#include <cuda_runtime.h>

#include "gpu/cuda/common/device.hpp"
#include "numerics/error.hpp"
#include "numerics/no_device.hpp"

namespace xentlab::gpu {

DeviceInfo query_device() {
  DeviceInfo info;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    info.reason = no_cuda_device_reason(e == cudaErrorInsufficientDriver,
                                        e == cudaErrorNoDevice || (e == cudaSuccess && count == 0),
                                        cudaGetErrorString(e));
    (void)cudaGetLastError();
    return info;
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    info.reason = "cudaGetDeviceProperties failed";
    return info;
  }
  info.available = true;
  info.name = p.name;
  info.sm_major = p.major;
  info.sm_minor = p.minor;
  info.multiprocessors = p.multiProcessorCount;
  info.memory_gib = static_cast<double>(p.totalGlobalMem) / (1ull << 30);
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  return info;
}

}  // namespace xentlab::gpu

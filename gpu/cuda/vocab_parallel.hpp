#pragma once
// The CUDA vocab_parallel strategy (gpu/cuda/vocab_parallel.cu), built when NCCL is found
// (XENTLAB_HAVE_NCCL): host C++ declarations, no CUDA or NCCL header needed to use them.
#include <memory>

#include "gpu/strategy.hpp"

namespace xentlab::gpu {

/// The strategy object (name "vocab_parallel", backend cuda). RunRequest::ranks = P (≤ 0: 1)
/// ranks on devices 0 … P−1.
std::unique_ptr<Strategy> make_cuda_vocab_parallel();

/// ok when P ranks (≤ 0: 1) have a device each, else not_supported naming P and the number of
/// CUDA devices (or why there is none). Never throws.
Status vocab_parallel_ranks_supported(int ranks);

/// NCCL's version as ncclGetVersion reports it (e.g. 22809 for 2.28.9), of the library linked.
/// Throws DeviceError when NCCL fails.
int nccl_version();

}  // namespace xentlab::gpu

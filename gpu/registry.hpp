#pragma once
// The one registry of strategies: an explicit function lists every strategy of every backend that
// this build has (CUDA ones only when gpu/cuda was built). No static self-registration.
#include <memory>
#include <string>
#include <vector>

#include "gpu/strategy.hpp"

namespace xentlab {

/// Every strategy of the backend, in the order naive, chunked, checkpointed, fused.
std::vector<std::unique_ptr<Strategy>> make_strategies(Backend backend);
/// The names of make_strategies(backend), in its order (empty when the backend is not built).
std::vector<std::string> strategy_names(Backend backend);
/// True when this build contains the CUDA backend (a device may still be absent at run time).
bool cuda_backend_built();

}  // namespace xentlab

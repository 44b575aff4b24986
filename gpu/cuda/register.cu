// Registration of the CUDA strategies: one explicit list, in the order naive, chunked,
// checkpointed, fused.
#include <memory>
#include <vector>

#include "gpu/strategy.hpp"

namespace xentlab {
namespace gpu {
std::unique_ptr<Strategy> make_cuda_naive();         // naive.cu
std::unique_ptr<Strategy> make_cuda_chunked();       // chunked.cu
std::unique_ptr<Strategy> make_cuda_checkpointed();  // checkpointed.cu
std::unique_ptr<Strategy> make_cuda_fused();         // fused/strategy.cu
}  // namespace gpu

void register_cuda_strategies(std::vector<std::unique_ptr<Strategy>>& out) {
  out.push_back(gpu::make_cuda_naive());
  out.push_back(gpu::make_cuda_chunked());
  out.push_back(gpu::make_cuda_checkpointed());
  out.push_back(gpu::make_cuda_fused());
}

}  // namespace xentlab

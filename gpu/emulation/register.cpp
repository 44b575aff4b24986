// Registration of the CPU-emulation strategies, in the order naive, chunked, checkpointed, fused.
#include <memory>
#include <vector>

#include "gpu/strategy.hpp"

namespace xentlab {
namespace emulation {
std::unique_ptr<Strategy> make_naive();
std::unique_ptr<Strategy> make_chunked();
std::unique_ptr<Strategy> make_checkpointed();
std::unique_ptr<Strategy> make_fused();
}  // namespace emulation

void register_emulated_strategies(std::vector<std::unique_ptr<Strategy>>& out) {
  out.push_back(emulation::make_naive());
  out.push_back(emulation::make_chunked());
  out.push_back(emulation::make_checkpointed());
  out.push_back(emulation::make_fused());
}

}  // namespace xentlab

// Registration of the CPU-emulation strategies (filled in as they land).
#include <memory>
#include <vector>

#include "gpu/strategy.hpp"

namespace xentlab {

void register_emulated_strategies(std::vector<std::unique_ptr<Strategy>>& out) { (void)out; }

}  // namespace xentlab

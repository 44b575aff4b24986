#include "gpu/strategy.hpp"

namespace xentlab {

std::string_view to_string(Backend b) {
  switch (b) {
    case Backend::cpu_emulation: return "cpu-emulation";
    case Backend::cuda: return "cuda";
  }
  return "?";
}

std::string_view to_string(ReductionOrder o) {
  switch (o) {
    case ReductionOrder::sequential: return "sequential";
    case ReductionOrder::pairwise: return "pairwise";
    case ReductionOrder::blocked: return "blocked";
    case ReductionOrder::online_tiles: return "online-tiles";
  }
  return "?";
}

}  // namespace xentlab

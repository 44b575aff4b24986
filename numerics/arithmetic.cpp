#include "numerics/arithmetic.hpp"

namespace xentlab {

std::string_view to_string(ReductionOrder o) {
  switch (o) {
    case ReductionOrder::sequential:
      return "sequential";
    case ReductionOrder::pairwise:
      return "pairwise";
    case ReductionOrder::blocked:
      return "blocked";
    case ReductionOrder::online_tiles:
      return "online-tiles";
    case ReductionOrder::online_tree:
      return "online-tree";
  }
  return "?";
}

}  // namespace xentlab

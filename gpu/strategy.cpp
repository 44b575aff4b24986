#include "gpu/strategy.hpp"

namespace xentlab {

std::string_view to_string(Backend b) {
  switch (b) {
    case Backend::cpu_emulation:
      return "cpu-emulation";
    case Backend::cuda:
      return "cuda";
  }
  return "?";
}

}  // namespace xentlab

#include "gpu/registry.hpp"

namespace xentlab {

// Each backend provides one registration function (defined in its own files).
void register_emulated_strategies(std::vector<std::unique_ptr<Strategy>>& out);
#ifdef XENTLAB_HAVE_CUDA
void register_cuda_strategies(std::vector<std::unique_ptr<Strategy>>& out);
#endif

std::vector<std::unique_ptr<Strategy>> make_strategies(Backend backend) {
  std::vector<std::unique_ptr<Strategy>> out;
  if (backend == Backend::cpu_emulation) register_emulated_strategies(out);
#ifdef XENTLAB_HAVE_CUDA
  if (backend == Backend::cuda) register_cuda_strategies(out);
#endif
  return out;
}

std::vector<std::string> strategy_names(Backend backend) {
  std::vector<std::string> names;
  for (const auto& s : make_strategies(backend)) names.push_back(s->name());
  return names;
}

bool cuda_backend_built() {
#ifdef XENTLAB_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace xentlab

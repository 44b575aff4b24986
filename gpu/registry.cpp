#include "gpu/registry.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "numerics/error.hpp"
#include "numerics/no_device.hpp"
#ifdef XENTLAB_HAVE_CUDA
#include "gpu/cuda/common/device.hpp"
#endif

namespace xentlab {

// Each strategy's factory lives in the strategy's own file of each backend.
namespace emulation {
std::unique_ptr<Strategy> make_naive();              // gpu/emulation/naive.cpp
std::unique_ptr<Strategy> make_chunked();            // gpu/emulation/chunked.cpp
std::unique_ptr<Strategy> make_checkpointed();       // gpu/emulation/checkpointed.cpp
std::unique_ptr<Strategy> make_fused();              // gpu/emulation/fused.cpp
std::unique_ptr<Strategy> make_vocab_parallel();     // gpu/emulation/vocab_parallel.cpp
std::unique_ptr<Strategy> make_vocab_chunked();      // gpu/emulation/vocab_chunked.cpp
std::unique_ptr<Strategy> make_sequential_model();   // gpu/emulation/naive.cpp
std::unique_ptr<Strategy> make_tensor_core_model();  // gpu/emulation/naive.cpp
}  // namespace emulation
#ifdef XENTLAB_HAVE_CUDA
namespace gpu {
std::unique_ptr<Strategy> make_cuda_naive();             // gpu/cuda/naive.cu
std::unique_ptr<Strategy> make_cuda_chunked();           // gpu/cuda/chunked.cu
std::unique_ptr<Strategy> make_cuda_checkpointed();      // gpu/cuda/checkpointed.cu
std::unique_ptr<Strategy> make_cuda_fused();             // gpu/cuda/fused/strategy.cu
std::unique_ptr<Strategy> make_cuda_vocab_chunked();     // gpu/cuda/vocab_chunked.cu
std::unique_ptr<Strategy> make_cuda_sequential_model();  // gpu/cuda/naive.cu
}  // namespace gpu
#define XL_CUDA_FACTORY(f) &gpu::f
#else
#define XL_CUDA_FACTORY(f) nullptr
#endif
// The strategies on NCCL: present when the CUDA backend found NCCL (XENTLAB_HAVE_NCCL).
#if defined(XENTLAB_HAVE_CUDA) && defined(XENTLAB_HAVE_NCCL)
namespace gpu {
std::unique_ptr<Strategy> make_cuda_vocab_parallel();  // gpu/cuda/vocab_parallel.cu
}  // namespace gpu
#define XL_NCCL_FACTORY(f) &gpu::f
#else
#define XL_NCCL_FACTORY(f) nullptr
#endif

const std::vector<StrategyEntry>& strategy_table() {
  // Traits: {deterministic, chunks_tokens, every_recipe, vocab_order, in_default_set,
  // shards_vocabulary, splits_vocabulary, gemms_apart} (gpu/registry.hpp).
  // clang-format off
  static const std::vector<StrategyEntry> table = {
      {"naive",          {true,  false, true,  ReductionOrder::blocked,     true,  false, false, true},
       &emulation::make_naive,          XL_CUDA_FACTORY(make_cuda_naive)},
      {"chunked",        {true,  true,  true,  ReductionOrder::blocked,     true,  false, false, true},
       &emulation::make_chunked,        XL_CUDA_FACTORY(make_cuda_chunked)},
      {"checkpointed",   {true,  true,  true,  ReductionOrder::blocked,     true,  false, false, true},
       &emulation::make_checkpointed,   XL_CUDA_FACTORY(make_cuda_checkpointed)},
      {"fused",          {true,  true,  false, ReductionOrder::online_tree, true,  false},
       &emulation::make_fused,          XL_CUDA_FACTORY(make_cuda_fused)},
      // Runs only when named (xentlab audit --strategies vocab_parallel --ranks P).
      {"vocab_parallel", {true,  true,  true,  ReductionOrder::blocked,     false, true},
       &emulation::make_vocab_parallel, XL_NCCL_FACTORY(make_cuda_vocab_parallel)},
      // The vocabulary in splits on one device (RunRequest::vocab_splits, or from the memory
      // budget). Runs only when named: at the default budget the audit's problems take one
      // split, whose outputs are naive's bit for bit.
      {"vocab_chunked",  {true,  false, true,  ReductionOrder::blocked,     false, false, true,  true},
       &emulation::make_vocab_chunked,  XL_CUDA_FACTORY(make_cuda_vocab_chunked)},
  };
  // clang-format on
  return table;
}
#undef XL_CUDA_FACTORY
#undef XL_NCCL_FACTORY

const StrategyEntry* find_strategy_entry(std::string_view name) {
  for (const StrategyEntry& e : strategy_table())
    if (name == e.name) return &e;
  return nullptr;
}

const StrategyTraits& strategy_traits(std::string_view name) {
  if (const StrategyEntry* e = find_strategy_entry(name)) return e->traits;
  std::string names;
  for (const StrategyEntry& e : strategy_table())
    names += (names.empty() ? "" : ", ") + std::string(e.name);
  throw InputError(fmt::format("unknown strategy '{}' (registered: {})", name, names));
}

namespace {
std::unique_ptr<Strategy> make_entry(const StrategyEntry& e, Backend backend) {
  const auto factory = backend == Backend::cuda ? e.cuda : e.emulated;
  if (factory == nullptr) return nullptr;
  std::unique_ptr<Strategy> s = factory();
  if (s == nullptr || s->name() != e.name || s->backend() != backend)
    throw std::logic_error(fmt::format(
        "registry: the {} factory of '{}' made {} of backend {}", to_string(backend), e.name,
        s ? "'" + s->name() + "'" : std::string("nothing"), s ? to_string(s->backend()) : "-"));
  return s;
}

bool in_set(const StrategyEntry& e, StrategySet set) {
  return set == StrategySet::all || e.traits.in_default_set;
}
}  // namespace

std::vector<std::unique_ptr<Strategy>> make_strategies(Backend backend, StrategySet set) {
  std::vector<std::unique_ptr<Strategy>> out;
  for (const StrategyEntry& e : strategy_table()) {
    if (!in_set(e, set)) continue;
    if (auto s = make_entry(e, backend)) out.push_back(std::move(s));
  }
  return out;
}

std::unique_ptr<Strategy> make_strategy(Backend backend, std::string_view name) {
  const StrategyEntry* e = find_strategy_entry(name);
  return e == nullptr ? nullptr : make_entry(*e, backend);
}

std::vector<std::unique_ptr<Strategy>> make_baseline_models(const Recipe& r, Backend backend) {
  // Both model orders of fp32 sums: under 16-bit accumulation the order is part of what the
  // recipe declares (a sequential fp16 sum over a long row is a recipe of its own, whose error the
  // a-priori bound and the lab's strategies' orders describe).
  std::vector<std::unique_ptr<Strategy>> m;
  if (r.accum != DType::fp32) return m;
  if (backend == Backend::cuda) {
#ifdef XENTLAB_HAVE_CUDA
    m.push_back(gpu::make_cuda_sequential_model());
#endif
    return m;
  }
  m.push_back(emulation::make_sequential_model());
  if (r.input == DType::bf16 || r.input == DType::fp16)
    m.push_back(emulation::make_tensor_core_model());
  return m;
}

std::vector<std::string> strategy_names(Backend backend, StrategySet set) {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategy_table())
    if (in_set(e, set) && (backend == Backend::cuda ? e.cuda : e.emulated) != nullptr)
      names.emplace_back(e.name);
  return names;
}

std::vector<std::string> vocabulary_sharding_strategies() {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategy_table())
    if (e.traits.shards_vocabulary) names.emplace_back(e.name);
  return names;
}

std::vector<std::string> vocabulary_splitting_strategies() {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategy_table())
    if (e.traits.splits_vocabulary) names.emplace_back(e.name);
  return names;
}

std::vector<std::string> gemms_apart_strategies() {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategy_table())
    if (e.traits.gemms_apart) names.emplace_back(e.name);
  return names;
}

std::vector<std::string> without_emulated_twin(const std::vector<std::string>& names,
                                               const std::vector<StrategyEntry>& table) {
  std::vector<std::string> out;
  for (const std::string& n : names) {
    bool twin = false;
    for (const StrategyEntry& e : table) twin = twin || (n == e.name && e.emulated != nullptr);
    if (!twin) out.push_back(n);
  }
  return out;
}

bool cuda_backend_built() {
#ifdef XENTLAB_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_device_available(std::string* why) {
#ifdef XENTLAB_HAVE_CUDA
  const gpu::DeviceInfo d = gpu::query_device();
  if (!d.available && why != nullptr) *why = d.reason;
  return d.available;
#else
  if (why != nullptr) *why = no_cuda_backend_reason();
  return false;
#endif
}

}  // namespace xentlab

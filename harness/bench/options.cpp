// `xentlab bench` options: presets, validation of what the command line gives (see options.hpp).
#include "harness/bench/options.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "datasets/io/atomic_file.hpp"
#include "gpu/plans/vocab_shards.hpp"
#include "harness/text.hpp"
#include "numerics/error.hpp"

namespace xentlab::bench {
namespace {

/// a·b with overflow → InputError naming what.
std::int64_t checked_product(std::int64_t a, std::int64_t b, const char* what) {
  if (a > 0 && b > kMaxMatrixElements / a)
    throw InputError(
        fmt::format("{} would hold {}·{} > 2^48 elements: past what the bench can "
                    "index (and far past any device)",
                    what, a, b));
  return a * b;
}

/// Whether `named` holds any of `wanted`.
bool names_any(const std::vector<std::string>& named, const std::vector<std::string>& wanted) {
  return std::any_of(named.begin(), named.end(), [&](const std::string& s) {
    return std::find(wanted.begin(), wanted.end(), s) != wanted.end();
  });
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = [] {
    Preset l;
    l.name = "llama3-8b-128k";
    l.description =
        "Llama-3-8B's LM head (V = 128256, D = 4096) at a 128K-token context (N = 131072), bf16 "
        "inputs, every registered strategy; chunked and checkpointed with 8K-token chunks, fused "
        "with 8K-token groups";
    l.N = 131072;
    l.V = 128256;
    l.D = 4096;
    // bf16 gradients (the training default) and fp32 gradients (dW is then its own accumulator);
    // fp32 logits would make the backward GEMMs fp32 (no TF32): minutes per run at this size.
    l.recipes = {"bf16/bf16/fp32/bf16", "bf16/bf16/fp32/fp32"};
    l.chunk_tokens = 8192;
    l.memory_budget = 0;
    l.quoted_source =
        "the table practitioners quote, usually for a 16B model at 128K context; how it "
        "was measured is not published";
    l.quoted = {{"naive", "110 GB+", "1.0×"},
                {"chunked", "14 GB", "0.85×"},
                {"checkpointed", "4 GB", "0.70×"},
                {"fused", "6 GB", "1.05×"}};
    return std::vector<Preset>{l};
  }();
  return p;
}

const Preset& find_preset(std::string_view name) {
  std::vector<std::string> names;
  for (const Preset& p : presets()) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  throw InputError(fmt::format("unknown preset '{}' (known: {})", name, fmt::join(names, ", ")));
}

std::int64_t BenchOptions::input_bytes(DType input) const {
  return (N * D + V * D) * size_of(input) + N * 8;
}

namespace {

/// --ranks P: the checks of xentlab audit's --ranks (1 ≤ P ≤ V, a strategy that shards the
/// vocabulary named, else the option would be ignored).
std::int64_t checked_ranks(std::int64_t P, const std::vector<std::string>& strategies,
                           const std::vector<std::string>& sharding, std::int64_t V) {
  try {
    check_vocab_ranks(P);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--ranks: {}", e.what()));
  }
  bool named = false;
  for (const std::string& s : strategies)
    named = named || std::find(sharding.begin(), sharding.end(), s) != sharding.end();
  if (!named)
    throw InputError(fmt::format(
        "--ranks {} applies to the strategies that shard the vocabulary ({}), and --strategies "
        "names none (e.g. --strategies {} --ranks {})",
        P, fmt::join(sharding, ", "), sharding.empty() ? "" : sharding.front(), P));
  try {
    (void)vocab_shards(V, P);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--ranks {}: {} (--vocab {})", P, e.what(), V));
  }
  return P;
}

}  // namespace

BenchOptions resolve_options(const BenchArgs& a, const std::vector<std::string>& known,
                             const std::vector<std::string>& sharding,
                             const std::vector<std::string>& splitting,
                             const std::vector<std::string>& gemms_apart) {
  BenchOptions o;
  const Preset* p = a.preset.empty() ? nullptr : &find_preset(a.preset);
  if (p != nullptr) {
    o.preset = p->name;
    o.N = p->N;
    o.V = p->V;
    o.D = p->D;
    o.chunk_tokens = p->chunk_tokens;
    o.memory_budget = p->memory_budget;
  }
  auto size = [p](const std::optional<std::int64_t>& given, std::int64_t preset_value,
                  const char* flag) {
    if (!given && p == nullptr)
      throw InputError(fmt::format("{} is required (or give --preset)", flag));
    const std::int64_t v = given ? *given : preset_value;
    if (v < 1) throw InputError(fmt::format("{} must be at least 1, got {}", flag, v));
    return v;
  };
  o.N = size(a.tokens, o.N, "--tokens");
  o.V = size(a.vocab, o.V, "--vocab");
  o.D = size(a.hidden, o.D, "--hidden");
  checked_product(o.N, o.D, "H (--tokens × --hidden)");
  checked_product(o.V, o.D, "W (--vocab × --hidden)");
  checked_product(o.N, o.V, "the logits (--tokens × --vocab)");

  std::vector<std::string> recipes = split_commas(a.recipes);
  if (recipes.empty())
    recipes = p != nullptr ? p->recipes : std::vector<std::string>{kDefaultRecipes};
  for (const auto& name : recipes) {
    const Recipe r = parse_recipe(name);
    if (r.input == DType::fp64)
      throw InputError(
          fmt::format("recipe '{}': the bench generates fp32, fp16 or bf16 inputs on "
                      "the device, not fp64",
                      name));
    if (std::find(o.recipes.begin(), o.recipes.end(), r) == o.recipes.end()) o.recipes.push_back(r);
  }
  for (const auto& s : split_commas(a.strategies)) {
    if (std::find(known.begin(), known.end(), s) == known.end())
      throw InputError(fmt::format(
          "unknown strategy '{}' (this build's strategies: {})", s,
          known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", "))));
    if (std::find(o.strategies.begin(), o.strategies.end(), s) == o.strategies.end())
      o.strategies.push_back(s);
  }
  if (!a.memory_budget.empty()) {
    try {
      o.memory_budget = parse_bytes(a.memory_budget);
    } catch (const InputError& e) {
      throw InputError(fmt::format("--memory-budget: {}", e.what()));
    }
  }
  if (a.chunk_tokens) {
    if (*a.chunk_tokens < 0) throw InputError("--chunk-tokens must be 0 (from the budget) or more");
    o.chunk_tokens = *a.chunk_tokens;
  }
  if (a.ranks) o.ranks = checked_ranks(*a.ranks, o.strategies, sharding, o.V);
  if (a.vocab_splits) {
    const std::int64_t P = *a.vocab_splits;
    if (P < 1 || P > o.V)
      throw InputError(fmt::format("--vocab-splits must be 1 to V = {} (--vocab), got {}", o.V, P));
    if (!names_any(o.strategies, splitting))
      throw InputError(fmt::format(
          "--vocab-splits {} applies to the strategies that split the vocabulary ({}), and "
          "--strategies names none (e.g. --strategies {} --vocab-splits {})",
          P, fmt::join(splitting, ", "), splitting.empty() ? "" : splitting.front(), P));
    o.vocab_splits = P;
  }
  if (a.gemms_alone && !o.strategies.empty()) {
    // Without --strategies the default set runs, naive among it; named, one of them must issue its
    // GEMMs apart, else the option would time nothing without a word.
    if (!names_any(o.strategies, gemms_apart))
      throw InputError(fmt::format(
          "--gemms-alone applies to the strategies whose GEMMs run apart from their loss kernels "
          "({}), and --strategies names none ({}: their GEMMs are not timed alone)",
          fmt::join(gemms_apart, ", "), fmt::join(o.strategies, ", ")));
  }
  o.gemms_alone = a.gemms_alone;
  auto count = [](const std::optional<std::int64_t>& v, std::int64_t def, std::int64_t lo,
                  std::int64_t hi, const char* flag) {
    if (!v) return def;
    if (*v < lo || *v > hi)
      throw InputError(fmt::format("{} must be in [{}, {}], got {}", flag, lo, hi, *v));
    return *v;
  };
  o.repeats = static_cast<int>(count(a.repeats, 5, 1, 100000, "--repeats"));
  o.warmup = static_cast<int>(count(a.warmup, 1, 0, 100000, "--warmup"));
  o.sample_rows = std::min(count(a.sample_rows, 8, 0, kMaxMatrixElements, "--sample-rows"), o.N);
  o.vocab_rows = count(a.vocab_rows, 2048, 0, kMaxMatrixElements, "--vocab-rows");
  if (o.vocab_rows == 0 || o.vocab_rows > o.V) o.vocab_rows = o.V;
  o.seed = static_cast<std::uint64_t>(
      count(a.seed, 1, 0, std::numeric_limits<std::int64_t>::max(), "--seed"));
  o.csv = a.csv;
  o.h5 = a.h5;
  o.markdown = a.markdown;
  o.json = a.json;
  // The same file in two spellings ("x" and "./x", "dir/../x", absolute and relative), existing
  // or not, or hard links to one file.
  const std::vector<std::string> outs{o.csv, o.h5, o.markdown, o.json};
  for (std::size_t i = 0; i < outs.size(); ++i)
    for (std::size_t j = i + 1; j < outs.size(); ++j) {
      if (outs[i].empty() || outs[j].empty()) continue;
      if (same_output_file(outs[i], outs[j]))
        throw InputError(
            fmt::format("{} and {} are the same file, named by two of --csv, --h5, "
                        "--markdown and --json",
                        outs[i], outs[j]));
    }
  return o;
}

}  // namespace xentlab::bench

#include "datasets/catalog.hpp"

#include <fmt/format.h>
#include <unistd.h>  // sysconf: the physical memory

#include <filesystem>

#include "datasets/generators.hpp"
#include "datasets/loaders.hpp"
#include "datasets/stories260k.hpp"
#include "numerics/error.hpp"

namespace xentlab {

double ResolvedParams::get(const std::string& key) const {
  const auto it = extra.find(key);
  if (it == extra.end())
    throw InputError(fmt::format("dataset parameter '{}' is not defined", key));
  return it->second;
}

namespace {

ResolvedParams defaults(std::int64_t N, std::int64_t V, std::int64_t D, DType dt, double sigma,
                        std::map<std::string, double> extra = {}, LossSpec spec = {}) {
  ResolvedParams r;
  r.N = N;
  r.V = V;
  r.D = D;
  r.dtype = dt;
  r.sigma = sigma;
  r.extra = std::move(extra);
  r.spec = spec;
  return r;
}

TargetMode mode_of(const ResolvedParams& p) {
  return p.get("calibrated") != 0 ? TargetMode::calibrated : TargetMode::uniform;
}

// An LLM head at its real vocabulary and hidden sizes, calibrated targets.
DatasetEntry llm(const std::string& name, const std::string& model, std::int64_t V, std::int64_t D,
                 double softcap) {
  LossSpec spec;
  spec.softcap = softcap;
  return {name,
          fmt::format("LM head of {} (V={}, D={}{}), Gaussian bf16 H and W with logits ≈ N(0, σ²), "
                      "calibrated targets; any N",
                      model, V, D, softcap > 0 ? fmt::format(", softcap {}", softcap) : ""),
          defaults(16, V, D, DType::bf16, 4.0, {}, spec), false, [name](const ResolvedParams& p) {
            return make_head(p.N, p.V, p.D, p.dtype, p.sigma, p.seed, TargetMode::calibrated,
                             p.spec, name, p.progress, p.targets.get());
          }};
}

std::vector<DatasetEntry> build_catalog() {
  std::vector<DatasetEntry> c;
  c.push_back({"stories260k",
               "The real model: final hidden states of stories260K (llama2.c, trained on "
               "TinyStories) on its own text sampled from BOS with the seed, and its tied "
               "classifier W = the embedding table (fp32, V=512, D=64). The embedded default real "
               "input.",
               defaults(256, 512, 64, DType::fp32, 0, {{"greedy", 0}}), true,
               [](const ResolvedParams& p) {
                 return make_stories260k(p.N, p.seed, p.get("greedy") != 0);
               }});
  c.push_back({"gaussian",
               "Untrained head: Gaussian H, W scaled so logits ≈ N(0, σ²), uniform random targets "
               "(the one-hot dominates dz and hides most gradient errors; calibrated=1 to sample).",
               defaults(64, 32000, 64, DType::bf16, 4.0, {{"calibrated", 0}}), false,
               [](const ResolvedParams& p) {
                 return make_head(p.N, p.V, p.D, p.dtype, p.sigma, p.seed, mode_of(p), p.spec,
                                  "gaussian", p.progress, p.targets.get());
               }});
  c.push_back({"calibrated",
               "Targets drawn from each row's own softmax (the regime of a trained model; most "
               "audits should use it). Gaussian head, logits ≈ N(0, σ²).",
               defaults(64, 32000, 64, DType::bf16, 4.0), false, [](const ResolvedParams& p) {
                 return make_head(p.N, p.V, p.D, p.dtype, p.sigma, p.seed, TargetMode::calibrated,
                                  p.spec, "calibrated", p.progress, p.targets.get());
               }});
  c.push_back({"confident",
               "Confident rows: p_target between p_lo=0.9 and p_hi=0.9999 (log-uniform in 1−p), "
               "made by moving each H row along its target's W row; the true-class gradient "
               "p_t − 1 cancels and logit rounding matters.",
               defaults(64, 32000, 64, DType::bf16, 4.0, {{"p_lo", 0.9}, {"p_hi", 0.9999}}), false,
               [](const ResolvedParams& p) {
                 return make_confident_head(p.N, p.V, p.D, p.dtype, p.sigma, p.seed, p.spec,
                                            p.get("p_lo"), p.get("p_hi"), p.progress);
               }});
  c.push_back(
      {"heavy",
       "Heavy-tailed, large-magnitude given logits (Pareto-tailed scale mixture, tail index "
       "alpha) up to the fp16 limit 65504: storage rounding u·|z| and exp overflow.",
       defaults(32, 32000, 0, DType::fp16, 8.0, {{"alpha", 1.5}, {"calibrated", 1}}), false,
       [](const ResolvedParams& p) {
         return make_heavy_logits(p.N, p.V, p.dtype, p.sigma, p.get("alpha"), p.seed, mode_of(p),
                                  p.spec);
       }});
  c.push_back({"offset",
               "Large common offset: given logits offset + N(0, σ²), calibrated targets: "
               "lse − z_t cancels (docs/cases.md C01).",
               defaults(32, 32000, 0, DType::fp32, 2.0, {{"offset", 1e4}}), false,
               [](const ResolvedParams& p) {
                 return make_offset_logits(p.N, p.V, p.dtype, p.sigma, p.get("offset"), p.seed,
                                           p.spec);
               }});
  c.push_back({"masked",
               "Masked (−inf) vocabulary: a fraction of each row masked (never the target); row 0 "
               "fully masked and ignored, row 1 masked but for its target (docs/cases.md C08).",
               defaults(32, 32000, 0, DType::bf16, 4.0, {{"fraction", 0.5}}), false,
               [](const ResolvedParams& p) {
                 return make_masked_logits(p.N, p.V, p.dtype, p.sigma, p.get("fraction"), p.seed,
                                           p.spec);
               }});
  c.push_back({"ties",
               "Ties: integer logits in {0, …, levels−1}, many equal maxima per row, calibrated "
               "targets (argmax choice, max-subtraction).",
               defaults(32, 32000, 0, DType::bf16, 1.0, {{"levels", 4}}), false,
               [](const ResolvedParams& p) {
                 return make_tied_logits(p.N, p.V, p.dtype, static_cast<int>(p.get("levels")),
                                         p.seed, p.spec);
               }});
  c.push_back(
      {"all-ignored",
       "Every target is ignore_index (docs/cases.md C03): loss 0 per row, mean NaN by default, "
       "every gradient exactly 0.",
       defaults(16, 1000, 32, DType::bf16, 4.0), false, [](const ResolvedParams& p) {
         Problem pb = make_head(p.N, p.V, p.D, p.dtype, p.sigma, p.seed, TargetMode::calibrated,
                                p.spec, "all-ignored", p.progress, p.targets.get());
         ignore_rows(pb, 1.0, p.seed, p.spec.ignore_index);
         return pb;
       }});
  c.push_back({"part-ignored",
               "A seeded fraction of the targets is ignore_index (mean over the valid rows only, "
               "docs/cases.md C04/C11); calibrated otherwise.",
               defaults(64, 32000, 64, DType::bf16, 4.0, {{"fraction", 0.5}}), false,
               [](const ResolvedParams& p) {
                 Problem pb =
                     make_head(p.N, p.V, p.D, p.dtype, p.sigma, p.seed, TargetMode::calibrated,
                               p.spec, "part-ignored", p.progress, p.targets.get());
                 ignore_rows(pb, p.get("fraction"), p.seed, p.spec.ignore_index);
                 return pb;
               }});
  c.push_back({"odd-vocab",
               "Vocabulary and hidden sizes that are no multiple of any block (V=507, D=123; with "
               "audit or golden try --vocab 129920): tail lanes past V must not exist. Calibrated.",
               defaults(64, 507, 123, DType::bf16, 4.0), false, [](const ResolvedParams& p) {
                 return make_head(p.N, p.V, p.D, p.dtype, p.sigma, p.seed, TargetMode::calibrated,
                                  p.spec, "odd-vocab", p.progress, p.targets.get());
               }});
  c.push_back(llm("llama3-8b", "Llama-3 8B", 128256, 4096, 0));
  c.push_back(llm("gemma2-2b", "Gemma-2 2B", 256000, 2304, 30));
  c.push_back(llm("qwen2-7b", "Qwen2 7B", 151936, 3584, 0));
  return c;
}

}  // namespace

const std::vector<DatasetEntry>& dataset_catalog() {
  static const std::vector<DatasetEntry> c = build_catalog();
  return c;
}

const DatasetEntry& find_dataset(const std::string& name) {
  std::string names;
  for (const auto& e : dataset_catalog()) {
    if (e.name == name) return e;
    names += (names.empty() ? "" : ", ") + e.name;
  }
  throw InputError(fmt::format("unknown dataset '{}' (known: {}; or a file path)", name, names));
}

void check_problem_fits(const std::string& name, std::int64_t N, std::int64_t V, std::int64_t D,
                        DType dtype) {
  if (N < 1 || V < 1 || D < 0) return;  // the generator's own validation names these
  // In long double: N·V past 2^63 must not wrap. A lower bound of what generating needs.
  const long double elem = size_of(dtype);
  const long double values =
      D > 0 ? (static_cast<long double>(N) + V) * D : static_cast<long double>(N) * V;
  const long double bytes = values * elem + static_cast<long double>(N) * 8;
  const long double memory =
      static_cast<long double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (memory <= 0 || bytes <= memory) return;
  throw InputError(fmt::format(
      "{}: the problem N={} V={} D={} ({}) needs at least {:.0f} bytes ({:.1f} GiB) for its "
      "inputs, "
      "more than this machine's memory ({:.1f} GiB): use fewer tokens (-N)",
      name, N, V, D, to_string(dtype), static_cast<double>(bytes),
      static_cast<double>(bytes / 1073741824.0L), static_cast<double>(memory / 1073741824.0L)));
}

DatasetInstance make_dataset(const std::string& name, const DatasetParams& params) {
  const DatasetEntry& e = find_dataset(name);
  ResolvedParams r = e.defaults;
  if (e.fixed_shape && (params.V || params.D || params.dtype || params.sigma))
    throw InputError(
        fmt::format("dataset '{}' has a fixed shape and dtype (V={}, D={}, {}): only N, "
                    "the seed and its parameters can be chosen",
                    name, r.V, r.D, to_string(r.dtype)));
  if (r.D == 0 && params.D)
    throw InputError(
        fmt::format("dataset '{}' gives logits directly: it has no hidden size D", name));
  if (params.N) r.N = *params.N;
  if (params.V) r.V = *params.V;
  if (params.D) r.D = *params.D;
  if (params.dtype) r.dtype = *params.dtype;
  if (params.sigma) r.sigma = *params.sigma;
  r.seed = params.seed;
  r.progress = params.progress;
  r.targets = params.targets;
  for (const auto& [k, v] : params.extra) {
    if (!r.extra.count(k)) {
      std::string keys;
      for (const auto& kv : e.defaults.extra) keys += (keys.empty() ? "" : ", ") + kv.first;
      throw InputError(fmt::format("dataset '{}' has no parameter '{}' (it has: {})", name, k,
                                   keys.empty() ? "none" : keys));
    }
    r.extra[k] = v;
  }
  check_problem_fits(name, r.N, r.V, r.D, r.dtype);
  DatasetInstance d{e.make(r), r.spec, name, "catalog:" + name, e.regime, r};
  return d;
}

DatasetInstance load_dataset(const std::string& name_or_path, const DatasetParams& params,
                             std::int64_t ignore_index) {
  for (const auto& e : dataset_catalog())
    if (e.name == name_or_path) return make_dataset(name_or_path, params);
  if (!std::filesystem::exists(name_or_path)) {
    // A name that looks like a path (a folder separator, a file extension) was meant as a file.
    const std::filesystem::path p(name_or_path);
    if (name_or_path.find('/') != std::string::npos || p.has_extension())
      throw InputError(fmt::format("no such file: {}", name_or_path));
    find_dataset(name_or_path);  // throws, listing names
  }
  LoadedProblem lp = load_problem_file(name_or_path, ignore_index);
  DatasetInstance d;
  d.problem = std::move(lp.problem);
  d.spec.ignore_index = ignore_index;
  d.source = name_or_path;
  d.generator = "file:" + lp.format;
  d.regime = "user file";
  d.params.N = d.problem.N;
  d.params.V = d.problem.V;
  d.params.D = d.problem.D;
  d.params.dtype = d.problem.input_dtype();
  d.params.seed = 0;
  return d;
}

}  // namespace xentlab

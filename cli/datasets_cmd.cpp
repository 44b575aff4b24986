// `xentlab datasets`: lists the named problem sources (datasets/catalog.hpp) with their regimes and
// defaults; `--make NAME` generates one (with the usual overrides) and describes it.
#include <fmt/core.h>

#include <chrono>

#include "cli/commands.hpp"
#include "cli/options/reference.hpp"
#include "datasets/catalog.hpp"

namespace xentlab::cli {
namespace {

struct DatasetsArgs {
  std::string make;
  std::int64_t N = 0;
  std::uint64_t seed = 1;
};

std::string defaults_text(const DatasetEntry& e) {
  const ResolvedParams& d = e.defaults;
  std::string s = d.D > 0 ? fmt::format("N={} V={} D={} {}", d.N, d.V, d.D, to_string(d.dtype))
                          : fmt::format("N={} V={} logits {}", d.N, d.V, to_string(d.dtype));
  if (d.sigma > 0) s += fmt::format(" σ={:g}", d.sigma);
  if (d.spec.softcap > 0) s += fmt::format(" softcap={:g}", d.spec.softcap);
  for (const auto& [k, v] : d.extra) s += fmt::format(" {}={:g}", k, v);
  return s;
}

// Wraps text at width columns, indenting continuation lines.
std::string wrap(const std::string& text, std::size_t width, const std::string& indent) {
  std::string out, line;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t next = text.find(' ', pos);
    if (next == std::string::npos) next = text.size();
    const std::string word = text.substr(pos, next - pos);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += indent + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    pos = next + 1;
  }
  if (!line.empty()) out += indent + line + "\n";
  return out;
}

int run_datasets(const DatasetsArgs& a) {
  if (a.make.empty()) {
    for (const auto& e : dataset_catalog()) {
      fmt::print("{:<14}{}\n", e.name, defaults_text(e));
      fmt::print("{}", wrap(e.regime, 84, "              "));
    }
    fmt::print(
        "\nA file is a source too: --dataset model.safetensors | model.h5 | folder-of-npy "
        "(H, W, targets [, bias] or logits, targets).\n");
    return 0;
  }
  DatasetParams p;
  if (a.N > 0) p.N = a.N;
  p.seed = a.seed;
  p.progress = progress_printer("generating " + a.make);
  const auto t0 = std::chrono::steady_clock::now();
  const DatasetInstance d = make_dataset(a.make, p);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("{}  seed={}  valid rows {}/{}  spec {}  generated in {:.2f} s\n",
             d.problem.describe(), a.seed, d.problem.count_valid(d.spec.ignore_index), d.problem.N,
             d.spec.describe(), secs);
  return 0;
}

}  // namespace

void register_datasets(CLI::App& app) {
  auto a = std::make_shared<DatasetsArgs>();
  CLI::App* c = app.add_subcommand("datasets",
                                   "List the named problem sources and the regime each stands for");
  c->add_option("--make", a->make,
                "generate the named dataset and describe it (timing, valid rows)");
  c->add_option("--tokens,-N", a->N, "tokens N for --make (default: the entry's)");
  c->add_option("--seed", a->seed, "seed for --make")->capture_default_str();
  c->callback([a]() {
    const int rc = run_datasets(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace xentlab::cli

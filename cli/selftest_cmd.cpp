// `xentlab selftest`: proof by mutation of verify (harness/selftest/selftest.hpp,
// docs/selftest.md). Writes small golden files, judges correct and faulty candidates through
// verify, prints the confusion matrix and one line per candidate; exit 0 when every fault is caught
// and every correct candidate passes, 5 when the only faults not caught are below the problem's
// resolution, 1 otherwise, 2 for invalid options.
#include <fmt/core.h>

#include "cli/commands.hpp"
#include "datasets/io/atomic_file.hpp"
#include "gpu/registry.hpp"
#include "harness/selftest/selftest.hpp"
#include "judge/differential.hpp"
#include "numerics/error.hpp"

namespace xentlab::cli {
namespace {

struct SelftestArgs {
  selftest::SelftestOptions opt;
  std::string backend = "cpu", baseline_backend = "cpu", json;
  bool force = false, quiet = false;
  CLI::Option *o_dataset = nullptr, *o_N = nullptr, *o_V = nullptr, *o_D = nullptr;
};

int run_selftest_cmd(SelftestArgs& a) {
  if (a.backend == "cpu")
    a.opt.backends = {Backend::cpu_emulation};
  else if (a.backend == "cuda")
    a.opt.backends = {Backend::cuda};
  else if (a.backend == "all")
    a.opt.backends = {Backend::cpu_emulation, Backend::cuda};
  else
    throw InputError(fmt::format("--backend must be cpu, cuda or all, got '{}'", a.backend));
  if (a.backend != "cpu" && !cuda_backend_built())
    throw InputError(
        fmt::format("--backend {}: this build of xentlab has no CUDA backend", a.backend));
  a.opt.baseline_backends = baseline_backends(a.baseline_backend, true, "--baseline-backend");
  // Another dataset than the default takes its own shape where none is given.
  if (a.o_dataset->count())
    for (auto [o, v] : {std::pair{a.o_N, &a.opt.N}, {a.o_V, &a.opt.V}, {a.o_D, &a.opt.D}})
      if (!o->count()) *v = 0;
  if (!a.json.empty()) {
    AtomicOutput probe(a.json, a.force);  // refuse an existing file before the work
    probe.check_writable();
  }
  if (!a.quiet) a.opt.progress = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  const selftest::SelftestResult r = selftest::run_selftest(a.opt);
  fmt::print("{}", selftest::format_result(r));
  if (!a.json.empty()) {
    selftest::write_result_json(a.json, a.force, r);
    fmt::print("json       {}\n", a.json);
  }
  // 5 (inconclusive, as verify's): only faults below the problem's resolution were not caught.
  return r.ok() ? 0 : r.unresolved_only() ? 5 : 1;
}

}  // namespace

void register_selftest(CLI::App& app) {
  auto a = std::make_shared<SelftestArgs>();
  CLI::App* c = app.add_subcommand(
      "selftest",
      "Proof by mutation of verify: judge correct and faulty candidates on small golden files and "
      "print the confusion matrix; exit 0 when every fault is caught and every correct candidate "
      "passes, 5 when the only faults not caught are below the problem's resolution (a larger "
      "problem resolves them), 1 otherwise, 2 for invalid options");
  a->o_dataset = c->add_option("--dataset", a->opt.dataset,
                               "the main golden file's problem: a linear catalog dataset (e.g. "
                               "llama3-8b); its own shape unless --tokens/--vocab/--hidden")
                     ->capture_default_str();
  a->o_N =
      c->add_option("--tokens,-N", a->opt.N, "tokens N")->check(positive())->capture_default_str();
  a->o_V = c->add_option("--vocab,-V", a->opt.V, "vocabulary V")
               ->check(positive())
               ->capture_default_str();
  a->o_D = c->add_option("--hidden,-D", a->opt.D, "hidden size D")
               ->check(positive())
               ->capture_default_str();
  c->add_option("--seed", a->opt.seed, "seed of the problems and the upstream gradient")
      ->capture_default_str();
  c->add_option("--backend", a->backend,
                "whose strategies make the strategy candidates: cpu (the emulation), cuda (the "
                "kernels; none without a GPU, said in the report), or all")
      ->capture_default_str();
  c->add_option("--baseline-backend", a->baseline_backend,
                "whose strategies make verify's differential baseline, as verify's option: cpu "
                "(the emulation, the default), cuda (the CUDA kernels and sequential-sum model: "
                "the Llama-3 head at thousands of tokens), all, auto")
      ->capture_default_str();
  c->add_option("--workdir", a->opt.workdir,
                "keep the golden files here (an existing folder; default: a temporary folder, "
                "removed at the end)");
  c->add_option("--json", a->json, "also write the result as JSON here")->check(non_empty());
  c->add_flag("--force", a->force, "overwrite an existing --json file");
  c->add_flag("--quiet,-q", a->quiet, "no progress lines on stderr");
  c->callback([a]() {
    const int rc = run_selftest_cmd(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace xentlab::cli

// `xentlab regress BASELINE.h5 CURRENT.h5`: compares two audit results files run by run and exits
// 1 on a regression (harness/audit/regress.cpp says what counts as one).
#include <fmt/core.h>

#include <memory>

#include "cli/commands.hpp"
#include "harness/audit/audit.hpp"

namespace xentlab::cli {

void register_regress(CLI::App& app) {
  auto paths = std::make_shared<std::pair<std::string, std::string>>();
  CLI::App* c = app.add_subcommand(
      "regress",
      "Compare two audit results files; exit 1 on a run that regressed beyond its bound");
  c->add_option("baseline", paths->first, "previous results file")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("current", paths->second, "new results file")->required()->check(CLI::ExistingFile);
  c->callback([paths]() {
    const audit::RegressReport rep = audit::regress(paths->first, paths->second);
    for (const auto& l : rep.lines) fmt::print("{}\n", l);
    fmt::print(
        "{} runs in the baseline, {} now: {} regression(s), {} error growth(s) within bound\n",
        rep.baseline_runs, rep.current_runs, rep.regressions, rep.grown);
    if (rep.regressions > 0) throw CLI::RuntimeError(1);
  });
}

}  // namespace xentlab::cli

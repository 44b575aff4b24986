// `xentlab verify golden.h5 candidate.h5`: scores what another implementation wrote against the
// golden reference (tools/golden/verify.hpp), prints a table of error statistics per output and
// exits 0 (passed) or 1 (failed); 2 for a file that cannot be read as what it claims to be.
#include <fmt/core.h>

#include <filesystem>

#include "numerics/error.hpp"

#include "tools/cli/commands.hpp"
#include "tools/golden/verify.hpp"

namespace xentlab::cli {
namespace {

struct VerifyArgs {
  std::string golden, candidate, policy, strictness = "default", junit;
  double k = 0, atol = -1, rtol = -1;
  bool force = false;
};

int run_verify(const VerifyArgs& a) {
  // Refuse an existing JUnit file before doing any work (it is written atomically at the end).
  if (!a.junit.empty() && !a.force && std::filesystem::exists(a.junit))
    throw InputError(a.junit + ": the file exists; pass --force to overwrite it");
  const Golden g = read_golden(a.golden);
  VerifyPolicy pol;
  if (a.atol >= 0 || a.rtol >= 0) {
    pol = make_explicit_policy(std::max(a.atol, 0.0), std::max(a.rtol, 0.0));
  } else {
    const std::string name =
        a.policy.empty() ? std::string(to_string(g.problem.input_dtype())) : a.policy;
    pol =
        make_verify_policy(name, a.strictness, a.k > 0 ? std::optional<double>(a.k) : std::nullopt);
  }
  const VerifyReport r = verify_candidate(g, a.candidate, pol);
  fmt::print("{}", format_report(r));
  if (!a.junit.empty()) {
    write_junit(a.junit, a.force, r);
    fmt::print("junit      {}\n", a.junit);
  }
  return r.passed ? 0 : 1;
}

}  // namespace

void register_verify(CLI::App& app) {
  auto a = std::make_shared<VerifyArgs>();
  CLI::App* c = app.add_subcommand(
      "verify", "Score a candidate file against a golden file; exit 0 passed, 1 failed, 2 bad input");
  c->add_option("golden", a->golden, "golden file (xentlab golden)")->required();
  c->add_option("candidate", a->candidate, "candidate file (docs/formats.md)")->required();
  c->add_option("--policy", a->policy,
                "tolerance policy: the candidate's arithmetic dtype bf16, fp16, fp32, or a recipe "
                "in/logits/accum/grad (default: the golden problem's input dtype)");
  c->add_option("--strictness", a->strictness,
                "default, strict (k=0.5) or lenient (k=4, no bias test)")
      ->capture_default_str();
  c->add_option("--k", a->k, "multiplier of the tolerance (overrides the strictness's)");
  c->add_option("--atol", a->atol, "explicit absolute tolerance (replaces the policy)");
  c->add_option("--rtol", a->rtol, "explicit relative tolerance (replaces the policy)");
  c->add_option("--junit", a->junit, "write a JUnit XML report here");
  c->add_flag("--force", a->force, "overwrite an existing JUnit file");
  c->callback([a]() {
    const int rc = run_verify(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace xentlab::cli

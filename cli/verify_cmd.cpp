// `xentlab verify golden.h5 candidate.h5`: scores what another implementation wrote against the
// golden reference (harness/verify/verify.hpp), prints a table of error statistics per output and
// exits 0 (passed) or 1 (failed); 2 for invalid options or a file that cannot be read as what it
// claims to be (--junit and --json targets included, checked before any work); 3 when the --json
// report cannot be written after the work.
#include <fmt/core.h>

#include <chrono>
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/options/reference.hpp"
#include "datasets/io/atomic_file.hpp"
#include "harness/json_report.hpp"
#include "harness/text.hpp"
#include "harness/verify/memory.hpp"
#include "harness/verify/verify.hpp"
#include "numerics/error.hpp"

namespace xentlab::cli {
namespace {

struct VerifyArgs {
  std::string golden, candidate, policy, strictness = "default", junit, json, check = "both";
  std::string baseline_backend = "cpu", memory_budget;
  std::int64_t baseline_rows = 0;
  std::uint64_t baseline_seed = 1;
  bool explain = false;
  std::vector<std::string> require;
  double k = 1, atol = 0, rtol = 0;
  bool force = false;
  // Which options were given: every given value is checked and used, none is a silent default.
  CLI::Option *o_policy = nullptr, *o_strictness = nullptr, *o_k = nullptr, *o_atol = nullptr,
              *o_rtol = nullptr, *o_require = nullptr, *o_baseline_rows = nullptr,
              *o_baseline_seed = nullptr, *o_baseline_backend = nullptr;
};

int run_verify(const VerifyArgs& a) {
  const std::string started = json_report::utc_now();
  const auto t0 = std::chrono::steady_clock::now();
  // Every option is checked before any file is read.
  const bool explicit_tol = a.o_atol->count() > 0 || a.o_rtol->count() > 0;
  if (a.o_atol->count()) check_tolerance_number("--atol", a.atol, true);
  if (a.o_rtol->count()) check_tolerance_number("--rtol", a.rtol, true);
  if (a.o_k->count()) check_tolerance_number("--k", a.k, false);
  if (a.o_policy->count() && a.policy.find_first_not_of(" \t") == std::string::npos)
    throw InputError(
        "--policy '" + a.policy +
        "': give a policy (bf16, fp16, fp32 or a recipe in/logits/accum/grad), or leave the "
        "option out for the golden problem's input dtype");
  if (explicit_tol)
    for (const CLI::Option* o : {a.o_policy, a.o_strictness, a.o_k})
      if (o->count())
        throw InputError(fmt::format(
            "{} does not apply with --atol/--rtol: the explicit tolerance atol + rtol·|ref| "
            "replaces the policy (k = 1, no bias test); leave one of them out",
            o->get_name()));
  const std::vector<std::string> required_names = split_commas(a.require);
  if (a.o_require->count() && required_names.empty())
    throw InputError("--require: empty value (a comma list of outputs, e.g. loss,dH,dW)");
  VerifyOptions options;
  options.required = parse_required_outputs(required_names);
  options.check = parse_verify_check(a.check);
  options.explain = a.explain;
  if (a.baseline_rows < 0)
    throw InputError(
        fmt::format("--baseline-rows must be ≥ 0 (0: every token row), got {}", a.baseline_rows));
  options.baseline.rows = a.baseline_rows;
  options.baseline.seed = a.baseline_seed;
  options.baseline.progress = [](const std::string& line) {
    fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
  };
  // The device is asked for only where a baseline runs (not for --check bound or --atol/--rtol
  // alone); the value is checked always.
  const bool runs_baseline =
      !explicit_tol && (options.check != VerifyCheck::bound || options.explain);
  options.baseline.backends =
      baseline_backends(a.baseline_backend, runs_baseline, "--baseline-backend");
  // Where no baseline runs (--atol/--rtol, or --check bound without --explain), a baseline
  // option given would be ignored.
  if (!runs_baseline)
    for (const CLI::Option* o : {a.o_baseline_rows, a.o_baseline_seed, a.o_baseline_backend})
      if (o->count())
        throw InputError(
            explicit_tol
                ? fmt::format(
                      "{} does not apply with --atol/--rtol: the explicit tolerance runs no "
                      "differential baseline; leave one of them out",
                      o->get_name())
                : fmt::format("{} does not apply with --check bound: no differential baseline "
                              "runs; leave it out, or use --check both",
                              o->get_name()));
  if (explicit_tol && options.check == VerifyCheck::differential)
    throw InputError(
        "--check differential needs a recipe to emulate: --atol/--rtol declare none (give "
        "--policy instead)");
  if (explicit_tol && a.explain)
    throw InputError(
        "--explain compares with emulated recipes: it does not apply with --atol/--rtol");
  if (!a.junit.empty()) {
    for (const std::string* other : {&a.golden, &a.candidate})
      if (same_output_file(a.junit, *other))
        throw InputError(fmt::format("--junit {}: is the {} file", a.junit,
                                     other == &a.golden ? "golden" : "candidate"));
    check_junit_output(a.junit, a.force);
  }
  if (!a.json.empty()) {
    for (const std::string* other : {&a.golden, &a.candidate, &a.junit})
      if (!other->empty() && same_output_file(a.json, *other))
        throw InputError(fmt::format("--json {}: is the {} file", a.json,
                                     other == &a.golden      ? "golden"
                                     : other == &a.candidate ? "candidate"
                                                             : "--junit"));
    json_report::check_json_output(a.json, a.force, "verify");
  }
  options.memory_budget = parse_memory_budget(a.memory_budget);
  // Refused before the golden file is read when reading it alone would not fit; the whole of
  // verify's estimate is checked by verify_candidate before any output is judged.
  check_golden_read_memory(a.golden, options.memory_budget, "verify");
  const Golden g = read_golden(a.golden);
  fmt::print(stderr, "read {} in {:.1f} s\n", a.golden,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (const std::string w = golden_checksum_warning(g); !w.empty())
    fmt::print(stderr, "xentlab: warning: {}\n", w);
  VerifyPolicy pol;
  if (explicit_tol) {
    pol = make_explicit_policy(a.atol, a.rtol);
  } else {
    const std::string name =
        a.policy.empty() ? std::string(to_string(g.problem.input_dtype())) : a.policy;
    pol = make_verify_policy(name, a.strictness,
                             a.o_k->count() ? std::optional<double>(a.k) : std::nullopt);
  }
  const VerifyReport r = verify_candidate(g, a.candidate, pol, options);
  fmt::print("{}", format_report(r));
  if (!a.junit.empty()) {
    write_junit(a.junit, a.force, r);
    fmt::print("junit      {}\n", a.junit);
  }
  if (!a.json.empty()) {
    json_report::write_json_output(a.json, a.force, "verify",
                                   verify_json(r, {"verify", recorded_command_line(), started}));
    fmt::print("json       {}\n", a.json);
  }
  // 0 passed, 1 failed, 5 inconclusive or not judged (no pass by omission: docs/verify.md).
  return r.passed ? 0 : r.verdict == "failed" ? 1 : kExitNoVerdict;
}

}  // namespace

void register_verify(CLI::App& app) {
  auto a = std::make_shared<VerifyArgs>();
  CLI::App* c = app.add_subcommand("verify",
                                   "Score a candidate file against a golden file; exit 0 passed, 1 "
                                   "failed, 2 invalid input, 5 inconclusive or not judged");
  c->add_option("golden", a->golden, "golden file (xentlab golden)")->required();
  c->add_option("candidate", a->candidate, "candidate file (docs/formats.md)")->required();
  a->o_policy = c->add_option(
      "--policy", a->policy,
      "tolerance policy: the candidate's arithmetic dtype bf16, fp16, fp32, or a recipe "
      "in/logits/accum/grad (default: the golden problem's input dtype)");
  a->o_strictness = c->add_option("--strictness", a->strictness,
                                  "default, strict (k=0.5) or lenient (k=4, no bias test)")
                        ->capture_default_str();
  a->o_k = c->add_option("--k", a->k,
                         "multiplier of the tolerance, a finite number > 0 (overrides the "
                         "strictness's)");
  a->o_atol = c->add_option("--atol", a->atol,
                            "explicit absolute tolerance, a finite number ≥ 0 (with --rtol: "
                            "replaces the policy; the one left out is 0)");
  a->o_rtol = c->add_option("--rtol", a->rtol,
                            "explicit relative tolerance, a finite number ≥ 0 (with --atol: "
                            "replaces the policy; the one left out is 0)");
  a->o_require = c->add_option(
      "--require", a->require,
      "outputs the candidate must hold and pass (comma list of loss, lse, reduced_loss, dH, dW, "
      "db, dz); a missing one fails");
  c->add_option("--check", a->check,
                "bound (the a-priori tolerance), differential (error ≤ 2 × that of the policy's "
                "recipe run by the CPU emulation on the same problem, + one ULP), or both")
      ->capture_default_str();
  c->add_flag("--explain", a->explain,
              "also run the emulation of every recipe of the default grid and report which ones "
              "the candidate's error profile is consistent with");
  a->o_baseline_rows =
      c->add_option("--baseline-rows", a->baseline_rows,
                    "token rows the emulated baseline runs on (0: all, the default; k: a seeded "
                    "sample of k rows, which leaves dW, db and reduced_loss inconclusive)")
          ->capture_default_str();
  a->o_baseline_seed =
      c->add_option("--baseline-seed", a->baseline_seed, "seed of the baseline's row sample")
          ->capture_default_str();
  a->o_baseline_backend =
      c->add_option(
           "--baseline-backend", a->baseline_backend,
           "whose strategies make the differential baseline: cpu (the emulation: the same "
           "verdict on every machine), cuda (the lab's CUDA kernels, tensor-core GEMMs, run "
           "on the whole problem), all (both; per output the largest error), auto (all when "
           "a GPU is present, else cpu)")
          ->capture_default_str();
  c->add_option("--junit", a->junit,
                "write a JUnit XML report here (an existing report of verify is replaced: CI "
                "re-runs write to the same path)")
      ->check(non_empty());
  c->add_option("--json", a->json,
                "write the machine-readable report here (docs/json.md; an existing JSON report "
                "of verify is replaced)")
      ->check(non_empty());
  c->add_flag("--force", a->force,
              "overwrite an existing --junit or --json file that is not a report of verify");
  add_memory_budget_option(c, a->memory_budget);
  c->callback([a]() {
    const int rc = run_verify(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace xentlab::cli

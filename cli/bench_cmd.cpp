// `xentlab bench`: the memory/throughput table of the CUDA strategies, measured:
// forward+backward time (median and spread), TFLOP/s, peak extra device memory, throughput
// relative to naive, and the error against the certified reference on sampled rows, for every
// registered strategy × recipe. Terminal table, Markdown, CSV and HDF5 rows, the JSON report
// (harness/bench/report.hpp); the measurement is harness/bench/timing.hpp (CUDA builds only).
// Exit status (as the audit's: 1 when a run is incorrect or failed): 0 table produced, every
// checked run within its a-priori bounds (refusals are rows), 1 a run incorrect (judge/: an output
// beyond its bound) or failed, an output failed after measuring (every output is still attempted;
// the Markdown goes to stdout when its file fails) or a device error, 2 invalid options (before
// any measurement), 4 no CUDA device (or no CUDA backend in this build).
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "datasets/io/atomic_file.hpp"
#include "gpu/registry.hpp"
#include "harness/bench/options.hpp"
#include "harness/bench/report.hpp"
#include "harness/json_report.hpp"
#include "numerics/error.hpp"
#include "numerics/no_device.hpp"
#ifdef XENTLAB_HAVE_CUDA
#include "harness/bench/timing.hpp"
#endif

namespace xentlab::cli {
namespace {

std::string& command_line_storage() {
  static std::string s = "xentlab";
  return s;
}

/// The strategies a filter may name: this build's CUDA strategies (vocab_parallel too, which runs
/// only when named), or (without the CUDA backend) the emulation's, so the arguments are
/// validated the same way on every machine.
std::vector<std::string> known_strategies() {
  std::vector<std::string> names = strategy_names(Backend::cuda, StrategySet::all);
  return names.empty() ? strategy_names(Backend::cpu_emulation, StrategySet::all) : names;
}

#ifdef XENTLAB_HAVE_CUDA
/// --ranks on this machine, before any measurement: each named strategy that shards the
/// vocabulary must have P devices (Strategy::can_run_ranks); InputError naming it otherwise.
void check_ranks_on_device(const bench::BenchOptions& o) {
  for (const std::string& s : o.strategies) {
    const StrategyEntry* e = find_strategy_entry(s);
    if (e == nullptr || !e->traits.shards_vocabulary) continue;
    if (const auto st = make_strategy(Backend::cuda, s)) {
      const Status ok = st->can_run_ranks(o.ranks);
      if (!ok.ok())
        throw InputError(
            fmt::format("--ranks {}: {} on the cuda backend: {}", o.ranks, s, ok.message));
    }
  }
}
#endif

struct BenchCliArgs {
  bench::BenchArgs args;
  bool force = false, quiet = false;
};

constexpr int kExitNoDevice = 4;

int no_device(const std::string& reason) {
  fmt::print(stderr,
             "xentlab bench: {}\n"
             "  the bench measures the CUDA strategies; the options are valid, run the same "
             "command on a machine with an NVIDIA GPU (exit status {})\n",
             reason, kExitNoDevice);
  return kExitNoDevice;
}

int run_bench_command(const BenchCliArgs& c) {
  std::vector<std::string> sharding;
  const std::vector<std::string> known = known_strategies();
  for (const std::string& s : vocabulary_sharding_strategies())
    if (std::find(known.begin(), known.end(), s) != known.end()) sharding.push_back(s);
  std::vector<std::string> splitting;
  for (const std::string& s : vocabulary_splitting_strategies())
    if (std::find(known.begin(), known.end(), s) != known.end()) splitting.push_back(s);
  std::vector<std::string> gemms_apart;
  for (const std::string& s : gemms_apart_strategies())
    if (std::find(known.begin(), known.end(), s) != known.end()) gemms_apart.push_back(s);
  bench::BenchOptions o = bench::resolve_options(c.args, known, sharding, splitting, gemms_apart);
  o.command_line = recorded_command_line();
  // Every output is checked before any work: a 10-minute run must not end on "file exists".
  if (!o.csv.empty()) bench::check_csv_target(o.csv);
  if (!o.h5.empty()) bench::check_h5_target(o.h5);
  if (!o.markdown.empty()) AtomicOutput(o.markdown, c.force).check_writable();
  if (!o.json.empty()) json_report::check_json_output(o.json, c.force, "bench");
#ifndef XENTLAB_HAVE_CUDA
  return no_device(no_cuda_backend_reason());
#else
  const bench::DeviceDescription dev = bench::describe_device();
  if (!dev.available) return no_device(dev.reason);
  check_ranks_on_device(o);
  const auto t0 = std::chrono::steady_clock::now();
  std::function<void(const std::string&)> progress;
  if (!c.quiet)
    progress = [t0](const std::string& line) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print(stderr, "xentlab bench [{:6.1f} s] {}\n", s, line);
    };
  bench::BenchReport rep;
  try {
    rep = bench::run_bench(o, progress);
  } catch (const DeviceError& e) {  // before any row was measured (later ones become rows)
    fmt::print(stderr, "xentlab bench: device error: {}\n", e.what());
    return 1;
  }
  fmt::print("{}", bench::format_table(rep));
  const bench::OutputReport out = bench::write_outputs(rep, c.force);
  fmt::print("{}", out.stdout_text);
  std::fflush(stdout);
  for (const std::string& f : out.failures) fmt::print(stderr, "xentlab bench: {}\n", f);
  return bench::exit_status(rep, out);
#endif
}

}  // namespace

const std::string& recorded_command_line() {
  return command_line_storage();
}

void set_command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
                                         "OPQRSTUVWXYZ0123456789-_=/.,:+@%") == std::string::npos;
    if (!plain) {
      std::string q = "'";
      for (char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      a = q + "'";
    }
    s += (i ? " " : "") + a;
  }
  command_line_storage() = s;
}

/// An empty value would read as "not given" (e.g. --csv '' writing no CSV): refused, naming the
/// option (exit 2). For comma lists, a value that lists nothing (',') is refused too.
const CLI::Validator& non_empty() {
  static const CLI::Validator v(
      [](std::string& s) {
        return s.find_first_not_of(", \t") == std::string::npos
                   ? std::string("an empty value (leave the option out for its default)")
                   : std::string();
      },
      "NONEMPTY");
  return v;
}

void register_bench(CLI::App& app) {
  auto c = std::make_shared<BenchCliArgs>();
  bench::BenchArgs& a = c->args;
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "The memory/throughput table of the CUDA strategies, measured: forward+backward time, "
      "TFLOP/s, peak extra device memory, throughput vs naive, and the error against the "
      "certified reference on sampled rows, per strategy x recipe, each judged against its "
      "a-priori "
      "bound (exit 1 when a run is incorrect or failed). Needs a CUDA device (exit 4 without "
      "one).");
  cmd->add_option("--tokens,-N", a.tokens, "tokens N");
  cmd->add_option("--vocab,-V", a.vocab, "vocabulary V");
  cmd->add_option("--hidden,-D", a.hidden, "hidden size D");
  cmd->add_option(
         "--preset", a.preset,
         "named configuration: llama3-8b-128k (N=131072 V=128256 D=4096, bf16, chunks and fused's "
         "token groups of 8192 tokens, with the quoted table beside the measured one); flags given "
         "too win")
      ->check(non_empty());
  cmd->add_option("--recipes", a.recipes,
                  std::string("recipes input/logits/accum/grad (comma list); default ") +
                      bench::kDefaultRecipes)
      ->check(non_empty());
  cmd->add_option("--strategies", a.strategies,
                  "strategies (comma list); default every registered CUDA strategy")
      ->check(non_empty());
  cmd->add_option("--memory-budget", a.memory_budget,
                  "extra device memory allowed per run, e.g. 4GiB, 512MiB or bytes; default each "
                  "strategy's own (chunked/checkpointed: 2 GiB; vocab_chunked: a 1 GiB logits "
                  "slab; fused: a 192 MiB dz stage of one token group; naive: none); given, it "
                  "sizes fused's token groups and bounds --chunk-tokens (chunks that need more "
                  "are does-not-fit rows)")
      ->check(non_empty());
  cmd->add_option("--chunk-tokens", a.chunk_tokens,
                  "tokens per chunk of the chunked strategies, and per token group of fused "
                  "(0 = from the budget)");
  cmd->add_option("--ranks", a.ranks,
                  "vocabulary-parallel ranks P of vocab_parallel (its shards: "
                  "docs/vocab_parallel.md), 1 to V; only with --strategies naming it. The bench "
                  "times one device: P > 1 gives not-supported rows");
  cmd->add_option("--vocab-splits", a.vocab_splits,
                  "vocabulary splits P of vocab_chunked, 1 to V (default: the fewest whose "
                  "logits slab of all tokens fits the memory budget, 1 GiB by default); only with "
                  "--strategies naming it");
  cmd->add_flag(
      "--gemms-alone", a.gemms_alone,
      "also time each strategy's own GEMMs alone (its shapes, operands and workspace; "
      "no loss kernels), interleaved with it: the 'GEMMs ms' and '× GEMMs' columns. "
      "Every strategy but fused and vocab_parallel (refused when --strategies names "
      "only those); doubles the timed runs, and each lane holds its own workspace (naive's "
      "two at N = 131072: 63 GiB)");
  cmd->add_option("--repeats", a.repeats, "timed runs (median and spread over them; default 5)");
  cmd->add_option("--warmup", a.warmup, "untimed runs before them (default 1)");
  cmd->add_option("--sample-rows", a.sample_rows,
                  "token rows checked against the certified reference (0 = no check; default 8)");
  cmd->add_option("--vocab-rows", a.vocab_rows,
                  "vocabulary rows of the dW check (0 = all; default 2048)");
  cmd->add_option("--seed", a.seed, "seed of the inputs and of the samples (default 1)");
  cmd->add_option("--csv", a.csv, "append the rows to this CSV file (header written when new)")
      ->check(non_empty());
  cmd->add_option("--h5", a.h5, "append the run to this HDF5 file (format xentlab-bench)")
      ->check(non_empty());
  cmd->add_option("--markdown", a.markdown, "write the Markdown tables here (default: printed)")
      ->check(non_empty());
  cmd->add_option("--json", a.json,
                  "write the machine-readable report here (docs/json.md; an existing JSON report "
                  "of bench is replaced)")
      ->check(non_empty());
  cmd->add_flag("--force", c->force,
                "overwrite an existing --markdown file (and a --json file that is not a report "
                "of bench)");
  cmd->add_flag("--quiet,-q", c->quiet, "no progress lines on stderr");
  cmd->callback([c]() {
    const int rc = run_bench_command(*c);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace xentlab::cli

// `xentlab audit`: every strategy × recipe on the embedded problem set (or chosen problems),
// against the certified reference; HDF5 results, summary table, Markdown, plots, and the verdict on
// "logits may be bf16 while accumulation must be fp32"; with --json the machine-readable report
// (docs/json.md). Exit status 1 when any run is incorrect or failed (docs/audit.md: 2 bad input
// before the work, 3 an output not written after it).
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <spawn.h>  // posix_spawnp, environ
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/options/loss.hpp"
#include "cli/options/reference.hpp"
#include "datasets/catalog.hpp"
#include "datasets/io/atomic_file.hpp"
#include "datasets/io/h5.hpp"
#include "gpu/registry.hpp"
#include "harness/audit/audit.hpp"
#include "harness/json_report.hpp"
#include "harness/text.hpp"
#include "numerics/error.hpp"
#include "numerics/no_device.hpp"
#ifdef XENTLAB_HAVE_CUDA
#include "gpu/cuda/common/device.hpp"
#endif

extern char** environ;

namespace xentlab::cli {
namespace {

struct AuditArgs {
  std::vector<std::string> problems, datasets, strategies, recipes;
  bool tokens_given = false, hidden_given = false;
  std::int64_t vocab = 0;  ///< --dataset generators: V (0 = the entry's default)
  std::string backend = "auto";
  ReferenceChoice reference;
  std::int64_t rows = 8, vocab_rows = 256, tokens = 16, hidden = 64;
  std::uint64_t seed = 1;
  std::string policy = "audit";
  std::string out = "xentlab-audit.h5", markdown, plots, json;
  bool force = false, append = false, quiet = false, no_plots = false;
  LossOptions loss;  ///< LossDefaults::problem: overrides applied to every problem when given
  std::int64_t chunk_tokens = 0;
  std::int64_t ranks = 1;
  bool ranks_given = false;
  std::int64_t vocab_splits = 0;
  std::string local_strategy;  ///< --local-strategy (empty: not given)
};

Backend choose_backend(const std::string& b, std::string& device, int& sms) {
  bool have_gpu = false;
  std::string why = no_cuda_backend_reason();
#ifdef XENTLAB_HAVE_CUDA
  const gpu::DeviceInfo d = gpu::query_device();
  have_gpu = d.available;
  why = d.reason;
  if (have_gpu) {
    device = fmt::format("{} (sm_{}{}, {} SMs, {:.0f} GiB)", d.name, d.sm_major, d.sm_minor,
                         d.multiprocessors, d.memory_gib);
    sms = d.multiprocessors;
  }
#endif
  if (b == "cpu") {
    device = "cpu-emulation";
    sms = 0;
    return Backend::cpu_emulation;
  }
  if (b == "cuda") {
    if (!have_gpu) throw NoDeviceError("--backend cuda: " + why);
    return Backend::cuda;
  }
  if (b != "auto") throw InputError("--backend must be auto, cpu or cuda, got '" + b + "'");
  if (have_gpu && !make_strategies(Backend::cuda).empty()) return Backend::cuda;
  device = "cpu-emulation";
  sms = 0;
  return Backend::cpu_emulation;
}

/// The plots' folder, before the work: a folder that takes files (created here when missing and
/// `create`, its parent must exist; else tools/scripts/plot_audit.py creates it) and holds none of
/// the script's PNGs unless --force. `what` names it in the messages.
void check_plots_folder(const std::string& dir, bool force, bool create, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw InputError(fmt::format("{}: exists and is not a folder", what));
  if (!fs::exists(dir, ec)) {
    if (!create) return;  // the results file's folder was checked: the script makes this one
    if (!fs::create_directory(dir, ec))
      throw InputError(fmt::format("{}: cannot create the folder: {}", what, ec.message()));
  }
  AtomicOutput((fs::path(dir) / "error_vs_recipe_loss.png").string(), true).check_writable();
  if (force) return;
  // Every file tools/scripts/plot_audit.py may write (its PLOT_NAMES; it makes the same check
  // itself).
  for (const char* name :
       {"error_vs_recipe_loss.png", "error_vs_recipe_dz.png", "error_vs_recipe_dH.png",
        "error_vs_recipe_dW.png", "ulp_loss.png", "ulp_dz.png", "ulp_dH.png", "ulp_dW.png",
        "loss_error_vs_ptarget.png", "loss_error_vs_maxlogit.png", "verdict_heatmap.png"})
    if (fs::exists(fs::path(dir) / name, ec))
      throw InputError(
          fmt::format("{}: holds plots already ({}); pass --force to overwrite them", what, name));
}

// A list option given with nothing in it ('' or ',') is a mistake, not "all" (the default when
// the option is left out); a name given twice would run or be counted twice.
std::vector<std::string> checked_list(const char* opt, const std::vector<std::string>& given) {
  const std::vector<std::string> items = split_commas(given);
  if (!given.empty() && items.empty())
    throw InputError(fmt::format("{}: empty value (leave the option out for the default)", opt));
  for (std::size_t i = 0; i < items.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (items[i] == items[j])
        throw InputError(fmt::format("{}: '{}' is named twice", opt, items[i]));
  return items;
}

// The audit's configuration from the options, every value checked before any work.
audit::AuditConfig config_of(const AuditArgs& a) {
  if (a.no_plots && !a.plots.empty())
    throw InputError(fmt::format("--plots {} and --no-plots: give one of them", a.plots));
  audit::AuditConfig cfg;
  cfg.strategies = checked_list("--strategies", a.strategies);
  for (const auto& r : checked_list("--recipes", a.recipes)) cfg.recipes.push_back(parse_recipe(r));
  (void)checked_list("--problems", a.problems);
  (void)checked_list("--dataset", a.datasets);
  if (a.vocab > 0 && a.datasets.empty())
    throw InputError(
        "--vocab sets V of --dataset generators; the embedded set has V = 128256 "
        "(give --dataset, or leave --vocab out)");
  {
    ReferenceOptions ro;
    apply_reference_choice(a.reference, ro);
    cfg.reference_tier = ro.tier;
    cfg.reference_memory = ro.max_bytes;
  }
  cfg.backend = choose_backend(a.backend, cfg.device, cfg.device_sms);
  cfg.rows = a.rows;
  cfg.vocab_rows = a.vocab_rows;
  cfg.seed = a.seed;
  cfg.policy = a.policy;
  policy_by_name(cfg.policy);  // unknown policy: fail before any work
  cfg.chunk_tokens = a.chunk_tokens;
  cfg.ranks = a.ranks;
  cfg.local_strategy = a.local_strategy;
  if (a.ranks_given || !a.local_strategy.empty()) {
    // --ranks and --local-strategy are parameters of the strategies that shard the vocabulary
    // only: given without one, they would be silently ignored.
    const std::string given =
        a.ranks_given ? fmt::format("--ranks {}", a.ranks) : "--local-strategy " + a.local_strategy;
    bool sharding = false;
    for (const std::string& s : cfg.strategies)
      sharding = sharding || strategy_traits(s).shards_vocabulary;  // an unknown name: its error
    if (!sharding) {
      std::vector<std::string> names;
      for (const StrategyEntry& e : strategy_table())
        if (e.traits.shards_vocabulary) names.emplace_back(e.name);
      throw InputError(fmt::format(
          "{} applies to the strategies that shard the vocabulary ({}), and --strategies "
          "names none (e.g. --strategies {} {})",
          given, fmt::join(names, ", "), names.empty() ? "" : names.front(), given));
    }
    // Before the problems are generated: a backend that cannot give every rank a device.
    for (const std::string& s : cfg.strategies) {
      const StrategyEntry* e = find_strategy_entry(s);
      if (e == nullptr || !e->traits.shards_vocabulary) continue;
      if (const auto st = make_strategy(cfg.backend, s)) {
        const Status ok = st->can_run_ranks(a.ranks);
        if (!ok.ok())
          throw InputError(fmt::format("--ranks {}: {} on the {} backend: {}", a.ranks, s,
                                       to_string(cfg.backend), ok.message));
        const Status local = st->can_run_local(a.local_strategy);
        if (!local.ok())
          throw InputError(fmt::format("--local-strategy {}: {}", a.local_strategy, local.message));
      }
    }
  }
  cfg.vocab_splits = a.vocab_splits;
  if (a.vocab_splits > 0) {
    // A parameter of the strategies that split the vocabulary only: without one it would be
    // recorded, not used.
    bool splitting = false;
    for (const std::string& s : cfg.strategies)
      splitting = splitting || strategy_traits(s).splits_vocabulary;
    if (!splitting) {
      const std::vector<std::string> names = vocabulary_splitting_strategies();
      throw InputError(fmt::format(
          "--vocab-splits {} applies to the strategies that split the vocabulary ({}), and "
          "--strategies names none (e.g. --strategies {} --vocab-splits {})",
          a.vocab_splits, fmt::join(names, ", "), names.empty() ? "" : names.front(),
          a.vocab_splits));
    }
  }
  if (a.chunk_tokens > 0 && !cfg.strategies.empty()) {
    // A chunk width for strategies none of which chunks tokens would be recorded, not used.
    bool chunking = false;
    for (const std::string& s : cfg.strategies)
      chunking = chunking || strategy_traits(s).chunks_tokens;
    if (!chunking) {
      std::vector<std::string> chunkers;
      for (const StrategyEntry& e : strategy_table())
        if (e.traits.chunks_tokens) chunkers.emplace_back(e.name);
      throw InputError(fmt::format(
          "--chunk-tokens {}: none of the strategies named ({}) works through the tokens in "
          "chunks; leave the option out, or name one that does ({})",
          a.chunk_tokens, fmt::join(cfg.strategies, ", "), fmt::join(chunkers, ", ")));
    }
  }
  cfg.upstream = a.loss.upstream_kind();
  return cfg;
}

// --append: one seed per file (runs of another seed would be compared as runs of the same
// problems), likewise one chunk width and one upstream gradient (absent in version 1: 0, ones),
// and one number of vocabulary-parallel ranks among the runs that record one.
void check_append(const AuditArgs& a, const audit::AuditConfig& cfg) {
  const h5::File f = audit::open_results_file(a.out);
  if (!f.exists("runs")) return;
  bool sharding = false;  // this audit runs a strategy that shards the vocabulary
  for (const std::string& s : cfg.strategies)
    if (const StrategyEntry* e = find_strategy_entry(s))
      sharding = sharding || e->traits.shards_vocabulary;
  if (sharding)
    for (const auto& id : f.open_group("runs").children()) {
      const h5::Group run = f.open_group("runs/" + id);
      if (run.has_attr("ranks") && run.attr_int("ranks") != cfg.ranks)
        throw InputError(fmt::format(
            "--append: {} holds {} runs of --ranks {}, this audit's are of --ranks {}; write "
            "it to another file",
            a.out, run.attr_string("strategy"), run.attr_int("ranks"), cfg.ranks));
      const std::string local =
          cfg.local_strategy.empty() ? kDefaultLocalStrategy : cfg.local_strategy;
      const std::string held = !run.has_attr("ranks")           ? local
                               : run.has_attr("local_strategy") ? run.attr_string("local_strategy")
                                                                : kDefaultLocalStrategy;
      if (held != local)
        throw InputError(
            fmt::format("--append: {} holds {} runs of --local-strategy {}, this audit's are of "
                        "--local-strategy {}; write it to another file",
                        a.out, run.attr_string("strategy"), held, local));
    }
  for (const auto& id : f.open_group("runs").children()) {
    const h5::Group run = f.open_group("runs/" + id);
    const std::int64_t s = run.attr_int("seed");
    if (s != static_cast<std::int64_t>(a.seed))
      throw InputError(
          fmt::format("--append: {} holds runs of seed {}, this audit's is {}; "
                      "write it to another file",
                      a.out, s, a.seed));
    const std::int64_t c = run.has_attr("chunk_tokens") ? run.attr_int("chunk_tokens") : 0;
    const std::string u = run.has_attr("upstream") ? run.attr_string("upstream") : "ones";
    if (c != a.chunk_tokens || u != cfg.upstream)
      throw InputError(fmt::format(
          "--append: {} holds runs of --chunk-tokens {} --upstream {}, this audit's are "
          "{} and {}; write it to another file",
          a.out, c, u, a.chunk_tokens, cfg.upstream));
    break;
  }
}

// The results file, before the work: an hour of audit must not end on "file exists".
void check_results_file(const AuditArgs& a, const audit::AuditConfig& cfg,
                        const std::string& md_path) {
  if (same_output_file(md_path, a.out))
    throw InputError(fmt::format("--markdown {} is the results file {} itself", md_path, a.out));
  for (const std::string& d : checked_list("--dataset", a.datasets))  // inputs, not outputs
    for (const std::string& out : {a.out, md_path})
      if (same_output_file(out, d))
        throw InputError(fmt::format(
            "{} is the problem file --dataset {} itself: write the audit elsewhere", out, d));
  if (a.append && std::filesystem::exists(a.out)) check_append(a, cfg);
  // The Markdown of an appending audit describes its own runs: it never replaces the summary of
  // the runs already in the file without --force.
  if (a.append && !a.force && std::filesystem::exists(md_path))
    throw InputError(fmt::format(
        "--append: the Markdown summary {} exists (it describes the runs already in {}); this "
        "audit's summary covers its own runs only: give --markdown another file, or --force to "
        "replace it",
        md_path, a.out));
  AtomicOutput probe(a.out, a.force || a.append);  // folder exists, not a device, no clobbering
  probe.check_writable();  // permissions, a read-only file system: before the work, with why
  if (a.json.empty()) return;
  for (const std::string& other : {a.out, md_path})
    if (same_output_file(a.json, other))
      throw InputError(fmt::format("--json {} is the {} file itself", a.json,
                                   other == a.out ? "results" : "Markdown"));
  for (const std::string& d : checked_list("--dataset", a.datasets))
    if (same_output_file(a.json, d))
      throw InputError(fmt::format(
          "--json {} is the problem file --dataset {} itself: write it elsewhere", a.json, d));
  json_report::check_json_output(a.json, a.force, "audit");
}

// The embedded problems named by --problems (all when none), each refused before it is generated
// when its reference would not fit.
void add_embedded_problems(const AuditArgs& a, const audit::AuditConfig& cfg,
                           const std::shared_ptr<const TargetEngine>& targets,
                           std::vector<audit::AuditProblem>& problems) {
  const auto wanted = split_commas(a.problems);
  std::vector<audit::AuditProblem> all = audit::default_problem_set(
      a.seed, a.tokens, a.hidden, wanted,
      [&a](const std::string& name) {
        return a.quiet ? GenerationProgress{} : progress_printer("generating " + name);
      },
      cfg.backend != Backend::cpu_emulation,
      [&cfg](const audit::ProblemShape& ps) {
        // Its inputs, in the smallest dtype of the set (bf16): a size no machine here holds is
        // refused before it is generated (exit 2), as the reference's budget refuses one.
        check_problem_fits(ps.name, ps.N, ps.V, ps.D, DType::bf16);
        // The reference of the sub-batch the audit will run on
        // (harness/audit/audit.cpp, prepare), before generating.
        const std::int64_t r = ps.rows >= 0 ? ps.rows : cfg.rows;
        const std::int64_t S = r > 0 ? std::min(r, ps.N) : ps.N;
        const std::int64_t vr = ps.vocab_rows >= 0 ? ps.vocab_rows : cfg.vocab_rows;
        const std::int64_t J = ps.D == 0 ? 0 : (vr > 0 ? std::min(vr, ps.V) : ps.V);
        ReferenceOptions ro;
        ro.tier = cfg.reference_tier;
        ro.max_bytes = cfg.reference_memory;
        ro.want_dz = ps.D == 0;
        check_reference_fits(S, ps.V, ps.D, J, ro);
      },
      targets);
  for (auto& p : all)
    if (wanted.empty() || std::find(wanted.begin(), wanted.end(), p.name) != wanted.end())
      problems.push_back(std::move(p));
  for (const auto& w : wanted) {
    bool found = false;
    for (const auto& p : problems) found = found || p.name == w;
    if (!found && w == "llama3-8b")
      throw InputError(
          "the embedded problem 'llama3-8b' (the Llama-3-8B head at N = 8192, every row, full "
          "dW) is audited on a GPU backend only: the CPU emulation would take hours a run "
          "(use --backend cuda on a machine with a GPU, or --dataset llama3-8b with --rows)");
    if (!found)
      throw InputError(
          fmt::format("unknown problem '{}' of the embedded set (see xentlab audit --help; "
                      "catalog datasets and files go to --dataset)",
                      w));
  }
}

// The problems of the audit: the embedded set (or the named part of it) unless only --dataset is
// given, then each --dataset; the loss options override each problem's spec.
std::vector<audit::AuditProblem> make_problems(const AuditArgs& a, const audit::AuditConfig& cfg) {
  std::vector<audit::AuditProblem> problems;
  // Calibrated targets of linear heads where the reference runs: on the GPU with the cuda tier.
  const std::shared_ptr<const TargetEngine> targets = target_engine_for(cfg.reference_tier);
  const auto datasets = split_commas(a.datasets);
  if (!split_commas(a.problems).empty() || datasets.empty())
    add_embedded_problems(a, cfg, targets, problems);
  for (const auto& d : datasets) {
    DatasetParams params;
    params.seed = a.seed;
    if (a.tokens_given) params.N = a.tokens;
    if (a.hidden_given) params.D = a.hidden;
    if (a.vocab > 0) params.V = a.vocab;
    params.targets = targets;
    if (!a.quiet)
      params.progress = progress_printer(
          "generating " + d + (targets ? " (targets on " + targets->describe() + ")" : ""));
    DatasetInstance inst = load_dataset(d, params);
    problems.push_back({inst.source, inst.regime.empty() ? inst.generator : inst.regime,
                        std::move(inst.problem), inst.spec});
  }
  audit::check_problem_names(problems);  // before the work (run_audit checks it too)
  for (auto& p : problems) {
    p.spec = a.loss.over(p.spec);
    try {
      p.spec.validate();  // an out-of-range override is an InputError naming it
    } catch (const InputError& e) {
      throw InputError(fmt::format("problem {}: {}", p.name, e.what()));
    }
  }
  return problems;
}

// The audit's progress on stderr: on a terminal one line redrawn in place; otherwise (a log) a
// line per tenth of the runs.
std::function<void(std::int64_t, std::int64_t, const std::string&)> progress_display(
    std::chrono::steady_clock::time_point t0) {
  const bool tty = isatty(fileno(stderr)) != 0;
  auto last_tenth = std::make_shared<std::int64_t>(-1);
  return [t0, tty, last_tenth](std::int64_t done, std::int64_t total, const std::string& what) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double eta =
        done > 0 ? el / static_cast<double>(done) * static_cast<double>(total - done) : 0.0;
    if (tty) {
      fmt::print(stderr, "\r[{:>4}/{}] {:>5.0f}s elapsed, ETA {:>4.0f}s  {:<60.60}", done, total,
                 el, eta, what);
      if (done == total) fmt::print(stderr, "\n");
    } else {
      const std::int64_t tenth = total > 0 ? done * 10 / total : 10;
      if (tenth == *last_tenth) return;
      *last_tenth = tenth;
      fmt::print(stderr, "[{:>4}/{}] {:.0f}s elapsed, ETA {:.0f}s: {}\n", done, total, el, eta,
                 what);
    }
  };
}

// The Markdown summary into md_out's temporary file (committed by the caller).
void write_markdown(const AuditArgs& a, const audit::AuditConfig& cfg,
                    const std::vector<audit::AuditProblem>& problems, const audit::AuditResult& res,
                    const AtomicOutput& md_out, const std::string& md_path) {
  errno = 0;
  std::ofstream md(md_out.temp_path());
  // Problems with their own sub-batch (the real-shape problem: every row, full dW) say so.
  std::string own;
  const auto count = [](std::int64_t n, const char* all) {
    return n > 0 ? std::to_string(n) : std::string(all);
  };
  for (const auto& p : problems)
    if (p.rows >= 0 || p.vocab_rows >= 0)
      own += fmt::format("; {}: {} token rows, {} vocabulary rows of dW", p.name,
                         count(p.rows >= 0 ? p.rows : cfg.rows, "every"),
                         count(p.vocab_rows >= 0 ? p.vocab_rows : cfg.vocab_rows, "all"));
  // The strategies that shard the vocabulary name their ranks (the results file records each
  // run's ranks and shards).
  std::string ranks;
  for (const std::string& s : cfg.strategies)
    if (strategy_traits(s).shards_vocabulary)
      ranks += fmt::format("; {}: {} vocabulary-parallel ranks, each running {}", s, cfg.ranks,
                           cfg.local_strategy.empty() ? kDefaultLocalStrategy : cfg.local_strategy);
  md << "# xentlab audit\n\nbackend: " << cfg.device << ", seed " << cfg.seed << ", policy "
     << cfg.policy << ", sub-batch rows " << cfg.rows << own << ranks << "\n\n"
     << (a.append ? fmt::format("The runs of this audit, appended to {}; the file holds the "
                                "earlier runs as well.\n\n",
                                a.out)
                  : std::string())
     << audit::format_summary(res, true);
  md.close();
  const int err = errno;
  if (!md)
    throw OutputError(
        fmt::format("{}: cannot write the Markdown summary ({}; the results file "
                    "{} is written)",
                    md_path, err != 0 ? std::strerror(err) : "unknown reason", a.out));
}

// ---- the plots (tools/scripts/plot_audit.py) ----------------------------------------------------

// Where the plots go: --plots DIR, else beside the results file (xentlab-audit.h5 →
// xentlab-audit-plots/); empty with --no-plots.
std::string plots_folder(const AuditArgs& a) {
  if (a.no_plots) return {};
  if (!a.plots.empty()) return a.plots;
  std::string stem = a.out;
  if (stem.size() > 3 && stem.compare(stem.size() - 3, 3, ".h5") == 0) stem.resize(stem.size() - 3);
  return stem + "-plots";
}

// The interpreter that runs the plot script: $XENTLAB_PLOT_PYTHON, else the one this build was
// configured with (CMake's XENTLAB_PLOT_PYTHON: tools/xentlab.sh gives build/venv's).
std::string plot_python() {
  const char* env = std::getenv("XENTLAB_PLOT_PYTHON");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(XENTLAB_PLOT_PYTHON);
}

struct Spawned {
  int status = -1;     ///< exit status; -1 when it could not be started or did not exit
  std::string output;  ///< its stdout and stderr
};

// Runs args (no shell: the arguments go to the program as they are), its output captured.
Spawned spawn_captured(std::vector<std::string> args) {
  Spawned r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  std::vector<char*> argv;
  for (auto& x : args) argv.push_back(x.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const bool started = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ) == 0;
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  char buf[4096];
  ssize_t n = 0;
  while (started && (n = read(fds[0], buf, sizeof buf)) != 0)
    if (n > 0)
      r.output.append(buf, static_cast<std::size_t>(n));
    else if (errno != EINTR)
      break;
  close(fds[0]);
  int status = 0;
  if (started && waitpid(pid, &status, 0) == pid && WIFEXITED(status))
    r.status = WEXITSTATUS(status);
  if (!started) r.output = fmt::format("cannot run {}", args[0]);
  return r;
}

std::string plot_script() {
  return std::string(XENTLAB_SOURCE_DIR) + "/tools/scripts/plot_audit.py";
}

// The last non-empty line of a program's output (its one-line message).
std::string last_line(const std::string& text) {
  const std::size_t end = text.find_last_not_of("\n \t");
  if (end == std::string::npos) return {};
  const std::size_t nl = text.rfind('\n', end);
  const std::size_t begin = nl == std::string::npos ? 0 : nl + 1;
  return text.substr(begin, end + 1 - begin);
}

// Before the work: can the plot script import what it needs? Empty when it can, else why not
// (one line).
std::string plots_unavailable() {
  const std::string py = plot_python();
  const Spawned r = spawn_captured({py, plot_script(), "--check-libraries"});
  if (r.status == 0) return {};
  if (r.status < 0)
    return fmt::format("cannot run {} (XENTLAB_PLOT_PYTHON names the interpreter)", py);
  const std::string why = last_line(r.output);
  return fmt::format("{}: {}", py, why.empty() ? "the plot script's check failed" : why);
}

// The plots of the results file. 0, or 3 when they could not be made.
int make_plots(const AuditArgs& a, const std::string& dir) {
  std::vector<std::string> args{plot_python(), plot_script(), a.out, dir};
  // The folder was checked before, with the same rule; --append redraws the whole file's plots.
  if (a.force || a.append) args.push_back("--force");
  const Spawned r = spawn_captured(args);
  if (r.status != 0) {
    fmt::print(stderr,
               "{}xentlab audit: the plots were not made: {} {} failed (its message is above). "
               "The results files are written.\n",
               r.output, args[0], args[1]);
    return 3;  // an output that could not be written
  }
  fmt::print("plots: {}/\n", dir);
  return 0;
}

int run_audit_command(const AuditArgs& a) {
  const std::string started = json_report::utc_now();
  audit::AuditConfig cfg = config_of(a);
  // Every output is checked before any work.
  const std::string md_path = a.markdown.empty() ? a.out + ".md" : a.markdown;
  check_results_file(a, cfg, md_path);
  AtomicOutput md_out(md_path, a.force);
  md_out.check_writable();
  const std::string plots = plots_folder(a);
  if (!plots.empty())
    check_plots_folder(plots, a.force || a.append, !a.plots.empty(),
                       a.plots.empty() ? fmt::format("the plots' folder {} (--plots DIR puts them "
                                                     "elsewhere, --no-plots leaves them out)",
                                                     plots)
                                       : "--plots " + plots);
  // The loss-spec overrides are checked before any problem is generated (each problem's spec is
  // checked again, with its own defaults).
  (void)a.loss.check_given();
  const auto t0 = std::chrono::steady_clock::now();
  if (!a.quiet) fmt::print(stderr, "xentlab audit: generating problems (seed {})\n", a.seed);
  const std::vector<audit::AuditProblem> problems = make_problems(a, cfg);
  // A problem the file records under the same name as another (its shape, rows or spec) is
  // refused now, not after the work.
  if (a.append) audit::check_append_problems(a.out, problems, cfg);
  // The plots by default where the plot script's libraries import (a note where they do not);
  // asked for with --plots, their absence ends the command before the work.
  std::string no_plots_why = plots.empty() ? std::string() : plots_unavailable();
  if (!no_plots_why.empty() && !a.plots.empty())
    throw OutputError(
        fmt::format("--plots {}: the plots cannot be drawn: {}", a.plots, no_plots_why));
  if (!a.quiet) cfg.progress = progress_display(t0);
  const audit::AuditResult res = audit::run_audit(problems, cfg);
  audit::require_some_run(res);
  audit::write_results(a.out, res, cfg, a.force, a.append);
  write_markdown(a, cfg, problems, res, md_out, md_path);
  md_out.commit();
  fmt::print("{}", audit::format_summary(res, false));
  fmt::print("\nresults: {} (HDF5), {} (Markdown)\n", a.out, md_path);
  int status = (res.incorrect > 0 || res.failed > 0) ? 1 : 0;
  if (!a.json.empty()) {
    try {
      json_report::write_json_output(
          a.json, a.force, "audit",
          audit::audit_json(res, cfg, {"audit", recorded_command_line(), started},
                            {a.out, md_path}));
      fmt::print("json: {}\n", a.json);
    } catch (const std::exception& e) {  // after the work: the other files are written
      fmt::print(stderr, "xentlab audit: the JSON report was not written: {}\n", e.what());
      status = 3;
    }
  }
  std::fflush(stdout);  // the plot script writes to the same terminal
  if (!plots.empty() && no_plots_why.empty() && make_plots(a, plots) != 0) return 3;
  if (!plots.empty() && !no_plots_why.empty())
    fmt::print("plots: not drawn: {} (--no-plots leaves this note out)\n", no_plots_why);
  return status;
}

}  // namespace

void register_audit(CLI::App& app) {
  auto a = std::make_shared<AuditArgs>();
  CLI::App* c = app.add_subcommand(
      "audit",
      "Every strategy x recipe against the certified reference, on the embedded problem set; "
      "writes HDF5 results, a Markdown summary and the verdict. Exit 1 if any run is incorrect or "
      "failed.");
  c->add_option("--problems", a->problems,
                "problems of the embedded set (comma list): stories260k, calibrated, confident, "
                "offset, masked, all-options; default all");
  c->add_option(
      "--dataset,-d", a->datasets,
      "catalog datasets (xentlab datasets) or problem files (HDF5, .safetensors, a folder of "
      ".npy) to audit instead of the embedded set (repeatable, comma list)");
  c->add_option("--strategies", a->strategies,
                "strategies (comma list); default all registered but vocab_parallel and "
                "vocab_chunked, which run when named");
  c->add_option(
      "--recipes", a->recipes,
      "recipes input/logits/accum/grad (comma list); default: the grid of logits x accum in "
      "{fp32,bf16,fp16} for bf16 and fp16 inputs, plus all-fp32");
  c->add_option("--backend", a->backend, "auto (GPU if present), cpu (emulation) or cuda")
      ->capture_default_str();
  c->add_option("--rows", a->rows, "token rows of each problem's audited sub-batch (0 = all)")
      ->capture_default_str()
      ->check(non_negative());
  c->add_option("--vocab-rows", a->vocab_rows, "vocabulary rows compared for dW/db (0 = all)")
      ->capture_default_str()
      ->check(non_negative());
  auto* tok = c->add_option("--tokens,-N", a->tokens, "tokens N generated per synthetic problem")
                  ->capture_default_str();
  c->add_option("--vocab,-V", a->vocab,
                "vocabulary V of catalog datasets given with --dataset (default: the entry's)")
      ->check(positive());
  auto* hid = c->add_option("--hidden,-D", a->hidden, "hidden size D of the synthetic heads")
                  ->capture_default_str();
  c->add_option("--seed", a->seed, "seed of every generator and sample")->capture_default_str();
  c->add_option("--policy", a->policy, "pass/fail policy: audit, default, strict, lenient")
      ->capture_default_str();
  c->add_option("--out,-o", a->out, "HDF5 results file")->capture_default_str();
  c->add_option("--markdown", a->markdown, "Markdown summary (default: <out>.md)");
  c->add_option(
      "--plots", a->plots,
      "folder for the PNG plots (default: the results file's name without .h5, plus -plots; "
      "drawn where the plot script's Python imports h5py and matplotlib)");
  c->add_flag("--no-plots", a->no_plots, "draw no plots");
  c->add_option("--json", a->json,
                "write the machine-readable report here (docs/json.md; an existing JSON report of "
                "audit is replaced)")
      ->check(non_empty());
  c->add_flag("--force", a->force,
              "overwrite an existing results file (and a --json file that is not a report of "
              "audit)");
  c->add_flag("--append", a->append, "add the runs to an existing results file");
  c->add_flag("--quiet,-q", a->quiet, "no progress display");
  a->loss.defaults = LossDefaults::problem;
  add_loss_options(
      c, a->loss,
      {LossOption::reduction, LossOption::label_smoothing, LossOption::z_loss, LossOption::softcap,
       LossOption::logit_scale, LossOption::normalizer, LossOption::upstream});
  c->add_option("--chunk-tokens", a->chunk_tokens,
                "token rows per chunk of chunked and checkpointed, and per token group of "
                "fused's backward (0 = their default; naive does not chunk tokens)")
      ->check(non_negative())
      ->capture_default_str();
  auto* ranks = c->add_option("--ranks", a->ranks,
                              "vocabulary-parallel ranks P of vocab_parallel (its shards: "
                              "docs/vocab_parallel.md), 1 to V; only with --strategies naming it")
                    ->capture_default_str();
  c->add_option("--local-strategy", a->local_strategy,
                "the strategy each rank of vocab_parallel runs over its shard: naive, chunked, "
                "checkpointed or fused on the cpu backend, chunked on cuda (default chunked); only "
                "with --strategies naming vocab_parallel")
      ->check(non_empty());
  c->add_option("--vocab-splits", a->vocab_splits,
                "vocabulary splits P of vocab_chunked, 1 to V (0: the fewest whose logits slab of "
                "the sub-batch fits 1 GiB, one split at the audit's sub-batches); only with "
                "--strategies naming vocab_chunked")
      ->check(non_negative())
      ->capture_default_str();
  add_reference_options(c, a->reference);
  c->callback([a, tok, hid, ranks]() {
    a->tokens_given = tok->count() > 0;
    a->hidden_given = hid->count() > 0;
    a->ranks_given = ranks->count() > 0;
    const int rc = run_audit_command(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace xentlab::cli

// `xentlab golden`: writes a golden file (docs/formats.md) for a named dataset or a problem file:
// the problem bit-exact, the loss spec, the certified reference's outputs with their bounds,
// per-token covariates and provenance.
#include <fmt/core.h>

#include <algorithm>
#include <map>

#include "cli/commands.hpp"
#include "cli/options/loss.hpp"
#include "cli/options/reference.hpp"
#include "datasets/catalog.hpp"
#include "datasets/generators.hpp"
#include "datasets/io/atomic_file.hpp"
#include "datasets/io/h5.hpp"
#include "harness/verify/golden.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"

namespace xentlab::cli {
namespace {

struct GoldenArgs {
  std::string dataset = "stories260k", out, dtype, compress = "none";
  std::int64_t N = 0, V = 0, D = 0;
  double sigma = 0;
  std::uint64_t seed = 1;
  std::vector<std::string> params;
  LossOptions loss;  ///< LossDefaults::dataset: a given option overrides the dataset's spec
  GoldenOptions opt;
  bool no_grad = false;
  ReferenceChoice choice;
};

int run_golden(GoldenArgs& a, const std::string& command) {
  // Before generating anything: an existing file without --force (exit 2), a folder that takes no
  // file (exit 3).
  AtomicOutput(a.out, a.opt.force).check_writable();
  a.opt.compression = h5::parse_compression(a.compress);
  // The loss-spec overrides are checked before the dataset is generated or read (that can take
  // many seconds): each against the defaults, the values given on their own.
  (void)a.loss.check_given();
  {
    ReferenceOptions ro;
    apply_reference_choice(a.choice, ro);
    a.opt.tier = ro.tier;
    a.opt.memory_budget = ro.max_bytes;
  }
  a.opt.progress = progress_printer("reference");
  DatasetParams p;
  if (a.N > 0) p.N = a.N;
  if (a.V > 0) p.V = a.V;
  if (a.D > 0) p.D = a.D;
  if (!a.dtype.empty()) p.dtype = parse_dtype(a.dtype);
  if (a.sigma > 0) p.sigma = a.sigma;
  p.seed = a.seed;
  p.targets = target_engine_for(a.opt.tier);
  a.opt.gradients = !a.no_grad;
  // A catalog problem's shape is known before it is generated: what the whole command would hold
  // (golden_memory) is refused before the generation, which can take many seconds. (A file's
  // problem is checked by write_golden once loaded.)
  if (const auto& cat = dataset_catalog(); std::any_of(
          cat.begin(), cat.end(), [&](const DatasetEntry& e) { return e.name == a.dataset; })) {
    const DatasetEntry& e = find_dataset(a.dataset);
    GoldenShape g;
    g.N = p.N.value_or(e.defaults.N);
    g.V = !e.fixed_shape && p.V ? *p.V : e.defaults.V;
    g.D = e.defaults.D > 0 ? (!e.fixed_shape && p.D ? *p.D : e.defaults.D) : 0;
    g.dtype = !e.fixed_shape && p.dtype ? *p.dtype : e.defaults.dtype;
    // A linear head's calibrated targets drawn on the CPU hold its fp64 logits in blocks.
    if (g.D > 0 && !p.targets) g.generation_bytes = head_generation_bytes(g.N, g.V, g.D);
    check_golden_memory(g, a.opt,
                        fmt::format("the golden file of {} (N={} V={}{} {})", a.dataset, g.N, g.V,
                                    g.D > 0 ? fmt::format(" D={}", g.D) : "", to_string(g.dtype)));
  }
  p.progress = progress_printer("generating " + a.dataset +
                                (p.targets ? " (targets on " + p.targets->describe() + ")" : ""));
  for (const auto& kv : a.params) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos)
      throw InputError(fmt::format("--param '{}': expected key=value", kv));
    try {
      p.extra[kv.substr(0, eq)] = std::stod(kv.substr(eq + 1));
    } catch (const std::exception&) {
      throw InputError(fmt::format("--param '{}': the value is not a number", kv));
    }
  }
  const DatasetInstance ds =
      load_dataset(a.dataset, p, a.loss.ignore_index.value_or(LossSpec{}.ignore_index));
  const LossSpec spec = a.loss.over(ds.spec);
  spec.validate();  // e.g. a normaliser beside a dataset whose default reduction is not mean
  if (spec.reduction == Reduction::none)
    a.opt.upstream = a.loss.upstream_values(ds.problem.N, a.loss.upstream_seed);
  a.opt.command = command;
  fmt::print("problem  {}  ({}{})\nspec     {}\n", ds.problem.describe(), ds.generator,
             ds.generator.rfind("catalog:", 0) == 0 ? fmt::format(", seed {}", a.seed) : "",
             spec.describe());
  if (spec.reduction == Reduction::none) {
    const std::string u = a.loss.upstream_kind();
    fmt::print("upstream {}\n",
               u == "ones" ? std::string("ones (g = 1 for every token)")
               : u == "random"
                   ? fmt::format("random, seed {}: k/8 with k uniform in {{-8..16}} (stored)",
                                 a.loss.upstream_seed)
                   : fmt::format("{} (stored)", u));
  }
  const GoldenSummary s = write_golden(a.out, ds, spec, a.opt);
  fmt::print("rows     {} token rows{}, {} vocabulary rows\n", s.S, s.partial ? " (sampled)" : "",
             s.J);
  std::string outs;
  for (const auto& o : s.outputs) outs += (outs.empty() ? "" : ", ") + o;
  fmt::print("loss     {:.17g} ± {:.3g}{}\noutputs  {}\nwrote    {} in {:.2f} s\n", s.reduced_loss,
             s.reduced_loss_bound, s.partial ? " (over the sampled rows)" : "", outs, a.out,
             s.seconds);
  fmt::print("memory   estimated {}; budget {}\n", s.memory.describe(), s.budget.describe());
  if (a.opt.compression.enabled())
    fmt::print("stored   {} bytes of data for {} raw ({:.1f}% of raw, {}: {} bytes saved)\n",
               s.storage.stored_bytes, s.storage.raw_bytes,
               s.storage.raw_bytes ? 100.0 * static_cast<double>(s.storage.stored_bytes) /
                                         static_cast<double>(s.storage.raw_bytes)
                                   : 100.0,
               a.opt.compression.describe(),
               s.storage.raw_bytes > s.storage.stored_bytes
                   ? s.storage.raw_bytes - s.storage.stored_bytes
                   : 0);
  return 0;
}

}  // namespace

void register_golden(CLI::App& app) {
  auto a = std::make_shared<GoldenArgs>();
  CLI::App* c = app.add_subcommand(
      "golden", "Write a golden file: problem, spec, certified reference outputs and bounds");
  c->add_option("--dataset", a->dataset, "catalog name (xentlab datasets) or a problem file")
      ->capture_default_str();
  c->add_option("--out,-o", a->out, "golden file to write (.h5)")->required();
  c->add_flag("--force", a->opt.force, "overwrite an existing file");
  c->add_option("--compress", a->compress,
                "store the datasets chunked through shuffle and gzip: gzip (level 4) or "
                "gzip:LEVEL (1-9); none = uncompressed (any HDF5 reader, h5py included, reads "
                "either)")
      ->capture_default_str();
  c->add_option("--tokens,-N", a->N, "tokens N (default: the dataset's)")->check(positive());
  c->add_option("--vocab,-V", a->V, "vocabulary V")->check(positive());
  c->add_option("--hidden,-D", a->D, "hidden size D")->check(positive());
  c->add_option("--dtype", a->dtype, "input dtype: bf16, fp16, fp32");
  c->add_option("--sigma", a->sigma, "logit standard deviation")->check(positive());
  c->add_option("--seed", a->seed, "generator seed")->capture_default_str();
  c->add_option("--param", a->params, "dataset parameter key=value (see xentlab datasets)");
  c->add_option("--rows", a->opt.rows,
                "sample this many token rows (0 = all; sampling drops dW/db)")
      ->check(non_negative());
  c->add_option("--vocab-rows", a->opt.vocab_rows,
                "sample this many vocabulary rows of dW/db (0 = all)")
      ->check(non_negative());
  c->add_option("--sample-seed", a->opt.sample_seed, "seed of the row samples")
      ->capture_default_str();
  c->add_flag("--no-grad", a->no_grad, "forward outputs only (no dH, dW, db, dz)");
  c->add_option("--threads", a->opt.threads, "OpenMP threads (0 = default)")
      ->check(in_range(0, 4096));
  // The loss options in the order of the command line golden records (the reference options
  // among them).
  a->loss.defaults = LossDefaults::dataset;
  add_loss_options(c, a->loss,
                   {LossOption::reduction, LossOption::upstream, LossOption::normalizer});
  add_reference_options(c, a->choice);
  add_loss_options(c, a->loss,
                   {LossOption::empty_mean, LossOption::ignore_index, LossOption::label_smoothing,
                    LossOption::z_loss, LossOption::softcap, LossOption::logit_scale});
  c->callback([a, c]() {
    std::string cmd = "xentlab golden";
    for (const auto& r : c->remaining(true)) cmd += " " + r;
    for (const auto* o : c->get_options())
      if (o->count() && !o->get_lnames().empty() && o->get_lnames()[0] != "help")
        for (const auto& r : o->results())
          cmd +=
              fmt::format(" --{}{}", o->get_lnames()[0], o->get_expected_min() == 0 ? "" : " " + r);
    const int rc = run_golden(*a, cmd);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace xentlab::cli

#include "cli/options/loss.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "cli/commands.hpp"
#include "datasets/loaders.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"

namespace xentlab::cli {
namespace {

EmptyMean parse_empty_mean(const std::string& s) {
  if (s == "nan") return EmptyMean::nan;
  if (s == "zero") return EmptyMean::zero;
  throw InputError(fmt::format("--empty-mean '{}': expected nan or zero", s));
}

// The value of a string option, or null where it counts as left out: not given, or given empty
// where the command takes an empty value so (golden: --reduction, --upstream, --empty-mean;
// audit: --reduction).
const std::string* given(const std::optional<std::string>& v, bool empty_is_given) {
  return v && (empty_is_given || !v->empty()) ? &*v : nullptr;
}

const std::string* given_reduction(const LossOptions& o) {
  return given(o.reduction, o.defaults == LossDefaults::spec);
}

// The given reduction, ε, λ, softcap, scale and normaliser over `spec` (not ignore_index nor
// empty_mean: the checks before the data leave those to their own steps).
void apply_spec_options(const LossOptions& o, LossSpec& spec) {
  if (const std::string* r = given_reduction(o)) spec.reduction = parse_reduction(*r);
  if (o.label_smoothing) spec.label_smoothing = *o.label_smoothing;
  if (o.z_loss) spec.z_loss = *o.z_loss;
  if (o.softcap) spec.softcap = *o.softcap;
  if (o.logit_scale) spec.logit_scale = *o.logit_scale;
  if (o.normalizer) spec.normalizer = *o.normalizer;
}

// How a command's help names the source of a value left out ("" for LossDefaults::spec, whose
// defaults are shown by CLI11).
const char* default_from(LossDefaults d) {
  switch (d) {
    case LossDefaults::spec:
      return "";
    case LossDefaults::problem:
      return " (default: each problem's)";
    case LossDefaults::dataset:
      return " (default: the dataset's)";
  }
  return "";
}

std::string number(double v) {
  return fmt::format("{}", v);
}

}  // namespace

LossSpec LossOptions::over(LossSpec base) const {
  apply_spec_options(*this, base);
  if (ignore_index) base.ignore_index = *ignore_index;
  if (const std::string* e = given(empty_mean, false)) base.empty_mean = parse_empty_mean(*e);
  return base;
}

LossSpec LossOptions::check_given() const {
  LossSpec spec;
  apply_spec_options(*this, spec);
  spec.validate();
  if (defaults == LossDefaults::dataset) {
    // Any upstream gradient, ones included, is the gradient of reduction none.
    const std::string* r = given_reduction(*this);
    if (given(upstream, false) && spec.reduction != Reduction::none)
      throw InputError(fmt::format(
          "--upstream {}: an upstream gradient is taken with --reduction none only (got {})",
          *upstream, r ? *r : std::string("the default, mean")));
  } else {
    const std::string u = upstream_kind();
    if (u != "ones" && u != "random")
      throw InputError(fmt::format("--upstream '{}': expected ones or random", u));
    if (u == "random" && spec.reduction != Reduction::none)
      throw InputError(
          defaults == LossDefaults::problem
              ? "--upstream random: an upstream gradient is taken with reduction none only (add "
                "--reduction none)"
              : "--upstream random: an upstream gradient is taken with --reduction none only");
  }
  if (const std::string* e = given(empty_mean, false)) spec.empty_mean = parse_empty_mean(*e);
  if (ignore_index) spec.ignore_index = *ignore_index;
  return spec;
}

std::string LossOptions::upstream_kind() const {
  if (const std::string* u = given(upstream, defaults != LossDefaults::dataset)) return *u;
  return defaults == LossDefaults::dataset ? "random" : "ones";
}

std::vector<double> LossOptions::upstream_values(std::int64_t N, std::uint64_t seed) const {
  const std::string u = upstream_kind();
  if (u == "ones") return {};
  if (u == "random") return random_upstream(N, seed);
  if (defaults != LossDefaults::dataset)
    throw InputError(fmt::format("--upstream '{}': expected ones or random", u));
  const LoadedArray arr = read_npy(u);
  if (arr.is_integer || arr.shape.size() != 1 || arr.shape[0] != N)
    throw InputError(fmt::format(
        "--upstream {}: expected a float array of shape ({}) (one dL/dloss_i per token), got {} "
        "of shape ({})",
        u, N, arr.is_integer ? "an integer array" : "a float array", fmt::join(arr.shape, ", ")));
  std::vector<double> g(static_cast<std::size_t>(N));
  arr.floats.read(0, N, g.data());
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!std::isfinite(g[i]))
      throw InputError(fmt::format("--upstream {}: entry [{}] = {} is not finite", u, i, g[i]));
  return g;
}

void add_loss_options(CLI::App* cmd, LossOptions& o, std::initializer_list<LossOption> which) {
  const LossDefaults d = o.defaults;
  const bool show = d == LossDefaults::spec;  // the defaults are LossSpec's: show them
  const std::string from = default_from(d);
  const LossSpec defaults;
  // The default CLI11 shows for LossDefaults::spec, or nothing.
  const auto shown = [show](CLI::Option* opt, const std::string& value) {
    if (show) opt->default_str(value);
    return opt;
  };
  for (const LossOption which_one : which) {
    switch (which_one) {
      case LossOption::reduction:
        shown(cmd->add_option("--reduction", o.reduction, "none, mean or sum" + from),
              std::string(to_string(defaults.reduction)));
        break;
      case LossOption::ignore_index:
        shown(cmd->add_option(
                  "--ignore-index", o.ignore_index,
                  "ignore_index: rows with this target have loss 0 and gradient 0" + from),
              std::to_string(defaults.ignore_index));
        break;
      case LossOption::label_smoothing:
        shown(cmd->add_option("--label-smoothing", o.label_smoothing,
                              "label smoothing ε in [0, 1]" + from),
              number(defaults.label_smoothing));
        break;
      case LossOption::z_loss:
        shown(cmd->add_option("--z-loss", o.z_loss, "z-loss λ ≥ 0 (0 = off)" + from),
              number(defaults.z_loss));
        break;
      case LossOption::softcap:
        shown(cmd->add_option("--softcap", o.softcap, "softcap c: c·tanh(z/c) (0 = off)" + from),
              number(defaults.softcap));
        break;
      case LossOption::logit_scale:
        shown(cmd->add_option("--logit-scale", o.logit_scale,
                              "logit scale (1/temperature), > 0" + from),
              number(defaults.logit_scale));
        break;
      case LossOption::normalizer:
        shown(cmd->add_option("--normalizer", o.normalizer,
                              "reduction mean: divide the sum by this token count instead of the "
                              "number of valid rows (num_items_in_batch; 0 = that number)" +
                                  from),
              std::to_string(defaults.normalizer))
            ->check(non_negative());
        break;
      case LossOption::empty_mean:
        shown(cmd->add_option("--empty-mean", o.empty_mean,
                              "mean of a batch with no valid row: nan (PyTorch's) or zero" + from),
              "nan");
        break;
      case LossOption::upstream:
        if (d == LossDefaults::dataset) {
          cmd->add_option(
              "--upstream", o.upstream,
              "reduction none: the upstream gradient dL/dloss_i, random (default: seeded, k/8 "
              "with k in -8..16, zeros and negatives included), ones, or a .npy file of N floats");
          cmd->add_option("--upstream-seed", o.upstream_seed, "seed of --upstream random")
              ->capture_default_str();
        } else {
          cmd->add_option("--upstream", o.upstream,
                          std::string("reduction none: the upstream gradient dL/dloss_i, ones or "
                                      "random (seeded: k/8 with k in -8..16") +
                              (d == LossDefaults::spec ? ", from --seed)" : ")"))
              ->default_str("ones");
        }
        break;
    }
  }
}

}  // namespace xentlab::cli

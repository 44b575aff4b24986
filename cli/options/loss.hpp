#pragma once
// The loss options of the command line (numerics/loss_spec.hpp: reduction, ignore_index, label
// smoothing, z-loss, softcap, logit scale, normaliser, the mean of an empty batch, and the upstream
// gradient of reduction none), declared once for `xentlab reference`, `golden` and `audit`: their
// names, types, help and checks live here; a command chooses which it takes and where the values
// it is not given come from.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "numerics/loss_spec.hpp"

namespace xentlab::cli {

/// One loss option of the command line.
enum class LossOption : std::uint8_t {
  reduction,        ///< --reduction none|mean|sum
  ignore_index,     ///< --ignore-index
  label_smoothing,  ///< --label-smoothing ε
  z_loss,           ///< --z-loss λ
  softcap,          ///< --softcap c
  logit_scale,      ///< --logit-scale
  normalizer,       ///< --normalizer n (reduction mean: num_items_in_batch)
  empty_mean,       ///< --empty-mean nan|zero
  upstream,         ///< --upstream (and, where it may be random from its own seed, --upstream-seed)
};

/// Where the value of an option that is left out comes from, which decides the help text and the
/// upstream gradients a command takes.
enum class LossDefaults : std::uint8_t {
  /// `xentlab reference`: LossSpec's defaults, shown in the help. --upstream: ones (default) or
  /// random, seeded by the command's --seed.
  spec,
  /// `xentlab audit`: each problem's own spec; a given option overrides it for every problem.
  /// --upstream: ones (default) or random (seeded by the audit's seed, in harness/audit/).
  problem,
  /// `xentlab golden`: the dataset's spec. --upstream: random (the default for reduction none,
  /// seeded by --upstream-seed), ones, or a .npy file of N floats.
  dataset,
};

/// The loss options as given on the command line; an option left out is unset. An empty string
/// value counts as left out where the commands took it so before the options were shared: golden's
/// --reduction, --upstream and --empty-mean, audit's --reduction (reference refuses it).
struct LossOptions {
  std::optional<std::string> reduction;
  std::optional<std::int64_t> ignore_index;
  std::optional<double> label_smoothing, z_loss, softcap, logit_scale;
  std::optional<std::int64_t> normalizer;
  std::optional<std::string> empty_mean;
  std::optional<std::string> upstream;
  std::uint64_t upstream_seed = 1;  ///< --upstream-seed (LossDefaults::dataset)
  LossDefaults defaults = LossDefaults::spec;

  /// `base` with every given option applied. Throws InputError for an unknown reduction or
  /// --empty-mean value; the result is not validated (LossSpec::validate does that).
  LossSpec over(LossSpec base) const;

  /// The given options alone over LossSpec's defaults, validated: the check a command makes
  /// before generating or reading its problems (which can take minutes). Then the upstream
  /// gradient's refusals (an unknown kind for the ones-or-random commands; an upstream gradient
  /// beside a reduction other than none), each naming the option. Throws InputError.
  LossSpec check_given() const;

  /// The upstream gradient kind as the command line names it: the given --upstream, else the
  /// command's default ("ones"; LossDefaults::dataset: "random").
  std::string upstream_kind() const;

  /// The upstream gradient dL/dloss_i of N tokens for reduction none: empty for "ones" (g = 1),
  /// random_upstream(N, seed) for "random", else (LossDefaults::dataset) the .npy file of N
  /// finite floats the option names. Throws InputError naming the option and the file's fault.
  std::vector<double> upstream_values(std::int64_t N, std::uint64_t seed) const;
};

/// Adds the named loss options, in that order, to a subcommand, binding them to `o` (whose
/// `defaults` must be set first: it picks the help text and the default shown).
void add_loss_options(CLI::App* cmd, LossOptions& o, std::initializer_list<LossOption> which);

}  // namespace xentlab::cli

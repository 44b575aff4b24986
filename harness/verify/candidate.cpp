// write_candidate (harness/verify/verify.hpp): the candidate format of docs/formats.md; and
// run_strategy_candidate (harness/verify/candidate.hpp): a strategy's outputs as a candidate's.
#include "harness/verify/candidate.hpp"

#include <fmt/format.h>

#include "datasets/generators.hpp"
#include "datasets/io/atomic_file.hpp"
#include "datasets/io/h5.hpp"
#include "gpu/registry.hpp"
#include "harness/verify/verify.hpp"
#include "numerics/error.hpp"
#include "numerics/version.hpp"

namespace xentlab {

void write_candidate(const std::string& path, bool force,
                     const std::vector<std::pair<std::string, Tensor>>& outputs,
                     const std::string& implementation) {
  // One dataset a name: a second output of a name would replace the first without a word.
  for (auto a = outputs.begin(); a != outputs.end(); ++a)
    for (auto b = outputs.begin(); b != a; ++b)
      if (a->first == b->first)
        throw InputError(
            fmt::format("{}: the candidate's outputs name '{}' twice", path, a->first));
  AtomicOutput out(path, force);
  h5::File f = h5::File::create(out.temp_path());
  f.set_attr("format", kCandidateFormat);
  f.set_attr("format_version", kCandidateVersion);
  f.set_attr("implementation", implementation);
  for (const auto& [name, t] : outputs) f.write_tensor(name, t);
  f.close();
  out.commit();
}

namespace {
template <class Vec>  // std::vector<double> or HostArray<double>
Tensor tensor_of(const Vec& v, DType dtype, std::vector<std::int64_t> shape, const char* name) {
  Tensor t(dtype, std::move(shape), name);
  store_rounded(t, 0, v.data(), static_cast<std::int64_t>(v.size()));  // exact: already in dtype
  return t;
}
}  // namespace

StrategyCandidate run_strategy_candidate(const Golden& g, const Strategy& st, const Recipe& recipe,
                                         std::int64_t chunk_tokens, int ranks,
                                         const std::string& local_strategy,
                                         std::int64_t vocab_splits) {
  const Status can = st.can_implement(g.problem, g.spec, recipe);
  if (!can.ok())
    throw InputError(fmt::format("{} cannot run recipe {} on {}: {}", st.name(), recipe.name(),
                                 g.path, can.message));
  RunRequest req;
  req.problem = &g.problem;
  req.spec = g.spec;
  req.upstream = g.upstream;
  req.recipe = recipe;
  req.chunk_tokens = chunk_tokens;
  req.ranks = ranks;
  req.local_strategy = local_strategy;
  req.vocab_splits = vocab_splits;
  req.want_grads = g.D > 0 ? (!g.dH.empty() || !g.dW.empty() || !g.db.empty()) : !g.dz.empty();
  const StrategyOutputs o = st.run(req);
  const std::int64_t N = g.N, V = g.V, D = g.D;
  StrategyCandidate c;
  auto& out = c.outputs;
  out.emplace_back("loss", tensor_of(o.loss, o.loss_dtype, {N}, "loss"));
  out.emplace_back("lse", tensor_of(o.lse, o.loss_dtype, {N}, "lse"));
  out.emplace_back("reduced_loss", tensor_of(std::vector<double>{o.reduced_loss}, o.loss_dtype, {},
                                             "reduced_loss"));
  if (!o.dH.empty()) out.emplace_back("dH", tensor_of(o.dH, o.grad_dtype, {N, D}, "dH"));
  if (!o.dW.empty()) out.emplace_back("dW", tensor_of(o.dW, o.grad_dtype, {V, D}, "dW"));
  if (!o.db.empty()) out.emplace_back("db", tensor_of(o.db, o.grad_dtype, {V}, "db"));
  if (!o.dz.empty()) out.emplace_back("dz", tensor_of(o.dz, o.grad_dtype, {N, V}, "dz"));
  // A baseline model (make_baseline_models) is no row of the strategy table: it shards nothing.
  const StrategyEntry* entry = find_strategy_entry(st.name());
  const bool sharded = entry != nullptr && entry->traits.shards_vocabulary;
  const bool splits = entry != nullptr && entry->traits.splits_vocabulary;
  c.implementation = fmt::format(
      "xentlab {} {} {}{}{}{}", to_string(st.backend()), st.name(), recipe.name(),
      chunk_tokens > 0 ? fmt::format(" chunk_tokens={}", chunk_tokens) : "",
      sharded ? fmt::format(" ranks={} local={}", ranks > 0 ? ranks : 1,
                            local_strategy.empty() ? kDefaultLocalStrategy : local_strategy)
              : "",
      splits ? fmt::format(" vocab_splits={}", st.run_arithmetic(req).vocab_ranks) : "");
  c.seconds = o.seconds;
  return c;
}
}  // namespace xentlab

// The differential check's parts (judge/differential.hpp): error profiles, and the emulated
// baseline of a recipe on a golden problem (the CPU emulation, gpu/emulation, against the golden
// file's certified reference). docs/verify.md, "The criterion", derives the constants.
#include "judge/differential.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "gpu/registry.hpp"
#include "numerics/error.hpp"
#include "numerics/no_device.hpp"
#include "numerics/ulp.hpp"
#include "reference/reference.hpp"  // sample_rows

namespace xentlab {
namespace {

std::size_t sz(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

// Rows `rows` (positions) of a row-major (·, cols) array.
std::vector<double> pick(const std::vector<double>& a, std::int64_t cols,
                         const std::vector<std::int64_t>& rows) {
  std::vector<double> out(rows.size() * sz(cols));
  for (std::size_t q = 0; q < rows.size(); ++q)
    std::copy_n(a.begin() + rows[q] * cols, cols,
                out.begin() + static_cast<std::ptrdiff_t>(q) * cols);
  return out;
}

}  // namespace

VerifyCheck parse_verify_check(std::string_view text) {
  if (text == "bound") return VerifyCheck::bound;
  if (text == "differential") return VerifyCheck::differential;
  if (text == "both") return VerifyCheck::both;
  throw InputError(
      fmt::format("--check: unknown check '{}' (one of bound, differential, both)", text));
}

std::string_view to_string(VerifyCheck c) {
  switch (c) {
    case VerifyCheck::bound:
      return "bound";
    case VerifyCheck::differential:
      return "differential";
    case VerifyCheck::both:
      return "both";
  }
  return "?";
}

const ErrorProfile* Baseline::profile(const std::string& name) const {
  for (const auto& [n, p] : profiles)
    if (n == name) return &p;
  return nullptr;
}

const ErrorProfile* Baseline::best_profile(const std::string& name) const {
  for (const auto& [n, p] : best)
    if (n == name) return &p;
  return profile(name);
}

DType Baseline::output_dtype(const std::string& name) const {
  return name == "loss" || name == "lse" || name == "reduced_loss" ? loss_dtype : grad_dtype;
}

std::string Baseline::describe() const {
  if (status != "ok") return fmt::format("recipe {}: not run ({})", recipe.name(), status);
  std::string t = fmt::format("recipe {}, {}, ", recipe.name(), strategy);
  t += sampled ? fmt::format("{} of {} token rows (seed {})", token_rows.size(), golden_rows, seed)
               : fmt::format("all {} token rows", token_rows.size());
  if (!vocab_rows.empty()) t += fmt::format(", dW/db on {} vocabulary rows", vocab_rows.size());
  return t;
}

namespace {
// The compared part of a run over the whole problem: loss, lse (N), dH (N × D) and dz (N × V)
// cut to the token rows `rows`, dW (V × D) and db (V) to the vocabulary rows `vrows` (each
// ascending; dW and db left whole when `vrows` is empty); the reduced loss as it is. An output
// of another length than the whole problem's is left as it is (the caller's size check names it).
StrategyOutputs rows_of(StrategyOutputs o, const std::vector<std::int64_t>& rows,
                        const std::vector<std::int64_t>& vrows, std::int64_t N, std::int64_t D,
                        std::int64_t V) {
  const auto cut = [](auto& v, const std::vector<std::int64_t>& keep, std::int64_t count,
                      std::int64_t width) {
    if (static_cast<std::int64_t>(v.size()) != count * width) return;
    // Every row in order (the whole golden problem): nothing to cut, nothing copied.
    bool all = static_cast<std::int64_t>(keep.size()) == count;
    for (std::size_t i = 0; all && i < keep.size(); ++i)
      all = keep[i] == static_cast<std::int64_t>(i);
    if (all) return;
    std::remove_reference_t<decltype(v)> r;
    r.reserve(keep.size() * static_cast<std::size_t>(width));
    for (const std::int64_t i : keep)
      r.insert(r.end(), v.begin() + i * width, v.begin() + (i + 1) * width);
    v = std::move(r);
  };
  cut(o.loss, rows, N, 1);
  cut(o.lse, rows, N, 1);
  cut(o.dH, rows, N, std::max<std::int64_t>(D, 1));
  cut(o.dz, rows, N, V);
  if (!vrows.empty()) {
    cut(o.dW, vrows, V, std::max<std::int64_t>(D, 1));
    cut(o.db, vrows, V, 1);
  }
  o.token_rows = rows;
  return o;
}

// A reference the baseline is compared with: the golden file's own values (all rows: not
// copied, dW is 4 GB at the Llama-3-8B head) or the sampled rows' copy.
struct RefValues {
  const std::vector<double>* whole = nullptr;
  std::vector<double> picked;
  const std::vector<double>& values() const { return whole != nullptr ? *whole : picked; }
};
RefValues ref_of(const std::vector<double>& full, std::int64_t cols,
                 const std::vector<std::int64_t>& pos, bool all) {
  RefValues r;
  if (all)
    r.whole = &full;
  else
    r.picked = pick(full, cols, pos);
  return r;
}

// Adds strategy st's outputs o to the baseline's profiles: per output the largest error over the
// strategies (the profile of the largest normwise error, with the largest quantiles).
void add_profiles(Baseline& b, const Strategy& st, const StrategyOutputs& o,
                  const std::vector<std::pair<std::string, RefValues>>& refs) {
  for (const auto& [name, rv] : refs) {
    const std::vector<double>& ref = rv.values();
    // The run's values of the output, in place (dW is 4 GB at the Llama-3-8B head: not copied).
    const double* out = nullptr;
    std::size_t n = 0;
    const auto view = [&](const auto& v) {
      out = v.data();
      n = v.size();
    };
    if (name == "loss") view(o.loss);
    if (name == "lse") view(o.lse);
    if (name == "dH") view(o.dH);
    if (name == "dz") view(o.dz);
    if (name == "reduced_loss") {
      out = &o.reduced_loss;
      n = 1;
    }
    if (name == "dW") view(o.dW);
    if (name == "db") view(o.db);
    if (n == 0) continue;  // not produced (db without a bias)
    if (n != ref.size())   // never dropped without a word: a baseline of fewer runs
      throw std::logic_error(
          fmt::format("baseline: {} ({}) returned {} values of {} where the golden file holds {}",
                      st.name(), to_string(st.backend()), n, name, ref.size()));
    const ErrorProfile p =
        error_profile(out, ref.data(), static_cast<std::int64_t>(ref.size()), b.output_dtype(name));
    // Per output the largest error over the strategies: the profile of the largest normwise
    // error, with the largest quantiles.
    auto it = std::find_if(b.profiles.begin(), b.profiles.end(),
                           [&](const auto& e) { return e.first == name; });
    if (it == b.profiles.end()) {
      b.profiles.emplace_back(name, p);
      b.best.emplace_back(name, p);
      continue;
    }
    merge_into_baseline(it->second, p, false);
    // The most accurate: the profile of the smaller normwise error, with the smaller quantile.
    ErrorProfile& best =
        b.best[static_cast<std::size_t>(it - b.profiles.begin())].second;  // same order
    const double q = std::min(best.rel_q, p.rel_q);
    if (p.normwise < best.normwise) best = p;
    best.rel_q = q;
  }
}

}  // namespace

namespace {

// What emulate_baseline runs: the strategies of the chosen backends that implement the recipe
// (none: why), the golden file's token rows it runs on (positions `pos` into them: all, or a
// seeded sample of the work) and the vocabulary rows of dW/db it compares.
struct BaselineSetup {
  std::vector<std::unique_ptr<Strategy>> strategies;
  std::vector<const Strategy*> runs;
  std::string why;
  std::vector<std::int64_t> pos, token_rows, vocab_rows;
  bool sampled = false;
};

BaselineSetup setup_baseline(const Golden& g, const Recipe& recipe, const BaselineOptions& opt) {
  if (opt.rows < 0) throw InputError(fmt::format("baseline rows must be ≥ 0, got {}", opt.rows));
  const Problem& P = g.problem;
  BaselineSetup u;
  // Every strategy of the chosen backends that implements the recipe.
  if (opt.backends.empty()) throw InputError("the baseline needs at least one backend");
  for (const Backend be : opt.backends) {
    for (auto& s : make_strategies(be)) u.strategies.push_back(std::move(s));
    // The models of other correct implementations (sequential sums; on the emulation also
    // tensor-core accumulation where the recipe runs on tensor cores): a candidate of either
    // passes.
    for (auto& s : make_baseline_models(recipe, be)) u.strategies.push_back(std::move(s));
  }
  const auto excluded = [&](const std::string& name) {
    return std::find(opt.exclude.begin(), opt.exclude.end(), name) != opt.exclude.end();
  };
  for (const auto& s : u.strategies) {
    if (excluded(s->name())) continue;
    // The emulated checkpointed strategy is chunked's arithmetic bit for bit (its backward
    // recomputes the logits exactly; gpu/emulation/checkpointed.cpp): the same profile twice,
    // unless chunked is left out.
    if (s->backend() == Backend::cpu_emulation && s->name() == "checkpointed" &&
        !excluded("chunked"))
      continue;
    const Status ok = s->can_implement(P, g.spec, recipe);
    if (ok.ok())
      u.runs.push_back(s.get());
    else if (u.why.empty())
      u.why = ok.message;
  }
  if (u.runs.empty()) return u;
  // Token rows: all the golden file's (the default), or a seeded sample of at most opt.rows.
  const std::int64_t m = opt.rows > 0 ? std::min(opt.rows, g.S) : g.S;
  if (m < g.S) {
    u.sampled = true;
    u.pos = sample_rows(g.S, m, opt.seed);
  } else {
    u.pos.resize(sz(g.S));
    for (std::int64_t q = 0; q < g.S; ++q) u.pos[sz(q)] = q;
  }
  for (const std::int64_t q : u.pos) u.token_rows.push_back(g.token_rows[sz(q)]);
  // With sampled tokens dW and db are not compared: each is a sum over all N tokens, and the sum
  // over the sample is another quantity (measured: on calibrated N = 256, V = 32000, D = 1024 the
  // normwise error of bf16 dz's dW was 2.6× smaller over 16 sampled tokens than over all 256).
  if (!u.sampled && (!g.dW.empty() || !g.db.empty())) u.vocab_rows = g.vocab_rows;
  return u;
}

RunRequest baseline_request(const Golden& g, const Recipe& recipe, const BaselineSetup& u) {
  RunRequest req;
  req.problem = &g.problem;
  req.spec = g.spec;          // with the normaliser, when the golden file has one
  req.upstream = g.upstream;  // reduction none: the golden file's g (empty = ones)
  req.recipe = recipe;
  req.token_rows = u.token_rows;
  req.want_grads = !g.dH.empty() || !g.dW.empty() || !g.db.empty() || !g.dz.empty();
  req.want_db = !g.db.empty();  // a golden file holds db also for a problem without a bias
  // dW/db of the compared vocabulary rows only (one row when none is compared: the least work).
  req.vocab_rows =
      !u.vocab_rows.empty() || !g.problem.is_linear() ? u.vocab_rows : std::vector<std::int64_t>{0};
  return req;
}

}  // namespace

double baseline_memory_bytes(const Golden& g, const Recipe& recipe, const BaselineOptions& opt) {
  const BaselineSetup u = setup_baseline(g, recipe, opt);
  if (u.runs.empty()) return 0;
  const RunRequest req = baseline_request(g, recipe, u);
  const double m = static_cast<double>(u.token_rows.size()), N = static_cast<double>(g.N);
  const double J = static_cast<double>(u.vocab_rows.empty() ? 1 : u.vocab_rows.size());
  const double V = static_cast<double>(g.V), D = static_cast<double>(g.D);
  const bool grads = req.want_grads, linear = g.problem.is_linear();
  // The references compared with: the sampled rows' copies (all rows: the golden file's own
  // values, not copied; a reduced loss of one value).
  const double refs =
      u.sampled ? 8.0 * (2 * m + (g.dH.empty() ? 0 : m * D) + (g.dz.empty() ? 0 : m * V)) : 8.0;
  double largest = 2 * m;  // the largest output profiled
  if (grads) largest = std::max(largest, linear ? std::max(m * D, J * D) : m * V);
  // A profile's relative errors (one per element) and its quantile selection's gathered values
  // (judge/profile.cpp: at most three buckets of 2^25).
  const double profile = 8.0 * (largest + std::min(largest, 3.0 * 0x1p25));
  const bool every_row = !u.sampled && J == V;  // rows_of then keeps a device run's outputs whole
  double most = 0;
  for (const Strategy* st : u.runs) {
    // A device strategy runs the whole problem and returns every row (rows_of then keeps some).
    const bool device = st->backend() != Backend::cpu_emulation;
    const double rows = device ? N : m, vocab = device ? V : J;
    const double outputs =
        8.0 * (2 * rows + (grads ? (linear ? rows * D + vocab * D + vocab : rows * V) : 0.0));
    const double ws = device ? 0.0 : static_cast<double>(st->workspace_size(req));
    most = std::max(most, ws + outputs * (device && !every_row ? 2.0 : 1.0) + profile);
  }
  return refs + most;
}

Baseline emulate_baseline(const Golden& g, const Recipe& recipe, const BaselineOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  BaselineSetup u = setup_baseline(g, recipe, opt);
  Baseline b;
  b.recipe = recipe;
  b.golden_rows = g.S;
  b.seed = opt.seed;
  const Problem& P = g.problem;
  const std::vector<const Strategy*>& runs = u.runs;
  if (runs.empty()) {
    b.status = u.why.empty() ? "no emulated strategy" : u.why;
    return b;
  }
  // "naive, chunked (cpu-emulation), naive (cuda); per output the largest error"
  for (std::size_t i = 0; i < runs.size(); ++i) {
    b.strategy += (i == 0 ? "" : ", ") + runs[i]->name();
    if (i + 1 == runs.size() || runs[i + 1]->backend() != runs[i]->backend())
      b.strategy += fmt::format(" ({})", to_string(runs[i]->backend()));
  }
  b.strategy += "; per output the largest error";
  b.sampled = u.sampled;
  b.token_rows = u.token_rows;
  b.vocab_rows = u.vocab_rows;
  const std::vector<std::int64_t>& pos = u.pos;

  // The references the baseline is compared with.
  std::vector<std::pair<std::string, RefValues>> refs;
  const bool all_rows = !b.sampled;  // pos is then 0 … S−1
  if (!g.loss.empty()) refs.emplace_back("loss", ref_of(g.loss, 1, pos, all_rows));
  if (!g.lse.empty()) refs.emplace_back("lse", ref_of(g.lse, 1, pos, all_rows));
  if (!g.dH.empty()) refs.emplace_back("dH", ref_of(g.dH, g.D, pos, all_rows));
  if (!g.dz.empty()) refs.emplace_back("dz", ref_of(g.dz, g.V, pos, all_rows));
  if (!b.sampled) {
    if (g.reduced_loss && !g.partial)
      refs.emplace_back("reduced_loss", RefValues{nullptr, {*g.reduced_loss}});
    if (!g.dW.empty()) refs.emplace_back("dW", RefValues{&g.dW, {}});
    if (!g.db.empty()) refs.emplace_back("db", RefValues{&g.db, {}});
  }
  const RunRequest req = baseline_request(g, recipe, u);
  for (const Strategy* st : runs) {
    if (opt.progress)
      opt.progress(fmt::format(
          "baseline: {} ({}) on {} token rows (at {:.1f} s)", st->name(), to_string(st->backend()),
          b.token_rows.size(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
    StrategyOutputs o;
    try {
      if (st->backend() == Backend::cpu_emulation) {
        o = st->run(req);
      } else {
        // A device strategy runs the golden problem whole, as the candidate did (the CUDA
        // strategies return every row and every vocabulary row whatever the request asks), and
        // the compared rows are kept.
        RunRequest whole = req;
        whole.token_rows.clear();
        whole.vocab_rows.clear();
        o = rows_of(st->run(whole), b.token_rows, b.vocab_rows, P.N, P.D, P.V);
        if (g.S < P.N) {  // the golden file's dW and db sum over its S rows, the device's over N
          o.dW.clear();
          o.db.clear();
        }
      }
    } catch (const InputError& e) {  // what the strategy refuses to run
      b.status = fmt::format("{} ({}) failed: {}", st->name(), to_string(st->backend()), e.what());
      b.profiles.clear();
      return b;
    } catch (const std::bad_alloc&) {  // a working set beyond the host's memory
      b.status = fmt::format("{} ({}): out of host memory", st->name(), to_string(st->backend()));
      b.profiles.clear();
      return b;
    }
    b.loss_dtype = o.loss_dtype;
    b.grad_dtype = o.grad_dtype;
    add_profiles(b, *st, o, refs);
  }
  b.status = "ok";
  b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (opt.progress) opt.progress(fmt::format("baseline: done in {:.1f} s", b.seconds));
  return b;
}

namespace {

// Positions in sorted of each of values (each present).
std::vector<std::int64_t> positions_of(const std::vector<std::int64_t>& sorted,
                                       const std::vector<std::int64_t>& values) {
  std::vector<std::int64_t> pos;
  pos.reserve(values.size());
  for (const std::int64_t v : values)
    pos.push_back(std::lower_bound(sorted.begin(), sorted.end(), v) - sorted.begin());
  return pos;
}

// Whether the baseline was measured on every element of output `name` the golden file holds (its
// rows are the golden file's, in order): the candidate is then compared as it is.
bool every_element(const Golden& g, const Baseline& b, const std::string& name) {
  if (name == "reduced_loss") return true;
  const bool vocab = name == "dW" || name == "db";
  return vocab ? b.vocab_rows == g.vocab_rows : b.token_rows == g.token_rows;
}

// The candidate's values and the golden reference of output `name` on the elements the baseline
// was measured on (its token rows, or its vocabulary rows for dW/db).
std::pair<std::vector<double>, std::vector<double>> on_baseline_elements(
    const Golden& g, const Baseline& b, const std::string& name, const std::vector<double>& out,
    const std::vector<double>& ref) {
  if (name == "reduced_loss") return {out, ref};
  const bool vocab = name == "dW" || name == "db";
  const std::int64_t cols = name == "dH" || name == "dW" ? g.D : name == "dz" ? g.V : 1;
  const std::vector<std::int64_t> pos =
      vocab ? positions_of(g.vocab_rows, b.vocab_rows) : positions_of(g.token_rows, b.token_rows);
  return {select_rows(out, cols, pos), select_rows(ref, cols, pos)};
}

}  // namespace

DifferentialResult compare_with_baseline(const ErrorProfile& c, const ErrorProfile& base, DType out,
                                         const std::string& recipe) {
  DifferentialResult d;
  d.candidate = c;
  d.baseline = base;
  // One ULP of the recipe's output format (2u) and four ULP of fp32 (δ = 8·2^-24: exp and log of
  // two correct libraries, e.g. CUDA's expf ≤ 2 ULP and logf ≤ 1 ULP against glibc's ≤ 1 ULP
  // each, evaluated in fp32 before the output's rounding), relative per element: the quantile's
  // floor, and the normwise floor at the largest element (·max|ref|/‖ref‖₂). Normwise over every
  // element, the same differences in root mean square (kElementaryUlpsRms ULP of fp32, δ_rms) and,
  // for an output coarser than fp32, the output roundings they flip (an element moved by δ_rms
  // rounds to a neighbour 2u away with probability at most δ_rms/2u: rms 2u·√(δ_rms/2u)); the
  // normwise floor is the larger of the two. (A problem whose correct results are exact in the
  // emulation — a baseline of 0 — is judged by this floor alone; measured on an H100: the CUDA
  // strategies' dz of shared case C11, fp32, 2.1e-8 normwise, where one element's worth was
  // 8.7e-9.) Not of the candidate's storage format: an output stored coarser than the recipe
  // delivers it is itself a lowered precision.
  const double u = unit_roundoff(out), ulp32 = 2 * unit_roundoff(DType::fp32);
  const double floor = 2 * u + kElementaryUlps * ulp32;
  d.floor_rel = floor;
  const double rms = kElementaryUlpsRms * ulp32;
  const double every_element = out == DType::fp32 || out == DType::fp64
                                   ? rms
                                   : rms + 2 * u * std::sqrt(std::min(1.0, rms / (2 * u)));
  // (The ratio first: floor·max|ref| would lose its digits below 2^-1022.)
  d.floor_normwise =
      c.norm_ref > 0 ? std::max(floor * (c.max_ref / c.norm_ref), every_element) : floor;
  d.limit_normwise = kDifferentialK * base.normwise + d.floor_normwise;
  d.limit_rel_q = kDifferentialK * base.rel_q + d.floor_rel;
  d.quantile_compared = c.n >= kDifferentialMinElements && base.n >= kDifferentialMinElements;
  // The scale test needs kScaleMinElements: on fewer the baseline's projection is one or a few
  // draws of its rounding errors, no estimate of a systematic part, and |projection| ≤ normwise
  // (Cauchy–Schwarz) leaves the output to the normwise test (measured on an H100: the scalar
  // reduced_loss of a bf16-accumulation recipe over 37 tokens, +7.2e-3 on the GPU against the
  // emulation's 1.1e-4, both within 2 ULP of bf16).
  d.scale_compared = c.n >= kScaleMinElements && base.n >= kScaleMinElements;
  // The scale test: a correct implementation's error has no component along the reference
  // beyond the baseline's own systematic part and its random spread; one rounding (u) allows a
  // systematically directed rounding of the output.
  // A correct candidate may have k times the baseline's error, so k times its spread.
  d.limit_scale = kDifferentialK * (std::fabs(base.scale) + kScaleSigmas * base.scale_spread) + u;
  std::string why;
  // Comparisons that fail closed: a NaN statistic is not within its limit.
  if (!(c.normwise <= d.limit_normwise))
    why = fmt::format(
        "normwise relative error {:.3g} > {:g} × {:.3g} + {:.2g} (recipe {} "
        "emulated: {:.1f}× its error)",
        c.normwise, kDifferentialK, base.normwise, d.floor_normwise, recipe,
        base.normwise > 0 ? c.normwise / base.normwise : INFINITY);
  else if (d.quantile_compared && !(c.rel_q <= d.limit_rel_q))
    why = fmt::format(
        "{:g}-quantile of the element-wise relative error {:.3g} > {:g} × {:.3g} + "
        "{:.2g} (recipe {} emulated: {:.1f}× its error)",
        kDifferentialQuantile, c.rel_q, kDifferentialK, base.rel_q, d.floor_rel, recipe,
        base.rel_q > 0 ? c.rel_q / base.rel_q : INFINITY);
  else if (d.scale_compared && !(std::fabs(c.scale) <= d.limit_scale))
    why = fmt::format(
        "systematic scale: the error's projection on the reference is {:+.3g} (the output is "
        "{:.6g}× the reference's) > {:g} × {:.3g} + {:g} × {:.3g} + {:.2g} (recipe {} emulated: "
        "its projection and spread)",
        c.scale, 1 + c.scale, kDifferentialK, std::fabs(base.scale), kScaleSigmas,
        base.scale_spread, u, recipe);
  d.status = why.empty() ? "passed" : "incorrect";
  d.message = why.empty()
                  ? fmt::format("normwise {:.3g} ≤ {:.3g}{}", c.normwise, d.limit_normwise,
                                d.quantile_compared ? fmt::format(", q{:g} {:.3g} ≤ {:.3g}",
                                                                  100 * kDifferentialQuantile,
                                                                  c.rel_q, d.limit_rel_q)
                                                    : "")
                  : why;
  return d;
}

void merge_into_baseline(ErrorProfile& into, const ErrorProfile& p, bool first) {
  if (first) {
    into = p;
    return;
  }
  const double q = std::max(into.rel_q, p.rel_q), p50 = std::max(into.rel_p50, p.rel_p50),
               p99 = std::max(into.rel_p99, p.rel_p99), mx = std::max(into.rel_max, p.rel_max),
               sc = std::fabs(into.scale) >= std::fabs(p.scale) ? into.scale : p.scale,
               spread = std::max(into.scale_spread, p.scale_spread);
  if (p.normwise > into.normwise) into = p;
  into.rel_q = q;
  into.rel_p50 = p50;
  into.rel_p99 = p99;
  into.rel_max = mx;
  into.scale = sc;
  into.scale_spread = spread;
}

DifferentialResult differential_check(const Golden& g, const Baseline& b, const std::string& name,
                                      const std::vector<double>& out,
                                      const std::vector<double>& ref) {
  DifferentialResult d;
  const ErrorProfile* base = b.status == "ok" ? b.profile(name) : nullptr;
  if (!base) {
    d.status = "not judged";
    const bool sum = name == "reduced_loss" || name == "dW" || name == "db";
    d.message = b.status != "ok" ? fmt::format("the emulation did not run: {}", b.status)
                : sum && b.sampled
                    ? fmt::format(
                          "{} is a sum over all tokens and the baseline ran on {} of the {} token "
                          "rows (without --baseline-rows it runs them all)",
                          name, b.token_rows.size(), g.S)
                : name == "db" ? "the baseline returned no db"
                               : fmt::format("the emulated baseline has no {}", name);
    return d;
  }
  const DType dt = b.output_dtype(name);
  if (every_element(g, b, name))  // compared in place (dW is 4 GB at the Llama-3-8B head)
    return compare_with_baseline(
        error_profile(out.data(), ref.data(), static_cast<std::int64_t>(ref.size()), dt), *base, dt,
        b.recipe.name());
  const auto [c_out, c_ref] = on_baseline_elements(g, b, name, out, ref);
  return compare_with_baseline(
      error_profile(c_out.data(), c_ref.data(), static_cast<std::int64_t>(c_ref.size()), dt), *base,
      dt, b.recipe.name());
}

bool judged_by_rounding(const std::string& name, DType stored, DType recipe_dtype) {
  const bool loss_like = name == "loss" || name == "lse" || name == "reduced_loss";
  return loss_like && unit_roundoff(stored) > unit_roundoff(recipe_dtype);
}

DifferentialResult rounding_check(const std::string& name, const std::vector<double>& out,
                                  const std::vector<double>& ref, const std::vector<double>& tol,
                                  DType stored, const std::string& recipe) {
  if (out.size() != ref.size() || tol.size() != ref.size())
    throw InputError(fmt::format("rounding_check {}: {} values, {} references, {} tolerances", name,
                                 out.size(), ref.size(), tol.size()));
  DifferentialResult d;
  d.rounding = true;
  d.candidate =
      error_profile(out.data(), ref.data(), static_cast<std::int64_t>(ref.size()), stored);
  std::int64_t bad = 0, first = -1;
  double lo_first = 0, hi_first = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i]) || !std::isfinite(ref[i])) continue;  // the bound check's
    const double t = std::isfinite(tol[i]) ? tol[i] : 0.0;
    const double lo = round_to(ref[i] - t, stored), hi = round_to(ref[i] + t, stored);
    if (out[i] >= lo && out[i] <= hi) continue;
    if (bad++ == 0) {
      first = static_cast<std::int64_t>(i);
      lo_first = lo;
      hi_first = hi;
    }
  }
  d.status = bad == 0 ? "passed" : "incorrect";
  const auto fi = static_cast<std::size_t>(first);
  d.message = bad == 0
                  ? fmt::format(
                        "every value is a correct rounding into {} of a value within the recipe "
                        "{}'s tolerance of the reference",
                        to_string(stored), recipe)
                  : fmt::format(
                        "{} of {} values are not a correct rounding into {} of a value within the "
                        "recipe {}'s tolerance of the reference; first {}[{}]: {:.9g}, where the "
                        "reference {:.9g} ± {:.3g} rounds to [{:.9g}, {:.9g}]",
                        bad, ref.size(), to_string(stored), recipe, name, first, out[fi], ref[fi],
                        tol[fi], lo_first, hi_first);
  return d;
}

// --explain: the candidate's profile against every recipe of the default grid with the golden
// problem's input dtype.
std::vector<RecipeMatch> match_recipes(const Golden& g, const std::vector<ComparedOutput>& compared,
                                       const std::vector<Baseline>& baselines) {
  std::vector<RecipeMatch> ms;
  for (const Baseline& b : baselines) {
    RecipeMatch m;
    const Recipe r = b.recipe;
    m.recipe = r;
    m.status = b.status;
    m.profiles = b.profiles;
    if (b.status != "ok") {
      ms.push_back(std::move(m));
      continue;
    }
    int judged = 0;
    m.consistent = true;
    for (const auto& [name, out] : compared) {
      const ErrorProfile* base = b.profile(name);
      if (!base) continue;
      RefOutput ro;
      ref_output(g, name, ro);
      const auto [c_out, c_ref] = on_baseline_elements(g, b, name, out, *ro.ref);
      const DType dt = b.output_dtype(name);
      const DifferentialResult d = compare_with_baseline(
          error_profile(c_out.data(), c_ref.data(), static_cast<std::int64_t>(c_ref.size()), dt),
          *base, dt, r.name());
      ++judged;
      // Consistent: the candidate passes the recipe's differential check, and is not
      // kExplainAccuracyFactor times more accurate than the most accurate of its correct
      // implementations (then it is another, more accurate recipe), on the normwise error and
      // (where compared) on the quantile.
      const ErrorProfile& best = *b.best_profile(name);
      m.consistent =
          m.consistent && d.status == "passed" &&
          best.normwise <= kExplainAccuracyFactor * d.candidate.normwise &&
          (!d.quantile_compared || best.rel_q <= kExplainAccuracyFactor * d.candidate.rel_q);
      // Distance: log2 ratios of the error scales (each with its floor), the total variation of
      // the ULP histograms, and the difference of the systematic fractions bias/normwise.
      const auto lr = [](double a, double b, double f) {
        return std::fabs(std::log2((a + f) / (b + f)));
      };
      double tv = 0;
      for (int k = 0; k < kUlpBuckets; ++k)
        tv += std::fabs(d.candidate.ulp_hist[static_cast<std::size_t>(k)] -
                        base->ulp_hist[static_cast<std::size_t>(k)]);
      const auto sys = [](const ErrorProfile& p) {
        return p.normwise > 0 ? p.bias / p.normwise : 0.0;
      };
      m.distance += lr(d.candidate.normwise, base->normwise, d.floor_normwise) +
                    (d.quantile_compared ? lr(d.candidate.rel_q, base->rel_q, d.floor_rel) : 0.0) +
                    tv / 2 + std::fabs(sys(d.candidate) - sys(*base));
    }
    if (judged == 0) {
      m.consistent = false;
      m.status = "no output of the candidate has a baseline";
    }
    ms.push_back(std::move(m));
  }
  std::stable_sort(ms.begin(), ms.end(), [](const RecipeMatch& a, const RecipeMatch& b) {
    if (a.consistent != b.consistent) return a.consistent;
    if ((a.status == "ok") != (b.status == "ok")) return a.status == "ok";
    return a.distance < b.distance;
  });
  return ms;
}

std::vector<Recipe> explain_recipes(const Golden& g) {
  const DType in = g.problem.input_dtype();
  std::vector<Recipe> recipes;
  for (const Recipe& r : default_recipe_grid())
    if (r.input == in) recipes.push_back(r);
  if (recipes.size() > 1) return recipes;
  // The grid's recipes read on the stored inputs (an fp32 problem has one recipe of its own).
  recipes.clear();
  for (Recipe r : default_recipe_grid()) {
    r.input = in;
    if (std::find(recipes.begin(), recipes.end(), r) == recipes.end()) recipes.push_back(r);
  }
  return recipes;
}

std::vector<Backend> baseline_backends(const std::string& value, bool ask_device,
                                       const std::string& option) {
  if (value != "cpu" && value != "auto" && value != "cuda" && value != "all")
    throw InputError(fmt::format("{} must be cpu, cuda, all or auto, got '{}'", option, value));
  if (value == "cpu" || !ask_device) return {Backend::cpu_emulation};
  std::string why;
  const bool have_gpu = cuda_device_available(&why);
  if (value == "auto")
    return have_gpu ? std::vector<Backend>{Backend::cpu_emulation, Backend::cuda}
                    : std::vector<Backend>{Backend::cpu_emulation};
  if (!have_gpu) throw NoDeviceError(fmt::format("{} {}: {}", option, value, why));
  return value == "cuda" ? std::vector<Backend>{Backend::cuda}
                         : std::vector<Backend>{Backend::cpu_emulation, Backend::cuda};
}

}  // namespace xentlab

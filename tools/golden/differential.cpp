// The differential check's parts (tools/golden/verify.hpp): error profiles, and the emulated
// baseline of a recipe on a golden problem (the CPU emulation, gpu/emulation, against the golden
// file's certified reference). docs/verify.md, "The differential check", derives the constants.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "gpu/registry.hpp"
#include "numerics/error.hpp"
#include "numerics/ulp.hpp"
#include "reference/reference.hpp"  // sample_rows
#include "tools/golden/verify.hpp"

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

// Nearest-rank q-quantile of v (v is reordered).
double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0.0;
  auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  k = std::min(std::max<std::size_t>(k, 1), v.size()) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

int ulp_bucket(double d) {
  if (d < 1) return 0;
  if (d < 2) return 1;
  const int b = 1 + static_cast<int>(std::floor(std::log2(d)));
  return std::min(b, kUlpBuckets - 1);
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

ErrorProfile error_profile(const double* out, const double* ref, std::int64_t n, DType ulp_dtype) {
  if (n < 0) throw InputError(fmt::format("error_profile: n = {} < 0", n));
  ErrorProfile p;
  p.ulp_dtype = ulp_dtype;
  double max_ref = 0;
  for (std::int64_t i = 0; i < n; ++i)
    if (std::isfinite(ref[i])) max_ref = std::max(max_ref, std::fabs(ref[i]));
  p.rel_floor = 0x1p-20 * max_ref;
  std::vector<double> rel;
  rel.reserve(sz(n));
  // Sums of squares scaled by max|ref| (no overflow); the profile's own rounding (relative
  // ~n·u_fp64) is far below any error it measures.
  const double s = max_ref > 0 ? 1.0 / max_ref : 1.0;
  double ee = 0, rr = 0, se = 0;
  std::array<std::int64_t, kUlpBuckets> hist{};
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i]) || !std::isfinite(ref[i])) continue;
    const double e = out[i] - ref[i];
    ee += (e * s) * (e * s);
    rr += (ref[i] * s) * (ref[i] * s);
    se += e;
    rel.push_back(std::fabs(e) / std::max(std::fabs(ref[i]), p.rel_floor));
    ++hist[sz(ulp_bucket(ulp_distance(out[i], ref[i], ulp_dtype)))];
  }
  p.n = static_cast<std::int64_t>(rel.size());
  p.max_ref = max_ref;
  p.norm_ref = max_ref * std::sqrt(rr);
  p.normwise = rr > 0 ? std::sqrt(ee / rr) : (ee > 0 ? INFINITY : 0.0);
  if (p.n > 0) {
    p.bias = rr > 0 ? (se / static_cast<double>(p.n)) / (p.norm_ref / std::sqrt(double(p.n))) : 0.0;
    for (int b = 0; b < kUlpBuckets; ++b)
      p.ulp_hist[sz(b)] = static_cast<double>(hist[sz(b)]) / static_cast<double>(p.n);
    p.rel_q = quantile(rel, kDifferentialQuantile);
    p.rel_p50 = quantile(rel, 0.5);
    p.rel_p99 = quantile(rel, 0.99);
  }
  return p;
}

const ErrorProfile* Baseline::profile(const std::string& name) const {
  for (const auto& [n, p] : profiles)
    if (n == name) return &p;
  return nullptr;
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
}  // namespace

Baseline emulate_baseline(const Golden& g, const Recipe& recipe, const BaselineOptions& opt) {
  if (opt.rows < 0) throw InputError(fmt::format("baseline rows must be ≥ 0, got {}", opt.rows));
  const auto t0 = std::chrono::steady_clock::now();
  Baseline b;
  b.recipe = recipe;
  b.golden_rows = g.S;
  b.seed = opt.seed;
  const Problem& P = g.problem;
  // Every strategy of the chosen backends that implements the recipe.
  if (opt.backends.empty()) throw InputError("the baseline needs at least one backend");
  std::vector<std::unique_ptr<Strategy>> strategies;
  for (const Backend be : opt.backends)
    for (auto& s : make_strategies(be)) strategies.push_back(std::move(s));
  std::string why;
  std::vector<const Strategy*> runs;
  for (const auto& s : strategies) {
    if (std::find(opt.exclude.begin(), opt.exclude.end(), s->name()) != opt.exclude.end()) continue;
    const Status ok = s->can_implement(P, g.spec, recipe);
    if (ok.ok())
      runs.push_back(s.get());
    else if (why.empty())
      why = ok.message;
  }
  if (runs.empty()) {
    b.status = why.empty() ? "no emulated strategy" : why;
    return b;
  }
  // "naive, chunked (cpu-emulation), naive (cuda); per output the largest error"
  for (std::size_t i = 0; i < runs.size(); ++i) {
    b.strategy += (i == 0 ? "" : ", ") + runs[i]->name();
    if (i + 1 == runs.size() || runs[i + 1]->backend() != runs[i]->backend())
      b.strategy += fmt::format(" ({})", to_string(runs[i]->backend()));
  }
  b.strategy += "; per output the largest error";
  // The sampled work is the CPU's: the emulated strategies share kBaselineWork (the CUDA
  // kernels' share of the time is small).
  const auto cpu_runs = std::count_if(runs.begin(), runs.end(), [](const Strategy* st) {
    return st->backend() == Backend::cpu_emulation;
  });

  // Token rows: all the golden file's, or a seeded sample of them (positions into token_rows),
  // each strategy's share of the work kBaselineWork.
  const std::int64_t per_row = std::max<std::int64_t>(1, g.V * std::max<std::int64_t>(g.D, 1));
  std::int64_t m =
      opt.rows > 0 ? opt.rows
      : cpu_runs == 0
          ? g.S  // the device runs the whole problem anyway
          : std::max<std::int64_t>(kBaselineMinRows,
                                   kBaselineWork / std::max<std::int64_t>(1, cpu_runs) / per_row);
  m = std::min(m, g.S);
  std::vector<std::int64_t> pos;
  if (m < g.S) {
    b.sampled = true;
    pos = sample_rows(g.S, m, opt.seed);
  } else {
    pos.resize(sz(g.S));
    for (std::int64_t q = 0; q < g.S; ++q) pos[sz(q)] = q;
  }
  for (const std::int64_t q : pos) b.token_rows.push_back(g.token_rows[sz(q)]);

  // The references the baseline is compared with.
  std::vector<std::pair<std::string, std::vector<double>>> refs;
  if (!g.loss.empty()) refs.emplace_back("loss", pick(g.loss, 1, pos));
  if (!g.lse.empty()) refs.emplace_back("lse", pick(g.lse, 1, pos));
  if (!g.dH.empty()) refs.emplace_back("dH", pick(g.dH, g.D, pos));
  if (!g.dz.empty()) refs.emplace_back("dz", pick(g.dz, g.V, pos));
  const bool vocab_outputs = !g.dW.empty() || !g.db.empty();
  if (!b.sampled) {
    if (g.reduced_loss && !g.partial)
      refs.emplace_back("reduced_loss", std::vector<double>{*g.reduced_loss});
    if (vocab_outputs) b.vocab_rows = g.vocab_rows;
    if (!g.dW.empty()) refs.emplace_back("dW", g.dW);
    if (!g.db.empty()) refs.emplace_back("db", g.db);
  }
  // With sampled tokens dW and db are not compared: each is a sum over all N tokens, and the sum
  // over the sample is another quantity (measured: on calibrated N = 256, V = 32000, D = 1024 the
  // normwise error of bf16 dz's dW was 2.6× smaller over 16 sampled tokens than over all 256).

  RunRequest req;
  req.problem = &P;
  req.spec = g.spec;          // with the normaliser, when the golden file has one
  req.upstream = g.upstream;  // reduction none: the golden file's g (empty = ones)
  req.recipe = recipe;
  req.token_rows = b.token_rows;
  req.want_grads = !g.dH.empty() || !g.dW.empty() || !g.db.empty() || !g.dz.empty();
  // dW/db of the compared vocabulary rows only (one row when none is compared: the least work).
  req.vocab_rows =
      !b.vocab_rows.empty() || !P.is_linear() ? b.vocab_rows : std::vector<std::int64_t>{0};
  for (const Strategy* st : runs) {
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
    for (const auto& [name, ref] : refs) {
      std::vector<double> out;
      if (name == "loss") out = o.loss;
      if (name == "lse") out = o.lse;
      if (name == "dH") out.assign(o.dH.begin(), o.dH.end());
      if (name == "dz") out.assign(o.dz.begin(), o.dz.end());
      if (name == "reduced_loss") out = {o.reduced_loss};
      if (name == "dW") out.assign(o.dW.begin(), o.dW.end());
      if (name == "db") out = o.db;
      if (out.empty()) continue;     // not produced (db without a bias)
      if (out.size() != ref.size())  // never dropped without a word: a baseline of fewer runs
        throw std::logic_error(
            fmt::format("baseline: {} ({}) returned {} values of {} where the golden file holds {}",
                        st->name(), to_string(st->backend()), out.size(), name, ref.size()));
      const ErrorProfile p = error_profile(
          out.data(), ref.data(), static_cast<std::int64_t>(ref.size()), b.output_dtype(name));
      // Per output the largest error over the strategies: the profile of the largest normwise
      // error, with the largest quantiles.
      auto it = std::find_if(b.profiles.begin(), b.profiles.end(),
                             [&](const auto& e) { return e.first == name; });
      if (it == b.profiles.end()) {
        b.profiles.emplace_back(name, p);
        continue;
      }
      ErrorProfile& k = it->second;
      const double q = std::max(k.rel_q, p.rel_q), p50 = std::max(k.rel_p50, p.rel_p50),
                   p99 = std::max(k.rel_p99, p.rel_p99);
      if (p.normwise > k.normwise) k = p;
      k.rel_q = q;
      k.rel_p50 = p50;
      k.rel_p99 = p99;
    }
  }
  b.status = "ok";
  b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return b;
}

}  // namespace xentlab

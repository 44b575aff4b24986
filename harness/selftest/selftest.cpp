// `xentlab selftest` (harness/selftest/selftest.hpp): the golden files, the candidates, verify's
// verdict on each, the confusion matrix.
#include "harness/selftest/selftest.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "datasets/catalog.hpp"
#include "datasets/generators.hpp"
#include "gpu/registry.hpp"
#include "harness/selftest/faults.hpp"
#include "harness/verify/candidate.hpp"
#include "harness/verify/golden.hpp"
#include "harness/verify/verify.hpp"
#include "judge/differential.hpp"
#include "judge/tolerance.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"

namespace xentlab::selftest {
namespace fs = std::filesystem;

SelftestMatrix SelftestResult::matrix() const {
  SelftestMatrix m;
  for (const SelftestEntry& e : entries) {
    if (e.verdict == "inconclusive")
      (e.fault ? m.faults_inconclusive : m.correct_inconclusive)++;
    else if (!e.fault)
      (e.as_expected() ? m.correct_passed : m.correct_failed)++;
    else if (e.as_expected())
      m.faults_caught++;
    else
      (e.below_resolution.empty() ? m.faults_missed : m.faults_below_resolution)++;
  }
  return m;
}

bool SelftestResult::ok() const {
  // A correct candidate judged inconclusive is not rejected; a fault so judged is not caught.
  const SelftestMatrix m = matrix();
  return m.correct_failed == 0 && m.faults_missed == 0 && m.faults_inconclusive == 0 &&
         m.faults_below_resolution == 0 && !entries.empty();
}

bool SelftestResult::unresolved_only() const {
  const SelftestMatrix m = matrix();
  return m.correct_failed == 0 && m.faults_missed == 0 && m.faults_inconclusive == 0 &&
         m.faults_below_resolution > 0;
}

std::string below_resolution(const VerifyReport& rep, double delta,
                             const std::vector<std::string>& scaled) {
  const double d = std::fabs(delta);
  std::string limits;
  for (const OutputReport& o : rep.outputs) {
    if (std::find(scaled.begin(), scaled.end(), o.name) == scaled.end()) continue;
    const DifferentialResult& r = o.differential;
    if (o.status != "passed" || r.status != "passed" || r.rounding) return "";
    // A correct candidate's own error may be −L where the fault adds +δ: caught for sure only
    // past 2L (selftest.hpp).
    if (d > 2 * r.limit_normwise || (r.scale_compared && d > 2 * r.limit_scale)) return "";
    // The report's own numbers within the limits it passed under: else the check passed what
    // its measurements fail (a limit applied looser than reported): a miss. With the candidate's
    // measured scale s_f = s_c + δ(1 + s_c) (s_c its clean error) this also holds the fault to
    // what this candidate's own error can hide, not only to the worst case 2L.
    if (r.candidate.normwise > r.limit_normwise ||
        (r.scale_compared && std::fabs(r.candidate.scale) > r.limit_scale))
      return "";
    limits += fmt::format("{}{} normwise limit {:.3g}", limits.empty() ? "" : ", ", o.name,
                          r.limit_normwise);
    if (r.scale_compared) limits += fmt::format(" and scale limit {:.3g}", r.limit_scale);
  }
  if (limits.empty()) return "";
  return fmt::format(
      "below this problem's resolution: its relative error {:.3g} is within twice the limits "
      "the recipe's own error sets here ({}), where a correct candidate's own error the other "
      "way hides it; a larger problem (more tokens) resolves it",
      d, limits);
}

namespace {

// The loss-spec goldens' problem: the small calibrated head of the default.
constexpr std::int64_t kSpecN = 64, kSpecV = 1024, kSpecD = 128;
// Their ignored fraction, and the normaliser as a multiple of the valid rows (the token count of
// a gradient-accumulation step of that many equal micro-batches).
constexpr double kIgnoredFraction = 0.25;
constexpr std::int64_t kMicroBatches = 4;
double work_of(const Golden& g) {
  return static_cast<double>(g.N) * static_cast<double>(g.V) * static_cast<double>(g.D);
}

// The working folder: the given one, or a fresh temporary one removed at the end.
struct WorkDir {
  fs::path dir;
  bool remove = false;
  explicit WorkDir(const std::string& given) {
    if (!given.empty()) {
      dir = given;
      if (!fs::is_directory(dir))
        throw InputError(fmt::format("--workdir {}: not a folder", given));
      return;
    }
    dir = fs::temp_directory_path() / fmt::format("xentlab-selftest-{}", ::getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    remove = true;
  }
  ~WorkDir() {
    std::error_code ec;
    if (remove) fs::remove_all(dir, ec);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

// Writes one golden file and reads it back.
Golden make_golden(const WorkDir& w, GoldenKind kind, const SelftestOptions& o) {
  const bool main = kind == GoldenKind::mean;
  DatasetParams p;
  p.seed = o.seed;
  const std::string dataset = main ? o.dataset : "calibrated";
  if (const std::int64_t n = main ? o.N : kSpecN; n > 0) p.N = n;
  if (const std::int64_t v = main ? o.V : kSpecV; v > 0) p.V = v;
  if (const std::int64_t d = main ? o.D : kSpecD; d > 0) p.D = d;
  // A dataset's own size can be below the catalogue's least (llama3-8b's default is 16 tokens):
  // refused before the problem is generated.
  if (const std::int64_t n = p.N ? *p.N : find_dataset(dataset).defaults.N; main && n < kMinTokens)
    throw InputError(fmt::format(
        "--dataset {}: its {} token rows are fewer than the {} the fault catalogue needs (below "
        "that some faults are none): give --tokens {} or more",
        dataset, n, kMinTokens, kMinTokens));
  DatasetInstance ds = make_dataset(dataset, p);
  if (!ds.problem.is_linear())
    throw InputError(fmt::format(
        "--dataset {}: a problem of given logits; the selftest needs a linear head (H, W)",
        dataset));

  LossSpec spec = ds.spec;
  GoldenOptions go;
  if (kind == GoldenKind::ignore_normalizer) {
    ignore_rows(ds.problem, kIgnoredFraction, o.seed, spec.ignore_index);
    spec.normalizer = kMicroBatches * ds.problem.count_valid(spec.ignore_index);
  } else if (kind == GoldenKind::none_upstream) {
    spec.reduction = Reduction::none;
    go.upstream = random_upstream(ds.problem.N, o.seed + 1);
  }
  spec.validate();
  go.force = w.remove;  // a fresh temporary folder; in a given one an existing file is refused
  go.command = fmt::format("xentlab selftest ({} golden)", to_string(kind));
  const std::string path = w.path(fmt::format("golden-{}.h5", static_cast<int>(kind)));
  if (o.progress) o.progress(fmt::format("golden {}: {}", to_string(kind), ds.problem.describe()));
  write_golden(path, ds, spec, go);
  return read_golden(path);
}

// Judges candidates against one golden file; the baseline of each policy recipe is emulated once,
// and the policy's a-priori bounds are formed once for consecutive candidates of one policy (the
// candidates of a recipe follow each other; bounds of the whole dW are gigabytes at the Llama-3-8B
// head, so only the last policy's are kept).
class Judge {
 public:
  Judge(const Golden& g, GoldenKind kind, std::vector<Backend> baseline)
      : g_(g), kind_(kind), baseline_(std::move(baseline)) {}

  // Verifies the candidate (held in memory: verify_outputs, the checks of verify_candidate without
  // a file written and read back) under e's policy, fills e's verdict.
  void judge(const Outputs& outputs, const std::string& implementation, SelftestEntry& e) {
    const VerifyPolicy pol = make_verify_policy(e.policy);
    VerifyOptions vo;
    vo.baseline.backends = baseline_;
    if (const std::optional<Recipe> r = policy_recipe(pol, g_.problem.input_dtype())) {
      auto it = baselines_.find(r->name());
      if (it == baselines_.end())
        it = baselines_.emplace(r->name(), emulate_baseline(g_, *r, vo.baseline)).first;
      vo.baseline_given = &it->second;
    }
    if (!pol.explicit_tol) {
      if (bounds_.policy != pol.describe(g_.problem.input_dtype())) {
        bounds_ = PolicyBounds{};  // the last policy's released before the next ones are formed
        policy_bounds(g_, pol, bounds_);
      }
      vo.bounds_given = &bounds_;
    }
    const VerifyReport rep = verify_outputs(g_, outputs, implementation, pol, vo);
    e.verdict = rep.verdict;  // passed, failed, inconclusive or not judged
    e.reason = rep.reason;
    for (const OutputReport& o : rep.outputs)
      if (o.status != "passed" && o.status != "skipped") {
        std::string by;
        if (o.bound_status == "incorrect") by = "bound";
        if (o.differential.status == "incorrect")
          by += by.empty() ? "differential" : "+differential";
        e.failing.push_back(
            fmt::format("{} {}{}", o.name, o.status, by.empty() ? "" : " (" + by + ")"));
      }
    if (!e.failing.empty()) e.deciding = e.failing.front();
    if (e.fault && e.verdict == "passed" && e.scale_delta != 0)
      e.below_resolution = below_resolution(rep, e.scale_delta, e.scaled);
  }
  GoldenKind kind() const { return kind_; }
  const Golden& golden() const { return g_; }

 private:
  const Golden& g_;
  GoldenKind kind_;
  std::vector<Backend> baseline_;
  std::map<std::string, Baseline> baselines_;
  PolicyBounds bounds_;
};

// Makes and judges one candidate; an exception is the entry's "error".
void run_entry(Judge& j, SelftestEntry e, const std::function<Outputs(std::string&)>& make,
               const SelftestOptions& o, std::vector<SelftestEntry>& out) {
  const auto t0 = std::chrono::steady_clock::now();
  e.golden = to_string(j.kind());
  try {
    std::string impl = "xentlab selftest: " + e.name;
    const Outputs outputs = make(impl);
    j.judge(outputs, impl, e);
  } catch (const std::exception& ex) {
    e.verdict = "error";
    e.reason = ex.what();
  }
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.progress)
    o.progress(fmt::format("{:<5} {:<18} {:<42} {} ({:.1f} s)", e.fault ? "fault" : "ok", e.golden,
                           e.name, e.verdict, e.seconds));
  out.push_back(std::move(e));
}

// The recipes a strategy candidate runs: on the main golden every recipe of the default grid of
// the problem's input dtype; on the loss-spec goldens the recipe of the input dtype's policy.
std::vector<Recipe> strategy_recipes(const Golden& g, GoldenKind kind) {
  const DType in = g.problem.input_dtype();
  if (kind != GoldenKind::mean)
    return {*policy_recipe(make_verify_policy(std::string(to_string(in))), in)};
  std::vector<Recipe> out;
  for (const Recipe& r : default_recipe_grid())
    if (r.input == in) out.push_back(r);
  return out;
}

// Every registered strategy of each backend in its recipes, judged under the recipe's policy.
void strategy_entries(Judge& j, const SelftestOptions& o, SelftestResult& res) {
  const Golden& g = j.golden();
  for (const Backend b : o.backends) {
    std::string why;
    if (b == Backend::cuda && !cuda_device_available(&why)) {
      if (j.kind() == GoldenKind::mean)
        res.notes.push_back(fmt::format("no CUDA strategy candidates: {}", why));
      continue;
    }
    if (b == Backend::cpu_emulation && work_of(g) > kEmulationWork) {
      res.notes.push_back(fmt::format(
          "no emulated strategy candidates on the {} golden: N·V·D = {:.3g} > 2^28 (use "
          "--backend cuda)",
          to_string(j.kind()), work_of(g)));
      continue;
    }
    // Recipe by recipe: the candidates of one policy follow each other, so its bounds are formed
    // once (the Judge keeps the last policy's).
    const auto strategies = make_strategies(b, StrategySet::all);
    for (const Recipe& r : strategy_recipes(g, j.kind()))
      for (const auto& st : strategies) {
        if (!st->can_implement(g.problem, g.spec, r).ok()) continue;  // not one of its recipes
        SelftestEntry e;
        e.name = fmt::format("{} {} {}", st->name(), to_string(b), r.name());
        e.description = "a registered strategy in one of its recipes";
        e.policy = r.name();
        run_entry(
            j, e,
            [&](std::string& impl) {
              StrategyCandidate c = run_strategy_candidate(g, *st, r);
              impl = c.implementation;
              return std::move(c.outputs);
            },
            o, res.entries);
      }
  }
}

void made_entries(Judge& j, const std::vector<MadeCandidate>& list, const SelftestOptions& o,
                  SelftestResult& res) {
  for (const MadeCandidate& m : list) {
    if (std::find(m.goldens.begin(), m.goldens.end(), j.kind()) == m.goldens.end()) continue;
    if (m.max_work > 0 && work_of(j.golden()) > m.max_work &&
        !(m.gpu_above_max_work && cuda_device_available())) {
      res.notes.push_back(
          fmt::format("{} left out on the {} golden: N·V·D = {:.3g} > {:.3g}{}", m.name,
                      to_string(j.kind()), work_of(j.golden()), m.max_work,
                      m.gpu_above_max_work ? " and no GPU for its CUDA version" : ""));
      continue;
    }
    SelftestEntry e;
    e.name = m.name;
    e.fault = m.fault;
    e.description = m.description;
    e.policy = m.policy;
    e.expect_pass = !m.fault;
    e.scale_delta = m.scale_delta;
    e.scaled = m.scaled;
    run_entry(
        j, e, [&](std::string&) { return m.make(j.golden()); }, o, res.entries);
  }
}

}  // namespace

SelftestResult run_selftest(const SelftestOptions& o) {
  if (o.N < 0 || o.V < 0 || o.D < 0)
    throw InputError(
        fmt::format("sizes must be ≥ 0 (0: the dataset's), got N={} V={} D={}", o.N, o.V, o.D));
  if (o.N > 0 && o.N < kMinTokens)
    throw InputError(fmt::format(
        "--tokens {}: the fault catalogue needs at least {} token rows (a stale row needs a "
        "second row, the chunk faults four chunks, and a loss 1e-3 too large under the bf16 "
        "policy is within one bf16 rounding per row, seen only across rows: at N = 16 it is not, "
        "at 32 it is); below that some faults are none",
        o.N, kMinTokens));
  // One class: its softmax is its one-hot for every input, so the loss is 0 and every gradient
  // exactly 0 — zeroing or scaling a gradient or the loss is no fault, and most of the catalogue
  // would be reported "missed".
  if (o.V == 1)
    throw InputError(
        "--vocab 1: with one class the loss is 0 and every gradient exactly 0 for any input (the "
        "softmax of one logit is its one-hot), so the faults that zero or scale a gradient or the "
        "loss are none; give --vocab 2 or more");
  (void)find_dataset(o.dataset);  // an unknown name is refused before any work
  const WorkDir w(o.workdir);
  SelftestResult res;
  for (const GoldenKind kind :
       {GoldenKind::mean, GoldenKind::ignore_normalizer, GoldenKind::none_upstream}) {
    const Golden g = make_golden(w, kind, o);
    res.goldens.push_back(fmt::format("{:<18} {} ({}), {}", to_string(kind), g.problem.describe(),
                                      kind == GoldenKind::mean ? o.dataset : "calibrated",
                                      g.spec.describe()));
    Judge j(g, kind, o.baseline_backends);
    strategy_entries(j, o, res);
    made_entries(j, correct_candidates(), o, res);
    made_entries(j, fault_catalogue(), o, res);
  }
  return res;
}

}  // namespace xentlab::selftest

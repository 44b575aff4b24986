#include "reference/oracle.hpp"

#include <fmt/format.h>

#include <boost/math/special_functions/log1p.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "numerics/error.hpp"

namespace xentlab {
namespace {

mp_float mp_inf() {
  return std::numeric_limits<mp_float>::infinity();
}

double ratio_of(double fast, double oracle, double bound) {
  if (std::isnan(fast) && std::isnan(oracle)) return 0.0;
  if (std::isinf(fast) || std::isinf(oracle) || std::isnan(fast) || std::isnan(oracle))
    return fast == oracle ? 0.0 : std::numeric_limits<double>::infinity();
  const double diff = std::fabs(fast - oracle);
  if (diff == 0.0) return 0.0;
  return bound > 0.0 ? diff / bound : std::numeric_limits<double>::infinity();
}

}  // namespace

Oracle::Oracle(const Problem& problem, const LossSpec& spec, std::vector<double> upstream)
    : pb_(problem), sp_(spec), upstream_(std::move(upstream)) {
  sp_.validate();
  pb_.validate(sp_.ignore_index);
  n_valid_ = pb_.count_valid(sp_.ignore_index);
}

mp_float Oracle::value(char which, std::int64_t flat, const Tensor& t) const {
  mp_float v = mp_float(t.get(flat));
  if (!delta_.empty()) {
    auto it = delta_.find({which, flat});
    if (it != delta_.end()) v += it->second;
  }
  return v;
}

void Oracle::perturb(char which, std::int64_t flat, const mp_float& delta) {
  delta_[{which, flat}] += delta;
  cache_.clear();
}

const Oracle::Row& Oracle::row(std::int64_t i) {
  auto it = cache_.find(i);
  if (it != cache_.end()) return it->second;
  const std::int64_t V = pb_.V, D = pb_.D;
  const std::int64_t t = pb_.targets[static_cast<std::size_t>(i)];
  const bool valid = t != sp_.ignore_index;
  std::vector<mp_float> z(static_cast<std::size_t>(V)), chain(static_cast<std::size_t>(V));
  std::vector<mp_float> h;
  if (pb_.is_linear()) {
    h.resize(static_cast<std::size_t>(D));
    for (std::int64_t d = 0; d < D; ++d)
      h[static_cast<std::size_t>(d)] = value('H', i * D + d, pb_.H);
  }
  const mp_float scale(sp_.logit_scale), cap(sp_.softcap);
  for (std::int64_t j = 0; j < V; ++j) {
    mp_float r;
    if (pb_.is_linear()) {
      const mp_float b = pb_.bias ? value('b', j, *pb_.bias) : mp_float(0);
      if (boost::multiprecision::isinf(b)) {
        r = b;
      } else {
        r = b;
        for (std::int64_t d = 0; d < D; ++d)
          r += h[static_cast<std::size_t>(d)] * value('W', j * D + d, pb_.W);
      }
    } else {
      r = value('Z', i * V + j, pb_.logits);
    }
    mp_float zz = scale * r, ch = scale;
    if (sp_.softcap > 0) {
      const mp_float x = zz / cap;
      zz = cap * tanh(x);
      if (boost::multiprecision::isinf(x)) {
        ch = 0;
      } else {
        const mp_float co = cosh(x);
        ch = scale / (co * co);
      }
    }
    z[static_cast<std::size_t>(j)] = zz;
    chain[static_cast<std::size_t>(j)] = ch;
  }
  Row out;
  out.dz.assign(static_cast<std::size_t>(V), mp_float(0));
  std::int64_t k = -1;
  mp_float a = -mp_inf();
  for (std::int64_t j = 0; j < V; ++j)
    if (z[static_cast<std::size_t>(j)] > a) {
      a = z[static_cast<std::size_t>(j)];
      k = j;
    }
  if (k < 0) {
    out.lse = -mp_inf();
    out.ce = valid ? mp_inf() : mp_float(0);
    out.z_term = valid && sp_.z_loss > 0 ? mp_inf() : mp_float(0);
    out.loss = out.ce + out.z_term;
    return cache_.emplace(i, std::move(out)).first->second;
  }
  std::vector<mp_float> e(static_cast<std::size_t>(V));
  mp_float s = 0;
  for (std::int64_t j = 0; j < V; ++j) {
    e[static_cast<std::size_t>(j)] = exp(z[static_cast<std::size_t>(j)] - a);
    if (j != k) s += e[static_cast<std::size_t>(j)];
  }
  out.lse = a + boost::math::log1p(s);
  if (!valid) {
    out.ce = out.z_term = out.loss = 0;
    return cache_.emplace(i, std::move(out)).first->second;
  }
  const mp_float eps(sp_.label_smoothing), lam(sp_.z_loss), Vm(static_cast<double>(V));
  mp_float ce = out.lse - (1 - eps) * z[static_cast<std::size_t>(t)];
  if (sp_.label_smoothing > 0) {
    mp_float zs = 0;
    for (const auto& zj : z) zs += zj;
    ce -= eps / Vm * zs;
  }
  out.ce = ce;
  out.z_term = lam * out.lse * out.lse;
  out.loss = out.ce + out.z_term;
  // Reduction scale g_i.
  mp_float g = 1;
  if (sp_.reduction == Reduction::mean) {
    const std::int64_t n = sp_.mean_count(n_valid_);
    g = n > 0 ? mp_float(1) / n : mp_float(0);
  }
  if (sp_.reduction == Reduction::none && !upstream_.empty())
    g = mp_float(upstream_[static_cast<std::size_t>(i)]);
  const mp_float one_plus_s = 1 + s;
  mp_float not_t = 0;  // Σ_{j≠t} e_j
  for (std::int64_t j = 0; j < V; ++j)
    if (j != t) not_t += e[static_cast<std::size_t>(j)];
  for (std::int64_t j = 0; j < V; ++j) {
    const mp_float pj = e[static_cast<std::size_t>(j)] / one_plus_s;
    mp_float G = pj * (1 + 2 * lam * out.lse) - eps / Vm;
    if (j == t) G = -(not_t / one_plus_s) + 2 * lam * out.lse * pj + eps * (1 - 1 / Vm);
    out.dz[static_cast<std::size_t>(j)] = g * G * chain[static_cast<std::size_t>(j)];
  }
  return cache_.emplace(i, std::move(out)).first->second;
}

mp_float Oracle::reduced_loss() {
  mp_float tot = 0;
  for (std::int64_t i = 0; i < pb_.N; ++i) {
    if (pb_.targets[static_cast<std::size_t>(i)] == sp_.ignore_index) continue;
    const mp_float w = (sp_.reduction == Reduction::none && !upstream_.empty())
                           ? mp_float(upstream_[static_cast<std::size_t>(i)])
                           : mp_float(1);
    tot += w * row(i).loss;
  }
  if (sp_.reduction == Reduction::mean) {
    const std::int64_t n = sp_.mean_count(n_valid_);
    if (n == 0)
      return sp_.empty_mean == EmptyMean::nan ? std::numeric_limits<mp_float>::quiet_NaN()
                                              : mp_float(0);
    tot /= n;
  }
  return tot;
}

mp_float Oracle::dH(std::int64_t i, std::int64_t d) {
  const Row& r = row(i);
  mp_float acc = 0;
  for (std::int64_t j = 0; j < pb_.V; ++j)
    if (r.dz[static_cast<std::size_t>(j)] != 0)
      acc += r.dz[static_cast<std::size_t>(j)] * value('W', j * pb_.D + d, pb_.W);
  return acc;
}

mp_float Oracle::dW(std::int64_t j, std::int64_t d, const std::vector<std::int64_t>& rows) {
  mp_float acc = 0;
  for (std::int64_t i : rows) {
    const mp_float& x = row(i).dz[static_cast<std::size_t>(j)];
    if (x != 0) acc += x * value('H', i * pb_.D + d, pb_.H);
  }
  return acc;
}

mp_float Oracle::db(std::int64_t j, const std::vector<std::int64_t>& rows) {
  mp_float acc = 0;
  for (std::int64_t i : rows) acc += row(i).dz[static_cast<std::size_t>(j)];
  return acc;
}

std::string OracleReport::summary() const {
  std::map<std::string, std::pair<std::int64_t, const OracleCheck*>> worst;
  std::map<std::string, std::int64_t> fails;
  for (const auto& c : checks) {
    auto& w = worst[c.output];
    ++w.first;
    if (!w.second || c.ratio > w.second->ratio) w.second = &c;
    if (c.ratio > 1.0) ++fails[c.output];
  }
  std::string s;
  for (const auto& [name, w] : worst) {
    const OracleCheck& c = *w.second;
    std::string idx;
    for (std::size_t q = 0; q < c.index.size(); ++q)
      idx += (q ? "," : "") + std::to_string(c.index[q]);
    s += fmt::format(
        "  {:<8} {:>4} checked, {} over bound; worst [{}] fast={:.17g} oracle={:.17g} "
        "bound={:.3g} ratio={:.3g}\n",
        name, w.first, fails[name], idx, c.fast, c.oracle, c.bound, c.ratio);
  }
  for (const auto& k : skipped) s += "  skipped: " + k + "\n";
  return s;
}

OracleReport check_with_oracle(const Problem& pb, const LossSpec& sp, const ReferenceOptions& opt,
                               const ReferenceResult& fast, const OracleSampleSpec& spec) {
  Oracle oracle(pb, sp, opt.upstream);
  return check_with_oracle(oracle, pb, sp, opt, fast, spec);
}

OracleReport check_with_oracle(Oracle& oracle, const Problem& pb, const LossSpec& sp,
                               const ReferenceOptions& opt, const ReferenceResult& fast,
                               const OracleSampleSpec& spec) {
  (void)opt;  // the oracle was made with options.upstream
  OracleReport rep;
  std::mt19937_64 rng(spec.seed);
  auto add = [&](const char* name, std::vector<std::int64_t> idx, double f, double b,
                 const mp_float& o) {
    OracleCheck c;
    c.output = name;
    c.index = std::move(idx);
    c.fast = f;
    c.bound = b;
    c.oracle = o.convert_to<double>();
    // Compare in multiprecision: the oracle's own rounding to double must not count.
    if (std::isfinite(f) && boost::multiprecision::isfinite(o)) {
      const mp_float diff = abs(mp_float(f) - o);
      c.ratio = diff == 0 ? 0.0
                          : (b > 0 ? (diff / b).convert_to<double>()
                                   : std::numeric_limits<double>::infinity());
    } else {
      c.ratio = ratio_of(f, c.oracle, b);
    }
    rep.max_ratio = std::max(rep.max_ratio, c.ratio);
    if (c.ratio > 1.0) ++rep.failures;
    rep.checks.push_back(std::move(c));
  };
  const auto S = static_cast<std::int64_t>(fast.token_rows.size());
  const std::int64_t V = pb.V, D = pb.D;
  // Token rows: seeded sample plus every row whose loss is ill-conditioned.
  std::set<std::int64_t> qs;
  for (std::int64_t q : sample_rows(S, spec.rows, spec.seed)) qs.insert(q);
  std::int64_t extra = 0;
  for (std::int64_t q = 0; q < S && extra < spec.rows; ++q) {
    const double v = fast.loss[static_cast<std::size_t>(q)];
    if (std::isfinite(v) &&
        fast.loss_bound[static_cast<std::size_t>(q)] > spec.ill_conditioned * std::fabs(v) &&
        !qs.count(q)) {
      qs.insert(q);
      ++extra;
    }
  }
  for (std::int64_t q : qs) {
    const std::int64_t i = fast.token_rows[static_cast<std::size_t>(q)];
    const Oracle::Row& r = oracle.row(i);
    add("lse", {i}, fast.lse[static_cast<std::size_t>(q)],
        fast.lse_bound[static_cast<std::size_t>(q)], r.lse);
    add("loss", {i}, fast.loss[static_cast<std::size_t>(q)],
        fast.loss_bound[static_cast<std::size_t>(q)], r.loss);
  }
  // Gradient entries: sampled plus ill-conditioned ones.
  auto pick_entries = [&](std::int64_t rows, std::int64_t cols, const auto& val, const auto& bnd) {
    std::set<std::pair<std::int64_t, std::int64_t>> out;
    if (rows == 0 || cols == 0) return out;
    std::uniform_int_distribution<std::int64_t> pr(0, rows - 1), pc(0, cols - 1);
    for (std::int64_t k = 0; k < spec.entries; ++k) out.insert({pr(rng), pc(rng)});
    std::int64_t more = 0;
    for (std::int64_t f = 0; !val.empty() && f < rows * cols && more < spec.entries; ++f) {
      const double v = val[static_cast<std::size_t>(f)], b = bnd[static_cast<std::size_t>(f)];
      if (b > spec.ill_conditioned * std::fabs(v) && out.insert({f / cols, f % cols}).second)
        ++more;
    }
    return out;
  };
  if (!fast.dz.empty()) {
    std::vector<std::int64_t> srows(qs.begin(), qs.end());
    for (auto [qq, j] : pick_entries(static_cast<std::int64_t>(srows.size()), V,
                                     std::vector<double>(), std::vector<double>())) {
      const std::int64_t q = srows[static_cast<std::size_t>(qq)];
      const std::int64_t i = fast.token_rows[static_cast<std::size_t>(q)];
      add("dz", {i, j}, fast.dz[static_cast<std::size_t>(q * V + j)],
          fast.dz_bound[static_cast<std::size_t>(q * V + j)],
          oracle.row(i).dz[static_cast<std::size_t>(j)]);
    }
    // The target entry of each sampled row (the cancellation-prone one).
    for (std::int64_t q : qs) {
      const std::int64_t i = fast.token_rows[static_cast<std::size_t>(q)];
      const std::int64_t t = pb.targets[static_cast<std::size_t>(i)];
      if (t == sp.ignore_index) continue;
      add("dz", {i, t}, fast.dz[static_cast<std::size_t>(q * V + t)],
          fast.dz_bound[static_cast<std::size_t>(q * V + t)],
          oracle.row(i).dz[static_cast<std::size_t>(t)]);
    }
  }
  if (!fast.dH.empty()) {
    for (auto [q, d] : pick_entries(S, D, fast.dH, fast.dH_bound)) {
      const std::int64_t i = fast.token_rows[static_cast<std::size_t>(q)];
      add("dH", {i, d}, fast.dH[static_cast<std::size_t>(q * D + d)],
          fast.dH_bound[static_cast<std::size_t>(q * D + d)], oracle.dH(i, d));
    }
  }
  const double all_rows_ops = static_cast<double>(S) * static_cast<double>(V) *
                              static_cast<double>(std::max<std::int64_t>(D, 1));
  const bool all_rows_ok = all_rows_ops <= spec.max_mp_ops;
  const auto J = static_cast<std::int64_t>(fast.vocab_rows.size());
  if (!fast.dW.empty() || !fast.db.empty()) {
    if (!all_rows_ok) {
      rep.skipped.push_back(fmt::format("dW/db: {:.3g} multiprecision operations > budget {:.3g}",
                                        all_rows_ops, spec.max_mp_ops));
    } else {
      if (!fast.dW.empty())
        for (auto [jj, d] : pick_entries(J, D, fast.dW, fast.dW_bound)) {
          const std::int64_t j = fast.vocab_rows[static_cast<std::size_t>(jj)];
          add("dW", {j, d}, fast.dW[static_cast<std::size_t>(jj * D + d)],
              fast.dW_bound[static_cast<std::size_t>(jj * D + d)],
              oracle.dW(j, d, fast.token_rows));
        }
      if (!fast.db.empty())
        for (auto [jj, unused] : pick_entries(J, 1, fast.db, fast.db_bound)) {
          (void)unused;
          const std::int64_t j = fast.vocab_rows[static_cast<std::size_t>(jj)];
          add("db", {j}, fast.db[static_cast<std::size_t>(jj)],
              fast.db_bound[static_cast<std::size_t>(jj)], oracle.db(j, fast.token_rows));
        }
    }
  }
  if (fast.partial) {
    rep.skipped.push_back("reduced loss: the fast result covers a sample of the rows");
  } else if (!all_rows_ok) {
    rep.skipped.push_back(
        fmt::format("reduced loss: {:.3g} multiprecision operations > budget {:.3g}", all_rows_ops,
                    spec.max_mp_ops));
  } else {
    add("reduced", {}, fast.reduced_loss, fast.reduced_loss_bound, oracle.reduced_loss());
  }
  return rep;
}

}  // namespace xentlab

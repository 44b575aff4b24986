// The audit's memory estimate and the audit of a logits problem in blocks of token rows
// (blocked.hpp).
#include "harness/audit/blocked.hpp"

#include <fmt/format.h>
#include <omp.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>

#include "datasets/problem_ops.hpp"
#include "gpu/plans/vocab_shards.hpp"
#include "gpu/registry.hpp"
#include "numerics/eft.hpp"
#include "numerics/error.hpp"

namespace xentlab::audit {
namespace {

// Large arrays straight from mmap, and back to the system when freed: glibc raises its mmap
// threshold (up to 32 MiB) once a large array is freed, so the next blocks' arrays would come
// from the heap, where freed and new arrays of slightly different sizes fragment it beyond the
// estimate (measured: 15 bytes a logit more at blocks of 26 MB). A fixed threshold keeps glibc
// from raising it.
void fix_mmap_threshold() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
}
void release_freed_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

auto sz(std::int64_t n) {
  return static_cast<std::size_t>(n);
}

// One run's outputs (dz for given logits; dH, dW, db for a linear head) and per-token vectors.
double outputs_bytes(std::int64_t S, std::int64_t V, std::int64_t D) {
  return 8.0 * (D > 0 ? double(S) * D + double(V) * D + V : double(S) * V) + 16.0 * S;
}

// The largest host workspace of a strategy's CPU emulation (gpu/emulation/common.cpp,
// workspace_size, with its block of rows taken as all S): per-thread rows, the block of logits
// and dz, the fp32 copies of H and W and their gradients.
double workspace_bytes(std::int64_t S, std::int64_t V, std::int64_t D) {
  const double threads = omp_get_max_threads();
  double b = threads * 2.0 * V * 4 + double(S) * V * 4;
  if (D > 0) b += 2.0 * (double(S) * D * 4 + double(V) * D * 4 + V * 4.0);
  return b;
}

// The a-priori bounds of one run (judge/bounds_for.cpp) and the copies its statistics make: for
// given logits, dz's bound and the logits read as doubles while it is formed.
double bounds_bytes(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J) {
  if (D == 0) return 16.0 * double(S) * V + 32.0 * S;
  return 8.0 * (double(S) * D + 2.0 * J * D + 2.0 * J + 4.0 * S);
}

}  // namespace

double problem_bytes(const Problem& p) {
  double b = 8.0 * static_cast<double>(p.targets.size());
  if (p.is_linear()) {
    b += static_cast<double>(p.H.nbytes() + p.W.nbytes());
    if (p.bias) b += static_cast<double>(p.bias->nbytes());
  } else {
    b += static_cast<double>(p.logits.nbytes());
  }
  return b;
}

MemoryEstimate problem_memory(const AuditProblem& ap, DType input, std::int64_t S, std::int64_t J,
                              std::int64_t block_rows, const AuditConfig& cfg,
                              const std::vector<const Strategy*>& strategies,
                              const std::vector<const Strategy*>& emulations, bool baseline) {
  (void)strategies;
  (void)emulations;
  const Problem& p = ap.problem;
  const std::int64_t N = p.N, V = p.V, D = p.is_linear() ? p.D : 0;
  const double ei = size_of(input);
  const bool blocked = block_rows > 0 && block_rows < S;
  const std::int64_t B = blocked ? block_rows : S;
  MemoryEstimate m;
  if (!blocked) {
    m.add("the problem in the input dtype",
          D > 0 ? ei * (double(N) * D + double(V) * D) + 8.0 * (N + V)
                : ei * double(N) * V + 8.0 * N);
    if (S < N) m.add("the sub-batch", ei * double(S) * (D > 0 ? D : V) + 8.0 * S);
  } else {
    m.add("a block of the problem", (ei + size_of(p.input_dtype())) * double(B) * V + 8.0 * B);
    const double runs = 2.0 * static_cast<double>(cfg.recipes.empty() ? 19 : cfg.recipes.size()) *
                        std::max<std::size_t>(1, strategies.size());
    m.add("per-token results and merged statistics",
          8.0 * 30.0 * S + runs * (8.0 * 4.0 * S + 16.0 * kStatsBuckets + 3.0 * 8.0 * 224));
  }
  ReferenceOptions ro;
  ro.tier = cfg.reference_tier;
  ro.want_dz = D == 0;
  // A linear head's reference (BLAS or cuda tier) takes blocks as large as its max_bytes allows,
  // from its least plan to its largest (reference_peak_bytes): counted here at its least, the
  // audit's plan (audit.cpp, plan_memory) gives it what the budget leaves and counts that.
  m.add("the reference", reference_memory_bytes(B, V, D, D > 0 ? J : 0, ro));
  const int copies = baseline ? 2 : 1;  // the run and its CPU emulation's
  m.add("run outputs", copies * outputs_bytes(B, V, D));
  m.add("strategy workspace", workspace_bytes(B, V, D));
  m.add("a-priori bounds", copies * bounds_bytes(B, V, D, J));
  return m;
}

namespace {

// The reference's per-token outputs of a block appended to the whole's.
void append_rows(ReferenceResult& all, const ReferenceResult& b) {
  const auto cat = [](std::vector<double>& to, const std::vector<double>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  using Field = std::vector<double> ReferenceResult::*;
  for (const Field pr : std::initializer_list<Field>{
           &ReferenceResult::loss, &ReferenceResult::loss_bound, &ReferenceResult::lse,
           &ReferenceResult::lse_bound, &ReferenceResult::ce, &ReferenceResult::z_term,
           &ReferenceResult::max_logit, &ReferenceResult::p_target, &ReferenceResult::entropy,
           &ReferenceResult::sum_p_abs_z, &ReferenceResult::grad_scale})
    cat(all.*pr, b.*pr);
}

// A run's state over the blocks.
struct RunState {
  BlockedErrorStats dz, emu_dz;
  std::vector<double> loss, lse, loss_b, lse_b, emu_loss, emu_lse, emu_loss_b, emu_lse_b;
  eft::CompensatedSum reduced, reduced_b, emu_reduced, emu_reduced_b;
  double reduced_abs = 0, emu_reduced_abs = 0;
  RunAssessment first, emu_first;  ///< the first block's (bounds' constants, dtypes)
  bool started = false;
};

// Accumulates one block's assessment into the run's state.
void take_block(const RunAssessment& as, const StrategyOutputs& out, const PrefixCounts& pc,
                std::int64_t first_index, BlockedErrorStats& dz, std::vector<double>& loss,
                std::vector<double>& lse, std::vector<double>& loss_b, std::vector<double>& lse_b,
                eft::CompensatedSum& red, eft::CompensatedSum& red_b, double& red_abs) {
  dz.add(as.dz, pc, first_index);
  loss.insert(loss.end(), out.loss.begin(), out.loss.end());
  lse.insert(lse.end(), out.lse.begin(), out.lse.end());
  loss_b.insert(loss_b.end(), as.bounds.loss.begin(), as.bounds.loss.end());
  lse_b.insert(lse_b.end(), as.bounds.lse.begin(), as.bounds.lse.end());
  red.add(out.reduced_loss);
  red_b.add(as.bounds.reduced_loss);
  red_abs += std::fabs(out.reduced_loss);
}

// The merged assessment of a run: loss, lse and the reduced loss over all rows, dz merged.
RunAssessment finish_run(const RunAssessment& first, const ReferenceResult& ref,
                         const BlockedErrorStats& dz, const std::vector<double>& loss,
                         const std::vector<double>& lse, const std::vector<double>& loss_b,
                         const std::vector<double>& lse_b, const eft::CompensatedSum& red,
                         const eft::CompensatedSum& red_b, double red_abs, std::int64_t blocks,
                         const Policy& policy) {
  RunAssessment ra;
  ra.bounds.c_vocab = first.bounds.c_vocab;
  ra.bounds.c_tokens = first.bounds.c_tokens;
  ra.bounds.meaningful = first.bounds.meaningful;
  ra.bounds.note = first.bounds.note;
  const auto S = static_cast<std::int64_t>(ref.loss.size());
  const DType ld = first.loss.out_dtype;
  ra.loss = compute_error_stats(loss.data(), ref.loss.data(), S, ld, loss_b.data());
  ra.lse = compute_error_stats(lse.data(), ref.lse.data(), S, ld, lse_b.data());
  // The blocks' reduced losses summed here in double: their bounds, and this sum's rounding.
  const double out_red = red.value();
  const double bound = red_b.value() + eft::gamma_n(static_cast<double>(blocks)) * red_abs;
  ra.reduced_loss = compute_error_stats(&out_red, &ref.reduced_loss, 1, ld, &bound);
  ra.dz = dz.finish();
  ra.has_dz = true;
  ra.verdict = judge({{"loss", &ra.loss, true},
                      {"lse", &ra.lse, false},
                      {"reduced_loss", &ra.reduced_loss, false},
                      {"dz", &ra.dz, false}},
                     policy);
  return ra;
}

// The block [b0, b1) of the sub-batch in the input dtype, and its loss options: reduction mean
// divides by the sub-batch's valid rows (normalizer), as the whole sub-batch's runs do.
Problem block_problem(const AuditProblem& ap, DType input, const std::vector<std::int64_t>& rows,
                      std::int64_t b0, std::int64_t b1) {
  const std::vector<std::int64_t> r(rows.begin() + b0, rows.begin() + b1);
  try {
    return with_input_dtype(select_rows(ap.problem, r, ap.spec.ignore_index), input,
                            ap.spec.ignore_index);
  } catch (const InputError& e) {
    throw NoInputVersion(e.what());
  }
}

}  // namespace

BlockedAudit audit_in_blocks(const AuditProblem& ap, DType input,
                             const std::vector<std::int64_t>& rows, std::int64_t block_rows,
                             const AuditConfig& cfg, const std::vector<Recipe>& recipes,
                             const std::vector<const Strategy*>& strategies,
                             const std::vector<const Strategy*>& emulations, const Policy& policy,
                             const std::vector<double>& upstream) {
  fix_mmap_threshold();
  const auto S = static_cast<std::int64_t>(rows.size());
  const std::int64_t B = std::max<std::int64_t>(1, block_rows);
  LossSpec spec = ap.spec;
  std::int64_t n_valid = 0;
  for (std::int64_t i : rows) n_valid += ap.problem.targets[sz(i)] != spec.ignore_index;
  if (spec.reduction == Reduction::mean && spec.normalizer == 0 && n_valid > 0)
    spec.normalizer = n_valid;
  const auto ref_options = [&](std::int64_t b0, std::int64_t b1) {
    ReferenceOptions o;
    o.tier = cfg.reference_tier;
    o.max_bytes = cfg.reference_memory;
    o.want_dz = true;
    if (!upstream.empty()) o.upstream.assign(upstream.begin() + b0, upstream.begin() + b1);
    return o;
  };
  BlockedAudit res;
  res.orig_rows = rows;
  // Pass 1: the reference of every block, for the per-token outputs and max|dz| (the relative
  // floor the blocks' statistics share); its dz is dropped block by block.
  double max_dz = 0, red_b = 0, red_abs = 0;
  eft::CompensatedSum red;
  std::int64_t blocks = 0;
  for (std::int64_t b0 = 0; b0 < S; b0 += B, ++blocks) {
    const std::int64_t b1 = std::min(S, b0 + B);
    const ReferenceResult r =
        compute_reference(block_problem(ap, input, rows, b0, b1), spec, ref_options(b0, b1));
    append_rows(res.ref, r);
    for (double v : r.dz)
      if (std::isfinite(v)) max_dz = std::max(max_dz, std::fabs(v));
    red.add(r.reduced_loss);
    red_b += r.reduced_loss_bound;
    red_abs += std::fabs(r.reduced_loss);
    release_freed_memory();
  }
  res.ref.N = S, res.ref.V = ap.problem.V, res.ref.D = 0, res.ref.n_valid = n_valid;
  res.ref.tier = ReferenceTier::compensated;
  for (std::int64_t q = 0; q < S; ++q) res.ref.token_rows.push_back(q);
  res.ref.reduced_loss = red.value();
  res.ref.reduced_loss_bound = red_b + eft::gamma_n(static_cast<double>(blocks)) * red_abs;

  // Pass 2: per block, its reference again, then every run on it.
  std::vector<RunState> state;
  for (const Recipe& recipe : recipes)
    for (const Strategy* st : strategies)
      if (recipe.input == input) {
        res.runs.push_back({});
        res.runs.back().strategy = st;
        res.runs.back().recipe = recipe;
      }
  state.resize(res.runs.size());
  StatsOptions so;
  so.rel_floor_abs = StatsOptions{}.rel_floor_rel * max_dz;
  so.rel_floor_rel = 0.0;
  for (std::int64_t b0 = 0; b0 < S; b0 += B) {
    const std::int64_t b1 = std::min(S, b0 + B);
    const Problem pb = block_problem(ap, input, rows, b0, b1);
    const ReferenceOptions ro = ref_options(b0, b1);
    const ReferenceResult ref = compute_reference(pb, spec, ro);
    for (std::size_t k = 0; k < res.runs.size(); ++k) {
      BlockedRun& br = res.runs[k];
      RunState& rs = state[k];
      RunRequest req;
      req.problem = &pb;
      req.spec = spec;
      req.recipe = br.recipe;
      req.emulated_sms = cfg.device_sms;
      req.chunk_tokens = cfg.chunk_tokens;
      req.ranks = static_cast<int>(cfg.ranks);
      // The splits of the whole sub-batch of S rows in every block (not of the block's rows).
      if (strategy_traits(br.strategy->name()).splits_vocabulary)
        req.vocab_splits =
            vocab_chunk_splits(S, ap.problem.V, size_of(br.recipe.logits), 0, cfg.vocab_splits);
      req.upstream = ro.upstream;
      if (b0 == 0) {
        br.arith = br.strategy->run_arithmetic(req);
        br.can = br.strategy->can_implement(pb, spec, br.recipe);
      }
      if (!br.can.ok() || !br.error.empty()) continue;
      try {
        const auto t0 = std::chrono::steady_clock::now();
        const StrategyOutputs out = br.strategy->run(req);
        br.seconds +=
            out.seconds > 0
                ? out.seconds
                : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        br.peak_extra_bytes = std::max(br.peak_extra_bytes, out.peak_extra_bytes);
        PrefixCounts pc;
        StatsOptions o = so;
        o.prefix_counts = &pc;
        RunAssessment as = assess_run(pb, spec, br.recipe, br.arith, out, ref, policy, 0, o);
        take_block(as, out, pc, b0 * pb.V, rs.dz, rs.loss, rs.lse, rs.loss_b, rs.lse_b, rs.reduced,
                   rs.reduced_b, rs.reduced_abs);
        for (std::size_t q = 0; q < out.loss.size(); ++q)
          br.loss_abs_err.push_back(std::fabs(out.loss[q] - ref.loss[q]));
        as.bounds.dz = {};
        if (b0 == 0) rs.first = std::move(as);
        const Strategy* emu = nullptr;
        for (const Strategy* e : emulations)
          if (e->name() == br.strategy->name()) emu = e;
        if (!emu) continue;
        const StrategyOutputs eo = emu->run(req);
        PrefixCounts epc;
        o.prefix_counts = &epc;
        RunAssessment eas = assess_run(pb, spec, br.recipe, br.arith, eo, ref, policy, 0, o);
        take_block(eas, eo, epc, b0 * pb.V, rs.emu_dz, rs.emu_loss, rs.emu_lse, rs.emu_loss_b,
                   rs.emu_lse_b, rs.emu_reduced, rs.emu_reduced_b, rs.emu_reduced_abs);
        eas.bounds.dz = {};
        if (b0 == 0) rs.emu_first = std::move(eas);
        br.has_emulation = true;
      } catch (const std::exception& e) {
        br.error = e.what();
      }
      release_freed_memory();
    }
  }
  for (std::size_t k = 0; k < res.runs.size(); ++k) {
    BlockedRun& br = res.runs[k];
    RunState& rs = state[k];
    if (!br.can.ok() || !br.error.empty()) continue;
    br.as = finish_run(rs.first, res.ref, rs.dz, rs.loss, rs.lse, rs.loss_b, rs.lse_b, rs.reduced,
                       rs.reduced_b, rs.reduced_abs, blocks, policy);
    if (br.has_emulation)
      br.emulation_as = finish_run(rs.emu_first, res.ref, rs.emu_dz, rs.emu_loss, rs.emu_lse,
                                   rs.emu_loss_b, rs.emu_lse_b, rs.emu_reduced, rs.emu_reduced_b,
                                   rs.emu_reduced_abs, blocks, policy);
  }
  return res;
}

}  // namespace xentlab::audit

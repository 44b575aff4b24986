// vocab_parallel's local part (RunRequest::local_strategy; gpu/emulation/vocab_parallel.cpp and the
// engine's run_sharded): each rank runs naive, chunked, checkpointed or fused over its shard, and
// the cross-rank reductions (max, sum-exp, Σx, target logit, dH) are the same whatever the local
// part (docs/arithmetic.md §10). For every local part: P = 1, 2, 3 over vocabularies that no P > 1
// divides, within the a-priori bound of the run's declaration; P = 1 bit for bit the local strategy
// alone; P = V (one column per rank) equal to the rank-order sum written out here; the fused local
// part's declared constants worked by hand; unknown local parts refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/synthetic.hpp"
#include "gpu/registry.hpp"
#include "judge/bounds_for.hpp"
#include "numerics/emulate.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"
#include "tests/support/case_support.hpp"

namespace xentlab {
namespace {

using testing::same_bits;

/// The local parts: every registry row with a CPU emulation that does not itself shard or split
/// the vocabulary (naive, chunked, checkpointed, fused).
std::vector<std::string> local_parts() {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategy_table())
    if (e.emulated != nullptr && !e.traits.shards_vocabulary && !e.traits.splits_vocabulary)
      names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Strategy> vocab_parallel() {
  auto s = make_strategy(Backend::cpu_emulation, "vocab_parallel");
  if (s == nullptr) ADD_FAILURE() << "no emulated vocab_parallel in the registry";
  return s;
}

TEST(VocabParallelLocal, ComposesEveryStrategyThatDoesNotShardAndRefusesOthers) {
  const auto vp = vocab_parallel();
  ASSERT_NE(vp, nullptr);
  const std::vector<std::string> locals = local_parts();
  ASSERT_EQ(locals, (std::vector<std::string>{"naive", "chunked", "checkpointed", "fused"}));
  EXPECT_TRUE(vp->can_run_local("").ok());
  for (const std::string& l : locals) EXPECT_TRUE(vp->can_run_local(l).ok()) << l;
  const Problem pb = make_gaussian_logits(2, 7, DType::fp32, 1.0, 3);
  for (const char* bad : {"vocab_parallel", "Chunked", "liger"}) {
    const Status st = vp->can_run_local(bad);
    EXPECT_EQ(st.code, Status::Code::not_supported) << bad;
    EXPECT_NE(st.message.find(std::string("'") + bad + "' is not a local part"), std::string::npos)
        << st.message;
    EXPECT_NE(st.message.find("naive, chunked, checkpointed, fused"), std::string::npos)
        << st.message;
    RunRequest req;
    req.problem = &pb;
    req.recipe = parse_recipe("fp32/fp32/fp32/fp32");
    req.local_strategy = bad;
    EXPECT_THROW((void)vp->run(req), InputError) << bad;
    EXPECT_THROW((void)vp->run_arithmetic(req), InputError) << bad;
  }
  // The strategies that do not shard ignore the local part (as they ignore the ranks).
  const auto chunked = make_strategy(Backend::cpu_emulation, "chunked");
  EXPECT_TRUE(chunked->can_run_local("liger").ok());
}

struct Variant {
  std::string name;
  LossSpec spec;
  bool upstream = false;
};

// Label smoothing (Σx crosses the ranks) with the mean loss; every option at once with a per-token
// upstream gradient (z-loss, softcap, logit scale, reduction none). Every option on its own runs
// in VocabParallel.*EveryOption* (the default local part).
std::vector<Variant> variants() {
  std::vector<Variant> v;
  LossSpec s;
  s.label_smoothing = 0.1;
  v.push_back({"smoothing", s});
  s = LossSpec{};
  s.reduction = Reduction::none;
  s.label_smoothing = 0.05;
  s.z_loss = 1e-4;
  s.softcap = 8.0;
  s.logit_scale = 0.75;
  v.push_back({"all-options+upstream", s, true});
  return v;
}

// One run of vocab_parallel over `local` with P ranks against the reference, judged under
// "default" with the bounds of the run's declaration (the local strategy's order over a shard
// plus the cross-rank terms). Where the declaration has no meaningful bound (c·u_accum ≥ 1) every
// finite bound still holds (k = 1).
void expect_within_bound(const Problem& p, const Variant& var, const ReferenceResult& ref,
                         const std::vector<double>& upstream, const Recipe& rc,
                         const std::string& local, int P, const std::string& what) {
  const auto vp = vocab_parallel();
  ASSERT_NE(vp, nullptr);
  RunRequest req;
  req.problem = &p;
  req.spec = var.spec;
  req.recipe = rc;
  req.upstream = upstream;
  req.chunk_tokens = 3;
  req.ranks = P;
  req.local_strategy = local;
  const StrategyOutputs out = vp->run(req);
  const DeclaredArithmetic ar = vp->run_arithmetic(req);
  const auto alone = make_strategy(Backend::cpu_emulation, local);
  ASSERT_EQ(ar.vocab_ranks, P) << what;
  ASSERT_EQ(ar.vocab_order, alone->arithmetic(rc).vocab_order) << what;
  // Token chunks whose dW, db are added in the accum dtype: ⌈N/3⌉ for the chunking strategies.
  const std::int64_t chunks = strategy_traits(local).chunks_tokens ? (p.N + 2) / 3 : 1;
  const RunAssessment ra =
      assess_run(p, var.spec, rc, ar, out, ref, policy_by_name("default"), chunks);
  if (ra.bounds.meaningful) {
    EXPECT_EQ(ra.verdict.disposition, Disposition::passed) << what << ": " << ra.verdict.reason;
    return;
  }
  Policy k1 = policy_by_name("lenient");
  k1.k = 1.0;
  std::vector<JudgedOutput> j{{"loss", &ra.loss, false}, {"lse", &ra.lse, false}};
  if (ra.has_dH) j.push_back({"dH", &ra.dH, false});
  if (ra.has_dW) j.push_back({"dW", &ra.dW, false});
  if (ra.has_dz) j.push_back({"dz", &ra.dz, false});
  const Verdict v = judge(j, k1);
  EXPECT_EQ(v.disposition, Disposition::passed) << what << ": " << v.reason;
}

void check_locals(const Problem& pb, const char* label) {
  for (const Variant& var : variants()) {
    Problem p = pb;
    for (std::size_t i = 0; i < p.targets.size(); i += 5) p.targets[i] = var.spec.ignore_index;
    std::vector<double> upstream;
    if (var.upstream)
      for (std::int64_t i = 0; i < p.N; ++i)
        upstream.push_back(0.25 * static_cast<double>((i % 7) - 3));
    ReferenceOptions ro;
    ro.want_dz = !p.is_linear();
    ro.upstream = upstream;
    const ReferenceResult ref = compute_reference(p, var.spec, ro);
    // fp32 accumulation (a meaningful bound), and bf16 (the ranks' sums added in bf16).
    for (const char* r : {"bf16/fp32/fp32/bf16", "bf16/bf16/bf16/bf16"})
      for (const std::string& local : local_parts())
        for (const int P : {1, 2, 3})
          expect_within_bound(p, var, ref, upstream, parse_recipe(r), local, P,
                              std::string(label) + " " + var.name + " " + local +
                                  " P=" + std::to_string(P) + " " + r);
  }
}

// V = 317 (shards 159 + 158 and 106 + 106 + 105) with a bias, and given logits of V = 403 (202 +
// 201, 135 + 134 + 134).
TEST(VocabParallelLocal, EveryLocalPartWithinBoundAtOneTwoAndThreeRanks) {
  ASSERT_NE(317 % 2, 0);
  ASSERT_NE(317 % 3, 0);
  ASSERT_NE(403 % 2, 0);
  ASSERT_NE(403 % 3, 0);
  Problem lin = make_gaussian_linear(8, 317, 11, DType::bf16, 3.0, 11);
  Tensor b(DType::bf16, {317}, "bias");
  for (std::int64_t j = 0; j < 317; ++j) b.set(j, 0.125 * static_cast<double>((j % 9) - 4));
  lin = Problem::linear(lin.H, lin.W, b, lin.targets);
  check_locals(lin, "linear bf16");
  check_locals(make_gaussian_logits(6, 403, DType::bf16, 4.0, 13), "logits bf16");
}

// One rank runs the local strategy's own arithmetic, so every output equals it bit for bit:
// a plain local part (naive, chunked, checkpointed: blocked) takes the maximum over its one shard
// — the row — then sums rnd_A(expf(x_j − m)) over it in the blocked order, which is what the
// strategy's own sum_exp does; the online local part (fused) keeps its state, whose maximum is the
// global one (no rescale: the factor is exactly 1); dH is the rank's partial, the local strategy's
// sum over the row (fused: its tiles of 256), taken as the cross-rank sum without an addition; dW
// and db are the local strategy's.
TEST(VocabParallelLocal, OneRankIsTheLocalStrategyBitForBit) {
  Problem lin = make_gaussian_linear(11, 300, 13, DType::bf16, 3.0, 5);
  Tensor b(DType::bf16, {300}, "bias");
  for (std::int64_t j = 0; j < 300; ++j) b.set(j, 0.125 * static_cast<double>((j % 11) - 5));
  lin = Problem::linear(lin.H, lin.W, b, lin.targets);
  lin.targets[4] = -100;
  const Problem logits = make_gaussian_logits(7, 611, DType::fp16, 4.0, 9);
  const auto vp = vocab_parallel();
  ASSERT_NE(vp, nullptr);
  LossSpec smooth;
  smooth.label_smoothing = 0.1;
  smooth.z_loss = 1e-3;
  smooth.softcap = 10.0;
  LossSpec none;
  none.reduction = Reduction::none;
  for (const std::string& local : local_parts()) {
    const auto alone = make_strategy(Backend::cpu_emulation, local);
    for (const Problem* pb : {static_cast<const Problem*>(&lin), &logits})
      for (const LossSpec& spec : {LossSpec{}, smooth, none})
        for (const char* acc : {"fp32", "bf16", "fp16"}) {
          const std::string in(to_string(pb->input_dtype()));
          RunRequest req;
          req.problem = pb;
          req.spec = spec;
          req.recipe = parse_recipe(in + "/" + in + "/" + acc + "/" + in);
          req.chunk_tokens = 4;
          if (spec.reduction == Reduction::none)
            for (std::int64_t i = 0; i < pb->N; ++i) req.upstream.push_back(0.5 + 0.25 * (i % 3));
          const StrategyOutputs a = alone->run(req);
          req.local_strategy = local;
          req.ranks = 1;
          const StrategyOutputs o = vp->run(req);
          const std::string what = local + " " + req.recipe.name() + " " + spec.describe();
          testing::expect_same_outputs(o, a, what);
          // The same declaration, hence the same bounds.
          const DeclaredArithmetic d = vp->run_arithmetic(req), e = alone->arithmetic(req.recipe);
          EXPECT_EQ(d.vocab_ranks, 1) << what;
          EXPECT_EQ(d.vocab_order, e.vocab_order) << what;
          EXPECT_EQ(vocab_reduction_constant(d, pb->V, pb->N),
                    vocab_reduction_constant(e, pb->V, pb->N))
              << what;
          EXPECT_EQ(vocab_online_rescales(d, pb->V, pb->N), online_rescales(e, pb->V, pb->N))
              << what;
        }
  }
}

// P = V: each rank holds one column j, so its local part, whatever it is, gives m_r = x_j and the
// sum-exp term rnd_A(expf(x_j − m)) (a plain order: one term with the global m; fused: its state
// (x_j, 1) rescaled to m once, 1·expf(x_j − m)), and the cross-rank sum is the sequential sum of
// those terms in rank order: lse = rnd_A(m + logf(((e_0 + e_1) + e_2) + …)), loss = rnd_A(lse −
// x_t), written out here in fp32 and bf16 accumulation. Logits k/8 in [−4, 4) in fp32.
TEST(VocabParallelLocal, OneColumnPerRankIsTheRankOrderSum) {
  const std::int64_t V = 37;
  std::vector<std::vector<double>> rows(2, std::vector<double>(V));
  for (std::int64_t j = 0; j < V; ++j) {
    rows[0][static_cast<std::size_t>(j)] = static_cast<double>((j * 13) % 64 - 32) / 8.0;
    rows[1][static_cast<std::size_t>(j)] = static_cast<double>((j * 29 + 5) % 64 - 32) / 8.0;
  }
  const std::vector<std::int64_t> targets{3, 30};
  const Problem pb = testing::logits_problem(DType::fp32, rows, targets);
  const auto vp = vocab_parallel();
  ASSERT_NE(vp, nullptr);
  for (const DType A : {DType::fp32, DType::bf16}) {
    RunRequest req;
    req.problem = &pb;
    req.recipe = parse_recipe(std::string("fp32/fp32/") + std::string(to_string(A)) + "/fp32");
    req.ranks = static_cast<int>(V);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      float m = -INFINITY;
      for (double x : rows[i]) m = std::max(m, static_cast<float>(x));
      float s = 0.0f;
      for (std::int64_t j = 0; j < V; ++j) {
        const float e =
            emu::rnd(std::exp(static_cast<float>(rows[i][static_cast<std::size_t>(j)]) - m), A);
        s = j == 0 ? e : emu::rnd(s + e, A);
      }
      const float lse = emu::rnd(m + std::log(s), A);
      const float loss =
          emu::rnd(lse - static_cast<float>(rows[i][static_cast<std::size_t>(targets[i])]), A);
      for (const std::string& local : local_parts()) {
        req.local_strategy = local;
        const StrategyOutputs o = vp->run(req);
        EXPECT_EQ(o.lse[i], static_cast<double>(lse))
            << local << " row " << i << " " << to_string(A);
        EXPECT_EQ(o.loss[i], static_cast<double>(loss))
            << local << " row " << i << " " << to_string(A);
      }
    }
  }
}

// The fused local part's declaration (judge/bounds.hpp): the kernel's online tree over the largest
// shard, one more rounding and one more rescale for the rank's state rescaled to the global
// maximum, and P − 1 cross-rank additions. Worked by hand for V = 4096, N = 4 (fused: 64 columns
// per thread, 4 threads per row, 2 lane merges, at least min(16, tiles) ranges of 256-column
// tiles): c = (64 − 1) + 1 + 2·(⌈T/R⌉ − 1) + 2·(2 + 2⌈log2 T⌉), rescales (⌈T/R⌉ − 1) + 2 + 2⌈log2
// T⌉:
//   P = 1: 4096 columns, T = 16 = R: c = 63 + 1 + 0 + 2·(2 + 8) = 84, rescales 10;
//   P = 2: 2048, T = 8 = R: 63 + 1 + 2·(2 + 6) = 80, + 1 + 1 = 82; rescales 8 + 1 = 9;
//   P = 3: 1366, T = 6 = R: 80 + 1 + 2 = 83; rescales 8 + 1 = 9.
// dH's fp32 sum: ⌈V/P⌉ + P − 1 roundings (4096, 2049, 1368).
TEST(VocabParallelLocal, FusedLocalPartDeclaresTheRescaleToTheGlobalMaximum) {
  const auto vp = vocab_parallel();
  ASSERT_NE(vp, nullptr);
  const Problem pb = make_gaussian_logits(4, 4096, DType::bf16, 2.0, 7);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/fp32/bf16");
  req.local_strategy = "fused";
  const std::vector<std::vector<double>> expected{
      {1, 84, 10, 4096}, {2, 82, 9, 2049}, {3, 83, 9, 1368}};
  ReferenceOptions ro;
  ro.want_dz = true;
  const ReferenceResult ref = compute_reference(pb, LossSpec{}, ro);
  for (const auto& e : expected) {
    req.ranks = static_cast<int>(e[0]);
    const DeclaredArithmetic a = vp->run_arithmetic(req);
    EXPECT_EQ(a.vocab_order, ReductionOrder::online_tree);
    EXPECT_EQ(vocab_reduction_constant(a, 4096, 4), e[1]) << "P=" << e[0];
    EXPECT_EQ(vocab_online_rescales(a, 4096, 4), e[2]) << "P=" << e[0];
    EXPECT_EQ(dH_vocab_constant(a, 4096), e[3]) << "P=" << e[0];
    EXPECT_EQ(bounds_for_reference(pb, LossSpec{}, req.recipe, a, ref).c_vocab, e[1])
        << "P=" << e[0];
  }
}

}  // namespace
}  // namespace xentlab

// The vocab_parallel strategy on NCCL (gpu/cuda/vocab_parallel.cu): one rank equals chunked bit
// for bit, every loss option within the bound for each rank count, C03 exact, repeat runs, and
// refusals naming the cause. Built where NCCL is (XENTLAB_HAVE_NCCL); its CPU emulation is
// tests/gpu/emulation/vocab_parallel.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#ifdef XENTLAB_HAVE_NCCL
#include <cuda_runtime.h>

#include "gpu/cuda/vocab_parallel.hpp"
#endif
#include "tests/gpu/gpu_fixture.hpp"

namespace xentlab::gpu_tests {
namespace {

// ---- vocab_parallel on NCCL (gpu/cuda/vocab_parallel.cu) ---------------------------------------
#ifdef XENTLAB_HAVE_NCCL

int cuda_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/// The rank counts the vocab_parallel tests run: 1 (the whole code path with one NCCL rank), and
/// every device of the machine when it has more than one.
std::vector<int> rank_counts() {
  std::vector<int> p{1};
  if (cuda_devices() > 1) p.push_back(cuda_devices());
  return p;
}

std::unique_ptr<Strategy> vocab_parallel() {
  return gpu::make_cuda_vocab_parallel();
}

/// The linked NCCL, printed; ncclBfloat16 (the bf16 accumulator's all-reduce) needs NCCL ≥ 2.10.
/// No device needed.
TEST(GpuVocabParallel, NcclIsLinked) {
  const int v = gpu::nccl_version();
  std::cout << "[ note ] NCCL version " << v / 10000 << "." << (v / 100) % 100 << "." << v % 100
            << " (ncclGetVersion " << v << ")\n";
  EXPECT_GE(v, 21000) << "NCCL older than 2.10 has no ncclBfloat16";
  const auto s = vocab_parallel();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->name(), "vocab_parallel");
  EXPECT_EQ(s->backend(), Backend::cuda);
}

/// The local part on CUDA is chunked's steps only: "" and "chunked" are accepted, naive,
/// checkpointed and fused (which the CPU emulation composes) and unknown names are not_supported,
/// naming the part and the emulation; run() refuses them with InputError before any device work.
/// No device needed.
TEST(GpuVocabParallel, LocalPartsOtherThanChunkedAreRefused) {
  const auto s = vocab_parallel();
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->can_run_local("").ok());
  EXPECT_TRUE(s->can_run_local("chunked").ok());
  const Problem p = make_gaussian_logits(4, 64, DType::fp32, 1.0, 3);
  for (const char* local : {"naive", "checkpointed", "fused", "liger"}) {
    const Status st = s->can_run_local(local);
    EXPECT_EQ(st.code, Status::Code::not_supported) << local;
    EXPECT_NE(st.message.find(std::string("local part '") + local + "' is not built on CUDA"),
              std::string::npos)
        << st.message;
    EXPECT_NE(st.message.find("CPU emulation"), std::string::npos) << st.message;
    RunRequest req;
    req.problem = &p;
    req.recipe = parse_recipe("fp32/fp32/fp32/fp32");
    req.local_strategy = local;
    EXPECT_THROW((void)s->run(req), InputError) << local;
  }
}

/// More ranks than devices: not_supported naming both numbers, through the check and through
/// run() (InputError); as many ranks as devices are accepted. A budget below one token's needs
/// and a rank without a vocabulary row (P > V) are InputErrors naming the cause.
TEST(GpuVocabParallel, RefusalsNameTheCause) {
  XL_REQUIRE_DEVICE();
  const int n = cuda_devices();
  ASSERT_GT(n, 0);
  EXPECT_TRUE(gpu::vocab_parallel_ranks_supported(n).ok());
  EXPECT_TRUE(gpu::vocab_parallel_ranks_supported(0).ok());  // ≤ 0 means one rank
  const Status st = gpu::vocab_parallel_ranks_supported(n + 1);
  EXPECT_EQ(st.code, Status::Code::not_supported);
  EXPECT_NE(st.message.find(std::to_string(n + 1) + " ranks"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("has " + std::to_string(n)), std::string::npos) << st.message;
  const auto s = vocab_parallel();
  const Problem p = gaussian(64, 4096, 64, DType::bf16, 1.0, 23, false, false);
  RunRequest req;
  req.problem = &p;
  req.recipe = parse_recipe("bf16/bf16/fp32/bf16");
  req.ranks = n + 1;
  try {
    (void)s->run(req);
    ADD_FAILURE() << "ran with " << n + 1 << " ranks on " << n << " devices";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("has " + std::to_string(n)), std::string::npos)
        << e.what();
  }
  req.ranks = 1;
  req.memory_budget = 1024;
  try {
    (void)s->run(req);
    ADD_FAILURE() << "ran with a 1024-byte budget";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  }
  if (n > 1) {
    const Problem tiny = make_gaussian_logits(3, 1, DType::fp32, 1.0, 5);  // V = 1 < P
    RunRequest t;
    t.problem = &tiny;
    t.recipe = parse_recipe("fp32");
    t.ranks = n;
    try {
      (void)s->run(t);
      ADD_FAILURE() << "ran " << n << " ranks over a vocabulary of 1";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("own no row"), std::string::npos) << e.what();
    }
  }
}

/// Whether chunked's dH GEMM writes the grad dtype directly: its operands (the input dtype when
/// the logits are stored in it, fp32 otherwise) are 16-bit and grad is that dtype
/// (gemm_output_direct). vocab_parallel's dH GEMM always writes fp32 (it is all-reduced before its
/// rounding), so only where chunked's writes fp32 too are the two the same GEMM.
bool chunked_dH_direct_16bit(const Recipe& r) {
  const DType op = r.logits == r.input ? r.input : DType::fp32;
  return op != DType::fp32 && r.grad == op;
}

/// One rank: the declared arithmetic is chunked's operation for operation (the all-reduces of one
/// rank copy), so loss, lse, the reduced loss, dz, dW and db equal the CUDA chunked strategy's bit
/// for bit with the same chunks; dH too where both dH GEMMs write fp32. Where chunked writes a
/// 16-bit dH directly, the two are different cuBLAS calls: each is held to the a-priori bound
/// against the reference (check_run). Every option together, per-token upstream gradients, bias,
/// ignored rows, several chunks and one.
TEST(GpuVocabParallel, OneRankEqualsChunked) {
  XL_REQUIRE_DEVICE();
  const auto vp = vocab_parallel();
  const auto chunked = find_strategy(Backend::cuda, "chunked");
  ASSERT_TRUE(vp && chunked);
  LossSpec none;
  none.reduction = Reduction::none;
  none.label_smoothing = 0.05;
  none.z_loss = 1e-4;
  none.softcap = 20.0;
  none.logit_scale = 1.25;
  const Problem p = gaussian(100, 507, 123, DType::bf16, 4.0, 17, true, true);
  const Problem pf = gaussian(70, 300, 40, DType::fp32, 2.0, 29, true, true);
  const Problem lp = make_gaussian_logits(50, 999, DType::bf16, 3.0, 19);
  struct Run {
    const Problem* pb;
    const char* recipe;
  };
  std::vector<Run> runs;
  for (const char* rn : {"bf16/fp32/fp32/bf16", "bf16/bf16/fp32/fp32", "bf16/bf16/bf16/bf16",
                         "bf16/fp16/fp16/fp16", "bf16/bf16/fp32/bf16"}) {
    runs.push_back({&p, rn});
    runs.push_back({&lp, rn});
  }
  runs.push_back({&pf, "fp32"});
  for (const LossSpec& spec : {LossSpec{}, none})
    for (const Run& run : runs)
      for (const std::int64_t chunk : {std::int64_t{16}, run.pb->N}) {
        RunRequest req;
        req.problem = run.pb;
        req.spec = spec;
        req.recipe = parse_recipe(run.recipe);
        if (spec.reduction == Reduction::none) req.upstream = random_upstream(run.pb->N, 5);
        req.chunk_tokens = chunk;
        req.ranks = 1;
        const std::string ctx = run.pb->describe() + " recipe " + run.recipe + " spec {" +
                                spec.describe() + "} chunk_tokens " + std::to_string(chunk);
        const StrategyOutputs a = vp->run(req), b = chunked->run(req);
        EXPECT_TRUE(same_bits(a.loss, b.loss)) << ctx << " loss";
        EXPECT_TRUE(same_bits(a.lse, b.lse)) << ctx << " lse";
        EXPECT_TRUE(same_bits({a.reduced_loss}, {b.reduced_loss})) << ctx << " reduced loss";
        EXPECT_TRUE(same_bits(a.dz, b.dz)) << ctx << " dz";
        EXPECT_TRUE(same_bits(a.dW, b.dW)) << ctx << " dW";
        EXPECT_TRUE(same_bits(a.db, b.db)) << ctx << " db";
        if (!run.pb->is_linear() || !chunked_dH_direct_16bit(req.recipe)) {
          EXPECT_TRUE(same_bits(a.dH, b.dH)) << ctx << " dH";
        } else {
          Case c{"vp-vs-chunked", *run.pb, spec, req.upstream};
          check_run(c, reference_for(c), *vp, req.recipe, chunk, 1);
        }
        EXPECT_GT(a.peak_extra_bytes, 0) << ctx;
      }
}

/// Every loss option (as LossOptions), with and without bias, linear and logits problems, three
/// recipes: within the a-priori bound of the certified reference, for one rank and for every
/// device of the machine (P > 1: uneven shards since 507 and 1001 are odd), and, with P ranks, a
/// row whose maximum and target lie in different shards.
TEST(GpuVocabParallel, LossOptionsWithinBound) {
  XL_REQUIRE_DEVICE();
  const auto vp = vocab_parallel();
  const std::vector<LossSpec> specs = loss_option_specs();
  const std::vector<Recipe> recipes = {parse_recipe("bf16/fp32/fp32/bf16"),
                                       parse_recipe("bf16/bf16/fp32/bf16"),
                                       parse_recipe("bf16/bf16/bf16/bf16")};
  for (const int P : rank_counts()) {
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const LossSpec& sp = specs[k];
      for (bool bias : {false, true}) {
        Problem p = ignoring_as(gaussian(61, 507, 123, DType::bf16, 4.0, 11 + k, bias, true), sp);
        Case c{
            "vp-options-" + std::to_string(k) + (bias ? "-bias" : ""), std::move(p), sp,
            sp.reduction == Reduction::none ? random_upstream(61, 99 + k) : std::vector<double>{}};
        const ReferenceResult ref = reference_for(c);
        for (const Recipe& r : recipes) check_run(c, ref, *vp, r, 16, P);
      }
      Problem lp = make_gaussian_logits(37, 1001, DType::bf16, 3.0, 21 + k);
      for (std::int64_t i = 2; i < lp.N; i += 5)
        lp.targets[static_cast<std::size_t>(i)] = sp.ignore_index;
      Case lc{"vp-options-logits-" + std::to_string(k), std::move(lp), sp,
              sp.reduction == Reduction::none ? random_upstream(37, 7 + k) : std::vector<double>{}};
      const ReferenceResult ref = reference_for(lc);
      for (const Recipe& r : recipes) check_run(lc, ref, *vp, r, 16, P);
    }
    if (P > 1) {
      // Row 0: its maximum in the last shard, its target in the first; row 1 the reverse.
      const std::int64_t V = 10 * P + 3;
      std::vector<double> r0(static_cast<std::size_t>(V), 0.0), r1 = r0;
      r0[static_cast<std::size_t>(V - 1)] = 8.0;
      r0[1] = 2.0;
      r1[0] = 8.0;
      r1[static_cast<std::size_t>(V - 2)] = 2.0;
      for (const LossSpec& sp : {LossSpec{}, specs[6]}) {
        const Problem lp = testing::logits_problem(DType::fp32, {r0, r1}, {1, V - 2});
        for (const Problem& q : {lp, testing::linear_from_logits(lp)}) {
          Case c{"vp-split-max-target", q, sp,
                 sp.reduction == Reduction::none ? random_upstream(2, 3) : std::vector<double>{}};
          check_run(c, reference_for(c), *vp, parse_recipe("fp32"), 1, P);
        }
      }
    }
  }
}

/// Every target ignored (shared case C03): loss 0, every gradient exactly 0, mean NaN by default,
/// sum 0; for each rank count.
TEST(GpuVocabParallel, AllIgnoredIsExact) {
  XL_REQUIRE_DEVICE();
  const auto vp = vocab_parallel();
  std::vector<std::vector<double>> rows(5, std::vector<double>(10));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 10; ++j) rows[i][j] = static_cast<float>(0.1 * (i + 1) * (j - 4.5));
  const Problem lp = testing::logits_problem(DType::fp32, rows, std::vector<std::int64_t>(5, -100));
  const Problem pl = testing::linear_from_logits(lp);
  for (const int P : rank_counts())
    for (const Problem* p : {&lp, &pl})
      for (int variant = 0; variant < 2; ++variant) {
        RunRequest req;
        req.problem = p;
        req.recipe = parse_recipe("fp32");
        req.chunk_tokens = 2;
        req.ranks = P;
        if (variant == 1) req.spec.reduction = Reduction::sum;
        const StrategyOutputs o = vp->run(req);
        const std::string ctx = p->describe() + " ranks " + std::to_string(P);
        for (double v : o.loss) EXPECT_EQ(v, 0.0) << ctx;
        for (const auto* g : {&o.dz, &o.dH, &o.dW})
          for (double v : *g) EXPECT_EQ(v, 0.0) << ctx << " gradient";
        for (double v : o.db) EXPECT_EQ(v, 0.0) << ctx << " gradient";
        if (variant == 0) {
          EXPECT_TRUE(std::isnan(o.reduced_loss)) << ctx << " " << o.reduced_loss;
        } else {
          EXPECT_EQ(o.reduced_loss, 0.0) << ctx;
        }
      }
}

/// Repeat runs give every output bit for bit (fixed reduction orders; NCCL's all-reduce order is
/// fixed for a communicator and a message size), for each rank count, on a medium problem with
/// bias, ignored rows and several chunks; and a repeat after another rank count's run too.
TEST(GpuVocabParallel, RepeatRunsBitForBit) {
  XL_REQUIRE_DEVICE();
  const auto vp = vocab_parallel();
  const Problem pb = gaussian(256, 2000, 64, DType::bf16, 3.0, 5, true, true);
  for (const char* rn : {"bf16/bf16/fp32/fp32", "bf16/bf16/bf16/bf16"}) {
    RunRequest req;
    req.problem = &pb;
    req.recipe = parse_recipe(rn);
    req.chunk_tokens = 64;
    std::vector<StrategyOutputs> first;
    for (const int P : rank_counts()) {
      req.ranks = P;
      first.push_back(vp->run(req));
      expect_same_outputs(first.back(), vp->run(req),
                          std::string(rn) + " ranks " + std::to_string(P) + " repeat");
    }
    for (std::size_t k = 0; k < first.size(); ++k) {
      req.ranks = rank_counts()[k];
      expect_same_outputs(
          first[k], vp->run(req),
          std::string(rn) + " ranks " + std::to_string(req.ranks) + " after the other rank counts");
    }
  }
}

#endif  // XENTLAB_HAVE_NCCL

}  // namespace
}  // namespace xentlab::gpu_tests

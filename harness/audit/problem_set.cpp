// The audit's embedded default problem set.
#include <algorithm>

#include "datasets/catalog.hpp"
#include "datasets/generators.hpp"
#include "datasets/stories260k.hpp"
#include "harness/audit/audit.hpp"

namespace xentlab::audit {

std::vector<AuditProblem> default_problem_set(
    std::uint64_t seed, std::int64_t tokens, std::int64_t hidden,
    const std::vector<std::string>& only,
    const std::function<GenerationProgress(const std::string&)>& progress_for, bool real_shapes,
    const std::function<void(const ProblemShape&)>& before_generating,
    const std::shared_ptr<const TargetEngine>& targets) {
  constexpr std::int64_t kV = 128256;                      // Llama-3's vocabulary
  constexpr std::int64_t kStoriesV = 512, kStoriesD = 64;  // stories260K's head
  std::vector<AuditProblem> set;
  // Generation is the slow part at large `tokens` (the calibrated targets need every row's
  // softmax): only the problems asked for are made.
  const auto wanted = [&](const char* name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };
  // want(name, shape): asked for, and its shape heard (and accepted) before it is generated.
  const auto want = [&](const char* name, std::int64_t N, std::int64_t V, std::int64_t D,
                        std::int64_t rows = -1, std::int64_t vocab_rows = -1) {
    if (!wanted(name)) return false;
    if (before_generating) before_generating({name, N, V, D, rows, vocab_rows});
    return true;
  };
  const auto progress = [&](const char* name) {
    return progress_for ? progress_for(name) : GenerationProgress{};
  };
  LossSpec mean;
  if (want("stories260k", 256, kStoriesV, kStoriesD, 64)) {
    set.push_back(
        {"stories260k",
         "real trained model (llama2.c stories260K) on its own sampled text: peaked softmax, V=512",
         make_stories260k(256, seed), mean, 64});
  }
  if (want("calibrated", tokens, kV, hidden)) {
    set.push_back(
        {"calibrated",
         "Gaussian head, sigma=4, targets drawn from each row's softmax (a trained model's regime)",
         make_head(tokens, kV, hidden, DType::bf16, 4.0, seed, TargetMode::calibrated, mean,
                   "calibrated", progress("calibrated")),
         mean});
  }
  if (want("confident", tokens, kV, hidden)) {
    set.push_back({"confident",
                   "rows with p_target in 0.9 .. 0.9999 (true-class gradient 1 - p_t cancels)",
                   make_confident_head(tokens, kV, hidden, DType::bf16, 4.0, seed, mean, 0.9,
                                       0.9999, progress("confident")),
                   mean});
  }
  if (want("offset", tokens, kV, 0)) {
    set.push_back({"offset", "given logits N(0, 2^2) + 1000: rounding a stored logit costs u*|z|",
                   make_offset_logits(tokens, kV, DType::fp32, 2.0, 1000.0, seed, mean), mean});
  }
  if (want("masked", tokens, kV, 0)) {
    set.push_back(
        {"masked",
         "given logits with half the vocabulary masked (-inf), a fully masked ignored row",
         make_masked_logits(tokens, kV, DType::fp32, 4.0, 0.5, seed, mean), mean});
  }
  if (real_shapes && want("llama3-8b", kRealShapeTokens, kV, 4096, 0, 0)) {
    // The catalog's Llama-3-8B head (bf16, sigma as the catalog gives it), every row, full dW.
    DatasetParams params;
    params.N = kRealShapeTokens;
    params.seed = seed;
    params.progress = progress("llama3-8b");
    params.targets = targets;
    DatasetInstance inst = make_dataset("llama3-8b", params);
    AuditProblem ap{"llama3-8b",
                    "Llama-3-8B LM head at a training shape: N=8192, V=128256, D=4096, calibrated "
                    "targets, every row, full dW",
                    std::move(inst.problem), inst.spec};
    ap.rows = 0;
    ap.vocab_rows = 0;
    // Its own dtype only: a bf16 model's head converted to fp16 or fp32 is no longer the model,
    // and each run of this shape costs seconds of host work (36 runs of the grid instead of 76;
    // the other 40 are recorded as not supported, with the reason).
    ap.inputs = {ap.problem.input_dtype()};
    set.push_back(std::move(ap));
  }
  if (!want("all-options", tokens, kV, hidden)) return set;
  LossSpec gemma;
  gemma.softcap = 30.0;
  gemma.label_smoothing = 0.1;
  gemma.z_loss = 1e-4;
  Problem opt = make_head(tokens, kV, hidden, DType::bf16, 8.0, seed + 7, TargetMode::calibrated,
                          gemma, "all-options", progress("all-options"));
  ignore_rows(opt, 0.25, seed, gemma.ignore_index);
  set.push_back(
      {"all-options",
       "softcap 30, label smoothing 0.1, z-loss 1e-4, a quarter of the rows ignored, sigma=8",
       std::move(opt), gemma});
  return set;
}

}  // namespace xentlab::audit

// The audit's embedded default problem set.
#include "datasets/catalog.hpp"
#include "datasets/generators.hpp"
#include "datasets/stories260k.hpp"
#include "tools/audit/audit.hpp"

#include <algorithm>

namespace xentlab::audit {

std::vector<AuditProblem> default_problem_set(
    std::uint64_t seed, std::int64_t tokens, std::int64_t hidden,
    const std::vector<std::string>& only,
    const std::function<GenerationProgress(const std::string&)>& progress_for, bool real_shapes) {
  constexpr std::int64_t kV = 128256;  // Llama-3's vocabulary
  std::vector<AuditProblem> set;
  // Generation is the slow part at large `tokens` (the calibrated targets need every row's
  // softmax): only the problems asked for are made.
  const auto want = [&](const char* name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };
  const auto progress = [&](const char* name) {
    return progress_for ? progress_for(name) : GenerationProgress{};
  };
  LossSpec mean;
  if (want("stories260k")) {
    set.push_back({"stories260k", "real trained model (llama2.c stories260K) on its own sampled text: peaked softmax, V=512",
                   make_stories260k(256, seed), mean, 64});
  }
  if (want("calibrated")) {
    set.push_back({"calibrated", "Gaussian head, sigma=4, targets drawn from each row's softmax (a trained model's regime)",
                   make_head(tokens, kV, hidden, DType::bf16, 4.0, seed, TargetMode::calibrated,
                             mean, "calibrated", progress("calibrated")),
                   mean});
  }
  if (want("confident")) {
    set.push_back({"confident", "rows with p_target in 0.9 .. 0.9999 (true-class gradient 1 - p_t cancels)",
                   make_confident_head(tokens, kV, hidden, DType::bf16, 4.0, seed, mean, 0.9, 0.9999,
                                       progress("confident")),
                   mean});
  }
  if (want("offset")) {
    set.push_back({"offset", "given logits N(0, 2^2) + 1000: rounding a stored logit costs u*|z|",
                   make_offset_logits(tokens, kV, DType::fp32, 2.0, 1000.0, seed, mean), mean});
  }
  if (want("masked")) {
    set.push_back({"masked", "given logits with half the vocabulary masked (-inf), a fully masked ignored row",
                   make_masked_logits(tokens, kV, DType::fp32, 4.0, 0.5, seed, mean), mean});
  }
  if (real_shapes && want("llama3-8b")) {
    // The catalog's Llama-3-8B head (bf16, sigma as the catalog gives it), every row, full dW.
    DatasetParams params;
    params.N = kRealShapeTokens;
    params.seed = seed;
    params.progress = progress("llama3-8b");
    DatasetInstance inst = make_dataset("llama3-8b", params);
    AuditProblem ap{"llama3-8b",
                    "Llama-3-8B LM head at a training shape: N=8192, V=128256, D=4096, calibrated "
                    "targets, every row, full dW",
                    std::move(inst.problem), inst.spec};
    ap.rows = 0;
    ap.vocab_rows = 0;
    set.push_back(std::move(ap));
  }
  if (!want("all-options")) return set;
  LossSpec gemma;
  gemma.softcap = 30.0;
  gemma.label_smoothing = 0.1;
  gemma.z_loss = 1e-4;
  Problem opt = make_head(tokens, kV, hidden, DType::bf16, 8.0, seed + 7, TargetMode::calibrated,
                          gemma, "all-options", progress("all-options"));
  ignore_rows(opt, 0.25, seed, gemma.ignore_index);
  set.push_back({"all-options", "softcap 30, label smoothing 0.1, z-loss 1e-4, a quarter of the rows ignored, sigma=8",
                 std::move(opt), gemma});
  return set;
}

}  // namespace xentlab::audit

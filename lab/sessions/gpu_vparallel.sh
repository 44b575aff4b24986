#!/usr/bin/env bash
# GPU check of vocab_parallel's --ranks and local part. Run from the
# repository root on a CUDA machine (one or more GPUs); results under $OUT.
#   1. builds xentlab and the vocab_parallel tests (CUDA/NCCL and the CPU emulation);
#   2. ctest -R VocabParallel: GpuVocabParallel.* (OneRankEqualsChunked, LossOptionsWithinBound,
#      RepeatRunsBitForBit, ..., LocalPartsOtherThanChunkedAreRefused; P = 1 and P = the device
#      count where there are several GPUs) and the emulation's VocabParallel.*,
#      VocabParallelLocal.*;
#   3. a CUDA audit of vocab_parallel with --ranks 1 and --local-strategy chunked (exit 0 or 1
#      expected: the audit's verdict), then --local-strategy fused on CUDA (exit 2 expected:
#      refused before the work, naming the emulation);
#   4. bench --strategies chunked,vocab_parallel --ranks 1 (vocab_parallel timed as one rank),
#      and --ranks 2 (exit 2 on a one-GPU machine: more ranks than devices; on several GPUs a
#      not-supported row saying the bench times one device).
# summary.txt lists each step's exit status.
set -uo pipefail
OUT=${OUT:-$PWD/out-vparallel}
mkdir -p "$OUT"
build=${BUILD_DIR:-build-vparallel-gpu}
nvidia-smi -L >"$OUT/gpus.txt" 2>&1
{
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DXENTLAB_PYTHON=OFF &&
    cmake --build "$build" -j 16 --target xentlab test_gpu_strategies test_vocab_parallel \
      test_registry test_bounds test_audit test_cli test_bench
} >"$OUT/build.log" 2>&1 || { echo "build failed (see build.log)"; tail -40 "$OUT/build.log"; exit 1; }
grep -i "nccl" "$OUT/build.log" | head -3 >"$OUT/nccl.txt"
summary="$OUT/summary.txt"
: >"$summary"
step() {  # step NAME COMMAND...: runs it, output to NAME.txt, status to the summary
  local name=$1
  shift
  "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name: exit $rc" | tee -a "$summary"
}
step ctest_vocab ctest --test-dir "$build" -R "VocabParallel|Registry|Bounds" --output-on-failure \
  --timeout 900
step gtest_gpu_vocab "$build/tests/test_gpu_strategies" --gtest_filter='GpuVocabParallel.*'
bin="$build/cli/xentlab"
step audit_cuda_chunked "$bin" audit --backend cuda -q --strategies vocab_parallel --ranks 1 \
  --local-strategy chunked --problems calibrated,stories260k -o "$OUT/audit.h5" --force
step audit_cuda_fused_refused "$bin" audit --backend cuda -q --strategies vocab_parallel --ranks 1 \
  --local-strategy fused -o "$OUT/audit-fused.h5"
step bench_ranks1 "$bin" bench -N 2048 -V 32000 -D 512 --strategies chunked,vocab_parallel \
  --ranks 1 --repeats 3 --markdown "$OUT/bench1.md" --force
step bench_ranks2 "$bin" bench -N 2048 -V 32000 -D 512 --strategies vocab_parallel --ranks 2 \
  --repeats 3 --markdown "$OUT/bench2.md" --force
{
  echo "expected: ctest_vocab 0, gtest_gpu_vocab 0, audit_cuda_chunked 0 (or 1 with a verdict),"
  echo "audit_cuda_fused_refused 2, bench_ranks1 0, bench_ranks2 2 on one GPU (0 with a"
  echo "not-supported vocab_parallel row on several)"
  grep -h "is not built on CUDA\|more ranks\|ranks span" "$OUT"/audit_cuda_fused_refused.txt \
    "$OUT"/bench_ranks2.txt "$OUT"/bench2.md 2>/dev/null | head -5
} >>"$summary"
cat "$summary"

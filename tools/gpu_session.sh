#!/usr/bin/env bash
# One device session for the CUDA strategies (issue #5): configure, build, run the gpu-labelled
# tests, the strategy benchmark and the PyTorch baseline. Logs go to $OUT (default ./out).
#   tools/gpu_session.sh [all|tests|bench|preset]
# preset: `xentlab bench --preset llama3-8b-128k` (issue 8: the measured table beside the quoted
# one, $OUT/bench-preset.{md,csv,h5,log}) and the PyTorch baseline appended to the same CSV.
# Each step has its own time limit so that one slow step cannot eat the whole call.
set -u -o pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
what=${1:-all}
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -1; cmake --version | head -1; python3 -c 'import torch; print("torch", torch.__version__)'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if ! cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DXENTLAB_BUILD_BENCH=ON > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; echo "CONFIGURE FAILED"; exit 1
fi
targets="test_gpu_strategies gpu_bench"
[ "$what" = preset ] && targets="xentlab"
if ! timeout 420 cmake --build build-gpu -j16 --target $targets >> "$OUT/build.log" 2>&1; then
  grep -E "error|Error" "$OUT/build.log" | head -40; echo "BUILD FAILED"; exit 1
fi
echo "build ok"
if [ "$what" = all ] || [ "$what" = bench ]; then
  timeout 200 build-gpu/tools/gpu_bench --json "$OUT/bench.jsonl" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
  [ -n "${SKIP_TORCH:-}" ] || PYTHONUNBUFFERED=1 timeout 150 python3 tools/bench/torch_baseline.py --json "$OUT/torch.jsonl" \
    ${TORCH_ARGS:-} 2>&1 | tee "$OUT/torch.log"
fi
if [ "$what" = all ] || [ "$what" = tests ]; then
  (cd build-gpu && timeout ${TEST_TIMEOUT:-300} ctest -L gpu --output-on-failure --timeout 280) \
    > "$OUT/ctest_gpu.log" 2>&1
  echo "ctest rc=$?"
  grep -E "tests passed|Failed|FAILED|\*\*\*|Passed|Skipped" "$OUT/ctest_gpu.log" | tail -30
fi
if [ "$what" = preset ]; then
  timeout ${PRESET_TIMEOUT:-360} build-gpu/tools/xentlab bench --preset llama3-8b-128k ${PRESET_ARGS:-} \
    --markdown "$OUT/bench-preset.md" --csv "$OUT/bench-preset.csv" --h5 "$OUT/bench-preset.h5" --force \
    2> "$OUT/bench-preset.progress" | tee "$OUT/bench-preset.log"
  echo "xentlab bench rc=${PIPESTATUS[0]}"
  tail -5 "$OUT/bench-preset.progress"
  [ -n "${SKIP_TORCH:-}" ] || PYTHONUNBUFFERED=1 timeout 90 python3 tools/bench/torch_baseline.py \
    --preset llama3-8b-128k --csv "$OUT/bench-preset.csv" 2>&1 | tee "$OUT/torch-preset.log"
fi

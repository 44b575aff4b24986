#!/usr/bin/env bash
# One call on a GPU machine for the CUDA strategies: configure, build, run the gpu-labelled
# tests, the strategy benchmark and the PyTorch baseline. Logs go to $OUT (default ./out).
#   lab/sessions/gpu_session.sh [all|tests|bench|preset|fidelity|wgmma|fused|reference|real-audit|
#                                 scale|torch|proof]
# preset: `xentlab bench --preset llama3-8b-128k` (the measured table beside the quoted
# one, $OUT/bench-preset.{md,csv,h5,log}) and the PyTorch baseline appended to the same CSV.
# fidelity: the embedded audit on the GPU and on the CPU emulation, then `xentlab fidelity` of the
# two ($OUT/audit-{gpu,cpu}.h5, $OUT/fidelity.txt; docs/audit.md).
# wgmma: builds the experiments and runs lab/probes/wgmma_probe (validation against cuBLAS, then
# time; docs/fused.md) and its SASS instruction count ($OUT/wgmma.log).
# fused: the fused strategy's check in one call — the gpu-labelled tests, the side-by-side table (xentlab bench of
# naive, chunked and fused at 8K and 128K, then the PyTorch baseline), the fused time breakdown
# beside its atomic, split hand-over, no-wait and no-addition variants (BREAKDOWN_ONLY picks
# others), and the fused kernels' resources and SASS ($OUT/fused-*.log).
# reference: the reference's cuda tier — its GPU tests and the tier tests, then `xentlab reference`
# on the Llama-3-8B head shape (V=128256, D=4096) at N=8192 and N=131072 on the cuda tier, and
# PyTorch's float64 matmul rate on the same card for comparison ($OUT/reference-*.log).
# real-audit: the embedded set's real-shape problem alone (the Llama-3-8B head at N = 8192, every
# row, full dW) on the GPU with four recipes ($OUT/audit-llama.{h5,h5.md,txt}; docs/benchmarks.md).
# scale: ground truth at training scale — the GPU calibrated-target and chunk-plan tests, the
# 128K-context Llama-3-8B head (N = 131072, calibrated targets drawn on the GPU) audited on every
# row with full dW, and the N = 8192 head's chunked and checkpointed runs with fp32 logits
# ($OUT/audit-128k.{h5,txt}, $OUT/audit-llama-fp32.txt).
# torch: PyTorch as the candidate — examples/check_torch.py through the Python package, and
# verify of PyTorch's bf16 and fp32-upcast paths on the Llama-3-8B head golden file (256 tokens,
# sigma 8, 8192 vocabulary rows) under the bf16 and bf16/fp32/fp32/bf16 policies with both checks,
# the lab's CUDA strategies as candidates of the same file (xentlab candidate --backend cuda), then
# --explain of the bf16 path ($OUT/torch-*.log). SKIP_CHECK=1: the verify table alone.
# proof: the gpu-labelled tests on the tree as it is, then the differential baseline with the
# lab's CUDA kernels (verify --baseline-backend cpu and auto) on the Llama-3-8B head golden file,
# for the fp32-logits naive kernel and PyTorch's bf16 path, and the sign of the kernel's lse error
# ($OUT/ctest_gpu.log, $OUT/proof-*.log).
# Each step has its own time limit so that one slow step cannot eat the whole call.
set -u -o pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
what=${1:-all}
{
  date -u; nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -1; cmake --version | head -1; python3 -c 'import torch; print("torch", torch.__version__)'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
python_opts=""
[ "$what" = torch ] && [ -z "${SKIP_CHECK:-}" ] && python_opts="-DXENTLAB_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3)"
if ! cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DXENTLAB_BUILD_LAB=ON $python_opts > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; echo "CONFIGURE FAILED"; exit 1
fi
targets="test_gpu_strategies test_gpu_kernels test_bench_gpu xentlab"
[ "$what" = preset ] && targets="xentlab"
[ "$what" = fidelity ] && targets="xentlab"
[ "$what" = real-audit ] && targets="xentlab"
[ "$what" = reference ] && targets="xentlab test_reference_cuda test_reference_tiers"
[ "$what" = scale ] && targets="xentlab test_reference_cuda test_bench_gpu"
[ "$what" = torch ] && targets="xentlab _xentlab test_gpu_strategies"
[ "$what" = torch ] && [ -n "${SKIP_CHECK:-}" ] && targets="xentlab"
[ "$what" = proof ] && targets="xentlab test_gpu_strategies test_gpu_kernels test_bench_gpu test_reference_cuda"
[ "$what" = wgmma ] && targets="wgmma_probe"
[ "$what" = fused ] && targets="test_gpu_strategies test_gpu_kernels test_bench_gpu xentlab fused_breakdown"
if ! timeout 420 cmake --build build-gpu -j16 --target $targets >> "$OUT/build.log" 2>&1; then
  grep -E "error|Error" "$OUT/build.log" | head -40; echo "BUILD FAILED"; exit 1
fi
echo "build ok"
if [ "$what" = all ] || [ "$what" = bench ]; then
  timeout 200 build-gpu/cli/xentlab bench --tokens 8192 --csv "$OUT/bench.csv" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
  [ -n "${SKIP_TORCH:-}" ] || PYTHONUNBUFFERED=1 timeout 150 python3 harness/bench/torch_baseline.py --json "$OUT/torch.jsonl" \
    ${TORCH_ARGS:-} 2>&1 | tee "$OUT/torch.log"
fi
if [ "$what" = all ] || [ "$what" = tests ]; then
  (cd build-gpu && timeout ${TEST_TIMEOUT:-300} ctest -L gpu --output-on-failure --timeout 280) \
    > "$OUT/ctest_gpu.log" 2>&1
  echo "ctest rc=$?"
  grep -E "tests passed|Failed|FAILED|\*\*\*|Passed|Skipped" "$OUT/ctest_gpu.log" | tail -30
fi
if [ "$what" = reference ]; then
  (cd build-gpu && timeout 120 ctest -R 'ReferenceTiers' -E 'Past2Pow31' --output-on-failure --timeout 110) \
    > "$OUT/reference-tests.log" 2>&1
  echo "reference tests rc=$?"; grep -E "tests passed|Failed|\*\*\*" "$OUT/reference-tests.log" | tail -20
  # The oracle recomputes whole rows in 100-digit arithmetic (V·D multiply-adds a row): at the
  # Llama head's shape that is minutes a row, so the timed runs leave it out and a smaller head
  # carries the oracle check of the cuda tier.
  timeout 60 build-gpu/cli/xentlab reference -N 64 -V 32000 -D 256 --reference cuda \
    --oracle-rows 4 > "$OUT/reference-oracle.log" 2>&1; tail -12 "$OUT/reference-oracle.log"
  for n in 8192 131072; do
    XENTLAB_REFERENCE_TIMINGS=1 timeout 150 build-gpu/cli/xentlab reference -N $n -V 128256 \
      -D 4096 --reference cuda --oracle-rows 0 > "$OUT/reference-$n.log" 2>&1
    tail -14 "$OUT/reference-$n.log"
  done
  # A golden file of the whole Llama-3-8B head at N = 8192 (calibrated targets, every row, full
  # dW), verified against PyTorch's bf16 path.
  g=/tmp/xentlab-golden-llama3-8b.h5 c=/tmp/xentlab-candidate-torch.h5
  rm -f "$g" "$c"
  /usr/bin/time -f "golden wall %e s, max RSS %M KB" timeout 240 build-gpu/cli/xentlab golden \
    --dataset llama3-8b -N 8192 --out "$g" > "$OUT/golden-8192.log" 2>&1
  ls -l "$g" >> "$OUT/golden-8192.log" 2>&1; tail -9 "$OUT/golden-8192.log"
  PYTHONUNBUFFERED=1 /usr/bin/time -f "candidate wall %e s" timeout 150 python3 \
    examples/torch_candidate.py "$g" "$c" --dtype bf16 --device cuda >> "$OUT/golden-8192.log" 2>&1
  /usr/bin/time -f "verify wall %e s" timeout 150 build-gpu/cli/xentlab verify "$g" "$c" \
    --policy bf16 >> "$OUT/golden-8192.log" 2>&1; echo "verify rc=$?"; tail -25 "$OUT/golden-8192.log"
  PYTHONUNBUFFERED=1 timeout 60 python3 -c '
import torch, time
a = torch.randn(8192, 8192, dtype=torch.float64, device="cuda"); b = torch.randn_like(a)
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter(); n = 10
for _ in range(n): a @ b
torch.cuda.synchronize(); dt = (time.perf_counter() - t) / n
print(f"torch float64 matmul 8192^3: {2 * 8192**3 / dt / 1e12:.1f} TFLOP/s")' 2>&1 | tee "$OUT/reference-dgemm.log"
fi
if [ "$what" = preset ]; then
  timeout ${PRESET_TIMEOUT:-360} build-gpu/cli/xentlab bench --preset llama3-8b-128k ${PRESET_ARGS:-} \
    --markdown "$OUT/bench-preset.md" --csv "$OUT/bench-preset.csv" --h5 "$OUT/bench-preset.h5" --force \
    2> "$OUT/bench-preset.progress" | tee "$OUT/bench-preset.log"
  echo "xentlab bench rc=${PIPESTATUS[0]}"
  tail -5 "$OUT/bench-preset.progress"
  [ -n "${SKIP_TORCH:-}" ] || PYTHONUNBUFFERED=1 timeout 90 python3 harness/bench/torch_baseline.py \
    --preset llama3-8b-128k --csv "$OUT/bench-preset.csv" 2>&1 | tee "$OUT/torch-preset.log"
fi
if [ "$what" = fidelity ]; then
  timeout ${AUDIT_TIMEOUT:-330} build-gpu/cli/xentlab audit --backend cuda --out "$OUT/audit-gpu.h5" --force -q \
    > "$OUT/audit-gpu.txt" 2>&1; echo "gpu audit rc=$?"
  grep -E '^runs:' "$OUT/audit-gpu.txt"
  timeout ${AUDIT_TIMEOUT:-330} build-gpu/cli/xentlab audit --backend cpu --out "$OUT/audit-cpu.h5" --force -q \
    > "$OUT/audit-cpu.txt" 2>&1; echo "cpu audit rc=$?"
  build-gpu/cli/xentlab fidelity "$OUT/audit-cpu.h5" "$OUT/audit-gpu.h5" > "$OUT/fidelity.txt" 2>&1
  echo "fidelity rc=$?"
  tail -12 "$OUT/fidelity.txt"
fi
if [ "$what" = wgmma ]; then
  timeout 120 build-gpu/lab/wgmma_probe ${WGMMA_ARGS:-} 2>&1 | tee "$OUT/wgmma.log"
  echo "wgmma_probe rc=${PIPESTATUS[0]}"
  cuobjdump -sass build-gpu/lab/wgmma_probe 2>/dev/null | grep -oE 'HGMMA[.A-Z0-9x]*' | sort | uniq -c |
    tee -a "$OUT/wgmma.log"
fi
if [ "$what" = fused ]; then
  (cd build-gpu && timeout 240 ctest -L gpu --output-on-failure --timeout 200) > "$OUT/ctest_gpu.log" 2>&1
  echo "ctest rc=$?"
  grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest_gpu.log" | tail -20
  timeout 120 build-gpu/cli/xentlab bench --tokens 8192 --strategies naive,chunked,fused \
    --recipes bf16/bf16/fp32/fp32 --repeats 3 --csv "$OUT/fused-bench.csv" > "$OUT/fused-bench.log" 2>&1
  echo "xentlab bench rc=$?"
  sed -n '/^N /,$p' "$OUT/fused-bench.log"
  [ -n "${SKIP_TORCH:-}" ] || PYTHONUNBUFFERED=1 timeout 60 python3 harness/bench/torch_baseline.py \
    --sizes 8192x128256x4096,131072x128256x4096 --repeats 3 --json "$OUT/fused-torch.jsonl" 2>&1 |
    tee "$OUT/fused-torch.log"
  XL_BREAKDOWN_ONLY=${BREAKDOWN_ONLY:-"fused forward only,fused,fused-atomic,fused-split-handover,fused-red-no-wait,fused-noatomics"} \
    timeout 150 build-gpu/lab/fused_breakdown 3 8192 131072 2>&1 | tee "$OUT/fused-breakdown.log"
  o=build-gpu/gpu/CMakeFiles/xl_gpu_cuda.dir/cuda/fused  # the kernels: forward.cu.o, backward.cu.o
  { for f in "$o/forward.cu.o" "$o/backward.cu.o"; do cuobjdump -res-usage "$f"; done
    for f in "$o/forward.cu.o" "$o/backward.cu.o"; do cuobjdump -sass "$f"; done |
      grep -oE 'HGMMA[.A-Z0-9x]*|HMMA[.A-Z0-9x]*' | sort | uniq -c; } > "$OUT/fused-resources.log" 2>&1
  tail -8 "$OUT/fused-resources.log"
fi
if [ "$what" = real-audit ]; then
  /usr/bin/time -f "audit wall %e s, max RSS %M KB" timeout ${AUDIT_TIMEOUT:-330} build-gpu/cli/xentlab audit \
    --backend cuda --problems llama3-8b \
    --recipes bf16/fp32/fp32/bf16,bf16/bf16/fp32/bf16,bf16/fp32/bf16/bf16,bf16/fp32/fp16/bf16 \
    --out "$OUT/audit-llama.h5" --force > "$OUT/audit-llama.txt" 2>&1
  echo "audit rc=$?"
  grep -v '^\[' "$OUT/audit-llama.txt" | tail -40
fi
if [ "$what" = scale ]; then
  (cd build-gpu && timeout 150 ctest -R 'CalibratedTargetsOnTheGpu|BenchPlan' --output-on-failure \
    --timeout 140) > "$OUT/scale-tests.log" 2>&1
  echo "scale tests rc=$?"; grep -E "tests passed|Failed|\*\*\*" "$OUT/scale-tests.log" | tail -10
  /usr/bin/time -f "audit wall %e s, max RSS %M KB" timeout ${AUDIT_TIMEOUT:-300} build-gpu/cli/xentlab \
    audit --backend cuda --dataset llama3-8b --tokens 131072 --rows 0 --vocab-rows 0 \
    --recipes ${RECIPES_128K:-bf16/fp32/fp32/bf16,bf16/bf16/fp32/bf16,bf16/bf16/bf16/bf16} \
    --out "$OUT/audit-128k.h5" --force > "$OUT/audit-128k.txt" 2>&1
  echo "128k audit rc=$?"
  tr '\r' '\n' < "$OUT/audit-128k.txt" | grep -E 'generating|reference' | tail -4
  grep -v '^\[' "$OUT/audit-128k.txt" | tail -45
  /usr/bin/time -f "audit wall %e s, max RSS %M KB" timeout ${AUDIT_TIMEOUT:-200} build-gpu/cli/xentlab \
    audit --backend cuda --problems llama3-8b --strategies chunked,checkpointed \
    --recipes bf16/fp32/fp32/bf16 --out "$OUT/audit-llama-fp32.h5" --force > "$OUT/audit-llama-fp32.txt" 2>&1
  echo "llama fp32-logits audit rc=$?"
  grep -v '^\[' "$OUT/audit-llama-fp32.txt" | grep -E 'chunked|checkpointed|runs:|wall' | head -20
fi
if [ "$what" = torch ]; then
  # SKIP_CHECK=1 leaves out the GPU strategy tests and check_torch.py (the verify table only).
  if [ -z "${SKIP_CHECK:-}" ]; then
    (cd build-gpu && timeout 120 ctest -R 'GpuStrategies' --output-on-failure --timeout 110) \
      > "$OUT/torch-gpu-tests.log" 2>&1
    echo "gpu strategy tests rc=$?"; grep -E "tests passed|Failed|\*\*\*" "$OUT/torch-gpu-tests.log" | tail -10
    PYTHONPATH=build-gpu/python PYTHONUNBUFFERED=1 timeout 120 python3 examples/check_torch.py \
      --device cuda --cache-dir /tmp/xentlab-check-cache > "$OUT/torch-check.log" 2>&1
    echo "check_torch rc=$?"; grep -E "=====|reduced_loss|^dH|^dW|differential" "$OUT/torch-check.log" | head -40
  fi
  g=/tmp/xentlab-golden-llama-256.h5
  rm -f "$g" /tmp/xentlab-cand-*.h5
  timeout 120 build-gpu/cli/xentlab golden --dataset llama3-8b --tokens 256 --sigma 8 \
    --vocab-rows 8192 --out "$g" > "$OUT/torch-golden.log" 2>&1; echo "golden rc=$?"
  for dt in bf16 fp32; do
    PYTHONUNBUFFERED=1 timeout 60 python3 examples/torch_candidate.py "$g" \
      "/tmp/xentlab-cand-$dt.h5" --dtype $dt --device cuda >> "$OUT/torch-golden.log" 2>&1
    for pol in bf16/fp32/fp32/bf16 bf16; do
      echo "== candidate $dt, policy $pol" >> "$OUT/torch-verify.log"
      /usr/bin/time -f "verify wall %e s" timeout 90 build-gpu/cli/xentlab verify "$g" \
        "/tmp/xentlab-cand-$dt.h5" --policy $pol >> "$OUT/torch-verify.log" 2>&1
      echo "verify rc=$?" >> "$OUT/torch-verify.log"
    done
  done
  # The lab's own CUDA strategies as candidates of the same golden file.
  for st in naive chunked checkpointed fused; do
    for rc in bf16/fp32/fp32/bf16 bf16/bf16/fp32/bf16; do
      c="/tmp/xentlab-cand-$st-${rc//\//-}.h5"
      timeout 60 build-gpu/cli/xentlab candidate "$g" "$c" --strategy $st --recipe $rc \
        --backend cuda >> "$OUT/torch-golden.log" 2>&1 || continue
      for pol in bf16/fp32/fp32/bf16 bf16; do
        echo "== candidate $st $rc, policy $pol" >> "$OUT/torch-verify.log"
        timeout 90 build-gpu/cli/xentlab verify "$g" "$c" --policy $pol >> "$OUT/torch-verify.log" 2>&1
        echo "verify rc=$?" >> "$OUT/torch-verify.log"
      done
    done
  done
  grep -vE '^(golden|candidate|  ) ' "$OUT/torch-verify.log" | head -200
  /usr/bin/time -f "explain wall %e s" timeout ${EXPLAIN_TIMEOUT:-100} build-gpu/cli/xentlab verify "$g" \
    /tmp/xentlab-cand-bf16.h5 --policy bf16 --explain > "$OUT/torch-explain.log" 2>&1
  echo "explain rc=$?"; grep -E "behaves like|wall|^bf16/" "$OUT/torch-explain.log" | head -14
fi
if [ "$what" = proof ]; then
  # The GPU suite on the final tree, then the differential baseline with the lab's CUDA kernels:
  # the fp32-logits kernels' candidate against the emulation alone and against both backends,
  # PyTorch's bf16 path against both (it must still fail), and the sign of the kernels' lse error.
  (cd build-gpu && timeout ${TEST_TIMEOUT:-200} ctest -L gpu --output-on-failure --timeout 190) \
    > "$OUT/ctest_gpu.log" 2>&1
  echo "ctest rc=$?"
  grep -E "tests passed|Failed|FAILED|\*\*\*|Skipped|Total Test" "$OUT/ctest_gpu.log" | tail -30
  g=/tmp/xentlab-golden-llama-256.h5 c=/tmp/xentlab-cand-naive-fp32.h5 t=/tmp/xentlab-cand-torch-bf16.h5
  rm -f "$g" "$c" "$t"
  timeout 90 build-gpu/cli/xentlab golden --dataset llama3-8b --tokens 256 --sigma 8 \
    --vocab-rows 8192 --out "$g" > "$OUT/proof-golden.log" 2>&1; echo "golden rc=$?"
  timeout 60 build-gpu/cli/xentlab candidate "$g" "$c" --strategy naive \
    --recipe bf16/fp32/fp32/bf16 --backend cuda >> "$OUT/proof-golden.log" 2>&1
  [ -n "${SKIP_TORCH:-}" ] || PYTHONUNBUFFERED=1 timeout 60 python3 examples/torch_candidate.py \
    "$g" "$t" --dtype bf16 --device cuda >> "$OUT/proof-golden.log" 2>&1
  for b in cpu auto; do
    for cand in "$c" "$t"; do
      echo "== $cand, --baseline-backend $b" >> "$OUT/proof-verify.log"
      /usr/bin/time -f "verify wall %e s" timeout 90 build-gpu/cli/xentlab verify "$g" "$cand" \
        --policy bf16/fp32/fp32/bf16 --baseline-backend $b >> "$OUT/proof-verify.log" 2>&1
      echo "verify rc=$?" >> "$OUT/proof-verify.log"
    done
  done
  grep -E "^== |^baseline|^lse|^loss|^dH|FAILED|PASSED|verify rc|wall" "$OUT/proof-verify.log" | head -80
  timeout 60 python3 - "$g" "$c" <<'PY' 2>&1 | tee "$OUT/proof-lse-sign.log"
import sys, h5py, numpy as np
g, c = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
def ref(name):
    for k in (name, "reference/" + name, "outputs/" + name):
        if k in g: return np.asarray(g[k][()], dtype=np.float64)
    raise KeyError(name)
def cand(name):
    for k in (name, "outputs/" + name):
        if k in c: return np.asarray(c[k][()], dtype=np.float64)
    raise KeyError(name)
for name in ("lse", "loss"):
    e = cand(name) - ref(name)
    print(f"{name}: mean signed error {e.mean():.3e}, rms {np.sqrt((e**2).mean()):.3e}, "
          f"negative {np.mean(e < 0):.3f}, mean |ref| {np.abs(ref(name)).mean():.3f}")
PY
fi

#!/usr/bin/env bash
# One call on a lent GPU machine (the device tool) that records the figures of the README's PyTorch
# sections and of the nightly suite: build, the PyTorch golden→candidate→verify example, an audit
# of a file dumped by the README's PyTorch snippet, and the nightly suite (gpu tests, embedded audit
# on the GPU, the 128K-context audit). Each step has its own time limit; everything lands in $OUT
# (8 files at most come back).
#   OUT=out lab/sessions/device_session.sh
set -u -o pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
work=/tmp/xl-session
mkdir -p "$work"
log="$OUT/session.log"
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*" | tee -a "$log"; }

say "env"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -1; python3 -c 'import torch; print("torch", torch.__version__)'; nproc; } >>"$log" 2>&1

say "build"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release  >"$work/configure.log" 2>&1 &&
  timeout 300 cmake --build build-gpu -j16 >"$work/build.log" 2>&1
rc=$?; say "build rc=$rc"
[ $rc -eq 0 ] || { grep -E "error" "$work/build.log" | head -30 >>"$log"; exit 1; }
X=build-gpu/cli/xentlab

say "golden (stories260k) -> PyTorch candidate on the GPU -> verify"
( $X golden --dataset stories260k --out "$work/golden.h5" --force &&
  timeout 120 python3 examples/torch_candidate.py "$work/golden.h5" "$work/candidate.h5" --dtype bf16 --device cuda &&
  $X verify "$work/golden.h5" "$work/candidate.h5" --policy bf16 --junit "$work/verify.xml" --force ) >>"$log" 2>&1
say "verify rc=$?"

say "README snippet: dump H, W, targets with PyTorch to safetensors, then audit the file on the GPU"
timeout 60 python3 - "$work/mymodel.safetensors" >>"$log" 2>&1 <<'PY'
import sys, torch
from safetensors.torch import save_file
torch.manual_seed(0)
V, D, T = 32000, 256, 512
lm_head = torch.nn.Linear(D, V, bias=False).to("cuda", torch.bfloat16)       # stands in for model.lm_head
hidden = torch.nn.functional.rms_norm(torch.randn(T, D, device="cuda"), (D,)).to(torch.bfloat16)
with torch.no_grad(): probs = torch.softmax(lm_head(hidden).float(), -1)
targets = torch.multinomial(probs, 1)[:, 0]                                   # calibrated next tokens
W = lm_head.weight
save_file({"H": hidden.contiguous(), "W": W.contiguous(), "targets": targets.contiguous()}, sys.argv[1])
print("wrote", sys.argv[1], tuple(hidden.shape), tuple(W.shape))
PY
timeout 120 $X audit --dataset "$work/mymodel.safetensors" --backend cuda --rows 32 \
  --recipes bf16/fp32/fp32/bf16,bf16/bf16/fp32/bf16,bf16/bf16/bf16/bf16,bf16/fp32/fp16/bf16 \
  --out "$work/file-audit.h5" --force --quiet >>"$log" 2>&1
say "file audit rc=$?"

say "nightly suite (tests, embedded audit on the GPU, 128K context)"
BUILD_DIR=$PWD/build-gpu ROWS_128K=${ROWS_128K:-4} timeout ${NIGHTLY_TIMEOUT:-400} tools/scripts/nightly_gpu.sh "$work/nightly" >>"$log" 2>&1
say "nightly rc=$?"
cat "$work/nightly/summary.txt" >>"$log" 2>/dev/null

say "plots"
timeout 60 python3 tools/scripts/plot_audit.py "$work/nightly/audit.h5" "$work/plots" >>"$log" 2>&1

# What comes back (8 files at most).
cp "$work/nightly/audit-embedded.txt" "$OUT/" 2>/dev/null
cp "$work/nightly/audit-128k.txt" "$OUT/" 2>/dev/null
cp "$work/nightly/tests.log" "$OUT/" 2>/dev/null
cp "$work/nightly/audit.h5" "$OUT/" 2>/dev/null
cp "$work/plots/error_vs_recipe_dW.png" "$OUT/" 2>/dev/null
cp "$work/plots/loss_error_vs_ptarget.png" "$OUT/" 2>/dev/null
cp "$work/nightly/audit.h5.md" "$OUT/audit-embedded.md" 2>/dev/null
say "done"

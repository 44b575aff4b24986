#!/usr/bin/env bash
# The audit of a large given-logits dataset within a memory budget.
# Generates F: logits (N=16745, V=128256) fp32 = 8.6 GB and calibrated targets (an HDF5 problem
# file, docs/formats.md "Problem files": root datasets `logits` and `targets`), then runs
#   xentlab audit --dataset F --rows 0 --recipes fp32 --strategies naive --reduction none
#                 --memory-budget 60G
# under /usr/bin/time -v. Before the memory budget it grew to 130.8 GB and was killed (137); it must now
# pass (exit 0) with "Maximum resident set size" below 60 GiB, auditing in blocks of token rows.
# Run from the repository root; results under $OUT.
set -uo pipefail
OUT=${OUT:-$PWD/memory-out}
mkdir -p "$OUT"
cmake -S . -B build-mem -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 &&
  cmake --build build-mem -j16 --target xentlab >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
X=build-mem/cli/xentlab
F=${F:-/tmp/logits-16745x128256.h5}
python3 - "$F" <<'PY' 2>&1 | tee "$OUT/generate.log"
import sys, numpy as np, h5py
N, V, path = 16745, 128256, sys.argv[1]
rng = np.random.default_rng(7)
with h5py.File(path, "w") as f:
    z = f.create_dataset("logits", (N, V), dtype="float32", chunks=(64, V))
    t = np.empty(N, dtype=np.int64)
    for i0 in range(0, N, 512):
        i1 = min(N, i0 + 512)
        blk = (rng.standard_normal((i1 - i0, V), dtype=np.float32) * 3.0).astype(np.float32)
        z[i0:i1] = blk
        p = np.exp(blk - blk.max(axis=1, keepdims=True)); p /= p.sum(axis=1, keepdims=True)
        c = p.cumsum(axis=1); u = rng.random((i1 - i0, 1))
        t[i0:i1] = np.minimum((c < u).sum(axis=1), V - 1)
    f.create_dataset("targets", data=t)
print("wrote", path, N, V)
PY
free -g | tee "$OUT/free.txt"
nproc >>"$OUT/free.txt"
/usr/bin/time -v "$X" audit --dataset "$F" --rows 0 --recipes fp32 --strategies naive \
  --reduction none --memory-budget 60G -o "$OUT/audit.h5" --force \
  >"$OUT/audit.stdout" 2>"$OUT/audit.stderr"
rc=$?
echo "exit status: $rc" | tee "$OUT/summary.txt"
grep -E "Maximum resident|Elapsed" "$OUT/audit.stderr" | tee -a "$OUT/summary.txt"
grep -E "blocks|would hold|runs:" "$OUT/audit.stdout" "$OUT/audit.stderr" | head -5 | tee -a "$OUT/summary.txt"
# The same with a budget below the estimate of one block: refused before any work, exit 2.
/usr/bin/time -v "$X" audit --dataset "$F" --rows 0 --recipes fp32 --strategies naive \
  --reduction none --memory-budget 9G -o "$OUT/audit-small.h5" --force \
  >"$OUT/audit-small.stdout" 2>"$OUT/audit-small.stderr"
echo "9G budget: exit status $?" | tee -a "$OUT/summary.txt"
grep -E "would hold|Maximum resident|Elapsed" "$OUT/audit-small.stderr" | tee -a "$OUT/summary.txt"
# golden of the Llama-3 8B head at 256 tokens (the cuda reference tier on this machine): the
# estimate it prints ("memory   estimated …") against its measured peak (expect peak ≤ estimate
# + ~20 MB of process), then the same at 1G: refused at once (exit 2), before the generation.
/usr/bin/time -v "$X" golden --dataset llama3-8b --tokens 256 --vocab-rows 8192 \
  -o "$OUT/llama.h5" --force >"$OUT/golden.stdout" 2>"$OUT/golden.stderr"
echo "golden llama3-8b: exit status $?" | tee -a "$OUT/summary.txt"
grep -E "^memory|^wrote" "$OUT/golden.stdout" | tee -a "$OUT/summary.txt"
grep -E "Maximum resident|Elapsed" "$OUT/golden.stderr" | tee -a "$OUT/summary.txt"
rm -f "$OUT/llama.h5"
/usr/bin/time -v "$X" golden --dataset llama3-8b --tokens 256 --vocab-rows 8192 \
  --memory-budget 1G -o "$OUT/llama1g.h5" >"$OUT/golden1g.stdout" 2>"$OUT/golden1g.stderr"
echo "golden llama3-8b at 1G: exit status $?" | tee -a "$OUT/summary.txt"
grep -E "would hold|Maximum resident|Elapsed" "$OUT/golden1g.stderr" | tee -a "$OUT/summary.txt"
rm -f "$F"
exit $rc

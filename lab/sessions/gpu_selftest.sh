#!/usr/bin/env bash
# xentlab selftest on a GPU machine (run from the repository root; results under
# $OUT). Usage: bash lab/sessions/gpu_selftest.sh [small] [llama256] [llama8192]. Shows: (1) the CUDA strategies as correct candidates beside the emulated ones at the
# small default shape (--backend all); (2) the selftest at the Llama-3-8B head with a few hundred
# tokens (--backend cuda: the emulation and the fp32 sequential candidates are left out above
# their work limits, noted); (3) the nightly shape N = 8192 under a time limit (the model faults
# take three fp64 GEMMs of the problem each: this measures whether it fits a nightly at all).
set -uo pipefail
OUT=${OUT:-$PWD/selftest-gpu-out}
mkdir -p "$OUT"
nvidia-smi -L > "$OUT/gpu.txt" 2>&1
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release > "$OUT/configure.log" 2>&1 || { echo "configure failed"; exit 1; }
cmake --build build-gpu -j16 --target xentlab > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
X=build-gpu/cli/xentlab
run() {  # name, timeout, args...
  local name=$1 t=$2; shift 2
  local t0=$(date +%s)
  timeout "$t" $X selftest "$@" --json "$OUT/$name.json" --force > "$OUT/$name.txt" 2> "$OUT/$name.err"
  local rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - t0 )) s ($*)" | tee -a "$OUT/summary.txt"
  grep -E "^(note|confusion|  correct|  faulty|correct candidates|missed|selftest)" "$OUT/$name.txt" | tee -a "$OUT/summary.txt"
}
# Steps: the arguments (default: small llama256), so that each call fits a 10-minute command.
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(small llama256)
for step in "${steps[@]}"; do
  case $step in
    small) run small-all 300 --backend all ;;
    llama256) run llama3-256 400 --backend cuda --dataset llama3-8b --tokens 256 ;;
    llama8192) run llama3-8192 540 --backend cuda --dataset llama3-8b --tokens 8192 ;;
  esac
done

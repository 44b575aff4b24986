#!/usr/bin/env bash
# The nightly GPU correctness suite. On a machine with an NVIDIA GPU (sm_90 for the sm_90a code):
#   tools/scripts/nightly_gpu.sh OUTDIR [BASELINE.h5]
# 1. configures and builds what it runs (Release, build-nightly/);
# 2. runs the gpu-labelled and slow tests (TEST_JOBS at a time, 3; those past 2^31 elements one at
#    a time) beside the embedded audit of step 3, ending before its 128K audit; JUnit XML in
#    OUTDIR/tests.xml and OUTDIR/tests-large.xml;
# 3. runs the audit on the GPU: the embedded set (on a GPU it includes the Llama-3-8B head at
#    N = 8192, every row, full dW: minutes of the suite), then the 128K-context problem (the
#    Llama-3-8B head at N = 131072, V = 128256, D = 4096, calibrated targets drawn on the GPU in
#    seconds) audited on a seeded sub-batch of rows (ROWS_128K=0 VOCAB_ROWS_128K=0: every row and
#    full dW, about a minute a run); results in OUTDIR/audit.h5 (+ .md) and, for the 128K
#    problem (the embedded set's llama3-8b by name, at another N: --append refuses it),
#    OUTDIR/audit-128k.h5 (+ .md); summary in OUTDIR/summary.txt; the embedded set also on the CPU
#    emulation (OUTDIR/audit-cpu.h5, run beside the tests and the GPU audit: it needs no GPU) and
#    `xentlab fidelity` of the two (OUTDIR/fidelity.txt:
#    where the emulation does not model the GPU within 2×; reported, not failing);
# 4. runs `xentlab selftest` at the Llama-3-8B head (SELFTEST_TOKENS tokens, 8192; 0 skips it):
#    every fault of the catalogue caught, no correct candidate failed, candidates and the
#    differential baseline on the GPU (OUTDIR/selftest.txt, OUTDIR/selftest.json);
# 5. with BASELINE.h5 (a previous OUTDIR/audit.h5): xentlab regress BASELINE.h5 OUTDIR/audit.h5
#    (the embedded set's runs; the 128K audit's are not compared with a baseline).
#    A baseline from before the Llama-3-8B head was audited in bf16 only holds its fp16 and fp32
#    runs as passed, now not supported: regress reports them; refresh the baseline.
# Exit status: non-zero when a test failed, a run was incorrect or failed, or a regression was found.
# Environment: BUILD_DIR (build-nightly), JOBS (nproc), ROWS_128K (sub-batch rows, 8),
# SELFTEST_TOKENS (8192; 0 = no selftest),
# VOCAB_ROWS_128K (vocabulary rows of its dW, 256; 0 = all),
# RECIPES_128K (recipes of the 128K audit), AUDIT_ARGS (extra options of the embedded audit),
# AUDIT_TIMEOUT (seconds per audit step, 0 = none), SKIP_TESTS=1 (skip step 2), NO_GPU_CHECK=1
# (skip the check for a GPU; without one it exits 4 before building), BROKEN_STRATEGY=chunked (a
# test build whose chunked strategy is wrong on purpose, CMake's XENTLAB_BROKEN_STRATEGY: the suite
# must then exit non-zero; empty, the default, builds the real strategies).
set -uo pipefail
out=${1:?usage: tools/scripts/nightly_gpu.sh OUTDIR [BASELINE.h5]}
baseline=${2:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD_DIR:-$here/build-nightly}
jobs=${JOBS:-$(nproc)}
mkdir -p "$out"
status=0
step() { echo "== $*" | tee -a "$out/summary.txt"; }
# Stopped (a signal, a time limit), the suite stops its background jobs too.
trap 'jobs -p | xargs -r kill 2>/dev/null; exit 130' INT TERM

: >"$out/summary.txt"
rm -f "$out/fidelity.txt" "$out/regress.txt" "$out/audit-128k.h5" "$out/audit-128k.h5.md" # never a previous run's
# A GPU suite without a GPU would skip every test and fail the GPU audit deep inside: say so first
# (exit 4, as the other GPU tools). NO_GPU_CHECK=1 skips this check.
if [ -z "${NO_GPU_CHECK:-}" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  step "no NVIDIA GPU here (nvidia-smi -L failed): the nightly GPU suite needs one"
  exit 4
fi
step "build${BROKEN_STRATEGY:+ (a test build: strategy $BROKEN_STRATEGY broken on purpose)}"
# Only what the suite runs: the command line and the executables of the gpu- and slow-labelled
# tests (their targets named in tests/CMakeLists.txt: CTest lists the tests themselves only after
# the executables are built, gtest_discover_tests).
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DXENTLAB_CUDA=ON \
  -DXENTLAB_BROKEN_STRATEGY="${BROKEN_STRATEGY:-}" >"$out/configure.log" 2>&1 ||
  { step "configure FAILED (see configure.log)"; exit 1; }
targets=$(grep -oE 'xl_add_test\(test_[a-z0-9_]+ LABELS [a-z ]*(gpu|slow)' "$here/tests/CMakeLists.txt" |
  sed -E 's/xl_add_test\(([a-z0-9_]+) .*/\1/' | sort -u | tr '\n' ' ')
[ -n "$targets" ] || { step "no gpu- or slow-labelled test targets found in tests/CMakeLists.txt"; exit 1; }
cmake --build "$build" -j "$jobs" --target xentlab $targets >"$out/build.log" 2>&1 ||
  { step "build FAILED (see build.log)"; exit 1; }
echo "built xentlab $targets in ${SECONDS} s" | tee -a "$out/summary.txt"
limit=${AUDIT_TIMEOUT:-0}
# Three processes share the cores from here on (the GPU audit, the CPU audit, the tests): OpenMP
# threads that spin at their barriers while other processes hold the cores make each process many
# times slower (on the H200's 16 cores, with all three spinning, a 5 s GPU test took 279 s), so
# they wait passively, and the CPU audit and each test take a share of the cores.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
share=$(( jobs / 4 > 0 ? jobs / 4 : 1 ))

# The CPU emulation's audit of the embedded set (for the fidelity step) needs no GPU: it runs
# beside the tests and the GPU audit.
OMP_NUM_THREADS=$share timeout "$limit" "$build/cli/xentlab" audit --backend cpu --out "$out/audit-cpu.h5" --force ${AUDIT_ARGS:-} \
  >"$out/audit-cpu.txt" 2>&1 &
cpu_audit=$!

# The GPU tests run beside the embedded audit (they need the GPU little of the time, the audit
# mostly the host); they are waited for before the 128K audit.
tests_pid=
if [ -z "${SKIP_TESTS:-}" ]; then
  step "tests: gpu and slow labels (${TEST_JOBS:-3} at a time; those past 2^31 elements alone), beside the embedded audit"
  (
    rc=0
    export OMP_NUM_THREADS=$share
    ctest --test-dir "$build" -L 'gpu|slow' -E 'Past2Pow31' -j "${TEST_JOBS:-3}" --no-tests=error \
      --output-on-failure --output-junit "$out/tests.xml" >"$out/tests.log" 2>&1 || rc=1
    ctest --test-dir "$build" -L 'gpu|slow' -R 'Past2Pow31' -j 1 --output-on-failure \
      --output-junit "$out/tests-large.xml" >>"$out/tests.log" 2>&1 || rc=1
    echo "tests done at ${SECONDS} s" >>"$out/tests.log"
    exit $rc
  ) &
  tests_pid=$!
fi

step "audit: embedded set on the GPU"
timeout "$limit" "$build/cli/xentlab" audit --backend cuda --out "$out/audit.h5" --force ${AUDIT_ARGS:-} \
  >"$out/audit-embedded.txt" 2>&1 || status=1
grep -E '^runs:|HOLDS|REFUTED' "$out/audit-embedded.txt" | tee -a "$out/summary.txt"
echo "elapsed ${SECONDS} s" | tee -a "$out/summary.txt"

# The tests end before the 128K audit: its naive fp32 logits alone take 67 GB of the device, and the
# tests past 2^31 elements tens more (beside the embedded audit, whose largest run needs a few GB,
# both fit).
if [ -n "$tests_pid" ]; then
  step "tests (gpu and slow labels)"
  wait "$tests_pid" || status=1
  grep -E 'tests passed|tests failed|tests done' "$out/tests.log" | tee -a "$out/summary.txt"
  echo "elapsed ${SECONDS} s" | tee -a "$out/summary.txt"
fi

step "audit: the Llama-3-8B head at N=131072, calibrated targets (sub-batch of ${ROWS_128K:-8} rows)"
timeout "$limit" "$build/cli/xentlab" audit --backend cuda --dataset llama3-8b --tokens 131072 \
  --rows "${ROWS_128K:-8}" --vocab-rows "${VOCAB_ROWS_128K:-256}" --recipes "${RECIPES_128K:-bf16/fp32/fp32/bf16,bf16/bf16/fp32/bf16,bf16/bf16/bf16/bf16}" \
  --out "$out/audit-128k.h5" --force >"$out/audit-128k.txt" 2>&1 || status=1
grep -E '^runs:' "$out/audit-128k.txt" | tee -a "$out/summary.txt"
echo "elapsed ${SECONDS} s" | tee -a "$out/summary.txt"

if [ "${SELFTEST_TOKENS:-8192}" != 0 ]; then
  step "selftest: proof by mutation at the Llama-3-8B head (N=${SELFTEST_TOKENS:-8192}, full dW), candidates and baseline on the GPU"
  timeout "$limit" "$build/cli/xentlab" selftest --backend cuda --baseline-backend cuda \
    --dataset llama3-8b --tokens "${SELFTEST_TOKENS:-8192}" --json "$out/selftest.json" --force \
    >"$out/selftest.txt" 2>&1 || status=1
  grep -E '^(correct candidates passed|missed faults|faults below|correct candidates failed|selftest )' \
    "$out/selftest.txt" | tee -a "$out/summary.txt"
  echo "elapsed ${SECONDS} s" | tee -a "$out/summary.txt"
fi

step "fidelity: the CPU emulation of the same set against the GPU runs (reported, not failing)"
wait "$cpu_audit" &&
  "$build/cli/xentlab" fidelity "$out/audit-cpu.h5" "$out/audit.h5" >"$out/fidelity.txt" 2>&1
tail -n 1 "$out/fidelity.txt" 2>/dev/null | tee -a "$out/summary.txt"
echo "elapsed ${SECONDS} s" | tee -a "$out/summary.txt"

if [ -n "$baseline" ]; then
  step "regression check against $baseline"
  "$build/cli/xentlab" regress "$baseline" "$out/audit.h5" | tee "$out/regress.txt" | tail -n 20 ||
    status=1
  tail -n 1 "$out/regress.txt" >>"$out/summary.txt"
fi
step "exit status $status"
exit $status

#!/usr/bin/env bash
# GPU checks of the judge, in steps that each fit a 10-minute call (results under $OUT, tarred
# into one file: a call brings back only a few files).
#   bash lab/sessions/gpu_judge.sh nightly   the nightly suite on this tree (must exit 0), its
#                                            audits timed per run (XENTLAB_AUDIT_TIMINGS=1)
#   bash lab/sessions/gpu_judge.sh broken    a test build whose chunked strategy is broken on
#                                            purpose: the nightly (a reduced audit) must exit ≠ 0
#   bash lab/sessions/gpu_judge.sh llama     verify of a Llama-3-8B-head golden file (N = 8192,
#                                            full dW) against the naive CUDA candidate, timed,
#                                            with --baseline-backend cuda; then selftest at the
#                                            Llama head (256 tokens) on the GPU
#   bash lab/sessions/gpu_judge.sh start     the whole nightly (its selftest at the Llama head
#                                            included: about 20 minutes on an H100) in its own
#                                            process session, so that it outlives this call, then
#                                            (BROKEN_AFTER=1) the broken-strategy nightly of
#                                            `broken` in the same build folder (only chunked.cu
#                                            recompiles; no tests, the selftest at 256 tokens);
#                                            polls it until LIMIT (580 s)
#   bash lab/sessions/gpu_judge.sh poll      polls that nightly (the machine must still be warm:
#                                            the next call within its 30 s); packs its files
set -uo pipefail
OUT=${OUT:?}
what=${1:?nightly, broken, llama, start or poll}
t0=$(date +%s)
S=$OUT/summary.txt
W=/tmp/xl-judge-$what
mkdir -p "$W"
el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$S"; }
el "$what: $(nvidia-smi --query-gpu=name --format=csv,noheader); commit $(git log -1 --format=%h)"
pack() { tar czf "$OUT/$what.tgz" -C /tmp --exclude='*.h5' --exclude='*-plots' "xl-judge-$what" 2>/dev/null; }
trap pack EXIT
bg=/tmp/xl-judge-bg
poll_bg() {
  # Until the last run started is done (the broken-strategy one where it was asked for).
  local last=$bg/nightly.rc
  [ -f $bg/broken.wanted ] && last=$bg/broken.rc
  while [ $(( $(date +%s) - t0 )) -lt "${LIMIT:-580}" ] && [ ! -f $last ]; do sleep 10; done
  if [ -f $bg/nightly.rc ]; then el "nightly exit $(cat $bg/nightly.rc)"; else el "nightly still running"; fi
  cat $bg/out/summary.txt >> "$S" 2>/dev/null
  tail -3 $bg/out/selftest.txt >> "$S" 2>/dev/null
  if [ -f $bg/broken.wanted ]; then
    if [ -f $bg/broken.rc ]; then el "broken nightly exit $(cat $bg/broken.rc) (expected non-zero)"
    else el "broken nightly not done"; fi
    cat $bg/broken/summary.txt >> "$S" 2>/dev/null
  fi
  tar czf "$OUT/bg.tgz" -C /tmp --exclude='*.h5' --exclude='*-plots' xl-judge-bg 2>/dev/null
}
case $what in
  start)
    mkdir -p $bg
    [ -n "${BROKEN_AFTER:-}" ] && touch $bg/broken.wanted
    broken=":"
    [ -n "${BROKEN_AFTER:-}" ] && broken="BROKEN_STRATEGY=chunked SKIP_TESTS=1 SELFTEST_TOKENS=256 \
      AUDIT_TIMEOUT=0 AUDIT_ARGS='--problems calibrated,stories260k --strategies naive,chunked' \
      RECIPES_128K=bf16/fp32/fp32/bf16 tools/scripts/nightly_gpu.sh $bg/broken > $bg/broken.log 2>&1; \
      echo \$? > $bg/broken.rc"
    setsid nohup bash -c "cd $PWD && XENTLAB_AUDIT_TIMINGS=1 AUDIT_TIMEOUT=0 tools/scripts/nightly_gpu.sh $bg/out \
      > $bg/nightly.log 2>&1; echo \$? > $bg/nightly.rc; $broken" < /dev/null > /dev/null 2>&1 &
    el "nightly started in its own session"
    poll_bg ;;
  poll)
    poll_bg ;;
  nightly)
    XENTLAB_AUDIT_TIMINGS=1 AUDIT_TIMEOUT=0 timeout "${LIMIT:-580}" tools/scripts/nightly_gpu.sh "$W" \
      > "$W/nightly.log" 2>&1
    el "nightly exit $?"
    cat "$W/summary.txt" >> "$S" ;;
  broken)
    BROKEN_STRATEGY=chunked BUILD_DIR=$PWD/build-broken AUDIT_TIMEOUT=0 \
      AUDIT_ARGS="--problems calibrated,stories260k --strategies naive,chunked" \
      RECIPES_128K=bf16/fp32/fp32/bf16 timeout "${LIMIT:-580}" tools/scripts/nightly_gpu.sh "$W" \
      > "$W/nightly.log" 2>&1
    el "broken nightly exit $? (expected non-zero)"
    cat "$W/summary.txt" >> "$S" ;;
  llama)
    B=build-gpu X=build-gpu/cli/xentlab
    cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DXENTLAB_CUDA=ON > "$W/configure.log" 2>&1 &&
      cmake --build $B -j16 --target xentlab > "$W/build.log" 2>&1
    el "build exit $?"
    g=/tmp/xl-llama-golden.h5 c=/tmp/xl-llama-naive.h5
    /usr/bin/time -f "%e s, max RSS %M kB" timeout 200 $X golden --dataset llama3-8b -N 8192 \
      --out $g --force > "$W/golden.log" 2>&1
    el "golden exit $?: $(tail -1 "$W/golden.log")"
    timeout 120 $X candidate $g $c --strategy naive --recipe bf16/fp32/fp32/bf16 --backend cuda \
      --force > "$W/candidate.log" 2>&1
    el "candidate exit $?"
    /usr/bin/time -f "%e s, max RSS %M kB" timeout 240 $X verify $g $c --policy bf16/fp32/fp32/bf16 \
      --baseline-backend cuda --json "$W/verify.json" > "$W/verify.log" 2>&1
    el "verify exit $?: $(tail -1 "$W/verify.log")"
    rm -f $g $c
    timeout 200 $X selftest --backend cuda --dataset llama3-8b --tokens 256 > "$W/selftest.log" 2>&1
    el "selftest exit $?"
    grep -E "^(confusion|  correct|  faulty|missed|selftest)" "$W/selftest.log" >> "$S" ;;
esac

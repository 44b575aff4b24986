#!/usr/bin/env bash
# Compares two builds of the xentlab program on fixed inputs, for a change that must not change
# behaviour (a refactoring, a move of files):
#   tools/scripts/compare_builds.sh OLD_XENTLAB NEW_XENTLAB OUTDIR
# 1. every command's --help text (each program's own path replaced by "xentlab");
# 2. golden files and candidates written by OLD (linear problems, one sampled, one with the loss
#    options, the real stories260K head, a logits problem; candidates of several strategies and recipes, including a lowered precision), each
#    pair verified by both programs under a fixed list of option sets: the reports (stdout and
#    stderr, the baseline's wall time masked), the exit statuses and the JUnit files must be
#    byte-identical;
# 3. the golden files NEW writes for the same commands: identical to OLD's but for the root
#    attribute "created" (h5py; skipped without it);
# 4. the embedded audit of each (xentlab audit --out): tools/scripts/compare_audits.py must say
#    "identical (provenance aside)" (skipped with SKIP_AUDIT=1).
# Exit 0 when everything is identical, 1 otherwise (the differences are listed).
set -euo pipefail
old=${1:?usage: compare_builds.sh OLD_XENTLAB NEW_XENTLAB OUTDIR}
new=${2:?usage: compare_builds.sh OLD_XENTLAB NEW_XENTLAB OUTDIR}
out=${3:?usage: compare_builds.sh OLD_XENTLAB NEW_XENTLAB OUTDIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
old=$(command -v "$old" || true)
new=$(command -v "$new" || true)
case "$old" in /*) ;; *) old="$PWD/$old" ;; esac
case "$new" in /*) ;; *) new="$PWD/$new" ;; esac
[ -x "$old" ] && [ -x "$new" ] || { echo "compare_builds: OLD and NEW must be programs" >&2; exit 2; }
status=0
differ() { echo "DIFFERS: $*"; status=1; }

# 1. help texts
for c in "" audit reference datasets golden verify candidate regress fidelity bench; do
  for side in old new; do
    bin=${!side}
    # shellcheck disable=SC2086
    "$bin" $c --help 2>&1 | sed "s#$bin#xentlab#g" >"$out/help-$side-${c:-main}.txt" || true
  done
  cmp -s "$out/help-old-${c:-main}.txt" "$out/help-new-${c:-main}.txt" ||
    differ "xentlab ${c:-} --help (diff $out/help-old-${c:-main}.txt $out/help-new-${c:-main}.txt)"
done
echo "help texts compared"

# 2. golden files and candidates, verified by both
g="$out/files"
mkdir -p "$g"
golden() {  # name, then golden options
  local name=$1
  shift
  # The same path for both (the file records its command line): NEW's first, set aside.
  "$new" golden --out "$g/$name.h5" --force "$@" >"$g/$name.golden-new.txt" 2>&1
  mv "$g/$name.h5" "$g/$name-new.h5"
  "$old" golden --out "$g/$name.h5" --force "$@" >"$g/$name.golden-old.txt" 2>&1
}
golden lin --dataset calibrated -N 48 -V 700 -D 32 --dtype bf16 --seed 3
golden sampled --dataset calibrated -N 64 -V 900 -D 24 --dtype bf16 --rows 16 --vocab-rows 40
golden logits --dataset heavy -N 16 -V 3000
golden stories --dataset stories260k -N 32
golden ignore --dataset calibrated -N 40 -V 500 -D 16 --dtype fp32 --ignore-index 3 \
  --label-smoothing 0.1 --z-loss 1e-4 --reduction sum
pairs=()
candidate() {  # golden, name, candidate options
  local gold=$1 name=$2
  shift 2
  if "$old" candidate "$g/$gold.h5" "$g/$gold-$name.h5" --force "$@" >/dev/null 2>&1; then
    pairs+=("$gold:$gold-$name")
  else
    echo "note: no candidate $gold-$name ($*)"
  fi
}
for gold in lin sampled; do
  candidate $gold naive --strategy naive --recipe bf16/fp32/fp32/fp32
  candidate $gold chunked --strategy chunked --recipe bf16/bf16/fp32/bf16 --chunk-tokens 16
  candidate $gold fused --strategy fused --recipe bf16/bf16/fp32/bf16
  candidate $gold lowered --strategy naive --recipe bf16/bf16/bf16/bf16
done
candidate logits naive --strategy naive --recipe fp16/fp32/fp32/fp32
candidate logits bf16 --strategy checkpointed --recipe fp16/bf16/fp32/bf16
candidate stories naive --strategy naive --recipe fp32/fp32/fp32/fp32
candidate stories bf16 --strategy fused --recipe fp32/bf16/fp32/bf16
candidate ignore naive --strategy naive --recipe fp32/fp32/fp32/fp32
candidate ignore chunked --strategy chunked --recipe fp32/bf16/fp32/bf16
option_sets=(
  ""
  "--policy bf16"
  "--policy fp32"
  "--policy bf16/bf16/fp32/bf16 --strictness strict"
  "--policy bf16 --check bound"
  "--policy bf16 --check differential"
  "--atol 1e-3 --rtol 1e-2"
  "--policy bf16 --require loss,dH,dW"
  "--policy fp32 --k 3 --strictness lenient"
  "--policy bf16 --explain"
  "--policy fp64"
)
n=0
for p in "${pairs[@]}"; do
  gold=${p%%:*}
  cand=${p#*:}
  i=0
  for opts in "${option_sets[@]}"; do
    i=$((i + 1))
    for side in old new; do
      bin=${!side}
      rc=0
      # shellcheck disable=SC2086
      rm -f "$g/$cand.$i.xml"
      (cd "$g" && "$bin" verify "$gold.h5" "$cand.h5" $opts --junit "$cand.$i.xml") \
        >"$g/$cand.$i.$side.raw" 2>&1 || rc=$?
      [ ! -e "$g/$cand.$i.xml" ] || mv "$g/$cand.$i.xml" "$g/$cand.$i.$side.xml"
      # The baseline's wall time is the one figure of a report that differs between runs.
      sed -E 's/^(baseline .*), [0-9.]+ s$/\1, <time> s/' "$g/$cand.$i.$side.raw" >"$g/$cand.$i.$side.txt"
      echo "exit $rc" >>"$g/$cand.$i.$side.txt"
    done
    cmp -s "$g/$cand.$i.old.txt" "$g/$cand.$i.new.txt" ||
      differ "verify $gold $cand $opts (diff $g/$cand.$i.old.txt $g/$cand.$i.new.txt)"
    if [ -e "$g/$cand.$i.old.xml" ] || [ -e "$g/$cand.$i.new.xml" ]; then
      cmp -s "$g/$cand.$i.old.xml" "$g/$cand.$i.new.xml" || differ "JUnit of verify $gold $cand $opts"
    fi
    n=$((n + 1))
  done
done
echo "verify compared: ${#pairs[@]} golden/candidate pairs × ${#option_sets[@]} option sets = $n runs"

# 3. golden files written by each
if "$py" -c 'import h5py, numpy' 2>/dev/null; then
  for gold in lin sampled logits stories ignore; do
    "$py" - "$g/$gold.h5" "$g/$gold-new.h5" <<'PY' || differ "golden file $gold"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
bad = []
def attrs(x, y, where):
    ka = set(x.attrs) - ({"created"} if where == "/" else set())
    kb = set(y.attrs) - ({"created"} if where == "/" else set())
    if ka != kb: bad.append(f"{where}: attributes {sorted(ka ^ kb)}")
    for k in ka & kb:
        if not np.array_equal(np.asarray(x.attrs[k]), np.asarray(y.attrs[k])): bad.append(f"{where}@{k}")
def walk(x, y, where):
    attrs(x, y, where)
    if isinstance(x, h5py.Dataset):
        if x.dtype != y.dtype or x.shape != y.shape or not np.array_equal(x[()], y[()], equal_nan=True):
            bad.append(where)
        return
    if set(x) != set(y): bad.append(f"{where}: members {sorted(set(x) ^ set(y))}")
    for k in set(x) & set(y): walk(x[k], y[k], f"{where.rstrip('/')}/{k}")
walk(a, b, "/")
for line in bad: print("  ", line)
sys.exit(1 if bad else 0)
PY
  done
  echo "golden files compared"
else
  echo "golden files not compared: no h5py/numpy for $py"
fi

# 4. the embedded audit
if [ "${SKIP_AUDIT:-0}" != 1 ]; then
  "$old" audit --out "$out/audit-old.h5" --force -q >"$out/audit-old.txt" 2>&1 || true
  "$new" audit --out "$out/audit-new.h5" --force -q >"$out/audit-new.txt" 2>&1 || true
  "$py" "$here/tools/scripts/compare_audits.py" "$out/audit-old.h5" "$out/audit-new.h5" |
    tee "$out/audit-compare.txt" | tail -n 3
  grep -q "identical (provenance aside)" "$out/audit-compare.txt" || differ "audit results"
fi
[ $status = 0 ] && echo "compare_builds: identical" || echo "compare_builds: differences above"
exit $status

#!/usr/bin/env bash
# xentlab.adapters against the real libraries on a CUDA machine.
# Run from the repository root; needs the wheels of .whl/ (git-ignored: carry it), no internet.
#   - installs liger-kernel and cut-cross-entropy from .whl/ with pip install --no-deps --target
#     into build-py/site (the machine's torch and triton are used as they are), and, only where the
#     machine's python lacks them, nanobind, pytest, numpy, ml_dtypes from .whl/ (cp312 wheels);
#   - builds the Python extension in build-py (CUDA strategies off: check() needs none; no CLI);
#   - runs python/tests/test_adapters_gpu.py (every adapter x six golden problems, bf16, judged
#     under the bf16 policy; reports as JSON in $OUT/results, one line per run in
#     $OUT/results/summary.tsv), test_adapters.py (the numpy stand-ins, next to a real torch), and
#     test_check.py's torch tests.
# Results under $OUT: env.txt, install.log, build.log, pytest.log, junit.xml, results/.
set -uo pipefail
OUT=${OUT:-$PWD/python-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
SITE=$PWD/build-py/site
mkdir -p "$SITE"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" --version
  "$PY" -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  "$PY" -c 'import torch.nn.functional as F; print("F.linear_cross_entropy:", hasattr(F, "linear_cross_entropy"))'
  ls .whl
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

install() {  # wheels (paths) into $SITE without dependencies; pip, else unzip (pure-Python wheels)
  if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip install --no-deps --no-index --target "$SITE" --upgrade "$@"
  else
    for w in "$@"; do "$PY" -m zipfile -e "$w" "$SITE"; done
  fi
}
{
  install .whl/liger_kernel-*.whl .whl/cut_cross_entropy-*.whl
  for m in nanobind:nanobind pytest:pytest,iniconfig,packaging,pluggy,pygments numpy:numpy ml_dtypes:ml_dtypes; do
    mod=${m%%:*}
    if "$PY" -c "import $mod" 2>/dev/null; then
      echo "present: $mod"
    else
      IFS=, read -ra names <<<"${m#*:}"
      wheels=()
      for n in "${names[@]}"; do wheels+=($(ls .whl/"$n"-*.whl 2>/dev/null | head -1)); done
      echo "installing for $mod: ${wheels[*]}"
      install "${wheels[@]}"
    fi
  done
} >"$OUT/install.log" 2>&1
export PYTHONPATH=$SITE
"$PY" -c 'import liger_kernel, cut_cross_entropy, importlib.metadata as m; print("liger-kernel", m.version("liger-kernel"), "cut-cross-entropy", m.version("cut-cross-entropy"))' 2>&1 | tee -a "$OUT/env.txt"

cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DXENTLAB_CUDA=OFF \
  -DPython_EXECUTABLE="$(command -v "$PY")" >"$OUT/build.log" 2>&1 &&
  cmake --build build-py -j16 --target _xentlab >>"$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }

PYTHONPATH="$PWD/build-py/python:$PWD/python/tests:$SITE" \
  XENTLAB_CACHE_DIR="$PWD/build-py/golden-cache" XENTLAB_ADAPTER_RESULTS="$OUT/results" \
  timeout 420 "$PY" -m pytest -q -rs -o cache_dir="$PWD/build-py/.pytest_cache" \
  --junitxml="$OUT/junit.xml" python/tests/test_adapters_gpu.py python/tests/test_adapters.py \
  "python/tests/test_check.py::test_missing_gradient_of_a_torch_loss_fails" \
  "python/tests/test_check.py::test_torch_cross_entropy_passes_and_wrong_smoothing_fails" \
  >"$OUT/pytest.log" 2>&1
rc=$?
tail -40 "$OUT/pytest.log"
echo "--- verdicts (adapter, case, verdict, outputs)"
if [ -f "$OUT/results/summary.tsv" ]; then
  { column -t -s $'\t' "$OUT/results/summary.tsv" 2>/dev/null || cat "$OUT/results/summary.tsv"; } | cut -c1-250
fi
echo "pytest exit status: $rc"
exit $rc

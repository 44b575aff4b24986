#!/usr/bin/env bash
# The README's two commands. Each installs what is missing, configures and builds (Release, in
# build/), then:
#   tools/xentlab.sh audit [args…]   runs the main job: xentlab audit on its embedded default
#   tools/xentlab.sh test            runs the whole test suite (ctest; GPU tests skip without a GPU),
#                                    then the Python package's tests (pytest, python/tests) on the
#                                    extension built in the same build folder
# Environment: BUILD_DIR (default build), JOBS (default: number of cores), PYTEST_TIMEOUT (seconds,
# default 1200), XENTLAB_REQUIRE_PYTHON=1 (CI: a Python suite that cannot run fails the command).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
mode=${1:-}
[ -n "$mode" ] && shift
build=${BUILD_DIR:-build}
case "$build" in /*) ;; *) build="$here/$build" ;; esac
jobs=${JOBS:-$(nproc)}

case "$mode" in
  audit|test) ;;
  *) echo "usage: tools/xentlab.sh audit [xentlab audit options] | test" >&2; exit 2 ;;
esac

py_args=()
if [ "$mode" = audit ]; then
  bash tools/setup.sh --python
else
  # The Python package's build needs (nanobind) and test needs (pytest, numpy, h5py) in a virtual
  # environment inside the build folder; its python builds the extension (XENTLAB_PYTHON=AUTO).
  venv="$build/venv"
  bash tools/setup.sh --python-venv "$venv"
  if "$venv/bin/python" -c 'import nanobind' 2>/dev/null; then
    py_args=(-DPython_EXECUTABLE="$venv/bin/python")
  fi
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${py_args[@]}" >/dev/null
cmake --build "$build" -j "$jobs"

if [ "$mode" = test ]; then
  status=0
  ctest --test-dir "$build" -j "$jobs" --output-on-failure -LE slow || status=$?
  # ctest prints a skipped test's reason only with -V: say once why the gpu tests skipped.
  if [ -x "$build/tests/test_gpu_strategies" ]; then
    reason=$("$build/tests/test_gpu_strategies" --gtest_filter='GpuStrategies.CleanRefusals' 2>&1 |
      grep -m1 -o 'no CUDA device: .*' || true)
    [ -z "$reason" ] || echo "gpu-labelled tests skipped: $reason"
  fi
  # The Python package (python/): its tests compare it with the xentlab command built above.
  if compgen -G "$build/python/xentlab/_xentlab*.so" >/dev/null; then
    PYTHONPATH="$build/python:$here/python/tests" XENTLAB_CLI="$build/cli/xentlab" \
      XENTLAB_CACHE_DIR="$build/python-golden-cache" \
      timeout "${PYTEST_TIMEOUT:-1200}" "$venv/bin/python" -m pytest -q \
      -o cache_dir="$build/.pytest_cache" python/tests || status=$?
  else
    echo "python package tests skipped: the extension was not built (tools/setup.sh --python-venv $venv failed, or Python's headers are missing: see the setup and cmake messages above)"
    # CI sets XENTLAB_REQUIRE_PYTHON=1: there a skipped suite is a failure, not a green run.
    if [ "${XENTLAB_REQUIRE_PYTHON:-0}" = 1 ]; then status=1; fi
  fi
  exit "$status"
else
  exec "$build/cli/xentlab" audit "$@"
fi

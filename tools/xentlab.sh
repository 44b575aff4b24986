#!/usr/bin/env bash
# The README's two commands. Each installs what is missing (tools/setup.sh: the Debian packages,
# and the project's virtual environment build/venv from python/requirements-*.txt), configures
# (Release, in build/), builds, then:
#   tools/xentlab.sh audit [args…]   builds the xentlab program alone and runs the main job,
#                                    xentlab audit on its embedded default (plots drawn by
#                                    build/venv's Python, which has matplotlib)
#   tools/xentlab.sh test            builds everything and runs the whole test suite (ctest; GPU
#                                    tests skip without a GPU), then the Python package's tests
#                                    (pytest, python/tests) on the extension built in the same
#                                    build folder
# The CUDA backend: `test` compiles it wherever a CUDA toolkit is installed (CI has one and no GPU:
# the CUDA code must keep compiling); `audit` only where a GPU is present (nvidia-smi lists one),
# since without one the audit runs on the CPU emulation and the CUDA build would only cost time.
# Environment: BUILD_DIR (default build), JOBS (default: number of cores), PYTEST_TIMEOUT (seconds,
# default 1200), XENTLAB_REQUIRE_PYTHON=1 (CI: a Python suite that cannot run fails the command),
# XENTLAB_CUDA=ON|OFF|AUTO (forces the CMake option of the same name in either mode: ON needs a
# toolkit, AUTO builds the backend where one is found), XENTLAB_DRY_RUN=1 (prints the commands it
# would run, one a line starting "+ ", and runs none).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
mode=${1:-}
[ -n "$mode" ] && shift
build=${BUILD_DIR:-build}
case "$build" in /*) ;; *) build="$here/$build" ;; esac
jobs=${JOBS:-$(nproc)}
dry=${XENTLAB_DRY_RUN:-0}

case "$mode" in
  audit|test) ;;
  *) echo "usage: tools/xentlab.sh audit [xentlab audit options] | test" >&2; exit 2 ;;
esac

# Runs a command, or with XENTLAB_DRY_RUN=1 prints it (shell-quoted).
run() {
  if [ "$dry" = 1 ]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

# A GPU is present when nvidia-smi lists one.
gpu_present() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

# The CMake option XENTLAB_CUDA: as forced by the environment, else AUTO for the test suite
# (wherever a toolkit is found) and for an audit where a GPU is present, else OFF.
cuda=${XENTLAB_CUDA:-}
case "$cuda" in
  ON|OFF|AUTO|"") ;;
  *) echo "tools/xentlab.sh: XENTLAB_CUDA must be ON, OFF or AUTO, got '$cuda'" >&2; exit 2 ;;
esac
if [ -z "$cuda" ]; then
  if [ "$mode" = test ] || gpu_present; then cuda=AUTO; else cuda=OFF; fi
fi

# The project's virtual environment (tools/setup.sh --python): the Python package's build and
# test needs, and h5py, numpy and matplotlib for the audit's plots. A failure there is a warning.
venv="$build/venv"
run bash tools/setup.sh --python "$venv"
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DXENTLAB_CUDA="$cuda")
if [ "$dry" = 1 ] || [ -x "$venv/bin/python" ]; then
  cmake_args+=(-DXENTLAB_PLOT_PYTHON="$venv/bin/python")
fi
if [ "$mode" = test ] && { [ "$dry" = 1 ] || "$venv/bin/python" -c 'import nanobind' 2>/dev/null; }; then
  # Its python builds the Python package's extension (XENTLAB_PYTHON=AUTO).
  cmake_args+=(-DPython_EXECUTABLE="$venv/bin/python")
fi
if [ "$dry" = 1 ]; then
  run cmake -S . -B "$build" "${cmake_args[@]}"
else
  cmake -S . -B "$build" "${cmake_args[@]}" >/dev/null
fi

if [ "$mode" = audit ]; then
  # The audit needs the program alone: not the tests, the lab or the Python extension.
  run cmake --build "$build" -j "$jobs" --target xentlab
  if [ "$dry" = 1 ]; then
    run "$build/cli/xentlab" audit "$@"
    exit 0
  fi
  exec "$build/cli/xentlab" audit "$@"
fi

run cmake --build "$build" -j "$jobs"
[ "$dry" = 1 ] && exit 0
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
    timeout "${PYTEST_TIMEOUT:-1200}" "$venv/bin/python" -m pytest -q -rs \
    -o cache_dir="$build/.pytest_cache" python/tests || status=$?
else
  echo "python package tests skipped: the extension was not built (tools/setup.sh --python $venv failed, or Python's headers are missing: see the setup and cmake messages above)"
  # CI sets XENTLAB_REQUIRE_PYTHON=1: there a skipped suite is a failure, not a green run.
  if [ "${XENTLAB_REQUIRE_PYTHON:-0}" = 1 ]; then status=1; fi
fi
exit "$status"

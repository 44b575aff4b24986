#!/usr/bin/env bash
# The README's two commands. Each installs what is missing, configures and builds (Release, in
# build/), then:
#   tools/xentlab.sh audit [args…]   runs the main job: xentlab audit on its embedded default
#   tools/xentlab.sh test            runs the whole test suite (ctest; GPU tests skip without a GPU)
# Environment: BUILD_DIR (default build), JOBS (default: number of cores).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
mode=${1:-}
[ -n "$mode" ] && shift
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}

case "$mode" in
  audit|test) ;;
  *) echo "usage: tools/xentlab.sh audit [xentlab audit options] | test" >&2; exit 2 ;;
esac

bash tools/setup.sh $([ "$mode" = audit ] && echo --python)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
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
  exit "$status"
else
  exec "$build/tools/xentlab" audit "$@"
fi

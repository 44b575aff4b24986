#!/usr/bin/env bash
# The house style of the Python: every tracked .py file as `ruff format` lays it out, and clean
# under `ruff check` (the rules of [tool.ruff] in pyproject.toml). Run by ctest
# (house.python_format) and by hand. Exit 0: formatted and clean; 1: files to fix (listed, with
# the commands that fix them); 77: skipped (no ruff of the pinned version, or not a git checkout),
# with the reason. Other ruff versions format and lint differently, so the check runs with the
# version python/requirements-test.txt pins (tools/setup.sh --python build/venv installs it,
# as `tools/xentlab.sh test` does).
# The ruff run: $RUFF where set, else the test command's venv ($BUILD_DIR/venv/bin/ruff, then
# build/venv/bin/ruff), else ruff on PATH.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pins="$root/python/requirements-test.txt"
pinned=$(sed -n 's/^ruff==\([^[:space:]#]*\).*/\1/p' "$pins" 2>/dev/null | head -n 1 || true)
if [ -z "$pinned" ]; then
  echo "skipped: $pins pins no ruff version (a line ruff==X.Y.Z)"; exit 77
fi

ruff=""
if [ -n "${RUFF:-}" ]; then
  if ! command -v "$RUFF" >/dev/null 2>&1; then
    echo "skipped: RUFF=$RUFF is not an executable"; exit 77
  fi
  ruff=$RUFF
else
  candidates=()
  if [ -n "${BUILD_DIR:-}" ]; then
    case $BUILD_DIR in
      /*) candidates+=("$BUILD_DIR/venv/bin/ruff") ;;
      *) candidates+=("$root/$BUILD_DIR/venv/bin/ruff") ;;
    esac
  fi
  candidates+=("$root/build/venv/bin/ruff")
  for c in "${candidates[@]}"; do
    if [ -x "$c" ]; then ruff=$c; break; fi
  done
  if [ -z "$ruff" ]; then
    if command -v ruff >/dev/null 2>&1; then
      ruff=ruff
    else
      echo "skipped: no ruff in ${candidates[*]} or on PATH (tools/setup.sh --python" \
        "build/venv installs ruff $pinned; or set RUFF)"
      exit 77
    fi
  fi
fi

version=$("$ruff" --version 2>/dev/null | sed -n 's/^ruff \([^[:space:]]*\).*/\1/p' || true)
if [ "$version" != "$pinned" ]; then
  echo "skipped: $ruff is version ${version:-unknown}; the house style is checked with ruff" \
    "$pinned (python/requirements-test.txt)"
  exit 77
fi
if ! git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "skipped: $root is not a git checkout (the tracked files are the ones checked)"; exit 77
fi

files=()
while IFS= read -r -d '' f; do
  # A file deleted from the work tree but still tracked (a rename under way) is not checked.
  if [ -f "$root/$f" ]; then files+=("$f"); fi
done < <(git -C "$root" ls-files -z -- '*.py')
if [ ${#files[@]} -eq 0 ]; then
  echo "no tracked Python files"; exit 0
fi

# From the root, so that ruff reads pyproject.toml there; no cache written into the source tree.
cd "$root"
status=0
format_out=$("$ruff" format --check --no-cache --output-format concise -- "${files[@]}" 2>&1) ||
  status=1
lint_out=$("$ruff" check --no-cache --no-fix --output-format concise -- "${files[@]}" 2>&1) ||
  status=1
if [ $status -ne 0 ]; then
  # The files named in ruff's messages ("path:line:col: ..."); the messages follow.
  mapfile -t unformatted < <(printf '%s\n' "$format_out" | sed -n 's/^\([^:]*\.py\):[0-9].*/\1/p' |
    sort -u)
  mapfile -t unclean < <(printf '%s\n' "$lint_out" | sed -n 's/^\([^:]*\.py\):[0-9].*/\1/p' |
    sort -u)
  if [ ${#unformatted[@]} -gt 0 ]; then
    echo "${#unformatted[@]} file(s) not formatted as ruff $version formats them:"
    printf '  %s\n' "${unformatted[@]}"
    echo "fix: $ruff format ${unformatted[*]}"
  fi
  if [ ${#unclean[@]} -gt 0 ]; then
    echo "${#unclean[@]} file(s) with ruff check findings:"
    printf '  %s\n' "${unclean[@]}"
    echo "fix: by hand, or $ruff check --fix ${unclean[*]} (the safe fixes)"
  fi
  echo "--- ruff format --check"
  printf '%s\n' "$format_out"
  echo "--- ruff check"
  printf '%s\n' "$lint_out"
  exit 1
fi
echo "all ${#files[@]} tracked Python files formatted and clean (ruff $version)"

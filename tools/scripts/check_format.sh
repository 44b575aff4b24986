#!/usr/bin/env bash
# The house style: every tracked C++ and CUDA source as .clang-format formats it. Run by ctest
# (house.clang_format) and by hand. Exit 0: formatted; 1: files to format (listed, with the
# command that fixes them); 77: skipped (no clang-format of the pinned major version, or not a
# git checkout), with the reason. Formatters of other major versions lay code out differently,
# so the check runs with the version Debian 12 ships (tools/setup.sh installs it).
set -uo pipefail
pinned=14
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cf=${CLANG_FORMAT:-clang-format}
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "skipped: no $cf on PATH (tools/setup.sh installs clang-format)"; exit 77
fi
major=$("$cf" --version | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p')
if [ "$major" != "$pinned" ]; then
  echo "skipped: $cf is version ${major:-unknown}; the house style is checked with version $pinned"
  exit 77
fi
if ! git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "skipped: $root is not a git checkout (the tracked files are the ones checked)"; exit 77
fi
bad=()
while IFS= read -r -d '' f; do
  "$cf" --style=file --dry-run --Werror "$root/$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git -C "$root" ls-files -z -- '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' '*.cc')
if [ ${#bad[@]} -gt 0 ]; then
  echo "${#bad[@]} file(s) not formatted as .clang-format says:"
  printf '  %s\n' "${bad[@]}"
  echo "fix: clang-format -i ${bad[*]}"
  exit 1
fi
echo "all tracked C++/CUDA sources formatted (clang-format $major)"

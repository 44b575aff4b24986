#!/usr/bin/env bash
# The house rule "documents say what is" (docs/design.md, "Where things go"): no dates, clock
# times, work-log references or internal issue numbers in the product's code, scripts, README or
# docs/. Measured numbers live as data in lab/results/, dated prose in lab/notebook/ (neither is
# checked), user-visible changes in CHANGELOG.md (dated by version, not checked).
#   tools/scripts/check_dated_prose.sh
# Allowed: ISO 8601 timestamps in format examples and test fixtures ("2026-11-30T10:39:00Z"), and
# the generated results table between <!-- results-table:begin --> and <!-- results-table:end -->
# (its caption names the date of its data). Exit 1 listing each offending line; 77 (skipped)
# outside a git checkout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "skipped: not a git checkout"; exit 77; }
mapfile -t files < <(git ls-files -co --exclude-standard -- \
  '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.in' '*.py' '*.sh' '*.toml' '*.txt' '*.md' '.ci/*' |
  grep -vE '^(lab/|CHANGELOG\.md$)' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
patterns=(
  '20[0-9]{2}-[01][0-9]-[0-3][0-9]([^T0-9]|$)'           # a date (not an ISO timestamp)
  '(^|[^:0-9])[0-2][0-9]:[0-5][0-9] ?(Z|UTC)\b'          # a clock time (not in a timestamp)
  '\b[Ii]ssue #?[0-9]+\b|\(#[0-9]+\)'                    # an internal issue number
  '\b(GPU|device|this|that|last|next|previous|earlier|later) (work )?session\b'  # work log
  '\b(first|second|third|fourth|fifth|[0-9]+(st|nd|rd|th)) time (we|it|this)\b'        # ordinals
  '\bround [0-9]+\b'
)
bad=$(for p in "${patterns[@]}"; do grep -nEi -- "$p" "${files[@]}" 2>/dev/null || true; done |
  awk -F: '!seen[$1 FS $2]++' | sort -t: -k1,1 -k2,2n)
# Lines inside a generated results table are allowed.
if [ -n "$bad" ]; then
  bad=$(while IFS= read -r hit; do
    f=${hit%%:*}
    rest=${hit#*:}
    n=${rest%%:*}
    inside=$(awk -v n="$n" 'NR <= n && /<!-- results-table:begin -->/ {open = 1}
      NR <= n && /<!-- results-table:end -->/ {open = 0} END {print open + 0}' "$f")
    [ "$inside" = 1 ] || echo "$hit"
  done <<<"$bad")
fi
if [ -n "$bad" ]; then
  echo "dated or work-log prose (move it to lab/notebook/, the numbers to lab/results/):"
  echo "$bad"
  exit 1
fi
echo "no dated or work-log prose in ${#files[@]} files"

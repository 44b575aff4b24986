#!/usr/bin/env bash
# The house's include rules (docs/design.md, "Layers"), one per call, each a ctest (house.layering.*):
#   tools/scripts/check_layering.sh RULE
# numerics  numerics/ includes nothing of ours but numerics/
# datasets  datasets/ includes only numerics/ and datasets/
# reference reference/ includes only numerics/, datasets/ and reference/
# gpu       gpu/ includes only numerics/, datasets/ and gpu/ (the code under test never includes
#           the oracle or the judge)
# judge     judge/ includes nothing of harness/, cli/, python/, lab/
# harness   harness/ includes nothing of cli/, python/, lab/
# cli       cli/ (the xentlab program) includes nothing of python/ or lab/
# python    python/ (the extension) includes nothing of cli/ or lab/
# product   nothing outside lab/ includes lab/ (the lab is never part of the product)
# Prints every offending #include with its file and line; exit 1 when there is one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ours='numerics|datasets|reference|gpu|judge|harness|cli|python|lab|tools|tests|examples'
sources() { find "$@" -type f \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \
  -o -name '*.in' \) 2>/dev/null; }
# Lines of the files in $1.. that include one of our folders other than those allowed ($allowed).
offending() {
  local allowed=$1
  shift
  sources "$@" | xargs -r grep -nE "^\s*#\s*include\s+[<\"]($ours)/" |
    grep -vE "#\s*include\s+[<\"]($allowed)/" || true
}
rule=${1:?usage: check_layering.sh numerics|datasets|reference|gpu|judge|harness|cli|python|product}
case "$rule" in
  numerics) bad=$(offending 'numerics' numerics) ;;
  datasets) bad=$(offending 'numerics|datasets' datasets) ;;
  reference) bad=$(offending 'numerics|datasets|reference' reference) ;;
  gpu) bad=$(offending 'numerics|datasets|gpu' gpu) ;;
  judge) bad=$(offending 'numerics|datasets|reference|gpu|judge' judge) ;;
  harness) bad=$(offending 'numerics|datasets|reference|gpu|judge|harness' harness) ;;
  cli) bad=$(offending 'numerics|datasets|reference|gpu|judge|harness|cli' cli) ;;
  python) bad=$(offending 'numerics|datasets|reference|gpu|judge|harness|python' python) ;;
  product)
    bad=$(sources numerics datasets reference gpu judge harness cli python tests examples tools |
      xargs -r grep -nE '^\s*#\s*include\s+[<"]lab/' || true) ;;
  *) echo "check_layering.sh: unknown rule '$rule'" >&2; exit 2 ;;
esac
if [ -n "$bad" ]; then
  echo "layering rule '$rule' broken (docs/design.md, \"Layers\"):"
  echo "$bad"
  exit 1
fi
echo "layering rule '$rule' holds"

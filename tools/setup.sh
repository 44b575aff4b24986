#!/usr/bin/env bash
# Installs what xentlab needs and is missing, from Debian packages (and PyPI for the Python tools).
# Runs `apt-get update` once, only when something is missing. Needs root (or sudo) for apt-get.
#   tools/setup.sh                C++ build and test dependencies
#   tools/setup.sh --python [DIR] also the project's virtual environment DIR (default build/venv;
#                                 made by python3 -m venv where it is missing) holding, from PyPI at
#                                 the exact versions of python/requirements-test.txt and
#                                 python/requirements-plots.txt: what the Python package's build
#                                 and tests need (nanobind, numpy, ml_dtypes, pytest, h5py, ruff;
#                                 python/, docs/python.md) and what the audit's plots and the
#                                 example scripts need (h5py, numpy, matplotlib). Never the system
#                                 Python's packages (Debian's python3 refuses pip outside a
#                                 virtual environment: PEP 668). A failure here is a warning: the
#                                 C++ build and tests go on without the Python package and plots.
#   tools/setup.sh --python-venv DIR   the same (its earlier name)
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libboost-dev          # Boost.Multiprecision (header-only cpp_bin_float: the oracle)
  libhdf5-dev           # HDF5 C API: golden, candidate and results files
  libssl-dev            # OpenSSL's libcrypto: the SHA-256 digests of those files' datasets
  libgtest-dev          # GoogleTest
  libbenchmark-dev      # Google Benchmark
  libomp-dev            # OpenMP runtime (GCC uses libgomp; kept for clang builds)
  libcli11-dev libfmt-dev nlohmann-json3-dev
  libopenblas-openmp-dev  # OpenBLAS (OpenMP threading): the fp64 GEMMs of the reference's BLAS tier
  python3-dev python3-venv  # the Python package's extension: headers, and a venv for its PyPI needs
  clang-format          # the house style check (tests: house.clang_format)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "setup: need root to run: $*" >&2; exit 1
  fi
}

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

case "${1:-}" in
  --python | --python-venv)
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    if [ "$1" = --python-venv ]; then
      venv=${2:?"tools/setup.sh --python-venv DIR: the folder of the virtual environment"}
    else
      venv=${2:-$here/build/venv}
    fi
    py=${PYTHON:-python3}
    # The exact versions the package is built and tested with and the plots drawn with
    # (pyproject.toml names the lower bounds a user's installation needs).
    pins=("$here/python/requirements-test.txt" "$here/python/requirements-plots.txt")
    # The environment is filled when a pinned package is missing or at another version.
    pinned_ok() {
      "$venv/bin/python" - "${pins[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
for path in sys.argv[1:]:
    for line in open(path):
        line = line.split("#")[0].strip()
        if line:
            name, want = line.split("==")
            try:
                have = version(name)
            except PackageNotFoundError:
                sys.exit(1)
            if have != want:
                sys.exit(1)
PY
    }
    if pinned_ok; then
      echo "setup: the virtual environment $venv holds the pinned Python packages"
    else
      echo "setup: filling the virtual environment $venv from PyPI (python/requirements-test.txt, python/requirements-plots.txt)"
      { [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"; } &&
        "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "${pins[0]}" -r "${pins[1]}" ||
        echo "setup: warning: the virtual environment $venv could not be made or filled; the Python package will not be built or tested and the audit draws no plots (the C++ build and tests go on)" >&2
    fi
    ;;
  "") ;;
  *) echo "usage: tools/setup.sh [--python [DIR] | --python-venv DIR]" >&2; exit 2 ;;
esac

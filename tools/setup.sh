#!/usr/bin/env bash
# Installs what xentlab needs and is missing, from Debian packages (and PyPI for the Python tools).
# Runs `apt-get update` once, only when something is missing. Needs root (or sudo) for apt-get.
#   tools/setup.sh            C++ build and test dependencies
#   tools/setup.sh --python   also h5py, numpy, matplotlib for the plotting and example scripts
#   tools/setup.sh --python-venv DIR
#                             also a virtual environment DIR (made by python3 -m venv where it is
#                             missing) holding what the Python package's build and tests need from
#                             PyPI: nanobind, numpy, ml_dtypes, pytest, h5py, ruff at the exact
#                             versions of python/requirements-test.txt (python/, docs/python.md).
#                             Debian's python3 refuses pip outside one (PEP 668). A failure here is
#                             a warning: the C++ build and tests go on without the Python package.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libboost-dev          # Boost.Multiprecision (header-only cpp_bin_float: the oracle)
  libhdf5-dev           # HDF5 C API: golden, candidate and results files
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

if [ "${1:-}" = "--python" ]; then
  # Only the plots (`audit --plots`) and the example scripts need these: a failure here is a
  # warning, never the end of the main job. Debian's own python3 takes Debian's packages (pip is
  # refused there: PEP 668); another python3 (pyenv, a virtual environment) takes PyPI's.
  py=${PYTHON:-python3}
  if ! "$py" -c 'import h5py, numpy, matplotlib' 2>/dev/null; then
    if [ "$(command -v "$py")" = /usr/bin/python3 ]; then
      echo "setup: installing python3-h5py python3-numpy python3-matplotlib (Debian packages)"
      as_root apt-get update -qq || true
      DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends \
        python3-h5py python3-numpy python3-matplotlib || true
    else
      echo "setup: installing h5py numpy matplotlib from PyPI for $py"
      "$py" -m pip install -q h5py numpy matplotlib || true
    fi
    "$py" -c 'import h5py, numpy, matplotlib' 2>/dev/null ||
      echo "setup: warning: $py cannot import h5py, numpy and matplotlib; audit --plots and the example scripts will not run (the rest does)" >&2
  fi
fi

if [ "${1:-}" = "--python-venv" ]; then
  venv=${2:?"tools/setup.sh --python-venv DIR: the folder of the virtual environment"}
  py=${PYTHON:-python3}
  # The exact versions the package is built and tested with (pyproject.toml names the lower bounds
  # a user's installation needs): one file, python/requirements-test.txt.
  pins="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/python/requirements-test.txt"
  # The environment is filled when a pinned package is missing or at another version.
  pinned_ok() {
    "$venv/bin/python" - "$pins" 2>/dev/null <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
for line in open(sys.argv[1]):
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
  if ! pinned_ok; then
    echo "setup: filling the virtual environment $venv from PyPI ($pins)"
    { [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"; } &&
      "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$pins" ||
      echo "setup: warning: the virtual environment $venv could not be made or filled; the Python package will not be built or tested (the C++ build and tests go on)" >&2
  fi
fi

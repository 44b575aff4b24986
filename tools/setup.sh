#!/usr/bin/env bash
# Installs what xentlab needs and is missing, from Debian packages (and PyPI for the Python tools).
# Runs `apt-get update` once, only when something is missing. Needs root (or sudo) for apt-get.
#   tools/setup.sh            C++ build and test dependencies
#   tools/setup.sh --python   also h5py, numpy, matplotlib for the plotting and example scripts
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

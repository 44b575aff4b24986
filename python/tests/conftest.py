"""Shared fixtures of the package's tests: the xentlab command (the CLI the package must agree
with), a cache folder for golden files, and numpy loss functions (float32, written from the
formulas of numerics/loss_spec.hpp) used as candidates."""

import os
import subprocess

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def cli():
    """Runs the xentlab command: XENTLAB_CLI, else build/cli/xentlab of the source tree."""
    exe = os.environ.get("XENTLAB_CLI") or os.path.join(
        os.path.dirname(__file__), "..", "..", "build", "cli", "xentlab"
    )
    if not os.path.exists(exe):
        pytest.skip(f"the xentlab command is not built ({exe}; set XENTLAB_CLI)")

    def run(*args, cwd=None):
        return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, cwd=cwd)

    return run


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("golden-cache"))

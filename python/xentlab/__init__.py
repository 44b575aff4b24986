"""xentlab from Python: the lab's certified reference, catalog problems, golden files, verify and
the audit (the same C++ code as the ``xentlab`` command), and :func:`check`, which scores a
user's own loss function against the certified reference.

    import xentlab
    p = xentlab.problem("stories260k")            # a catalog problem (xentlab datasets)
    r = xentlab.reference(p)                      # values and certified bounds
    report = xentlab.check(my_loss, problem="stories260k", policy="fp32")
    print(report)                                 # per output: statistics, bound ratio, worst element
    report.to_dict()                              # the same findings as JSON types
    xentlab.check(xentlab.adapters.liger_fused_linear_cross_entropy(), device="cuda")  # a library's loss

The API is documented in docs/python.md.
"""

import os as _os
import subprocess as _subprocess
import sys as _sys


def _last_error(stderr: str) -> str:
    """The line of a child interpreter's stderr that names its error: the last exception line
    ("ModuleNotFoundError: …") or fatal error, else the last line."""
    import re

    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    named = [
        line
        for line in lines
        if re.match(r"(Fatal Python error|[A-Za-z_][\w.]*(Error|Exception)\b)", line)
    ]
    return (named or lines or ["no message"])[-1]


def _load_extension():
    """Imports the extension with the OpenBLAS kernels the ``xentlab`` command would choose.

    OpenBLAS reads OPENBLAS_CORETYPE when it is loaded. Where it does not recognise the processor
    it falls back to its oldest kernels (10x slower in fp64 here); the command then starts itself
    again with the kernels the instruction sets allow (numerics/blas.hpp, choose_blas_kernels).
    A Python process cannot restart, so a child process asks the same question
    (preferred_blas_coretype) and the variable is set for the load only. With the same kernels as
    the command, the BLAS tier's results are the command's bit for bit. A probe that fails (the
    child exits with an error or hangs) is reported once by a RuntimeWarning naming the cause;
    the import goes on.
    """
    if "OPENBLAS_CORETYPE" in _os.environ or _os.environ.get("XENTLAB_BLAS_PROBE"):
        from . import _xentlab

        return _xentlab
    want, failure = "", ""
    try:
        env = dict(_os.environ, XENTLAB_BLAS_PROBE="1")
        probe = _subprocess.run(
            [
                _sys.executable,
                "-c",
                "from xentlab import _xentlab as x; print(x.preferred_blas_coretype() or '')",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))),
        )
        if probe.returncode == 0:
            want = probe.stdout.strip()
        else:
            failure = f"the child interpreter exited with status {probe.returncode}: {_last_error(probe.stderr)}"
    except _subprocess.TimeoutExpired:
        failure = "the child interpreter did not answer within 60 s"
    except (OSError, _subprocess.SubprocessError) as e:
        failure = f"the child interpreter could not run: {e}"
    if failure:
        import warnings

        warnings.warn(
            f"xentlab: the probe of OpenBLAS's kernels failed ({failure}); the extension is loaded "
            f"with OpenBLAS's own choice, which on a processor it does not recognise is its oldest "
            f"kernels: the BLAS reference tier may then be slower and its last bits may differ from "
            f"the xentlab command's (set OPENBLAS_CORETYPE to choose the kernels and skip the probe)",
            RuntimeWarning,
            stacklevel=2,
        )
    if want:
        _os.environ["OPENBLAS_CORETYPE"] = want
    try:
        from . import _xentlab
    finally:
        if want:
            del _os.environ["OPENBLAS_CORETYPE"]
    return _xentlab


_load_extension()
# Kept in this order (the extension's version first, the testing helpers last): not sorted.
# isort: off
from ._xentlab import __version__
from ._audit import AuditResult, audit, default_recipes, strategies
from ._core import (
    DeviceError,
    FormatError,
    InputError,
    LossSpec,
    NoDeviceError,
    OutputError,
    Problem,
    Reference,
    datasets,
    problem,
    reference,
)
from ._golden import (
    Golden,
    VerifyOutput,
    VerifyReport,
    random_upstream,
    read_golden,
    verify,
    write_candidate,
    write_golden,
)
from .check import CheckReport, OutputCheck, cached_golden, check
from . import adapters, testing

# isort: on

__all__ = [
    "AuditResult",
    "CheckReport",
    "DeviceError",
    "FormatError",
    "Golden",
    "InputError",
    "LossSpec",
    "NoDeviceError",
    "OutputCheck",
    "OutputError",
    "Problem",
    "Reference",
    "VerifyOutput",
    "VerifyReport",
    "adapters",
    "audit",
    "cached_golden",
    "check",
    "datasets",
    "default_recipes",
    "problem",
    "random_upstream",
    "read_golden",
    "reference",
    "strategies",
    "testing",
    "verify",
    "write_candidate",
    "write_golden",
    "__version__",
]

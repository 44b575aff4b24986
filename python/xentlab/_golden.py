"""Golden files, candidates and verify from Python: write_golden, read_golden, write_candidate
and verify call the library functions that ``xentlab golden`` and ``xentlab verify`` call
(python/src/bind_golden.cpp, bind_verify.cpp). Errors as in ``_core``."""

from __future__ import annotations

import collections.abc
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from . import _xentlab as _x
from ._arrays import to_host
from ._core import (
    InputError,
    LossSpec,
    Problem,
    _int,
    _names,
    _number,
    _path,
    _shown,
    _spec_of,
    _text,
)


class _GoldenArrays(collections.abc.Mapping):
    """The arrays of a golden file by name, read-only float64 numpy views of the storage the
    extension read the file into (no copy; each view made on first access and kept)."""

    def __init__(self, c, covariates: bool):
        self._c, self._cov = c, covariates
        self._names = tuple(c.array_names(covariates))
        self._views: dict = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._views:
            if name not in self._names:
                raise KeyError(name)
            self._views[name] = self._c.array(name, self._cov)
        return self._views[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"<golden arrays: {', '.join(self._names)}>"


class Golden:
    """A golden file read back (datasets/formats/golden.hpp; schema docs/formats.md): the problem
    bit-exact (:attr:`problem`), its spec, the reference's outputs with bounds and conditions
    (:attr:`reference`: a read-only mapping of float64 arrays, keys loss, loss_bound, lse,
    lse_bound, dH, dH_bound, dH_cond, dW, dW_bound, dW_cond, db, db_bound, db_cond, dz, dz_bound —
    those the file holds), per-token covariates (:attr:`covariates`), the sampled rows and
    provenance. The arrays are read-only views of the file's contents as read (no copy; take
    ``.copy()`` to change one); :attr:`problem` is made once, on first access."""

    def __init__(self, c):
        self._c = c
        self.reference = _GoldenArrays(c, covariates=False)
        self.covariates = _GoldenArrays(c, covariates=True)
        #: reduction "none": the stored upstream gradient, (N) float64, or None (ones)
        self.upstream = c.upstream
        self._problem = None

    @property
    def problem(self) -> Problem:
        """The golden problem, bit-exact (one copy of its tensors, made on first access)."""
        if self._problem is None:
            self._problem = Problem(self._c.problem)
        return self._problem

    path = property(lambda self: self._c.path)
    N = property(lambda self: self._c.N)
    V = property(lambda self: self._c.V)
    D = property(lambda self: self._c.D)
    S = property(lambda self: self._c.S, doc="token rows held")
    J = property(lambda self: self._c.J, doc="vocabulary rows of dW/db held")
    n_valid = property(lambda self: self._c.n_valid)
    partial = property(lambda self: self._c.partial)
    reduced_loss = property(lambda self: self._c.reduced_loss)
    reduced_loss_bound = property(lambda self: self._c.reduced_loss_bound)
    provenance = property(lambda self: self._c.provenance)
    checksums = property(
        lambda self: self._c.checksums,
        doc="the file holds a sha256 digest per dataset, all checked when read (False: written "
        "by an older xentlab; read with a warning)",
    )
    manifest = property(
        lambda self: self._c.manifest,
        doc="the file holds a manifest of every object and attribute as written, checked when "
        "read (False: written by an older xentlab; read with a warning, deleted datasets and "
        "edited attributes undetectable)",
    )
    token_rows = property(lambda self: self._c.token_rows)
    vocab_rows = property(lambda self: self._c.vocab_rows)
    spec = property(lambda self: LossSpec._wrap(self._c.spec))

    def __repr__(self) -> str:
        return (
            f"<xentlab.Golden {self.path}: N={self.N} V={self.V} D={self.D} S={self.S} J={self.J}>"
        )


def write_golden(
    path,
    problem: Problem,
    spec: Optional[LossSpec | Mapping] = None,
    *,
    rows: int = 0,
    vocab_rows: int = 0,
    sample_seed: int = 1,
    gradients: bool = True,
    tier: str = "auto",
    memory_budget: int = 0,
    threads: int = 0,
    force: bool = False,
    upstream=None,
    compress: str = "none",
) -> dict:
    """Writes a golden file as ``xentlab golden`` does (same bits for the same problem, spec and
    options): runs the reference on the problem (spec default: the problem's), writes to a
    temporary name and renames it into place; an existing file only with force. rows /
    vocab_rows sample token rows (dropping dW/db) and vocabulary rows of dW/db (0 = all).
    upstream: reduction "none" only, the upstream gradient dL/dloss_i (N finite floats; None or
    all ones = ones; note the command's default for reduction none is ``--upstream random``, which
    is ``upstream=random_upstream(N)``), stored in the file and applied by the reference.
    compress: "none", "gzip" (level 4) or "gzip:LEVEL" (1–9), as ``xentlab golden --compress``:
    the datasets chunked through shuffle and gzip (h5py reads them without a plugin).
    memory_budget: bytes the work may hold (the problem, covariates, reference and file buffers;
    0, the default: the memory available now): over it, InputError naming the estimate, its terms
    and the budget before the reference runs. Returns a summary dict: path, S, J, reduced_loss,
    reduced_loss_bound, partial, outputs, seconds, raw_bytes and stored_bytes (the datasets'
    bytes, uncompressed and as stored). Raises InputError (ValueError) for an existing file
    without force or bad options,
    OutputError (OSError) when the file cannot be written."""
    if not isinstance(problem, Problem):
        raise TypeError(f"problem: expected a xentlab.Problem, got {type(problem).__name__}")
    s = _spec_of(spec, problem._c.spec)
    g = []
    if upstream is not None:
        if isinstance(upstream, str):
            raise TypeError(
                f"upstream: expected an array of {problem.N} floats, got the string {upstream!r} "
                f"(the command's --upstream random is upstream=xentlab.random_upstream(N))"
            )
        raw = np.asarray(upstream)
        if raw.dtype.kind != "f" and raw.dtype.name != "bfloat16":
            raise TypeError(
                f"upstream: expected an array of floats (one dL/dloss_i per token), got dtype "
                f"{raw.dtype} (as the command's --upstream FILE.npy, integer, bool, complex and "
                f"object arrays are refused)"
            )
        g = raw.astype(np.float64)
        if g.shape != (problem.N,):
            raise InputError(
                f"upstream: expected shape ({problem.N},) (one dL/dloss_i per token), got {g.shape}"
            )
        g = g.tolist()
    return _x.write_golden(
        _path(path, "path"),
        problem._c,
        s,
        _int("rows", rows),
        _int("vocab_rows", vocab_rows),
        _int("sample_seed", sample_seed, minimum=0),
        bool(gradients),
        _text("tier", tier),
        _int("memory_budget", memory_budget, minimum=0),
        _int("threads", threads),
        bool(force),
        "python: xentlab.write_golden",
        g,
        _text("compress", compress),
    )


def random_upstream(N: int, seed: int = 1) -> np.ndarray:
    """The seeded upstream gradient of ``xentlab golden --upstream random`` (reference/reference.hpp
    random_upstream): (N,) float64 values k/8, k uniform in −8…16 (zeros and negatives included,
    every value exact in bf16). ``write_golden(..., upstream=random_upstream(N))`` writes the same
    file as the command's default for reduction none."""
    return np.asarray(
        _x.random_upstream(_int("N", N, minimum=0), _int("seed", seed, minimum=0)), dtype=np.float64
    )


def read_golden(path) -> Golden:
    """Reads and checks a golden file, every dataset against its sha256 digest. Raises FormatError
    (ValueError) naming the file and what is wrong (a foreign file, another version, a missing
    dataset, data that do not match their digest: the dataset named; a dataset deleted or added
    or an attribute edited since the file was written, named by its manifest: docs/formats.md).
    A file written before xentlab stored digests (or a manifest) is read with a UserWarning
    "no checksums: written by an older xentlab" ("no manifest: …")."""
    c = _x.read_golden(_path(path))
    warning = _x.golden_checksum_warning(c)
    if warning:
        warnings.warn(warning, UserWarning, stacklevel=2)
    return Golden(c)


def write_candidate(
    path, outputs: Mapping[str, Any], *, implementation: str = "", force: bool = False
) -> None:
    """Writes a candidate file (format "xentlab-candidate", docs/formats.md) from arrays in their
    dtypes (numpy or torch; bf16 stored as bf16): any of loss, lse, reduced_loss, dH, dW, db, dz
    in the golden's sampled or the full shape. Atomic; an existing file only with force."""
    if not isinstance(outputs, Mapping):
        raise TypeError(
            f"outputs: expected a dict of output names and arrays, got {_shown(outputs)}"
        )
    names, arrays, bits = [], [], []
    known = _x.candidate_output_names()
    for k, v in outputs.items():
        if k not in known:
            raise InputError(f"candidate output '{k}': expected one of {', '.join(known)}")
        a, b = to_host(v, k)
        names.append(k)
        arrays.append(a)
        bits.append(b)
    _x.write_candidate(
        _path(path, "path"),
        bool(force),
        names,
        arrays,
        bits,
        _text("implementation", implementation),
    )


# --- verify --------------------------------------------------------------------------------------


@dataclass
class VerifyOutput:
    """One output's result: status "passed", "failed" (wrong or unusable), "inconclusive" (the
    checks cannot tell it from a wrong one: docs/verify.md, "Verdicts") or "not judged" (missing,
    or no reference in the golden file); stats (dict of judge/stats.hpp's ErrorStats: max_abs_err, max_rel_err,
    normwise_rel_err, max_ulp, frac_ulp_le1, bias, max_ratio — max |e|/tolerance — and their
    indices); for a failure the deciding element (its name in the golden file's numbering), both
    values, the error and the tolerance (k included)."""

    name: str
    status: str
    message: str
    dtype: Optional[str]
    shape: list
    stats: Optional[dict]
    index: int
    element: str
    candidate: float
    reference: float
    error: float
    tolerance: float
    bound_status: str = (
        ""  #: the bound check's verdict ("no bound": judged by the differential check)
    )
    differential_only: bool = False
    #: the differential check: status, message, normwise and rel_q of the candidate and of the
    #: emulated baseline, and the limits (k × baseline + one ULP of the recipe's output format)
    differential: dict = field(default_factory=dict)


@dataclass
class VerifyReport:
    """verify's report: ``passed``, ``reason``, the ``outputs`` (VerifyOutput), and ``text``, the
    table ``xentlab verify`` prints (the same text for the same files and policy)."""

    golden: str
    candidate: str
    policy: str
    provenance: str
    implementation: str
    required: list
    outputs: list
    passed: bool
    reason: str
    text: str
    k: float = 1.0  #: the policy's multiplier: an output passes when every |e| <= k·tolerance
    #: the candidate's verdict: "passed", "failed", "inconclusive" (the checks cannot tell an
    #: output from a wrong one) or "not judged" (an output the golden file can check is missing);
    #: ``xentlab verify`` exits 0, 1, 5 and 5 for them
    verdict: str = ""
    _report: Any = field(default=None, repr=False)

    def __str__(self) -> str:
        return self.text

    def __bool__(self) -> bool:
        """``passed``: ``assert report`` holds only for a passed verdict."""
        return self.passed

    def output(self, name: str) -> VerifyOutput:
        for o in self.outputs:
            if o.name == name:
                return o
        raise KeyError(name)

    def write_junit(self, path, force: bool = False) -> None:
        """The JUnit XML report of ``xentlab verify --junit``: a report of verify at path is
        replaced; any other existing file (another XML file included) only with force. Raises
        InputError (ValueError) naming the path otherwise."""
        _x.write_junit(_path(path), bool(force), self._report)


def verify_policy_description(
    golden: Golden, policy=None, strictness="default", k=None, atol=None, rtol=None
) -> str:
    """The policy line verify prints for these options."""
    g = golden if isinstance(golden, Golden) else read_golden(golden)
    p = _policy(g, policy, strictness, k, atol, rtol)
    return p.describe(g.problem.input_dtype)


def _policy(g: Golden, policy, strictness, k, atol, rtol):
    atol, rtol, k = (
        _number("atol", atol, optional=True),
        _number("rtol", rtol, optional=True),
        _number("k", k, optional=True),
    )
    policy, strictness = _text("policy", policy, optional=True), _text("strictness", strictness)
    explicit = atol is not None or rtol is not None
    if atol is not None:
        _x.check_tolerance_number("atol", atol, True)
    if rtol is not None:
        _x.check_tolerance_number("rtol", rtol, True)
    if k is not None:
        _x.check_tolerance_number("k", k, False)
    if explicit:
        for name, given in (
            ("policy", policy is not None),
            ("strictness", strictness != "default"),
            ("k", k is not None),
        ):
            if given:
                raise InputError(
                    f"{name} does not apply with atol/rtol: the explicit tolerance atol + rtol·|ref| "
                    f"replaces the policy (k = 1, no bias test); leave one of them out"
                )
    return _x.verify_policy(policy, strictness, k, atol, rtol, g._c)


def verify(
    golden,
    candidate,
    *,
    policy: Optional[str] = None,
    strictness: str = "default",
    k: Optional[float] = None,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    require: Iterable[str] = (),
    junit=None,
    force: bool = False,
    check: str = "both",
    explain: bool = False,
    baseline_rows: Optional[int] = None,
    baseline_seed: Optional[int] = None,
    baseline_backend: Optional[str] = None,
    memory_budget: int = 0,
) -> VerifyReport:
    """Scores a candidate file against a golden file, as ``xentlab verify`` does (the same
    policies, tolerances, report and JUnit file; docs/verify.md).

    golden: a path or a :class:`Golden`. policy: "bf16", "fp16", "fp32" or a recipe
    "in/logits/accum/grad" (default: the golden problem's input dtype); strictness "default",
    "strict" or "lenient"; k a finite number > 0; atol/rtol (finite, ≥ 0) replace the policy.
    require: outputs the candidate must hold and pass. junit: write the JUnit XML report there
    (replacing a report of verify; any other existing file only with force; never the golden or
    candidate file). check: "bound", "differential" or "both" (the
    differential check compares the candidate's error with the CPU emulation of the policy's recipe
    on the same problem; each output's ``differential`` dict holds both errors and the limits);
    explain: also rank the recipes of the grid by how well they explain the candidate's errors
    (in ``text``); baseline_rows (0, the default = automatic) and baseline_seed (default 1): the
    baseline's token sample; baseline_backend: whose strategies make the baseline — "cpu" (the
    default: the CPU emulation,
    the same verdict on every machine), "cuda" (the lab's CUDA kernels), "all" (both) or "auto"
    (all where a GPU is present, else cpu); docs/verify.md, "Tensor-core accumulation". The three
    baseline options are refused where no baseline runs (atol/rtol; check="bound" without
    explain). memory_budget: bytes verify may hold (0, the default: the memory available now); a
    golden file, candidate and baseline whose estimate exceeds it are refused before any work
    (InputError naming the estimate, its terms and the budget).
    Raises InputError (ValueError) for invalid options (and for "cuda"/"all" without a usable GPU,
    naming why) (the command's messages, with the
    keyword's name), FormatError (ValueError) for unreadable files."""
    # the options' types first, before any file is read
    for name, v in (("k", k), ("atol", atol), ("rtol", rtol)):
        _number(name, v, optional=True)
    _text("policy", policy, optional=True)
    _text("strictness", strictness)
    required = _x.parse_required_outputs(_names("require", require))
    check = _text("check", check)
    _text("baseline_backend", baseline_backend, optional=True)
    if (atol is not None or rtol is not None) and (check == "differential" or explain):
        raise InputError(
            "check='differential' and explain need a recipe to emulate: atol/rtol "
            "declare none (give a policy instead)"
        )
    # Where no baseline runs (atol/rtol, or check='bound' without explain), a baseline option
    # given would be ignored: refused, as by the command.
    explicit = atol is not None or rtol is not None
    if explicit or (check == "bound" and not explain):
        for name, v in (
            ("baseline_rows", baseline_rows),
            ("baseline_seed", baseline_seed),
            ("baseline_backend", baseline_backend),
        ):
            if v is not None:
                raise InputError(
                    f"{name} does not apply with atol/rtol: the explicit tolerance runs no "
                    f"differential baseline; leave one of them out"
                    if explicit
                    else f"{name} does not apply with check='bound': no differential baseline "
                    f"runs; leave it out, or use check='both'"
                )
    baseline_rows = 0 if baseline_rows is None else baseline_rows
    baseline_seed = 1 if baseline_seed is None else baseline_seed
    baseline_backend = (
        "cpu" if baseline_backend is None else _text("baseline_backend", baseline_backend)
    )
    if isinstance(baseline_rows, bool) or not isinstance(baseline_rows, int) or baseline_rows < 0:
        raise InputError(
            f"baseline_rows must be an integer >= 0 (0 = automatic), got {baseline_rows!r}"
        )
    if isinstance(baseline_seed, bool) or not isinstance(baseline_seed, int) or baseline_seed < 0:
        raise InputError(f"baseline_seed must be an integer >= 0, got {baseline_seed!r}")
    if junit is not None:
        _x.check_junit_output(_path(junit), bool(force))
        j = os.path.realpath(_path(junit))
        for what, other in (
            ("golden", golden.path if isinstance(golden, Golden) else golden),
            ("candidate", candidate),
        ):
            if os.path.exists(_path(other)) and os.path.realpath(_path(other)) == j:
                raise InputError(
                    f"junit {_path(junit)} is the {what} file itself: the report would replace it"
                )
    memory_budget = _int("memory_budget", memory_budget, minimum=0)
    if not isinstance(golden, Golden):
        _x.check_golden_read_memory(_path(golden), memory_budget, "verify")
    g = golden if isinstance(golden, Golden) else read_golden(golden)
    pol = _policy(g, policy, strictness, k, atol, rtol)
    d = _x.verify(
        g._c,
        _path(candidate, "candidate"),
        pol,
        required,
        check,
        bool(explain),
        baseline_rows,
        baseline_seed,
        baseline_backend,
        memory_budget,
    )
    d["outputs"] = [VerifyOutput(**o) for o in d["outputs"]]
    d["k"] = pol.k
    rep = VerifyReport(**d)
    if junit is not None:
        rep.write_junit(junit, force)
    return rep


# --- audit ----------------------------------------------------------------------------------------

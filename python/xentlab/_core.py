"""The lab's objects from Python: loss specs, problems, the certified reference, golden files,
verify and the audit. Each function calls the C++ library function that the ``xentlab`` command
calls (python/src/module.cpp), so results, bounds, policies and reports are the command's.

Errors: ``InputError`` (a ValueError) for bad input, ``FormatError`` (a ValueError) for a file
that is not what it claims to be, ``OutputError`` (an OSError) for an output that cannot be
written, ``TypeError`` for an array of a dtype the lab has no use for; the messages are the
library's, the ones ``xentlab`` prints after "invalid input:" or "bad file:".
"""

from __future__ import annotations

import collections.abc
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from . import _xentlab as _x
from ._arrays import from_raw, to_host

InputError = _x.InputError
FormatError = _x.FormatError
OutputError = _x.OutputError
DeviceError = _x.DeviceError

_SPEC_KEYS = ("ignore_index", "label_smoothing", "z_loss", "softcap", "logit_scale", "reduction", "empty_mean",
              "normalizer")


def _path(p, name: str = "") -> str:
    if not isinstance(p, (str, os.PathLike)):
        raise TypeError(f"{name + ': ' if name else ''}expected a file path (str or os.PathLike), got "
                        f"{type(p).__name__}")
    return os.fspath(p)


# Arguments are checked here, before the extension: its own refusal of a wrong type is one generic
# "incompatible function arguments" TypeError that names neither the argument nor what it takes.

def _shown(v) -> str:
    return f"{type(v).__name__} {v!r:.60}"


def _int(name: str, v, minimum: Optional[int] = None, optional: bool = False) -> Optional[int]:
    """v as an int: TypeError for what is no integer (a bool, a float, a string), InputError below
    minimum."""
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {_shown(v)}")
    if minimum is not None and v < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {int(v)}")
    return int(v)


def _number(name: str, v, optional: bool = False) -> Optional[float]:
    """v as a float: TypeError for what is no real number (a bool, a string, None)."""
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a number, got {_shown(v)}")
    return float(v)


def _text(name: str, v, optional: bool = False) -> Optional[str]:
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise TypeError(f"{name}: expected a string, got {_shown(v)}")
    return v


def _names(name: str, v) -> list:
    """A list of names: TypeError for a single string (it would be read character by character)
    or an element that is no string."""
    if isinstance(v, str):
        raise TypeError(f"{name}: expected a list of names, got the string {v!r} (write [{v!r}])")
    if not isinstance(v, Iterable):
        raise TypeError(f"{name}: expected a list of names, got {_shown(v)}")
    out = list(v)
    for i, n in enumerate(out):
        if not isinstance(n, str):
            raise TypeError(f"{name}[{i}]: expected a name (a string), got {_shown(n)}")
    return out


class LossSpec:
    """Every option of the loss (numerics/loss_spec.hpp), with PyTorch's semantics:
    ``ignore_index`` (int), ``label_smoothing`` ε ∈ [0, 1], ``z_loss`` λ ≥ 0 (loss += λ·lse²),
    ``softcap`` c (0 = off; z ← c·tanh(z/c)), ``logit_scale`` (> 0, 1/temperature), ``reduction``
    ("mean", "sum", "none"), ``empty_mean`` ("nan" as PyTorch, or "zero"), ``normalizer`` (int
    ≥ 0, reduction "mean" only: the sum is divided by this token count instead of the batch's own
    valid tokens, as ``num_items_in_batch`` in gradient accumulation; 0 = the batch's own).

    Raises InputError (ValueError) naming the option for a value out of range, with the message of
    ``xentlab golden --label-smoothing …``.
    """

    def __init__(self, ignore_index: int = -100, label_smoothing: float = 0.0, z_loss: float = 0.0,
                 softcap: float = 0.0, logit_scale: float = 1.0, reduction: str = "mean",
                 empty_mean: str = "nan", normalizer: int = 0):
        self._c = _x.make_spec(_int("ignore_index", ignore_index), _number("label_smoothing", label_smoothing),
                               _number("z_loss", z_loss), _number("softcap", softcap),
                               _number("logit_scale", logit_scale), _text("reduction", reduction),
                               _text("empty_mean", empty_mean), _int("normalizer", normalizer))

    @classmethod
    def _wrap(cls, c) -> "LossSpec":
        s = cls.__new__(cls)
        s._c = c
        return s

    def as_dict(self) -> dict:
        """The options as a dict (keys ignore_index, label_smoothing, z_loss, softcap,
        logit_scale, reduction, empty_mean, normalizer)."""
        return self._c.as_dict()

    def replace(self, **changes) -> "LossSpec":
        """A copy with some options changed (validated)."""
        unknown = set(changes) - set(_SPEC_KEYS)
        if unknown:
            raise TypeError(f"unknown loss option(s): {', '.join(sorted(unknown))}; the options are {', '.join(_SPEC_KEYS)}")
        d = self.as_dict()
        d.update(changes)
        return LossSpec(**d)

    def describe(self) -> str:
        return self._c.describe()

    def __getattr__(self, name):
        if name in _SPEC_KEYS:
            return self.as_dict()[name]
        raise AttributeError(name)

    def __setattr__(self, name, value):
        # A spec is a value: setting an option would change what it reads but not what it holds.
        if name == "_c" and "_c" not in self.__dict__:
            object.__setattr__(self, name, value)
            return
        raise AttributeError(f"LossSpec is immutable: use spec.replace({name}=...) for a copy with {name} "
                             f"changed")

    def __repr__(self) -> str:
        return "LossSpec(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def __eq__(self, other) -> bool:
        return isinstance(other, LossSpec) and self.as_dict() == other.as_dict()


def _spec_of(spec: Optional[LossSpec | Mapping], default) -> Any:
    """The C++ spec: a LossSpec, a dict of options (over the default's), or the default."""
    if spec is None:
        return default
    if isinstance(spec, LossSpec):
        return spec._c
    if isinstance(spec, Mapping):
        return LossSpec._wrap(default).replace(**spec)._c
    raise TypeError(f"spec: expected a LossSpec or a dict of loss options, got {type(spec).__name__}")


def _targets(targets):
    """Targets for the C++ side: a bf16 array reaches it as its uint16 bits, which would read as
    (wrong) integers: refused here, with the message the library gives any float dtype."""
    t, bf16 = to_host(targets, "targets")
    if bf16:
        raise TypeError("targets: dtype bf16 is not an integer dtype (class indices)")
    return t


class Problem:
    """One cross-entropy problem held exactly as stored (datasets/problem.hpp):

    - linear: ``H`` (N, D) and ``W`` (V, D) in one input dtype, optional ``bias`` (V), integer
      ``targets`` (N); logits = H·Wᵀ + b;
    - logits: given ``logits`` (N, V), ``targets`` (N).

    Made by :func:`problem` (a catalog name or a problem file), :meth:`linear` or
    :meth:`from_logits` (arrays), or read from a golden file (:attr:`Golden.problem`). ``spec`` is
    the problem's loss spec (the catalog entry's default, e.g. softcap 30 for gemma2-2b).

    Arrays come back as numpy (bf16 as ``ml_dtypes.bfloat16``) or, with :meth:`arrays`
    ("torch"), torch tensors; they are copies.
    """

    def __init__(self, c):
        self._c = c

    # --- constructors -----------------------------------------------------------------------
    @classmethod
    def linear(cls, H, W, targets, bias=None, spec: Optional[LossSpec | Mapping] = None,
               name: str = "linear") -> "Problem":
        """A linear problem from arrays: H (…, D) (leading dimensions flattened into N rows),
        W (V, D) in the same float dtype (float32, float16 or bfloat16 — numpy ml_dtypes or
        torch), bias (V) optional (−inf masks a row), targets (N) of any integer dtype.
        Any strides are read as the values they show (views, transposes, slices). Raises
        TypeError for another dtype or a device tensor that cannot come to the host, InputError
        (ValueError) for float64 H or W (the reference needs products that are exact in double:
        the message of a float64 problem file), shapes, non-finite values or targets out of range
        (Problem::validate's message)."""
        s = _spec_of(spec, LossSpec()._c)
        h, hb = to_host(H, "H")
        w, wb = to_host(W, "W")
        t = _targets(targets)
        b, bb = (None, False) if bias is None else to_host(bias, "bias")
        return cls(_x.linear_problem(h, w, b, t, s, _text("name", name), hb, wb, bb))

    @classmethod
    def from_logits(cls, logits, targets, spec: Optional[LossSpec | Mapping] = None,
                    name: str = "logits") -> "Problem":
        """A problem of given logits (…, V) (−inf allowed as a mask) and targets (N)."""
        s = _spec_of(spec, LossSpec()._c)
        z, zb = to_host(logits, "logits")
        t = _targets(targets)
        return cls(_x.logits_problem(z, t, s, _text("name", name), zb))

    def with_spec(self, spec: LossSpec | Mapping) -> "Problem":
        """The same problem with another loss spec (a dict changes some options)."""
        return Problem(_x.with_spec(self._c, _spec_of(spec, self._c.spec)))

    # --- properties -------------------------------------------------------------------------
    N = property(lambda self: self._c.N, doc="tokens")
    V = property(lambda self: self._c.V, doc="vocabulary size")
    D = property(lambda self: self._c.D, doc="hidden size (0 for a logits problem)")
    kind = property(lambda self: self._c.kind, doc='"linear" or "logits"')
    name = property(lambda self: self._c.name)
    input_dtype = property(lambda self: self._c.input_dtype, doc='"bf16", "fp16", "fp32" or "fp64"')
    source = property(lambda self: self._c.source, doc="catalog name, file path, or how it was made")
    regime = property(lambda self: self._c.regime, doc="the data regime it stands for")
    spec = property(lambda self: LossSpec._wrap(self._c.spec), doc="the problem's loss spec")
    targets = property(lambda self: self._c.targets, doc="(N) int64")

    def _tensor(self, name, framework="numpy", device=None):
        raw = self._c.tensor(name)
        return None if raw is None else from_raw(raw[0], raw[1], framework, device)

    H = property(lambda self: self._tensor("H"), doc="(N, D) in the input dtype (linear)")
    W = property(lambda self: self._tensor("W"), doc="(V, D) in the input dtype (linear)")
    bias = property(lambda self: self._tensor("bias"), doc="(V) or None")
    logits = property(lambda self: self._tensor("logits"), doc="(N, V) (logits problems)")

    def arrays(self, framework: str = "numpy", device=None) -> dict:
        """The problem's arrays in their dtype: {"H", "W", "targets"[, "bias"]} or {"logits",
        "targets"}, as numpy arrays or (framework="torch") torch tensors on ``device``."""
        names = ("H", "W", "bias") if self.kind == "linear" else ("logits",)
        out = {n: self._tensor(n, framework, device) for n in names}
        out = {k: v for k, v in out.items() if v is not None}
        t = self.targets
        if framework == "torch":
            import torch

            t = torch.from_numpy(t)
            t = t.to(device) if device is not None else t
        out["targets"] = t
        return out

    def describe(self) -> str:
        return self._c.describe()

    def __repr__(self) -> str:
        return f"<xentlab.Problem {self.describe()}; {self.spec.describe()}>"


def datasets() -> list:
    """The catalog of named problem sources, as ``xentlab datasets`` lists it: one dict per entry
    with name, regime, N, V, D, dtype, sigma, spec (dict), params (extra parameters and their
    defaults) and fixed_shape."""
    return _x.catalog()


def problem(name: str, N: Optional[int] = None, V: Optional[int] = None, D: Optional[int] = None,
            dtype: Optional[str] = None, sigma: Optional[float] = None, seed: int = 1,
            params: Optional[Mapping[str, float]] = None, ignore_index: Optional[int] = None) -> Problem:
    """A catalog problem (``xentlab datasets``; the same name, parameters and seed give the same
    bits as ``xentlab golden --dataset NAME``) or a problem file (HDF5, .safetensors, a folder
    of .npy files). ignore_index, when given, is the problem's spec's (as ``--ignore-index`` with
    ``--dataset``): a file's targets are read with it; a catalog problem keeps the targets its
    generator made (an entry that ignores rows marks them with its default, -100) and its spec
    takes the given value. Raises InputError (ValueError): "unknown dataset" with the catalog's
    names, "no such file: PATH" for a name that looks like a path, an override the entry does not
    accept, an unknown parameter, a target that is neither a class nor ignore_index, H and W in
    float64 (the reference's refusal); TypeError naming an argument of the wrong type."""
    name = _path(name, "name")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"params: expected a dict of parameter names and numbers, got {_shown(params)}")
    extra = {_text("params key", k): _number(f"params[{k!r}]", v) for k, v in (params or {}).items()}
    ii = _int("ignore_index", ignore_index, optional=True)
    c = _x.load_dataset(name, _int("N", N, optional=True), _int("V", V, optional=True),
                        _int("D", D, optional=True), _text("dtype", dtype, optional=True),
                        _number("sigma", sigma, optional=True), _int("seed", seed, minimum=0), extra,
                        -100 if ii is None else ii)
    p = Problem(c)
    if ii is not None and p.spec.ignore_index != ii:  # a catalog problem: the spec takes it
        p = p.with_spec({"ignore_index": ii})
    return p


# --- the certified reference -------------------------------------------------------------------

@dataclass
class Reference:
    """The certified reference's outputs (reference/reference.hpp), every value with a bound on
    its own error: |value − exact| ≤ bound (first order in u = 2^-53; docs/reference.md).

    Per token (S = len(token_rows)), float64: ``loss`` (nats, ce + z-loss, 0 for ignored rows),
    ``lse``, their ``*_bound``; covariates ``ce``, ``z_term``, ``max_logit``, ``p_target``,
    ``entropy``, ``sum_p_abs_z``, ``grad_scale``. Gradients of the reduced loss (linear
    problems): ``dH`` (S, D), ``dW`` (J, D), ``db`` (J), each with ``*_bound`` and for dH/dW the
    condition ``*_cond`` (|dz|·|W|, |dz|ᵀ·|H|); ``dz`` (S, V) when asked. ``reduced_loss`` and
    its bound (over the sampled rows when ``partial``). Missing outputs are None.
    """

    tier: str
    N: int
    V: int
    D: int
    n_valid: int
    partial: bool
    token_rows: np.ndarray
    vocab_rows: np.ndarray
    reduced_loss: float
    reduced_loss_bound: float
    loss: np.ndarray
    loss_bound: np.ndarray
    lse: np.ndarray
    lse_bound: np.ndarray
    ce: np.ndarray
    z_term: np.ndarray
    max_logit: np.ndarray
    p_target: np.ndarray
    entropy: np.ndarray
    sum_p_abs_z: np.ndarray
    grad_scale: np.ndarray
    dH: Optional[np.ndarray] = None
    dH_bound: Optional[np.ndarray] = None
    dH_cond: Optional[np.ndarray] = None
    dW: Optional[np.ndarray] = None
    dW_bound: Optional[np.ndarray] = None
    dW_cond: Optional[np.ndarray] = None
    db: Optional[np.ndarray] = None
    db_bound: Optional[np.ndarray] = None
    dz: Optional[np.ndarray] = None
    dz_bound: Optional[np.ndarray] = None


def _rows(rows, what) -> list:
    if rows is None:
        return []
    a = np.asarray(rows)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{what}: expected integer row indices, got dtype {a.dtype}")
    return [int(v) for v in a.ravel()]


def reference(problem: Problem, spec: Optional[LossSpec | Mapping] = None, *, tier: str = "auto",
              token_rows=None, vocab_rows=None, dz: bool = False, gradients: bool = True,
              memory_budget: int = 0, threads: int = 0) -> Reference:
    """The certified reference on a problem (``xentlab reference``'s computation).

    spec: the loss spec (default: the problem's; a dict changes some options). tier: "auto",
    "compensated", "blas" or "cuda" (docs/reference.md, "Tiers"). token_rows / vocab_rows: sorted
    unique subsets to compute (default all). dz: also dL/d(raw logits). memory_budget: bytes (0 =
    90 % of the memory available). Raises InputError (ValueError) for an invalid problem or spec,
    bad rows, or a problem beyond the memory budget (naming the bytes it needs)."""
    if not isinstance(problem, Problem):
        raise TypeError(f"problem: expected a xentlab.Problem, got {type(problem).__name__}")
    s = _spec_of(spec, problem._c.spec)
    d = _x.reference(problem._c, s, _text("tier", tier), _rows(token_rows, "token_rows"),
                     _rows(vocab_rows, "vocab_rows"), bool(dz), bool(gradients),
                     _int("memory_budget", memory_budget, minimum=0), _int("threads", threads))
    return Reference(**d)


# --- golden files --------------------------------------------------------------------------------

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
    """A golden file read back (tools/golden/golden_file.hpp; schema docs/formats.md): the problem
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
    def problem(self) -> "Problem":
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
    token_rows = property(lambda self: self._c.token_rows)
    vocab_rows = property(lambda self: self._c.vocab_rows)
    spec = property(lambda self: LossSpec._wrap(self._c.spec))

    def __repr__(self) -> str:
        return f"<xentlab.Golden {self.path}: N={self.N} V={self.V} D={self.D} S={self.S} J={self.J}>"


def write_golden(path, problem: Problem, spec: Optional[LossSpec | Mapping] = None, *, rows: int = 0,
                 vocab_rows: int = 0, sample_seed: int = 1, gradients: bool = True, tier: str = "auto",
                 memory_budget: int = 0, threads: int = 0, force: bool = False,
                 upstream=None) -> dict:
    """Writes a golden file as ``xentlab golden`` does (same bits for the same problem, spec and
    options): runs the reference on the problem (spec default: the problem's), writes to a
    temporary name and renames it into place; an existing file only with force. rows /
    vocab_rows sample token rows (dropping dW/db) and vocabulary rows of dW/db (0 = all).
    upstream: reduction "none" only, the upstream gradient dL/dloss_i (N finite floats; None or
    all ones = ones; note the command's default for reduction none is ``--upstream random``, which
    is ``upstream=random_upstream(N)``), stored in the file and applied by the reference.
    Returns a summary dict: path, S, J, reduced_loss, reduced_loss_bound, partial, outputs,
    seconds. Raises InputError (ValueError) for an existing file without force or bad options,
    OutputError (OSError) when the file cannot be written."""
    if not isinstance(problem, Problem):
        raise TypeError(f"problem: expected a xentlab.Problem, got {type(problem).__name__}")
    s = _spec_of(spec, problem._c.spec)
    g = []
    if upstream is not None:
        if isinstance(upstream, str):
            raise TypeError(f"upstream: expected an array of {problem.N} floats, got the string {upstream!r} "
                            f"(the command's --upstream random is upstream=xentlab.random_upstream(N))")
        raw = np.asarray(upstream)
        if raw.dtype.kind != "f" and raw.dtype.name != "bfloat16":
            raise TypeError(f"upstream: expected an array of floats (one dL/dloss_i per token), got dtype "
                            f"{raw.dtype} (as the command's --upstream FILE.npy, integer, bool, complex and "
                            f"object arrays are refused)")
        g = raw.astype(np.float64)
        if g.shape != (problem.N,):
            raise InputError(f"upstream: expected shape ({problem.N},) (one dL/dloss_i per token), "
                             f"got {g.shape}")
        g = g.tolist()
    return _x.write_golden(_path(path, "path"), problem._c, s, _int("rows", rows), _int("vocab_rows", vocab_rows),
                           _int("sample_seed", sample_seed, minimum=0), bool(gradients), _text("tier", tier),
                           _int("memory_budget", memory_budget, minimum=0), _int("threads", threads), bool(force),
                           "python: xentlab.write_golden", g)


def random_upstream(N: int, seed: int = 1) -> np.ndarray:
    """The seeded upstream gradient of ``xentlab golden --upstream random`` (reference/reference.hpp
    random_upstream): (N,) float64 values k/8, k uniform in −8…16 (zeros and negatives included,
    every value exact in bf16). ``write_golden(..., upstream=random_upstream(N))`` writes the same
    file as the command's default for reduction none."""
    return np.asarray(_x.random_upstream(_int("N", N, minimum=0), _int("seed", seed, minimum=0)),
                      dtype=np.float64)


def read_golden(path) -> Golden:
    """Reads and checks a golden file. Raises FormatError (ValueError) naming the file and what is
    wrong (a foreign file, another version, a missing dataset)."""
    return Golden(_x.read_golden(_path(path)))


def write_candidate(path, outputs: Mapping[str, Any], *, implementation: str = "", force: bool = False) -> None:
    """Writes a candidate file (format "xentlab-candidate", docs/formats.md) from arrays in their
    dtypes (numpy or torch; bf16 stored as bf16): any of loss, lse, reduced_loss, dH, dW, db, dz
    in the golden's sampled or the full shape. Atomic; an existing file only with force."""
    if not isinstance(outputs, Mapping):
        raise TypeError(f"outputs: expected a dict of output names and arrays, got {_shown(outputs)}")
    names, arrays, bits = [], [], []
    known = _x.candidate_output_names()
    for k, v in outputs.items():
        if k not in known:
            raise InputError(f"candidate output '{k}': expected one of {', '.join(known)}")
        a, b = to_host(v, k)
        names.append(k)
        arrays.append(a)
        bits.append(b)
    _x.write_candidate(_path(path, "path"), bool(force), names, arrays, bits, _text("implementation", implementation))


# --- verify --------------------------------------------------------------------------------------

@dataclass
class VerifyOutput:
    """One output's result: status "passed", "incorrect", "failed" (unusable) or "skipped" (no
    reference); stats (dict of numerics/stats.hpp's ErrorStats: max_abs_err, max_rel_err,
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
    bound_status: str = ""  #: the bound check's verdict ("no bound": judged by the differential check)
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
    _report: Any = field(default=None, repr=False)

    def __str__(self) -> str:
        return self.text

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


def verify_policy_description(golden: Golden, policy=None, strictness="default", k=None, atol=None, rtol=None) -> str:
    """The policy line verify prints for these options."""
    g = golden if isinstance(golden, Golden) else read_golden(golden)
    p = _policy(g, policy, strictness, k, atol, rtol)
    return p.describe(g.problem.input_dtype)


def _policy(g: Golden, policy, strictness, k, atol, rtol):
    atol, rtol, k = _number("atol", atol, optional=True), _number("rtol", rtol, optional=True), _number("k", k, optional=True)
    policy, strictness = _text("policy", policy, optional=True), _text("strictness", strictness)
    explicit = atol is not None or rtol is not None
    if atol is not None:
        _x.check_tolerance_number("atol", atol, True)
    if rtol is not None:
        _x.check_tolerance_number("rtol", rtol, True)
    if k is not None:
        _x.check_tolerance_number("k", k, False)
    if explicit:
        for name, given in (("policy", policy is not None), ("strictness", strictness != "default"), ("k", k is not None)):
            if given:
                raise InputError(f"{name} does not apply with atol/rtol: the explicit tolerance atol + rtol·|ref| "
                                 f"replaces the policy (k = 1, no bias test); leave one of them out")
    return _x.verify_policy(policy, strictness, k, atol, rtol, g._c)


def verify(golden, candidate, *, policy: Optional[str] = None, strictness: str = "default",
           k: Optional[float] = None, atol: Optional[float] = None, rtol: Optional[float] = None,
           require: Iterable[str] = (), junit=None, force: bool = False, check: str = "both",
           explain: bool = False, baseline_rows: Optional[int] = None, baseline_seed: Optional[int] = None,
           baseline_backend: Optional[str] = None) -> VerifyReport:
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
    explain).
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
        raise InputError("check='differential' and explain need a recipe to emulate: atol/rtol "
                         "declare none (give a policy instead)")
    # Where no baseline runs (atol/rtol, or check='bound' without explain), a baseline option
    # given would be ignored: refused, as by the command.
    explicit = atol is not None or rtol is not None
    if explicit or (check == "bound" and not explain):
        for name, v in (("baseline_rows", baseline_rows), ("baseline_seed", baseline_seed),
                        ("baseline_backend", baseline_backend)):
            if v is not None:
                raise InputError(f"{name} does not apply with atol/rtol: the explicit tolerance runs no "
                                 f"differential baseline; leave one of them out" if explicit else
                                 f"{name} does not apply with check='bound': no differential baseline "
                                 f"runs; leave it out, or use check='both'")
    baseline_rows = 0 if baseline_rows is None else baseline_rows
    baseline_seed = 1 if baseline_seed is None else baseline_seed
    baseline_backend = "cpu" if baseline_backend is None else _text("baseline_backend", baseline_backend)
    if isinstance(baseline_rows, bool) or not isinstance(baseline_rows, int) or baseline_rows < 0:
        raise InputError(f"baseline_rows must be an integer >= 0 (0 = automatic), got {baseline_rows!r}")
    if isinstance(baseline_seed, bool) or not isinstance(baseline_seed, int) or baseline_seed < 0:
        raise InputError(f"baseline_seed must be an integer >= 0, got {baseline_seed!r}")
    if junit is not None:
        _x.check_junit_output(_path(junit), bool(force))
        j = os.path.realpath(_path(junit))
        for what, other in (("golden", golden.path if isinstance(golden, Golden) else golden), ("candidate", candidate)):
            if os.path.exists(_path(other)) and os.path.realpath(_path(other)) == j:
                raise InputError(f"junit {_path(junit)} is the {what} file itself: the report would replace it")
    g = golden if isinstance(golden, Golden) else read_golden(golden)
    pol = _policy(g, policy, strictness, k, atol, rtol)
    d = _x.verify(g._c, _path(candidate, "candidate"), pol, required, check, bool(explain), baseline_rows,
                  baseline_seed, baseline_backend)
    d["outputs"] = [VerifyOutput(**o) for o in d["outputs"]]
    d["k"] = pol.k
    rep = VerifyReport(**d)
    if junit is not None:
        rep.write_junit(junit, force)
    return rep


# --- audit ----------------------------------------------------------------------------------------

@dataclass
class AuditResult:
    """The audit's result (tools/audit/audit.hpp): ``runs`` (one dict per strategy × recipe ×
    problem: problem, strategy, recipe, disposition, reason, max_ratio, outputs → statistics),
    ``verdict`` (rows of the verdict on "logits may be bf16 while accumulation must be fp32"), the
    counts, and ``summary``, the table ``xentlab audit`` prints."""

    runs: list
    verdict: list
    passed: int
    incorrect: int
    not_supported: int
    failed: int
    summary: str
    markdown: str

    def __str__(self) -> str:
        return self.summary

    def find(self, problem: str, recipe: str, strategy: str) -> dict:
        """The run of (problem, recipe, strategy); KeyError when there is none."""
        for r in self.runs:
            if (r["problem"], r["recipe"], r["strategy"]) == (problem, recipe, strategy):
                return r
        raise KeyError((problem, recipe, strategy))


def audit(problems: Optional[Sequence[str]] = None, datasets: Sequence[Any] = (), *,
          strategies: Sequence[str] = (), recipes: Sequence[str] = (), rows: int = 8, vocab_rows: int = 256,
          tokens: int = 16, hidden: int = 64, seed: int = 1, policy: str = "audit", tier: str = "auto",
          memory_budget: int = 0, out=None, force: bool = False, append: bool = False,
          chunk_tokens: int = 0, upstream: str = "ones") -> AuditResult:
    """Every strategy × recipe on a set of problems against the certified reference, on the CPU
    emulation (``xentlab audit --backend cpu``).

    problems: names of the embedded set (default: all of it when no datasets are given);
    datasets: catalog names, problem files or :class:`Problem` objects; strategies and recipes
    (default: every registered strategy, the default grid); rows / vocab_rows: the sub-batch;
    out: also write the results HDF5 file (docs/audit.md; an existing file only with force or
    append). chunk_tokens: token rows per chunk of chunked and checkpointed (0 = their default;
    ``--chunk-tokens``); upstream: "ones" or "random", the upstream gradient of problems with
    reduction "none" (``--upstream``); both recorded per run. The loss options are each problem's
    spec (a :class:`Problem` made with ``spec=LossSpec(normalizer=…)`` is audited with it). Raises InputError (ValueError) for unknown names, negative counts, an existing
    ``out`` without force/append (before the work), or when no run is supported; TypeError for a
    single string where a list of names is expected."""
    problems = None if problems is None else _names("problems", problems)
    strategies, recipes = _names("strategies", strategies), _names("recipes", recipes)
    if isinstance(datasets, str) or not isinstance(datasets, Iterable):
        raise TypeError(f"datasets: expected a list of catalog names, problem files or xentlab.Problem objects, got "
                        f"{_shown(datasets)}" + (f" (write [{datasets!r}])" if isinstance(datasets, str) else ""))
    datasets = list(datasets)
    for i, d in enumerate(datasets):
        if not isinstance(d, (str, os.PathLike, Problem)):
            raise TypeError(f"datasets[{i}]: expected a catalog name, a problem file or a xentlab.Problem, got {_shown(d)}")
    seed = _int("seed", seed, minimum=0)
    policy, tier = _text("policy", policy), _text("tier", tier)
    memory_budget = _int("memory_budget", memory_budget, minimum=0)
    for what, v in (("rows", rows), ("vocab_rows", vocab_rows), ("tokens", tokens), ("hidden", hidden),
                    ("chunk_tokens", chunk_tokens)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 or (what in ("tokens", "hidden") and v < 1):
            raise InputError(f"{what} must be an integer >= {1 if what in ('tokens', 'hidden') else 0}"
                             f"{' (0 = all)' if what in ('rows', 'vocab_rows') else ''}"
                             f"{' (0 = the default)' if what == 'chunk_tokens' else ''}, got {v!r}")
    upstream = _text("upstream", upstream)
    if out is not None and os.path.exists(_path(out, "out")) and not (force or append):
        raise InputError(f"{_path(out)} exists: pass force=True to replace it or append=True to add the runs")
    ps = _x._AuditProblems()
    if problems is not None or not datasets:
        ps.add_default_set(seed, int(tokens), int(hidden), list(problems or []))
    for d in datasets:
        p = d if isinstance(d, Problem) else problem(d, seed=seed)
        ps.add(p.source, p.regime or p.source, p._c, p._c.spec)
    res = _x.run_audit(ps, strategies, recipes, "cpu", int(rows), int(vocab_rows), seed,
                       policy, tier, memory_budget, None if out is None else _path(out), bool(force),
                       bool(append), int(chunk_tokens), upstream)
    return AuditResult(**res)


def strategies() -> list:
    """The strategies of the default set (CPU emulation): those an audit without `strategies`
    runs. vocab_parallel is registered outside it and runs when named (with one rank here)."""
    return _x.strategy_names()


def default_recipes() -> list:
    """The default recipe grid of the audit ("in/logits/accum/grad")."""
    return _x.default_recipe_grid()

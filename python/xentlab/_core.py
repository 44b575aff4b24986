"""The lab's objects from Python: loss specs, problems, the certified reference, golden files,
verify and the audit. Each function calls the C++ library function that the ``xentlab`` command
calls (python/src/module.cpp), so results, bounds, policies and reports are the command's.

Errors: ``InputError`` (a ValueError) for bad input, ``FormatError`` (a ValueError) for a file
that is not what it claims to be, ``OutputError`` (an OSError) for an output that cannot be
written, ``TypeError`` for an array of a dtype the lab has no use for; the messages are the
library's, the ones ``xentlab`` prints after "invalid input:" or "bad file:".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from . import _xentlab as _x
from ._arrays import from_raw, to_host

InputError = _x.InputError
FormatError = _x.FormatError
OutputError = _x.OutputError
DeviceError = _x.DeviceError
NoDeviceError = _x.NoDeviceError

_SPEC_KEYS = (
    "ignore_index",
    "label_smoothing",
    "z_loss",
    "softcap",
    "logit_scale",
    "reduction",
    "empty_mean",
    "normalizer",
)


def _path(p, name: str = "") -> str:
    if not isinstance(p, (str, os.PathLike)):
        raise TypeError(
            f"{name + ': ' if name else ''}expected a file path (str or os.PathLike), got "
            f"{type(p).__name__}"
        )
    return os.fspath(p)


# Arguments are checked here, before the extension: its own refusal of a wrong type is one generic
# "incompatible function arguments" TypeError that names neither the argument nor what it takes.


def _shown(v) -> str:
    return f"{type(v).__name__} {v!r:.60}"


def _int(name: str, v, minimum: Optional[int] = None, optional: bool = False) -> Optional[int]:
    """v as an int: TypeError for what is no integer (a bool, a float, a string), InputError below
    minimum or outside int64."""
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {_shown(v)}")
    if minimum is not None and v < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {int(v)}")
    if not -(2**63) <= v < 2**63:  # the library's integers are int64
        raise InputError(f"{name} must be below 2**63, got {int(v)}")
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

    def __init__(
        self,
        ignore_index: int = -100,
        label_smoothing: float = 0.0,
        z_loss: float = 0.0,
        softcap: float = 0.0,
        logit_scale: float = 1.0,
        reduction: str = "mean",
        empty_mean: str = "nan",
        normalizer: int = 0,
    ):
        self._c = _x.make_spec(
            _int("ignore_index", ignore_index),
            _number("label_smoothing", label_smoothing),
            _number("z_loss", z_loss),
            _number("softcap", softcap),
            _number("logit_scale", logit_scale),
            _text("reduction", reduction),
            _text("empty_mean", empty_mean),
            _int("normalizer", normalizer),
        )

    @classmethod
    def _wrap(cls, c) -> LossSpec:
        s = cls.__new__(cls)
        s._c = c
        return s

    def as_dict(self) -> dict:
        """The options as a dict (keys ignore_index, label_smoothing, z_loss, softcap,
        logit_scale, reduction, empty_mean, normalizer)."""
        return self._c.as_dict()

    def replace(self, **changes) -> LossSpec:
        """A copy with some options changed (validated)."""
        unknown = set(changes) - set(_SPEC_KEYS)
        if unknown:
            raise TypeError(
                f"unknown loss option(s): {', '.join(sorted(unknown))}; the options are {', '.join(_SPEC_KEYS)}"
            )
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
        raise AttributeError(
            f"LossSpec is immutable: use spec.replace({name}=...) for a copy with {name} changed"
        )

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
    raise TypeError(
        f"spec: expected a LossSpec or a dict of loss options, got {type(spec).__name__}"
    )


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
    def linear(
        cls,
        H,
        W,
        targets,
        bias=None,
        spec: Optional[LossSpec | Mapping] = None,
        name: str = "linear",
    ) -> Problem:
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
    def from_logits(
        cls, logits, targets, spec: Optional[LossSpec | Mapping] = None, name: str = "logits"
    ) -> Problem:
        """A problem of given logits (…, V) (−inf allowed as a mask) and targets (N)."""
        s = _spec_of(spec, LossSpec()._c)
        z, zb = to_host(logits, "logits")
        t = _targets(targets)
        return cls(_x.logits_problem(z, t, s, _text("name", name), zb))

    def with_spec(self, spec: LossSpec | Mapping) -> Problem:
        """The same problem with another loss spec (a dict changes some options)."""
        return Problem(_x.with_spec(self._c, _spec_of(spec, self._c.spec)))

    # --- properties -------------------------------------------------------------------------
    N = property(lambda self: self._c.N, doc="tokens")
    V = property(lambda self: self._c.V, doc="vocabulary size")
    D = property(lambda self: self._c.D, doc="hidden size (0 for a logits problem)")
    kind = property(lambda self: self._c.kind, doc='"linear" or "logits"')
    name = property(lambda self: self._c.name)
    input_dtype = property(lambda self: self._c.input_dtype, doc='"bf16", "fp16", "fp32" or "fp64"')
    source = property(
        lambda self: self._c.source, doc="catalog name, file path, or how it was made"
    )
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


def problem(
    name: str,
    N: Optional[int] = None,
    V: Optional[int] = None,
    D: Optional[int] = None,
    dtype: Optional[str] = None,
    sigma: Optional[float] = None,
    seed: int = 1,
    params: Optional[Mapping[str, float]] = None,
    ignore_index: Optional[int] = None,
) -> Problem:
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
        raise TypeError(
            f"params: expected a dict of parameter names and numbers, got {_shown(params)}"
        )
    extra = {
        _text("params key", k): _number(f"params[{k!r}]", v) for k, v in (params or {}).items()
    }
    ii = _int("ignore_index", ignore_index, optional=True)
    c = _x.load_dataset(
        name,
        _int("N", N, optional=True),
        _int("V", V, optional=True),
        _int("D", D, optional=True),
        _text("dtype", dtype, optional=True),
        _number("sigma", sigma, optional=True),
        _int("seed", seed, minimum=0),
        extra,
        -100 if ii is None else ii,
    )
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


def reference(
    problem: Problem,
    spec: Optional[LossSpec | Mapping] = None,
    *,
    tier: str = "auto",
    token_rows=None,
    vocab_rows=None,
    dz: bool = False,
    gradients: bool = True,
    memory_budget: int = 0,
    threads: int = 0,
) -> Reference:
    """The certified reference on a problem (``xentlab reference``'s computation).

    spec: the loss spec (default: the problem's; a dict changes some options). tier: "auto",
    "compensated", "blas" or "cuda" (docs/reference.md, "Tiers"). token_rows / vocab_rows: sorted
    unique subsets to compute (default all). dz: also dL/d(raw logits). memory_budget: bytes (0 =
    90 % of the memory available). Raises InputError (ValueError) for an invalid problem or spec,
    bad rows, or a problem beyond the memory budget (naming the bytes it needs)."""
    if not isinstance(problem, Problem):
        raise TypeError(f"problem: expected a xentlab.Problem, got {type(problem).__name__}")
    s = _spec_of(spec, problem._c.spec)
    d = _x.reference(
        problem._c,
        s,
        _text("tier", tier),
        _rows(token_rows, "token_rows"),
        _rows(vocab_rows, "vocab_rows"),
        bool(dz),
        bool(gradients),
        _int("memory_budget", memory_budget, minimum=0),
        _int("threads", threads),
    )
    return Reference(**d)


# --- golden files --------------------------------------------------------------------------------

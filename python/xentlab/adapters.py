"""Adapters: the cross-entropy losses of PyTorch, Liger-Kernel and Cut Cross-Entropy in the calling
convention of :func:`xentlab.check`, so that a library's kernel is checked against the certified
reference without writing the glue::

    import xentlab, xentlab.adapters as xa
    report = xentlab.check(xa.liger_fused_linear_cross_entropy(), problem="part-ignored",
                           policy="bf16", device="cuda")      # framework "torch" by default

=======================================  ==========================================================
factory                                  the library's function
=======================================  ==========================================================
``torch_cross_entropy()``                ``F.cross_entropy(F.linear(H, W, bias), targets)`` (also
                                         a logits problem: ``F.cross_entropy(logits, targets)``)
``torch_linear_cross_entropy()``         ``torch.nn.functional.linear_cross_entropy`` (where the
                                         installed PyTorch has it)
``liger_fused_linear_cross_entropy()``   Liger-Kernel's ``LigerFusedLinearCrossEntropyLoss``
``cce_linear_cross_entropy()``           Cut Cross-Entropy's ``cut_cross_entropy.linear_cross_entropy``
=======================================  ==========================================================

Each factory imports its library when it is called (``import xentlab`` imports none of them) and
raises :class:`MissingLibrary` (an ImportError) naming the PyPI package when it is not installed.
Keyword arguments of a factory are the library's own options (``accum_dtype=`` of Liger,
``filter_eps=`` or ``impl=`` of Cut Cross-Entropy, ``logits_dtype=torch.float32`` of
``torch_cross_entropy``: upcast the logits before the loss); an option the library does not take,
or one that the golden problem's loss spec sets (ignore_index, reduction, …), is a TypeError.

The adapter maps the golden problem's loss spec onto the library's arguments:

- ignore_index, label_smoothing, reduction, softcap, the z-loss (Liger's ``lse_square_scale``),
  the bias: passed as the library's arguments of the same meaning;
- the normaliser n (reduction mean over n tokens, ``num_items_in_batch``): the library's
  reduction "sum", divided by n (what Hugging Face transformers does with these losses);
- the z-loss of a library without one: λ·lse² of the non-ignored rows added to the loss, lse
  from the library (Cut Cross-Entropy's ``return_lse=True``, its documented recipe) or, for
  ``torch_cross_entropy``, ``torch.logsumexp`` of the logits; reduced as the loss;
- logit_scale and softcap of ``torch_cross_entropy``: ``z * scale``, then
  ``c * tanh(z / c)``, on the logits before ``F.cross_entropy`` (the lab's order);
- the upstream gradient of a golden file (reduction none): nothing to map; the adapter returns the
  per-token loss and :func:`check` applies the gradient through autograd.

What the library cannot express is refused before it runs: :class:`UnsupportedOption` (an
InputError, hence a ValueError) naming the option, its value and the library (with its version),
e.g. Cut Cross-Entropy and label smoothing, or a bias where the installed version's function has
no bias argument. :meth:`Adapter.refusal` gives the same reason without running anything, for a
golden file, a problem or a spec; an adapter only for linear problems (H, W) refuses a logits
problem.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any, Callable, Optional

from ._core import InputError, LossSpec, Problem
from ._golden import Golden

__all__ = [
    "Adapter",
    "MissingLibrary",
    "UnsupportedOption",
    "cce_linear_cross_entropy",
    "liger_fused_linear_cross_entropy",
    "torch_cross_entropy",
    "torch_linear_cross_entropy",
]


class MissingLibrary(ImportError):
    """The library of an adapter is not installed, or the installed version lacks the function."""


class UnsupportedOption(InputError):
    """The golden problem's loss spec sets an option the library cannot express (a ValueError)."""


# The options check() passes to a loss function, with the values that switch them off.
_DEFAULTS = {
    "ignore_index": -100,
    "label_smoothing": 0.0,
    "z_loss": 0.0,
    "softcap": 0.0,
    "logit_scale": 1.0,
    "reduction": "mean",
    "normalizer": 0,
}


def _import(adapter: str, library: str, package: str, module: str, attr: Optional[str] = None):
    """module (or its attribute attr); MissingLibrary naming the package when it cannot be had."""
    try:
        m = importlib.import_module(module)
    except ImportError as e:
        raise MissingLibrary(
            f"xentlab.adapters.{adapter}() needs {library} (PyPI package {package}): importing "
            f"{module} failed ({e}); install it with: pip install {package}"
        ) from e
    if attr is None:
        return m
    if not hasattr(m, attr):
        raise MissingLibrary(
            f"xentlab.adapters.{adapter}() needs {module}.{attr}, which the installed {library} "
            f"({_version(package, m)}) does not have"
        )
    return getattr(m, attr)


def _version(package: str, module=None) -> str:
    from importlib import metadata

    try:
        return f"{package} {metadata.version(package)}"
    except metadata.PackageNotFoundError:
        v = getattr(module, "__version__", None)
        return f"{package} {v}" if v else f"{package}, version unknown"


def _parameters(fn) -> tuple:
    """The names fn takes (a class: its constructor's); () where Python cannot tell."""
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


def _spec_dict(spec) -> dict:
    if spec is None:
        return dict(_DEFAULTS)
    d = spec.as_dict() if isinstance(spec, LossSpec) else dict(spec)
    out = dict(_DEFAULTS)
    out.update({k: v for k, v in d.items() if k in _DEFAULTS})
    return out


class Adapter:
    """A library's loss function callable as :func:`xentlab.check` calls ``loss_fn``:
    ``adapter(H, W, targets, bias=None, **spec)`` (linear problems: H (N, D), W (V, D), bias (V),
    targets (N) int64, tensors of the library's framework) or ``adapter(logits, targets, **spec)``
    (logits (N, V)), spec the loss options of check (ignore_index, label_smoothing, z_loss,
    softcap, logit_scale, reduction, normalizer). Returns the loss: a scalar (reduction mean or
    sum) or (N) per-token losses (reduction none), in the library's dtype; gradients by autograd.

    Attributes: ``name`` (the factory's), ``library`` and ``version`` (e.g. "liger-kernel 0.8.5"),
    ``options`` (the library options given to the factory), ``framework`` ("torch": the default
    framework of :func:`check` for this function). Raises :class:`UnsupportedOption` for a spec
    the library cannot express and TypeError for an option check does not pass."""

    framework = "torch"
    #: spec option → the library's own argument of that meaning (those it passes as arguments;
    #: none of them may be given as a library option)
    _maps: dict = {}

    def __init__(self, name: str, library: str, version: str, fn: Callable, options: Mapping):
        self.name, self.library, self.version = name, library, version
        self._fn = fn
        self.options = dict(options)
        self.__qualname__ = f"{name}({version})"  # check()'s implementation name
        taken = _parameters(fn)
        for k in self.options:
            if k in _DEFAULTS or k in ("bias", "return_lse") or k in self._maps.values():
                raise TypeError(
                    f"{name}(): {k} comes from the golden problem (its loss spec or bias), not "
                    f"from the adapter's options"
                )
            if taken and k not in taken:
                raise TypeError(
                    f"{name}(): {library} ({version}) takes no option {k!r}; it takes "
                    f"{', '.join(taken)}"
                )

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"xentlab.adapters.{self.name}({opts}) <{self.library}, {self.version}>"

    # --- what the library can express -------------------------------------------------------

    def _refusals(self, spec: dict, logits: bool, bias: bool) -> list:
        """(option, why) pairs of what this library cannot compute."""
        raise NotImplementedError

    def refusal(self, problem=None, *, logits: bool = False, bias: bool = False) -> Optional[str]:
        """Why this library cannot compute the loss of ``problem`` (a :class:`xentlab.Golden`, a
        :class:`xentlab.Problem`, a :class:`xentlab.LossSpec` or a dict of loss options; None:
        the default spec), or None when it can. For a spec, ``logits`` and ``bias`` say whether
        the problem gives logits and has a bias; a golden file or problem says it itself."""
        spec = problem
        if isinstance(problem, Golden):
            spec, problem = problem.spec, problem.problem
        if isinstance(problem, Problem):
            logits, bias = problem.kind == "logits", problem.bias is not None
            spec = problem.spec if spec is problem else spec
        why = self._refusals(_spec_dict(spec), logits, bias)
        return self._message(why) if why else None

    def _message(self, why: list) -> str:
        return f"{self.library} ({self.version}, {self.name}) cannot express " + "; ".join(
            f"{opt}: {reason}" for opt, reason in why
        )

    @staticmethod
    def _need(taken: tuple, arg: str, option: str, value, what: str) -> list:
        """The refusal of option (set to value; None: a tensor, not shown) when the library's
        function has no argument arg."""
        if not taken or arg in taken:
            return []
        shown = option if value is None else f"{option}={value!r}"
        return [(shown, f"{what} has no argument {arg} in this version")]

    # --- running it -------------------------------------------------------------------------

    def _run(self, arrays: tuple, bias, spec: dict, reduction: str):
        """The library's loss with this reduction, and lse (N) when the z-loss is composed."""
        raise NotImplementedError

    def __call__(self, *arrays, bias=None, **spec):
        unknown = sorted(set(spec) - set(_DEFAULTS))
        if unknown:
            raise TypeError(
                f"{self.name}: unknown loss option(s) {', '.join(unknown)}; xentlab.check passes "
                f"{', '.join(_DEFAULTS)}"
            )
        if len(arrays) not in (2, 3):
            raise TypeError(
                f"{self.name}: expected (H, W, targets) or (logits, targets), got {len(arrays)} "
                f"arrays"
            )
        s = _spec_dict(spec)
        why = self._refusals(s, logits=len(arrays) == 2, bias=bias is not None)
        if why:
            raise UnsupportedOption(self._message(why))
        n, reduction = int(s["normalizer"]), s["reduction"]
        loss, lse = self._run(arrays, bias, s, "sum" if n > 0 else reduction)
        if lse is not None and s["z_loss"] > 0:
            # λ·lse² of the non-ignored rows, reduced as the loss (numerics/loss_spec.hpp)
            valid = arrays[-1] != s["ignore_index"]
            z = s["z_loss"] * (lse * lse) * valid
            if n > 0 or reduction == "sum":
                loss = loss + z.sum()
            elif reduction == "mean":
                loss = loss + z.sum() / valid.sum()
            else:
                loss = loss + z
        return loss / n if n > 0 else loss


def _linear_only(logits: bool, what: str) -> list:
    return (
        [("a logits problem", f"{what} takes H and W (a linear problem), not logits")]
        if logits
        else []
    )


# --- PyTorch ----------------------------------------------------------------------------------


class _TorchCrossEntropy(Adapter):
    _maps = {
        "ignore_index": "ignore_index",
        "label_smoothing": "label_smoothing",
        "reduction": "reduction",
    }

    def __init__(self, torch, F, logits_dtype, options):
        self._torch, self._F, self.logits_dtype = torch, F, logits_dtype
        super().__init__(
            "torch_cross_entropy",
            "PyTorch",
            _version("torch", torch),
            F.cross_entropy,
            options,
        )
        if logits_dtype is not None:
            self.options["logits_dtype"] = logits_dtype

    def _refusals(self, spec, logits, bias):
        return []  # every option: the library's arguments or torch operations on the logits

    def _run(self, arrays, bias, s, reduction):
        F, torch = self._F, self._torch
        if len(arrays) == 3:
            H, W, targets = arrays
            z = F.linear(H, W, bias)
        else:
            z, targets = arrays
        if self.logits_dtype is not None:
            z = z.to(self.logits_dtype)
        if s["logit_scale"] != 1:
            z = z * s["logit_scale"]
        if s["softcap"] > 0:
            z = torch.tanh(z / s["softcap"]) * s["softcap"]
        options = {k: v for k, v in self.options.items() if k != "logits_dtype"}
        loss = F.cross_entropy(
            z,
            targets,
            ignore_index=s["ignore_index"],
            label_smoothing=s["label_smoothing"],
            reduction=reduction,
            **options,
        )
        return loss, torch.logsumexp(z, dim=-1) if s["z_loss"] > 0 else None


def torch_cross_entropy(logits_dtype=None, **options) -> Adapter:
    """PyTorch's ``F.cross_entropy`` on ``F.linear(H, W, bias)`` (or on a logits problem's
    logits): ignore_index, label_smoothing, reduction as its arguments; logit_scale, softcap and
    the z-loss as torch operations on the logits (``z * scale``, ``c * tanh(z / c)``,
    λ·``logsumexp(z)²``). logits_dtype (a torch dtype, default None = F.linear's): convert the
    logits first (``torch.float32``: the upcast of most training code). options: further
    arguments of ``F.cross_entropy`` (``weight=``). Raises :class:`MissingLibrary` without torch."""
    torch = _import("torch_cross_entropy", "PyTorch", "torch", "torch")
    F = _import("torch_cross_entropy", "PyTorch", "torch", "torch.nn.functional")
    return _TorchCrossEntropy(torch, F, logits_dtype, options)


class _TorchLinearCrossEntropy(Adapter):
    _maps = {
        "ignore_index": "ignore_index",
        "label_smoothing": "label_smoothing",
        "reduction": "reduction",
        "bias": "linear_bias",
    }

    def _refusals(self, s, logits, bias):
        taken = _parameters(self._fn)
        what = "torch.nn.functional.linear_cross_entropy"
        why = _linear_only(logits, what)
        for opt, reason in (
            ("z_loss", "it has no z-loss and does not return lse"),
            ("softcap", "it has no softcap (the logits are never formed outside it)"),
            ("logit_scale", "it has no logit scale"),
        ):
            if s[opt] != _DEFAULTS[opt]:
                why.append((f"{opt}={s[opt]!r}", reason))
        if bias:
            why += self._need(taken, "linear_bias", "bias", None, what)
        if s["label_smoothing"] > 0:
            why += self._need(
                taken, "label_smoothing", "label_smoothing", s["label_smoothing"], what
            )
        return why

    def _run(self, arrays, bias, s, reduction):
        H, W, targets = arrays
        kw = dict(self.options, ignore_index=s["ignore_index"], reduction=reduction)
        if s["label_smoothing"] > 0:
            kw["label_smoothing"] = s["label_smoothing"]
        if bias is not None:
            kw["linear_bias"] = bias
        return self._fn(H, W, targets, **kw), None


def torch_linear_cross_entropy(**options) -> Adapter:
    """PyTorch's fused ``torch.nn.functional.linear_cross_entropy(H, W, targets, …)`` (newer
    PyTorch releases): ignore_index, label_smoothing, reduction, and the bias as ``linear_bias``
    where the installed version takes it; z-loss, softcap and logit_scale refused (the logits
    never leave the function). options: its further arguments (``options=`` of the chunked
    path). Raises :class:`MissingLibrary` without torch, or with a torch that lacks the
    function."""
    torch = _import("torch_linear_cross_entropy", "PyTorch", "torch", "torch")
    fn = _import(
        "torch_linear_cross_entropy",
        "PyTorch",
        "torch",
        "torch.nn.functional",
        "linear_cross_entropy",
    )
    return _TorchLinearCrossEntropy(
        "torch_linear_cross_entropy", "PyTorch", _version("torch", torch), fn, options
    )


# --- Liger-Kernel -----------------------------------------------------------------------------


class _Liger(Adapter):
    _maps = {
        "ignore_index": "ignore_index",
        "label_smoothing": "label_smoothing",
        "z_loss": "lse_square_scale",
        "softcap": "softcap",
        "reduction": "reduction",
    }

    def _refusals(self, s, logits, bias):
        taken = _parameters(self._fn)
        what = "LigerFusedLinearCrossEntropyLoss"
        why = _linear_only(logits, what)
        if s["logit_scale"] != 1:
            why.append(
                (
                    f"logit_scale={s['logit_scale']!r}",
                    "it has no logit scale (temperature); scaling H or W first would change the "
                    "problem's inputs",
                )
            )
        for opt in ("label_smoothing", "z_loss", "softcap"):
            if s[opt] != _DEFAULTS[opt]:
                why += self._need(taken, self._maps[opt], opt, s[opt], what)
        if bias:
            why += self._need(
                _parameters(self._fn.forward), "bias", "bias", None, what + ".forward"
            )
        return why

    def _run(self, arrays, bias, s, reduction):
        H, W, targets = arrays
        kw = dict(self.options, ignore_index=s["ignore_index"], reduction=reduction)
        for opt in ("label_smoothing", "z_loss", "softcap"):
            if s[opt] != _DEFAULTS[opt]:  # only what is set: an older version may lack the rest
                kw[self._maps[opt]] = s[opt]
        loss_module = self._fn(**kw)
        # forward(lin_weight, _input, target, bias=None): the weight comes first
        out = loss_module(W, H, targets) if bias is None else loss_module(W, H, targets, bias)
        return out, None


def liger_fused_linear_cross_entropy(**options) -> Adapter:
    """Liger-Kernel's ``LigerFusedLinearCrossEntropyLoss(...)(W, H, targets, bias)`` (note: the
    weight first): ignore_index, label_smoothing, reduction, softcap (c > 0; the lab's 0 = off is
    Liger's None), the z-loss λ as ``lse_square_scale``, the bias as forward's bias; logit_scale
    refused. options: further constructor arguments (``accum_dtype=torch.float32``). Raises
    :class:`MissingLibrary` without liger-kernel."""
    cls = _import(
        "liger_fused_linear_cross_entropy",
        "Liger-Kernel",
        "liger-kernel",
        "liger_kernel.transformers",
        "LigerFusedLinearCrossEntropyLoss",
    )
    mod = importlib.import_module("liger_kernel")
    return _Liger(
        "liger_fused_linear_cross_entropy",
        "Liger-Kernel",
        _version("liger-kernel", mod),
        cls,
        options,
    )


# --- Cut Cross-Entropy ------------------------------------------------------------------------


class _CCE(Adapter):
    _maps = {
        "ignore_index": "ignore_index",
        "softcap": "softcap",
        "reduction": "reduction",
        "bias": "bias",
    }

    def _refusals(self, s, logits, bias):
        taken = _parameters(self._fn)
        what = "cut_cross_entropy.linear_cross_entropy"
        why = _linear_only(logits, what)
        if s["label_smoothing"] > 0:
            why.append((f"label_smoothing={s['label_smoothing']!r}", "it has no label smoothing"))
        if s["logit_scale"] != 1:
            why.append((f"logit_scale={s['logit_scale']!r}", "it has no logit scale"))
        if s["softcap"] > 0:
            why += self._need(taken, "softcap", "softcap", s["softcap"], what)
        if s["z_loss"] > 0:  # composed from the lse it returns
            why += self._need(taken, "return_lse", "z_loss", s["z_loss"], what)
        if bias:
            why += self._need(taken, "bias", "bias", None, what)
        return why

    def _run(self, arrays, bias, s, reduction):
        H, W, targets = arrays
        kw = dict(self.options, ignore_index=s["ignore_index"], reduction=reduction)
        if s["softcap"] > 0:
            kw["softcap"] = s["softcap"]
        if bias is not None:
            kw["bias"] = bias
        if s["z_loss"] > 0:
            loss, lse = self._fn(H, W, targets, return_lse=True, **kw)
            return loss, lse
        return self._fn(H, W, targets, **kw), None


def cce_linear_cross_entropy(**options) -> Adapter:
    """Cut Cross-Entropy's ``linear_cross_entropy(H, W, targets, …)`` (apple/ml-cross-entropy):
    ignore_index, softcap, reduction, the bias where the installed version takes it; the z-loss
    from the lse it returns (``return_lse=True``, where the version has it); label smoothing and
    logit_scale refused. options: its further arguments (``filter_eps=None`` switches the
    gradient filter off, ``impl="torch_compile"``). Raises :class:`MissingLibrary` without
    cut-cross-entropy."""
    fn = _import(
        "cce_linear_cross_entropy",
        "Cut Cross-Entropy",
        "cut-cross-entropy",
        "cut_cross_entropy",
        "linear_cross_entropy",
    )
    mod = importlib.import_module("cut_cross_entropy")
    return _CCE(
        "cce_linear_cross_entropy",
        "Cut Cross-Entropy",
        _version("cut-cross-entropy", mod),
        fn,
        options,
    )


def available() -> dict[str, Any]:
    """Which adapters can be made here: factory name → None (importable) or the reason
    (:class:`MissingLibrary`'s message). Imports the libraries."""
    out = {}
    for f in (
        torch_cross_entropy,
        torch_linear_cross_entropy,
        liger_fused_linear_cross_entropy,
        cce_linear_cross_entropy,
    ):
        try:
            f()
            out[f.__name__] = None
        except MissingLibrary as e:
            out[f.__name__] = str(e)
    return out

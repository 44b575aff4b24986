"""``xentlab.check``: runs a user's loss function on a golden problem and scores what it returns
with ``verify`` (harness/verify/verify.hpp: the policies and tolerances of docs/verify.md).

The function is called as ``loss_fn(H, W, targets, **spec)`` (linear problems; ``bias=`` is
added when the problem has one) or ``loss_fn(logits, targets, **spec)`` (logits problems), where
spec holds ignore_index, label_smoothing, z_loss, softcap, logit_scale and reduction (PyTorch's
meanings), and ``normalizer=n`` when the golden problem's spec has a normaliser n > 0 (reduction
mean over n tokens instead of the batch's valid ones, as ``num_items_in_batch``). It may return

- a torch tensor (framework="torch"): the loss, scalar (mean/sum) or per token (reduction
  none); the gradients dH, dW, db (or dz) come from autograd (``backward()``, or
  ``backward(g)`` for a per-token loss, g the golden file's upstream gradient, ones when it
  stores none);
- a tuple ``(loss, dH, dW)`` or ``(loss, dH, dW, db)`` (``(loss, dz)`` for logits problems) of
  arrays, numpy or torch;
- a dict with any of loss, lse, reduced_loss, dH, dW, db, dz;
- the loss alone (then only the loss is judged).

A golden problem with a per-token upstream gradient g (reduction none, ``Golden.upstream``) needs
gradients of Σ g_i·loss_i: autograd applies g; a function that returns its own gradients cannot be
given g and is refused (InputError) on such a problem.

With framework="jax" the inputs are jax arrays and a loss returned alone gets its gradients from
``jax.vjp`` (the upstream gradient g, or ones, as the cotangent); ``xentlab.adapters`` holds
ready functions for the losses of PyTorch, Liger-Kernel and Cut Cross-Entropy.

Every array is stored in the dtype it came in (a bf16 result is judged as a bf16 result).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any, Callable, Optional

import numpy as np

from . import _jax
from . import _xentlab as _x
from ._arrays import is_torch, to_numpy64
from ._core import (
    InputError,
    LossSpec,
    Problem,
    _int,
    _names,
    _path,
    _shown,
    _text,
)
from ._core import problem as make_problem
from ._golden import (
    Golden,
    read_golden,
    verify,
    write_candidate,
    write_golden,
)
from ._report import CheckReport, OutputCheck
from .adapters import Adapter

_LOSS_KWARGS = ("ignore_index", "label_smoothing", "z_loss", "softcap", "logit_scale", "reduction")


def _cache_dir(cache_dir) -> str:
    if cache_dir is not None:
        cache_dir = _path(cache_dir, "cache_dir")
    d = (
        cache_dir
        or os.environ.get("XENTLAB_CACHE_DIR")
        or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "xentlab"
        )
    )
    os.makedirs(d, exist_ok=True)
    return os.fspath(d)


def cached_golden(
    name: str = "stories260k",
    *,
    cache_dir=None,
    N: Optional[int] = None,
    V: Optional[int] = None,
    D: Optional[int] = None,
    dtype: Optional[str] = None,
    sigma: Optional[float] = None,
    seed: int = 1,
    params: Optional[Mapping[str, float]] = None,
    spec: Optional[LossSpec | Mapping] = None,
    tier: str = "auto",
    memory_budget: int = 0,
) -> Golden:
    """The golden file of a catalog problem or a problem file (all token and vocabulary rows),
    written once into ``cache_dir`` (default ``$XENTLAB_CACHE_DIR``, else ``~/.cache/xentlab``)
    under a name that holds a digest of every argument, the xentlab version and, for a problem
    file (or folder of .npy files), the SHA-256 of its contents — a file changed in place gets a
    golden file of its own — then read from there. The same arguments give the same problem bits
    as ``xentlab golden --dataset NAME``. memory_budget: bytes writing and reading it may hold (0,
    the default: the memory available now; over it: InputError before the reference runs, or
    before the file is read)."""
    name = _path(name, "name")
    _text("tier", tier)
    memory_budget = _int("memory_budget", memory_budget, minimum=0)
    p = make_problem(name, N=N, V=V, D=D, dtype=dtype, sigma=sigma, seed=seed, params=params)
    if spec is not None:
        p = p.with_spec(spec)
    catalog = p._c.generator.startswith("catalog:")
    key = json.dumps(
        {
            "name": name,
            "N": N,
            "V": V,
            "D": D,
            "dtype": dtype,
            "sigma": sigma,
            "seed": seed,
            "params": dict(params or {}),
            "spec": p.spec.as_dict(),
            "tier": tier,
            "content": None if catalog else _content_digest(name),
            "version": _x.__version__,
            # 3: golden files carry a manifest of types and links (files cached before it would
            # warn on every read, or be refused)
            "cache": 3,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in os.path.basename(name))
    path = os.path.join(_cache_dir(cache_dir), f"{safe}-{digest}.h5")
    if not os.path.exists(path):
        try:
            write_golden(path, p, tier=tier, memory_budget=memory_budget)
        except InputError:
            if not os.path.exists(path):  # another process may have written it first
                raise
    _x.check_golden_read_memory(path, memory_budget, "check")
    return read_golden(path)


def _content_digest(path: str) -> str:
    """SHA-256 of a problem file's bytes, or of a folder's files (each relative name and bytes,
    in sorted order)."""
    h = hashlib.sha256()

    def feed(f):
        with open(f, "rb") as r:
            for block in iter(lambda: r.read(1 << 20), b""):
                h.update(block)

    if os.path.isdir(path):
        for rel in sorted(
            os.path.relpath(os.path.join(root, f), path)
            for root, _, files in os.walk(path)
            for f in files
        ):
            h.update(rel.encode() + b"\0")
            feed(os.path.join(path, rel))
    else:
        feed(path)
    return h.hexdigest()


def _golden_of(problem, cache_dir, tier, tmp, memory_budget=0) -> Golden:
    if isinstance(problem, Golden):
        return problem
    if isinstance(problem, Problem):
        path = os.path.join(tmp, "golden.h5")
        write_golden(path, problem, tier=tier, memory_budget=memory_budget)
        return read_golden(path)
    if isinstance(problem, (str, os.PathLike)):
        s = os.fspath(problem)
        if os.path.exists(s):
            _x.check_golden_read_memory(s, memory_budget, "check")
            return read_golden(s)
        return cached_golden(s, cache_dir=cache_dir, tier=tier, memory_budget=memory_budget)
    raise TypeError(
        f"problem: expected a catalog name, a golden file path, a xentlab.Golden or a xentlab.Problem, "
        f"got {type(problem).__name__}"
    )


def _call(loss_fn, g: Golden, framework: str, device) -> tuple[dict, list]:
    """Runs loss_fn on the golden problem; returns the candidate outputs and the names autograd
    should have given (None where loss_fn returned its own gradients, or with numpy: verify's
    default rule applies)."""
    p = g.problem
    spec = {k: v for k, v in g.spec.as_dict().items() if k in _LOSS_KWARGS}
    if g.spec.normalizer > 0:  # only then: a loss_fn of PyTorch's keywords keeps working
        spec["normalizer"] = g.spec.normalizer
    arrays = p.arrays("numpy" if framework == "jax" else framework, device)
    linear = p.kind == "linear"
    leaves = {}
    if framework == "torch":
        for k in ("H", "W", "bias", "logits"):
            if k in arrays:
                arrays[k] = arrays[k].detach().requires_grad_(True)
                leaves[k] = arrays[k]
    if linear:
        args = (arrays["H"], arrays["W"], arrays["targets"])
        if "bias" in arrays:
            spec["bias"] = arrays["bias"]
    else:
        args = (arrays["logits"], arrays["targets"])
    pull = None  # jax: the vector-Jacobian product of the loss
    if framework == "jax":
        out, pull = _jax.run(loss_fn, _jax.inputs(arrays, device), linear, spec)
    else:
        out = loss_fn(*args, **spec)

    grads = ("dH", "dW", "db") if linear else ("dz",)
    outputs: dict = {}
    upstream = getattr(g, "upstream", None)

    def refuse_own_gradients(names):
        if upstream is not None and names:
            raise InputError(
                f"this golden problem has a per-token upstream gradient (reduction none, {len(upstream)} "
                f"values, not all ones), and loss_fn returned its own {', '.join(names)}, which cannot "
                f"have applied it: return the per-token loss as a torch tensor (autograd applies the "
                f"upstream gradient), or use a golden file without one"
            )

    if isinstance(out, Mapping):
        refuse_own_gradients([k for k in out if k in grads])
        outputs = dict(out)
        if "loss" in outputs and np.ndim(to_numpy64(outputs["loss"])) == 0:
            # A scalar loss is the reduced loss: beside a reduced_loss of its own, one of the two
            # would be dropped unjudged.
            if "reduced_loss" in outputs:
                raise InputError(
                    "loss_fn returned both a scalar loss and a reduced_loss: a scalar loss is the "
                    "reduced loss, and one of the two would go unjudged (return one of them, or "
                    "the per-token loss as loss)"
                )
            outputs["reduced_loss"] = outputs.pop("loss")
        return outputs, None
    if isinstance(out, (tuple, list)):
        if len(out) < 1 or len(out) > 1 + len(grads):
            raise InputError(
                f"loss_fn returned {len(out)} values; expected the loss, then up to {len(grads)} "
                f"gradient(s) in the order {', '.join(grads)}"
            )
        loss, rest = out[0], out[1:]
        refuse_own_gradients([grads[i] for i, v in enumerate(rest) if v is not None])
        outputs.update({grads[i]: v for i, v in enumerate(rest) if v is not None})
    else:
        loss = out
    # A loss is a number: a float, a numpy floating scalar or array, or a torch tensor. Anything
    # else (None, a string, a bool, an integer array) would be coerced by numpy into something
    # that scores, so it is refused naming what came back.
    is_float_array = (
        isinstance(loss, np.ndarray)
        and np.issubdtype(loss.dtype, np.floating)
        or (isinstance(loss, np.ndarray) and loss.dtype.name == "bfloat16")
    )
    if not (
        is_torch(loss)
        or is_float_array
        or isinstance(loss, np.floating)
        or (isinstance(loss, float) and not isinstance(loss, bool))
    ):
        raise TypeError(
            f"loss_fn returned a loss of type {type(loss).__name__} ({loss!r:.60}); expected a "
            f"float, a numpy floating scalar or array, or a torch tensor"
        )
    if (
        is_torch(loss)
        and framework == "torch"
        and loss.requires_grad
        and not isinstance(out, (tuple, list))
    ):
        import torch

        if loss.ndim == 0:
            loss.backward()
        elif upstream is not None:
            if tuple(loss.shape) != (len(upstream),):
                raise InputError(
                    f"loss_fn returned a per-token loss of shape {tuple(loss.shape)}; expected "
                    f"({len(upstream)},) to apply the golden problem's upstream gradient"
                )
            loss.backward(torch.as_tensor(upstream, dtype=loss.dtype, device=loss.device))
        else:
            loss.backward(torch.ones_like(loss))
        names = {"H": "dH", "W": "dW", "bias": "db", "logits": "dz"}
        for k, leaf in leaves.items():
            if leaf.grad is not None:
                outputs[names[k]] = leaf.grad
        required = [names[k] for k in leaves]
    elif framework == "torch" and not isinstance(out, (tuple, list)):
        # A torch loss without a graph (every input detached, torch.no_grad(), a kernel without
        # autograd): the gradients it should give are still required, and fail as missing.
        names = {"H": "dH", "W": "dW", "bias": "db", "logits": "dz"}
        required = [names[k] for k in leaves]
    elif pull is not None:
        shape = np.shape(loss)
        if upstream is not None and shape != (len(upstream),):
            raise InputError(
                f"loss_fn returned a per-token loss of shape {shape}; expected "
                f"({len(upstream)},) to apply the golden problem's upstream gradient"
            )
        outputs.update(pull(upstream if upstream is not None else np.ones(shape)))
        required = list(outputs)
    else:
        required = None
    scalar = np.ndim(to_numpy64(loss)) == 0
    if not scalar and spec["reduction"] != "none":
        raise InputError(
            f"loss_fn returned a loss of shape {tuple(np.shape(to_numpy64(loss)))} with reduction "
            f"'{spec['reduction']}'; expected a scalar"
        )
    name = "reduced_loss" if scalar else "loss"
    # a numpy scalar keeps its dtype; a Python float is a float64
    outputs[name] = (
        loss
        if (is_torch(loss) or isinstance(loss, np.ndarray))
        else np.asarray(loss, dtype=loss.dtype if isinstance(loss, np.generic) else np.float64)
    )
    if required is not None:
        required.append(name)
    return outputs, required


def _shape(x) -> tuple:
    return tuple(x.shape) if is_torch(x) or isinstance(x, np.ndarray) else np.shape(x)


def _check_shapes(g: Golden, outputs: dict) -> None:
    """Every output in the shape verify judges: the problem's (every token or vocabulary row) or
    the golden file's sampled rows. Refused otherwise, naming both (a gradient with an extra
    leading dimension, a per-token loss of shape (N, 1), dW transposed)."""
    N, V, D, S, J = g.N, g.V, g.D, g.S, g.J
    rows = {
        "loss": ((N,), (S,), "(N)", "(S)"),
        "lse": ((N,), (S,), "(N)", "(S)"),
        "dH": ((N, D), (S, D), "(N, D)", "(S, D)"),
        "dz": ((N, V), (S, V), "(N, V)", "(S, V)"),
        "dW": ((V, D), (J, D), "(V, D)", "(J, D)"),
        "db": ((V,), (J,), "(V)", "(J)"),
        "reduced_loss": ((), (), "()", "()"),
    }
    for name, x in outputs.items():
        if name not in rows:
            continue  # write_candidate names the unknown output
        full, sampled, full_t, sampled_t = rows[name]
        got = _shape(x)
        if got in (full, sampled):
            continue
        which = "token" if name in ("loss", "lse", "dH", "dz") else "vocabulary"
        want = f"{full} {full_t}" + (
            ""
            if sampled == full
            else f" or {sampled} {sampled_t}, the golden file's sampled {which} rows"
        )
        raise InputError(f"loss_fn returned {name} of shape {got}; expected {want}")


def _unjudged_reason(g: Golden, name: str) -> Optional[str]:
    """Why the golden file cannot judge an output (verify's words), or None when it can."""
    held = g.reduced_loss is not None if name == "reduced_loss" else name in g.reference
    if held:
        return None
    return (
        f"the golden file holds no reference {name} ("
        f"{'token rows were sampled' if g.partial else 'not computed for this problem'})"
    )


def _worst(g: Golden, name: str, stats: dict, cand, shape: list) -> Optional[dict]:
    i = stats.get("max_ratio_index", -1) if stats else -1
    if i is None or i < 0:
        return None
    if name == "reduced_loss":
        ref = g.reduced_loss
        c = float(to_numpy64(cand))
        return {
            "element": "reduced_loss",
            "index": (),
            "flat_index": 0,
            "candidate": c,
            "reference": ref,
            "error": stats["max_ratio_err"],
            "tolerance": stats["max_ratio_bound"],
        }
    rows = g.vocab_rows if name in ("dW", "db") else g.token_rows
    cols = shape[1] if len(shape) == 2 else 1
    q, col = divmod(i, cols)
    row = int(rows[q])
    c = to_numpy64(cand)
    if c.shape[0] != shape[0]:  # the full problem's rows: the golden file holds a sample of them
        c = c[rows]
    c = c.reshape(-1)[i] if c.size else float("nan")
    ref = g.reference[name].reshape(-1)[i] if name in g.reference else float("nan")
    label = "vocab row" if name in ("dW", "db") else "token"
    element = (
        f"{name}[{row}, {col}] ({label} {row}, col {col})"
        if len(shape) == 2
        else f"{name}[{row}] ({label} {row})"
    )
    return {
        "element": element,
        "index": (row, col) if len(shape) == 2 else (row,),
        "flat_index": int(i),
        "candidate": float(c),
        "reference": float(ref),
        "error": stats["max_ratio_err"],
        "tolerance": stats["max_ratio_bound"],
    }


def check(
    loss_fn: Callable,
    problem: Any = "stories260k",
    policy: Optional[str] = None,
    *,
    framework: Optional[str] = None,
    device=None,
    strictness: str = "default",
    k: Optional[float] = None,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    require=None,
    cache_dir=None,
    tier: str = "auto",
    implementation: Optional[str] = None,
    check: str = "both",
    baseline_backend: Optional[str] = None,
    memory_budget: int = 0,
) -> CheckReport:
    """Runs ``loss_fn`` on a golden problem and scores its outputs against the certified
    reference with verify (docs/verify.md; see this module's docstring for the calling
    convention and what loss_fn may return).

    problem: a catalog name (its golden file is cached, :func:`cached_golden`), a golden file
    path, a :class:`Golden` or a :class:`Problem`. policy: the arithmetic the function is allowed
    ("bf16", "fp16", "fp32" or a recipe "in/logits/accum/grad"; default: the problem's input
    dtype); strictness, k, atol, rtol, check ("bound", "differential" or "both": the
    differential check holds the function's errors to twice the CPU emulation of the policy's
    recipe) and baseline_backend ("cpu", "cuda", "all" or "auto": "all" adds the lab's CUDA
    kernels to the baseline, for a function on tensor cores) as :func:`xentlab.verify`.
    memory_budget: bytes writing or reading the golden file and verify may hold (0, the default:
    the memory available now; over it: InputError naming the estimate before that work; loss_fn's
    own memory is not counted). framework: "numpy" (the inputs are numpy arrays, bf16 as
    ml_dtypes.bfloat16), "torch" (torch tensors on ``device``, requiring grad; gradients by
    autograd) or "jax" (jax arrays on ``device``, a jax.Device; gradients by ``jax.vjp``; float64
    inputs need jax_enable_x64); default: an adapter's own (``xentlab.adapters``: "torch"), else
    "numpy". require: the outputs to judge, each of which must be present and pass (default:
    every output the golden file holds a reference for — a torch or jax loss returned alone gets
    its gradients by autograd; a numpy function that returns only the loss where the golden file
    can check gradients is "not judged", not passed: docs/verify.md, "Verdicts"; a golden file of
    sampled token rows holds no reference for the reduced loss, dW and db, which are then not
    asked for). Returns a
    :class:`CheckReport`; raises InputError (ValueError) for bad options, a ``require`` the golden
    file cannot judge, an output of another shape than the problem's or the golden file's
    sampled rows (naming both), a return value of which nothing can be judged; TypeError for an
    argument of the wrong type or a loss that is no number; and whatever loss_fn raises."""
    if not callable(loss_fn):
        raise TypeError(f"loss_fn: expected a function, got {_shown(loss_fn)}")
    if framework is None:
        framework = loss_fn.framework if isinstance(loss_fn, Adapter) else "numpy"
    if _text("framework", framework) not in ("numpy", "torch", "jax"):
        raise InputError(f"framework '{framework}': expected numpy, torch or jax")
    _text("tier", tier)
    _text("implementation", implementation, optional=True)
    memory_budget = _int("memory_budget", memory_budget, minimum=0)
    asked = None if require is None else _x.parse_required_outputs(_names("require", require))
    with tempfile.TemporaryDirectory(prefix="xentlab-check-") as tmp:
        g = _golden_of(problem, cache_dir, tier, tmp, memory_budget)
        # What the golden file cannot judge cannot be required of the function: refused before
        # the function runs, with the reason.
        for n in asked or ():
            why = _unjudged_reason(g, n)
            if why:
                raise InputError(f"require: {n} cannot be judged on {g.path}: {why}")
        outputs, returned = _call(loss_fn, g, framework, device)
        _check_shapes(g, outputs)
        impl = (
            implementation
            or f"{getattr(loss_fn, '__module__', '')}.{getattr(loss_fn, '__qualname__', repr(loss_fn))} ({framework})"
        )
        cand = os.path.join(tmp, "candidate.h5")
        write_candidate(cand, outputs, implementation=impl)  # refuses an unknown output's name
        # By default every output the golden file can check is expected (verify's default: no
        # pass by omission): a function that returns only the loss where gradients can be
        # checked is not judged; require names the outputs to judge.
        judged = [n for n in outputs if not _unjudged_reason(g, n)]
        if not judged:
            reasons = "; ".join(_unjudged_reason(g, n) for n in outputs)
            raise InputError(
                f"nothing loss_fn returned ({', '.join(outputs)}) can be judged on {g.path}: {reasons}"
                + (
                    "; return per-token losses (reduction='none') or dH, or use a golden file of "
                    "every token row"
                    if g.partial
                    else ""
                )
            )
        # torch and jax: every gradient autograd should give is required (a detached input's
        # missing gradient fails); numpy: verify's own rule (no pass by omission).
        autograd = (
            [n for n in returned if not _unjudged_reason(g, n)]
            if framework in ("torch", "jax") and returned is not None
            else []
        )
        required = autograd if asked is None else asked
        rep = verify(
            g,
            cand,
            policy=policy,
            strictness=strictness,
            k=k,
            atol=atol,
            rtol=rtol,
            require=required,
            check=check,
            baseline_backend=baseline_backend,
            memory_budget=memory_budget,
        )
    checks = []
    for o in rep.outputs:
        stats = o.stats
        ratio = stats["max_ratio"] if stats else float("nan")
        worst = (
            _worst(g, o.name, stats, outputs[o.name], o.shape)
            if stats and o.name in outputs
            else None
        )
        checks.append(
            OutputCheck(o.name, o.status, o.message, o.dtype, o.shape, stats, ratio, worst)
        )
    explicit = atol is not None or rtol is not None
    settings = {
        "framework": framework,
        "strictness": strictness,
        "check": check,
        "explicit": explicit,
        "baseline_backend": (None if explicit or check == "bound" else (baseline_backend or "cpu")),
    }
    golden = {
        "path": g.path,
        "provenance": g.provenance,
        "kind": g.problem.kind,
        "N": g.N,
        "V": g.V,
        "D": g.D,
        "S": g.S,
        "J": g.J,
        "input_dtype": g.problem.input_dtype,
        "spec": g.spec.as_dict(),
        "upstream": g.upstream is not None,
    }
    return CheckReport(
        rep.passed, rep.reason, rep.policy, rep.k, checks, rep, impl, settings, golden, rep.verdict
    )

"""``framework="jax"`` of :func:`xentlab.check`: the golden problem's arrays as jax arrays, the
user's function run under ``jax.vjp``, its gradients pulled back from the loss (the upstream
gradient of the golden file, or ones). jax is imported only here, when that framework is asked
for."""

from __future__ import annotations

import numpy as np

from ._core import InputError

_GRADIENT = {"H": "dH", "W": "dW", "bias": "db", "logits": "dz"}


def _jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        raise ImportError(
            f"framework='jax' needs the package jax (pip install jax; the CPU build suffices): {e}"
        ) from e
    return jax, jnp


def inputs(arrays: dict, device=None) -> dict:
    """The problem's numpy arrays (bf16 as ml_dtypes.bfloat16) as jax arrays of the same dtype, on
    ``device`` (a jax.Device; None: jax's default). Raises InputError for a float64 array while
    jax_enable_x64 is off (jax would make it float32: another problem)."""
    jax, jnp = _jax()
    if not jax.config.jax_enable_x64:
        wide = [k for k, v in arrays.items() if k != "targets" and v.dtype == np.float64]
        if wide:
            raise InputError(
                f"framework='jax': {', '.join(wide)} of this problem is float64, which jax turns "
                f"into float32 while jax_enable_x64 is off; set "
                f"jax.config.update('jax_enable_x64', True) first"
            )
    out = {k: jnp.asarray(v) for k, v in arrays.items()}
    if device is not None:
        out = {k: jax.device_put(v, device) for k, v in out.items()}
    return out


def run(loss_fn, arrays: dict, linear: bool, spec: dict):
    """Calls ``loss_fn(H, W, targets, [bias=], **spec)`` or ``loss_fn(logits, targets, **spec)``
    under jax.vjp. Returns (out, pull): out is what loss_fn returned with every jax array as a
    numpy array (bf16 stays ml_dtypes.bfloat16); pull(cotangent) → {"dH", "dW"[, "db"]} or
    {"dz"} as numpy arrays, the vector-Jacobian product of the loss with the cotangent (its
    shape), or None when loss_fn returned more than one array (its own gradients)."""
    jax, jnp = _jax()
    names = [k for k in ("H", "W", "bias") if k in arrays] if linear else ["logits"]
    targets = arrays["targets"]

    def f(*xs):
        given = dict(zip(names, xs))
        if not linear:
            return loss_fn(given["logits"], targets, **spec)
        kw = dict(spec, bias=given["bias"]) if "bias" in given else spec
        return loss_fn(given["H"], given["W"], targets, **kw)

    out, pullback = jax.vjp(f, *(arrays[n] for n in names))
    host = jax.tree_util.tree_map(np.asarray, out)
    if not isinstance(out, jax.Array):
        return host, None

    def pull(cotangent) -> dict:
        ct = jnp.asarray(np.asarray(cotangent, dtype=np.float64), dtype=out.dtype)
        grads = pullback(jnp.broadcast_to(ct, out.shape))
        return {_GRADIENT[n]: np.asarray(g) for n, g in zip(names, grads)}

    return host, pull

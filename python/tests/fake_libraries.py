"""numpy stand-ins for the libraries of xentlab.adapters, installed into sys.modules by a test
(monkeypatch) where the real ones are absent: modules of the same names whose functions have the
real signatures (PyTorch's ``torch.nn.functional.linear``, ``cross_entropy`` and
``linear_cross_entropy``; Liger-Kernel's ``LigerFusedLinearCrossEntropyLoss``; Cut Cross-Entropy's
``linear_cross_entropy`` as released on PyPI (25.1.1: no bias, no return_lse) and as in its
repository (bias, return_lse)). Each computes PyTorch's cross-entropy (label smoothing as
PyTorch's, the z-loss as Liger's lse_square_scale, softcap c·tanh(z/c)) in float64 and returns it
rounded to float32, and appends (function, positional arguments, keyword arguments) to CALLS, so
that a test sees which library arguments the adapter passed."""

import sys
import types

import numpy as np

CALLS = []


def cross_entropy_numpy(
    z, targets, ignore_index=-100, label_smoothing=0.0, reduction="mean", softcap=None, z_loss=0.0
):
    """PyTorch's cross-entropy of logits z (N, V) (float64): (loss, lse (N))."""
    z = np.asarray(z, dtype=np.float64)
    if softcap:
        z = softcap * np.tanh(z / softcap)
    targets = np.asarray(targets)
    n, v = z.shape
    m = z.max(axis=1)
    lse = m + np.log(np.exp(z - m[:, None]).sum(axis=1))
    valid = targets != ignore_index
    t = np.where(valid, targets, 0)
    eps = label_smoothing
    ce = lse - (1 - eps) * z[np.arange(n), t] - eps / v * z.sum(axis=1)
    loss_i = np.where(valid, ce + z_loss * lse * lse, 0.0)
    if reduction == "none":
        loss = loss_i
    elif reduction == "sum":
        loss = loss_i.sum()
    else:
        loss = loss_i.sum() / valid.sum()
    return np.asarray(loss, dtype=np.float32), lse.astype(np.float32)


def _linear(H, W, bias=None):
    z = np.asarray(H, dtype=np.float64) @ np.asarray(W, dtype=np.float64).T
    return z if bias is None else z + np.asarray(bias, dtype=np.float64)


# --- torch ---------------------------------------------------------------------------------------


def _torch_modules(with_linear_cross_entropy=True, with_linear_bias=True):
    torch = types.ModuleType("torch")
    torch.__version__ = "fake"
    torch.tanh = np.tanh

    def logsumexp(z, dim):
        m = z.max(axis=dim, keepdims=True)
        return (m + np.log(np.exp(z - m).sum(axis=dim, keepdims=True))).squeeze(dim)

    torch.logsumexp = logsumexp
    nn = types.ModuleType("torch.nn")
    F = types.ModuleType("torch.nn.functional")

    def linear(input, weight, bias=None):
        CALLS.append(("linear", (input, weight), {"bias": bias}))
        return _linear(input, weight, bias)

    def cross_entropy(
        input,
        target,
        weight=None,
        size_average=None,
        ignore_index=-100,
        reduce=None,
        reduction="mean",
        label_smoothing=0.0,
    ):
        CALLS.append(
            (
                "cross_entropy",
                (input, target),
                dict(
                    ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing
                ),
            )
        )
        return cross_entropy_numpy(input, target, ignore_index, label_smoothing, reduction)[0]

    F.linear, F.cross_entropy = linear, cross_entropy
    if with_linear_cross_entropy:
        if with_linear_bias:

            def linear_cross_entropy(
                input,
                linear_weight,
                target,
                *,
                linear_bias=None,
                weight=None,
                reduction="mean",
                ignore_index=None,
                label_smoothing=0.0,
                options=None,
            ):
                kw = dict(
                    linear_bias=linear_bias,
                    reduction=reduction,
                    ignore_index=ignore_index,
                    label_smoothing=label_smoothing,
                )
                CALLS.append(("linear_cross_entropy", (input, linear_weight, target), kw))
                z = _linear(input, linear_weight, linear_bias)
                ii = -100 if ignore_index is None else ignore_index
                return cross_entropy_numpy(z, target, ii, label_smoothing, reduction)[0]

        else:

            def linear_cross_entropy(
                input,
                linear_weight,
                target,
                *,
                weight=None,
                reduction="mean",
                ignore_index=None,
                label_smoothing=0.0,
            ):
                kw = dict(
                    reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing
                )
                CALLS.append(("linear_cross_entropy", (input, linear_weight, target), kw))
                ii = -100 if ignore_index is None else ignore_index
                z = _linear(input, linear_weight)
                return cross_entropy_numpy(z, target, ii, label_smoothing, reduction)[0]

        F.linear_cross_entropy = linear_cross_entropy
    torch.nn, nn.functional = nn, F
    return {"torch": torch, "torch.nn": nn, "torch.nn.functional": F}


# --- Liger-Kernel --------------------------------------------------------------------------------


def _liger_modules(ignores_z_loss=False):
    liger = types.ModuleType("liger_kernel")
    liger.__version__ = "fake"
    transformers = types.ModuleType("liger_kernel.transformers")

    class LigerFusedLinearCrossEntropyLoss:
        def __init__(
            self,
            ce_weight=None,
            ignore_index=-100,
            lse_square_scale=0.0,
            label_smoothing=0.0,
            reduction="mean",
            softcap=None,
            return_z_loss=False,
            accum_dtype=None,
            use_token_scaling=False,
            return_token_accuracy=False,
            return_predicted_tokens=False,
        ):
            self.kw = dict(
                ignore_index=ignore_index,
                lse_square_scale=lse_square_scale,
                label_smoothing=label_smoothing,
                reduction=reduction,
                softcap=softcap,
                accum_dtype=accum_dtype,
            )

        def forward(self, lin_weight, _input, target, bias=None):
            CALLS.append(
                ("LigerFusedLinearCrossEntropyLoss", (lin_weight, _input, target), self.kw)
            )
            k = self.kw
            return cross_entropy_numpy(
                _linear(_input, lin_weight, bias),
                target,
                k["ignore_index"],
                k["label_smoothing"],
                k["reduction"],
                k["softcap"],
                0.0 if ignores_z_loss else k["lse_square_scale"],
            )[0]

        __call__ = forward

    transformers.LigerFusedLinearCrossEntropyLoss = LigerFusedLinearCrossEntropyLoss
    liger.transformers = transformers
    return {"liger_kernel": liger, "liger_kernel.transformers": transformers}


# --- Cut Cross-Entropy ---------------------------------------------------------------------------


def _cce_modules(repository_version=True):
    cce = types.ModuleType("cut_cross_entropy")
    cce.__version__ = "fake"

    def run(e, c, targets, bias, ignore_index, softcap, reduction, return_lse, kw):
        CALLS.append(("linear_cross_entropy", (e, c, targets), kw))
        loss, lse = cross_entropy_numpy(
            _linear(e, c, bias), targets, ignore_index, 0.0, reduction, softcap
        )
        return (loss, lse) if return_lse else loss

    if repository_version:

        def linear_cross_entropy(
            e,
            c,
            targets,
            bias=None,
            ignore_index=-100,
            softcap=None,
            reduction="mean",
            shift=0,
            return_lse=False,
            filter_eps="auto",
            accum_e_fp32=False,
            accum_c_fp32=False,
            filter_e_grad=True,
            filter_c_grad=True,
            impl="cce",
            vocab_parallel_options=None,
        ):
            kw = dict(
                bias=bias,
                ignore_index=ignore_index,
                softcap=softcap,
                reduction=reduction,
                return_lse=return_lse,
                filter_eps=filter_eps,
            )
            return run(e, c, targets, bias, ignore_index, softcap, reduction, return_lse, kw)

    else:

        def linear_cross_entropy(
            e,
            c,
            targets,
            ignore_index=-100,
            softcap=None,
            reduction="mean",
            shift=False,
            filter_eps="high",
            impl="cce",
        ):
            kw = dict(
                ignore_index=ignore_index,
                softcap=softcap,
                reduction=reduction,
                filter_eps=filter_eps,
            )
            return run(e, c, targets, None, ignore_index, softcap, reduction, False, kw)

    cce.linear_cross_entropy = linear_cross_entropy
    return {"cut_cross_entropy": cce}


def install(monkeypatch, library: str, **variant) -> None:
    """Puts the stand-in of library ("torch", "liger", "cce") into sys.modules for one test."""
    modules = {"torch": _torch_modules, "liger": _liger_modules, "cce": _cce_modules}[library](
        **variant
    )
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    CALLS.clear()

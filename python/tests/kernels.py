"""numpy float32 implementations of the cross-entropy loss and its gradients, for check().

``ce_fp32`` is correct (float32 arithmetic throughout, numerics/loss_spec.hpp's formulas with
PyTorch's semantics). The others carry one deliberate error each:
``ce_bf16_sumexp``: the sum of exponentials accumulated sequentially in bf16 (each partial sum
rounded to bf16), the error of a kernel that accumulates in its storage dtype;
``ce_smoothing_on_ignored``: label smoothing's term applied to rows whose target is ignore_index
(their loss and gradient should be exactly 0).
"""

import ml_dtypes
import numpy as np


def _forward(H, W, logit_scale):
    H = np.asarray(H, dtype=np.float32)
    W = np.asarray(W, dtype=np.float32)
    return H, W, (H @ W.T) * np.float32(logit_scale)


def _loss_and_grads(
    H, W, z, lse, targets, ignore_index, eps, logit_scale, reduction, smooth_ignored=False
):
    N, V = z.shape
    valid = targets != ignore_index
    t = np.where(valid, targets, 0)
    p = np.exp(z - lse[:, None])
    eps = np.float32(eps)
    ce = lse - (1 - eps) * z[np.arange(N), t] - eps / np.float32(V) * z.sum(axis=1)
    smooth = eps * (lse - z.sum(axis=1) / np.float32(V))  # what label smoothing adds to a row
    loss_i = np.where(valid, ce, smooth if smooth_ignored else 0).astype(np.float32)
    n = max(int(valid.sum()), 1)
    scale = np.float32(1.0 / n) if reduction == "mean" else np.float32(1.0)
    dz = p - eps / np.float32(V)
    dz[np.arange(N), t] -= 1 - eps
    keep = (valid | smooth_ignored)[:, None]
    if smooth_ignored:  # an ignored row's gradient of the smoothing term: eps·(p − 1/V)
        dz = np.where(valid[:, None], dz, eps * (p - np.float32(1.0) / np.float32(V)))
    dz = (dz * keep * scale * np.float32(logit_scale)).astype(np.float32)
    loss = loss_i.sum(dtype=np.float32) * scale if reduction != "none" else loss_i
    return (
        np.float32(loss) if reduction != "none" else loss,
        (dz @ W).astype(np.float32),
        (dz.T @ H).astype(np.float32),
    )


def ce_fp32(
    H, W, targets, ignore_index=-100, label_smoothing=0.0, logit_scale=1.0, reduction="mean", **_
):
    H, W, z = _forward(H, W, logit_scale)
    m = z.max(axis=1)
    lse = m + np.log(np.exp(z - m[:, None]).sum(axis=1, dtype=np.float32))
    return _loss_and_grads(
        H, W, z, lse, targets, ignore_index, label_smoothing, logit_scale, reduction
    )


def ce_bf16_sumexp(
    H, W, targets, ignore_index=-100, label_smoothing=0.0, logit_scale=1.0, reduction="mean", **_
):
    H, W, z = _forward(H, W, logit_scale)
    m = z.max(axis=1)
    e = np.exp(z - m[:, None])
    s = np.zeros(z.shape[0], dtype=ml_dtypes.bfloat16)
    for j in range(z.shape[1]):  # sequential, every partial sum rounded to bf16
        s = (s.astype(np.float32) + e[:, j]).astype(ml_dtypes.bfloat16)
    lse = m + np.log(s.astype(np.float32))
    return _loss_and_grads(
        H, W, z, lse, targets, ignore_index, label_smoothing, logit_scale, reduction
    )


def ce_smoothing_on_ignored(
    H, W, targets, ignore_index=-100, label_smoothing=0.0, logit_scale=1.0, reduction="mean", **_
):
    H, W, z = _forward(H, W, logit_scale)
    m = z.max(axis=1)
    lse = m + np.log(np.exp(z - m[:, None]).sum(axis=1, dtype=np.float32))
    return _loss_and_grads(
        H,
        W,
        z,
        lse,
        targets,
        ignore_index,
        label_smoothing,
        logit_scale,
        reduction,
        smooth_ignored=True,
    )

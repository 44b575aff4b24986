#!/usr/bin/env python3
"""Run PyTorch's cross-entropy on a xentlab golden file and write a candidate file for `xentlab verify`.

    python3 examples/torch_candidate.py golden.h5 candidate.h5 --dtype bf16 --device cuda
    xentlab verify golden.h5 candidate.h5 --policy bf16

The problem is read from the golden file exactly (bf16 is stored as uint16 bit patterns with the
attribute dtype="bf16", see docs/formats.md); the logits are H @ W.T in --dtype (PyTorch's matmul),
the loss is torch.nn.functional.cross_entropy with the golden file's loss spec, and the gradients come
from autograd. Outputs are written in the dtype PyTorch returned them in: loss (per token), lse,
reduced_loss, dH, dW, db (linear problems) or dz (given-logits problems). The golden file's loss
semantics are applied: with reduction none, its upstream gradient g (`/spec/upstream`, ones when
absent) weighs each token (reduced_loss = Σ g_i·loss_i, whose gradient is written); with reduction
mean and a normaliser n (`/spec` attribute `normalizer` > 0), the sum is divided by n instead of
the number of valid tokens. The candidate declares both (format_version 2 attributes).

--backend numpy runs the same formulas in numpy float32 (no PyTorch needed; ignore_index and the
none/mean/sum reductions only) — used to test this script where PyTorch is not installed. With
--dtype bf16 it stands in for PyTorch's bf16 path (`F.linear` in bf16, then `.float()` and the loss):
the logits are rounded to bf16 (round to nearest even), softmax, lse and loss are float32, and dz
and the gradients are rounded to bf16 (dH = dz·W and dW = dzᵀ·H with float32 sums): the recipe
in/bf16/fp32/bf16 of docs/arithmetic.md.
"""

import argparse
import os
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    sys.exit(
        f"torch_candidate.py: {e.name} is not installed for {sys.executable}; run this script "
        "with a Python that has h5py and numpy, such as build/venv/bin/python (made by "
        "tools/xentlab.sh or tools/setup.sh --python build/venv)"
    )


def read_tensor(ds):
    """A golden tensor as float32/float16/float64 numpy (bf16 bit patterns widened exactly)."""
    a = ds[()]
    if ds.attrs.get("dtype") == "bf16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return a


def load_golden(path):
    with h5py.File(path, "r") as g:
        if g.attrs.get("format") != "xentlab-golden" or g.attrs.get("format_version") not in (1, 2):
            sys.exit(f"{path}: not a xentlab golden file of format_version 1 or 2")
        p, s = g["problem"], g["spec"]
        prob = {
            "kind": p.attrs["kind"],
            "dtype": p.attrs["input_dtype"],
            "targets": p["targets"][()],
        }
        for name in ("H", "W", "bias", "logits"):
            if name in p:
                prob[name] = read_tensor(p[name])
        spec = {
            k: s.attrs[k]
            for k in (
                "ignore_index",
                "label_smoothing",
                "z_loss",
                "softcap",
                "logit_scale",
                "reduction",
                "empty_mean",
            )
        }
        spec["normalizer"] = int(s.attrs.get("normalizer", 0))  # version 1: none
        n_tok = prob["targets"].shape[0]
        spec["upstream"] = s["upstream"][()] if "upstream" in s else np.ones(n_tok)
    return prob, spec


def torch_outputs(prob, spec, dtype, device):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        sys.exit(
            "torch_candidate.py: PyTorch is not installed here; install it, or run the numpy "
            "float32 stand-in with --backend numpy"
        )
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    t = torch.tensor(prob["targets"], dtype=torch.int64, device=device)
    leaves = {}
    if prob["kind"] == "linear":
        H = torch.tensor(prob["H"], device=device).to(dt).requires_grad_()  # (N, D)
        W = torch.tensor(prob["W"], device=device).to(dt).requires_grad_()  # (V, D)
        leaves = {"dH": H, "dW": W}
        z = H @ W.T  # (N, V) in dt
        b = torch.zeros(W.shape[0], dtype=dt, device=device, requires_grad=True)
        if "bias" in prob:
            b = torch.tensor(prob["bias"], device=device).to(dt).requires_grad_()
        leaves["db"] = b
        z = z + b
    else:
        z = torch.tensor(prob["logits"], device=device).to(dt).requires_grad_()
        leaves = {"dz": z}
    z = z * float(spec["logit_scale"]) if spec["logit_scale"] != 1 else z
    if spec["softcap"] > 0:
        c = float(spec["softcap"])
        z = c * torch.tanh(z / c)
    ig = int(spec["ignore_index"])
    per_tok = F.cross_entropy(
        z, t, ignore_index=ig, reduction="none", label_smoothing=float(spec["label_smoothing"])
    )
    lse = torch.logsumexp(z.float(), dim=-1)
    valid = t != ig
    if spec["z_loss"] > 0:
        per_tok = per_tok + (float(spec["z_loss"]) * lse * lse * valid).to(per_tok.dtype)
    if spec["reduction"] == "mean":  # over the valid tokens, or the caller's normaliser
        reduced = per_tok.float().sum() / (spec["normalizer"] or valid.sum())
    elif spec["reduction"] == "sum":
        reduced = per_tok.float().sum()
    else:  # reduction none: the gradient of Σ g_i·loss_i
        g = torch.tensor(spec["upstream"], dtype=torch.float32, device=device)
        reduced = (per_tok.float() * g).sum()
    reduced.backward()
    out = {"loss": per_tok.detach(), "lse": lse.detach(), "reduced_loss": reduced.detach()}
    for name, leaf in leaves.items():
        out[name] = leaf.grad
    return out, f"torch {torch.__version__} {dtype} on {device}"


def to_bf16(x):
    """float32 array rounded to the nearest bf16 (ties to even), as float32 (NaN-free input)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


class Bf16:
    """A float32 array whose values are bf16: written as bf16 bit patterns (docs/formats.md)."""

    def __init__(self, x):
        self.x = to_bf16(x)


def numpy_outputs(prob, spec, bf16=False):
    """float32 numpy stand-in: plain log-softmax cross-entropy (ε = λ = 0, no softcap); bf16: the
    logits, dz and the gradients rounded to bf16 (the module docstring)."""
    if spec["label_smoothing"] or spec["z_loss"] or spec["softcap"] or spec["logit_scale"] != 1:
        sys.exit("--backend numpy supports plain cross-entropy only")
    f = np.float32
    t = prob["targets"]
    ig = int(spec["ignore_index"])
    valid = t != ig
    if prob["kind"] == "linear":
        H, W = prob["H"].astype(f), prob["W"].astype(f)
        z = H @ W.T
        if "bias" in prob:
            z = z + prob["bias"].astype(f)
    else:
        z = prob["logits"].astype(f)
    if bf16:
        z = to_bf16(z)
    m = z.max(axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, f(0))  # a fully masked row: e = 0, lse = -inf
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.exp(z - m)
        s = e.sum(axis=1, keepdims=True)
        lse = (m + np.log(s))[:, 0]
        dz = np.where(s > 0, e / s, f(0)).astype(f)
    rows = np.arange(z.shape[0])
    zt = z[rows, np.where(valid, t, 0)]
    with np.errstate(invalid="ignore"):
        loss = np.where(valid, lse - zt, f(0)).astype(f)
    n = spec["normalizer"] or int(valid.sum())  # the mean's divisor
    scale = f(1) / f(max(n, 1)) if spec["reduction"] == "mean" else f(1)
    dz[rows[valid], t[valid]] -= f(1)
    dz[~valid] = 0
    if spec["reduction"] == "none":  # dL/dloss_i = g_i: reduced = Σ g_i·loss_i
        g = spec["upstream"].astype(f)
        dz *= g[:, None]
        reduced = (g * loss).sum(dtype=f)
    else:
        dz *= scale
        reduced = np.float32(loss.sum(dtype=f) * scale)
    if spec["reduction"] == "mean" and n == 0:  # PyTorch: the mean of no valid row is NaN
        reduced = np.float32("nan") if spec["empty_mean"] == "nan" else np.float32(0)
    out = {"loss": loss, "lse": lse.astype(f), "reduced_loss": np.float32(reduced)}
    g = Bf16 if bf16 else (lambda x: x.astype(f))
    if bf16:
        dz = to_bf16(dz)
    if prob["kind"] == "linear":
        out.update(dH=g(dz @ W), dW=g(dz.T @ H), db=g(dz.sum(axis=0, dtype=f)))
    else:
        out["dz"] = g(dz)
    return out, f"numpy {np.__version__} float32" + (", bf16 logits and gradients" if bf16 else "")


def write_candidate(path, outputs, implementation, force, spec):
    """Atomic write: a temporary file in the same folder, renamed into place."""
    if os.path.exists(path) and not force:
        sys.exit(f"{path}: exists; pass --force to overwrite it")
    tmp = os.path.join(
        os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.tmp-{os.getpid()}"
    )
    try:
        with h5py.File(tmp, "w") as c:
            c.attrs["format"] = "xentlab-candidate"
            c.attrs["format_version"] = 2
            c.attrs["implementation"] = implementation
            c.attrs["reduction"] = spec["reduction"]  # the semantics implemented
            c.attrs["normalizer"] = np.int64(spec["normalizer"])
            for name, x in outputs.items():
                if isinstance(x, Bf16):  # bf16 values: uint16 bit patterns + dtype
                    c[name] = (x.x.view(np.uint32) >> 16).astype(np.uint16)
                    c[name].attrs["dtype"] = "bf16"
                    continue
                if hasattr(x, "detach"):  # a torch tensor
                    import torch

                    if x.dtype == torch.bfloat16:  # bf16: uint16 bit patterns + dtype attribute
                        c[name] = x.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
                        c[name].attrs["dtype"] = "bf16"
                        continue
                    x = x.cpu().numpy()
                c[name] = x
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("golden")
    ap.add_argument("candidate")
    ap.add_argument(
        "--dtype",
        choices=["bf16", "fp16", "fp32"],
        help="dtype of H, W and the logits in PyTorch (default bf16); numpy: fp32 "
        "(default) or bf16 logits and gradients",
    )
    ap.add_argument("--device", default="cuda", help="cuda or cpu")
    ap.add_argument("--backend", default="torch", choices=["torch", "numpy"])
    ap.add_argument("--force", action="store_true", help="overwrite an existing candidate file")
    a = ap.parse_args()
    prob, spec = load_golden(a.golden)
    if a.backend == "torch":
        outputs, impl = torch_outputs(prob, spec, a.dtype or "bf16", a.device)
    else:
        if a.dtype == "fp16":
            sys.exit("--backend numpy: --dtype fp32 or bf16 (numpy has no stand-in for fp16 here)")
        outputs, impl = numpy_outputs(prob, spec, bf16=a.dtype == "bf16")
    write_candidate(a.candidate, outputs, impl, a.force, spec)
    print(f"wrote {a.candidate}: {', '.join(outputs)} ({impl})")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""xentlab.check on PyTorch loss functions: torch.nn.functional.cross_entropy, a chunked
implementation, and two deliberately wrong ones, on a golden problem with ignored rows and label
smoothing (the README's worked example; docs/python.md).

    python3 examples/check_torch.py [--device cuda] [--policy bf16] [--tokens 256]

Each function gets H (N, D) and W (V, D) as bf16 leaf tensors on the device, the targets, and
the loss options; autograd gives dH and dW. Exit status 0 when the two correct functions pass and
the two wrong ones are caught, else 1.
"""

import argparse
import sys

import torch
import torch.nn.functional as F

import xentlab


def torch_cross_entropy(H, W, targets, ignore_index, label_smoothing, reduction, **_):
    """PyTorch's loss on bf16 logits."""
    return F.cross_entropy(
        H @ W.T,
        targets,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        reduction=reduction,
    )


def chunked(H, W, targets, ignore_index, label_smoothing, reduction, chunk=64, **_):
    """Token chunks of bf16 logits upcast to fp32, summed, divided by the valid rows."""
    total = H.new_zeros((), dtype=torch.float32)
    for s in range(0, H.shape[0], chunk):
        z = (H[s : s + chunk] @ W.T).float()
        total = total + F.cross_entropy(
            z,
            targets[s : s + chunk],
            ignore_index=ignore_index,
            label_smoothing=label_smoothing,
            reduction="sum",
        )
    n = (targets != ignore_index).sum()
    return total / n if reduction == "mean" else total


def smoothing_on_ignored_rows(H, W, targets, ignore_index, label_smoothing, reduction, **_):
    """Wrong: label smoothing's term is applied to the ignored rows too."""
    logp = torch.log_softmax((H @ W.T).float(), dim=-1)
    valid = targets != ignore_index
    nll = -logp.gather(1, targets.clamp(min=0)[:, None])[:, 0] * valid
    loss = (1 - label_smoothing) * nll + label_smoothing * -logp.mean(dim=-1)
    return loss.sum() / valid.sum()


def bf16_accumulation(H, W, targets, ignore_index, label_smoothing, reduction, **_):
    """Wrong: the sum of exponentials accumulated in bf16, one vocabulary entry after another
    (every partial sum rounded to bf16), as a kernel that accumulates in its input dtype."""
    z = (H @ W.T).float()
    m = z.max(dim=-1, keepdim=True).values.detach()
    e = torch.exp(z - m)
    s = torch.zeros(z.shape[0], device=z.device, dtype=torch.bfloat16)
    for j in range(z.shape[1]):
        s = (s.float() + e[:, j]).to(torch.bfloat16)
    lse = m[:, 0] + torch.log(s.float())
    valid = targets != ignore_index
    t = targets.clamp(min=0)
    ce = lse - (1 - label_smoothing) * z.gather(1, t[:, None])[:, 0] - label_smoothing * z.mean(-1)
    return (ce * valid).sum() / valid.sum()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--policy", default="bf16")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--cache-dir", default=None)
    a = ap.parse_args()
    golden = xentlab.cached_golden(
        "part-ignored", N=a.tokens, spec={"label_smoothing": 0.1}, cache_dir=a.cache_dir
    )
    print(
        f"problem: {golden.problem.describe()}; {golden.spec.describe()}; "
        f"{int((golden.problem.targets == -100).sum())} ignored rows; torch {torch.__version__} on {a.device}\n"
    )
    expected = {
        torch_cross_entropy: True,
        chunked: True,
        smoothing_on_ignored_rows: False,
        bf16_accumulation: False,
    }
    ok = True
    for fn, should_pass in expected.items():
        report = xentlab.check(
            fn, problem=golden, policy=a.policy, framework="torch", device=a.device
        )
        print(f"===== {fn.__name__}: {'PASSED' if report.passed else 'FAILED'}")
        print(report)
        ok = ok and report.passed == should_pass
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

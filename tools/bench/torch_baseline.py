#!/usr/bin/env python3
"""PyTorch baseline for tools/bench/gpu_bench: forward+backward of the LM-head cross-entropy,
the way most training code writes it, on the same shapes and input distribution.

  python3 tools/bench/torch_baseline.py [--sizes 8192x128256x4096,131072x128256x4096]
                                        [--repeats 5] [--json out.jsonl]

Variants (H (N, D), W (V, D) bf16 leaf tensors with requires_grad, targets uniform, mean):
  upcast:    F.cross_entropy(F.linear(H, W).float(), t)   (bf16 logits, fp32 softmax/CE)
  no-upcast: F.cross_entropy(F.linear(H, W), t)           (bf16 throughout)
Time: CUDA events around forward+backward, one warm-up excluded, median of the repeats.
Memory: torch.cuda.max_memory_allocated() during a run minus the bytes allocated before it
(inputs, targets and the gradient buffers, which exist after the warm-up): peak extra bytes.
An out-of-memory is reported as such.
"""
import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F


def run(N, V, D, upcast, repeats):
    g = torch.Generator(device="cuda").manual_seed(1)
    H = torch.randn(N, D, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
    W = (torch.randn(V, D, device="cuda", generator=g) * (2.0 / math.sqrt(D))).to(torch.bfloat16)
    W.requires_grad_()
    t = torch.randint(0, V, (N,), device="cuda", generator=g)

    def step():
        z = F.linear(H, W)
        loss = F.cross_entropy(z.float() if upcast else z, t)
        loss.backward()
        return loss

    step()  # warm-up; creates H.grad, W.grad
    torch.cuda.synchronize()
    times = []
    peak_extra = 0
    for _ in range(repeats):
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        loss = step()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1))
        peak_extra = max(peak_extra, torch.cuda.max_memory_allocated() - base)
        del loss
    assert math.isfinite(H.grad.float().abs().sum().item())
    del H, W, t
    torch.cuda.empty_cache()
    return statistics.median(times), peak_extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8192x128256x4096,131072x128256x4096")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    out = open(a.json, "w") if a.json else None
    print(f"{'N':<8} {'V':<7} {'D':<5} {'variant':<10} {'median_ms':>10} {'TFLOP/s':>9} {'extra_GiB':>10}")
    for s in a.sizes.split(","):
        N, V, D = (int(x) for x in s.split("x"))
        for upcast in (True, False):
            name = "upcast" if upcast else "no-upcast"
            try:
                ms, extra = run(N, V, D, upcast, a.repeats)
                tf = 6.0 * N * V * D / (ms * 1e-3) / 1e12
                print(f"{N:<8} {V:<7} {D:<5} {name:<10} {ms:>10.2f} {tf:>9.1f} {extra / 2**30:>10.3f}",
                      flush=True)
                rec = dict(N=N, V=V, D=D, variant=name, median_ms=ms, tflops=tf, peak_extra_bytes=extra)
            except torch.cuda.OutOfMemoryError as e:
                torch.cuda.empty_cache()
                print(f"{N:<8} {V:<7} {D:<5} {name:<10} out of memory: {str(e).splitlines()[0][:120]}",
                      flush=True)
                rec = dict(N=N, V=V, D=D, variant=name, oom=True)
            if out:
                out.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()

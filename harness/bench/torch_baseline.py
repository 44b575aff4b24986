#!/usr/bin/env python3
"""PyTorch baseline for `xentlab bench`: forward+backward of the LM-head
cross-entropy, the way most training code writes it, on the same shapes and input distribution.

  python3 harness/bench/torch_baseline.py [--sizes 8192x128256x4096,131072x128256x4096]
                                        [--tokens N --vocab V --hidden D | --preset llama3-8b-128k]
                                        [--repeats 5] [--warmup 1] [--json out.jsonl] [--csv bench.csv]
                                        [--variants upcast,no-upcast,liger,cce,cce-exact]

Variants (H (N, D), W (V, D) bf16 leaf tensors with requires_grad, targets uniform, mean):
  upcast:    F.cross_entropy(F.linear(H, W).float(), t)   (bf16 logits, fp32 softmax/CE)
  no-upcast: F.cross_entropy(F.linear(H, W), t)           (bf16 throughout)
and, where their packages import (a variant whose package is missing is a row saying so), the
peers' fused linear cross-entropy kernels on the same tensors:
  liger:     liger_kernel's LigerFusedLinearCrossEntropyLoss()(W, H, t) (Liger-Kernel)
  cce:       cut_cross_entropy.linear_cross_entropy(H, W, t) (Cut Cross-Entropy, its default
             gradient filter)
  cce-exact: the same with filter_eps=None (no gradient filtering)
--variants picks among them (comma list; default: all five); a variant whose package is missing is
a not-supported row saying so.
Inputs: H ~ N(0, 1), W ~ N(0, 4/D), as xentlab bench generates them (same distribution, not the
same bits). Time: CUDA events around forward+backward, warm-up runs excluded, median (and min/max)
of the repeats; each step's gradients accumulate into H.grad and W.grad, which exist after the
warm-up (as in a training step without zeroing them: one addition over dH and dW, a few ms at
N = 131072). Memory: torch.cuda.max_memory_allocated() during a run minus the bytes allocated
before it (inputs, targets and the gradient buffers, which exist after the warm-up): peak extra
bytes beyond inputs and gradients, the quantity xentlab bench reports. An out-of-memory is
reported as such. Determinism: after the timed runs, two more steps from cleared gradients; the
row says whether their loss, dH and dW are bit-identical ("repeat runs bit-identical" in the
message, `repeat_bit_identical` in the JSON lines) or which differ: a measurement on these
inputs, not a proof.

--csv appends rows to a CSV: to an existing `xentlab bench --csv` file (or one this script
started) with that file's header, which must have every column below (the columns this script
knows are filled, the others left empty; strategy "torch:upcast" or "torch:no-upcast", the peers
by their variant's name), or to a new file with the columns below:
  date_utc, gpu, command, preset, N, V, D, strategy, recipe, status, repeats, warmup,
  input_copies, median_ms, min_ms, max_ms, tflops, peak_extra_bytes, message
The options and the output files are checked before PyTorch is looked for (exit 2 naming the
problem); without PyTorch or a CUDA device, exit 4.
"""

import argparse
import csv
import datetime
import fcntl
import gc
import json
import math
import os
import statistics
import sys

try:  # imported here, refused in main(): --help works without PyTorch
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

PRESETS = {"llama3-8b-128k": (131072, 128256, 4096)}
DEFAULT_SIZES = "8192x128256x4096,131072x128256x4096"
RECIPE = {
    "upcast": "torch bf16 logits, fp32 CE, bf16 grads",
    "no-upcast": "torch bf16 throughout",
    "liger": "Liger-Kernel fused linear CE, bf16 inputs",
    "cce": "Cut Cross-Entropy, bf16 inputs, gradient filter on",
    "cce-exact": "Cut Cross-Entropy, bf16 inputs, filter_eps=None",
}
PACKAGE = {"liger": "liger_kernel", "cce": "cut_cross_entropy", "cce-exact": "cut_cross_entropy"}
# The CSV columns this script writes, in the order of a new file's header. Every row is written
# under them, whatever its status (a row that did not run leaves the timings empty).
COLUMNS = [
    "date_utc",
    "gpu",
    "command",
    "preset",
    "N",
    "V",
    "D",
    "strategy",
    "recipe",
    "status",
    "repeats",
    "warmup",
    "input_copies",
    "median_ms",
    "min_ms",
    "max_ms",
    "tflops",
    "peak_extra_bytes",
    "message",
]


def loss_fn(variant):
    """The loss of (H, W, t) for a variant; ImportError when its package is missing."""
    if variant == "upcast":
        return lambda H, W, t: F.cross_entropy(F.linear(H, W).float(), t)
    if variant == "no-upcast":
        return lambda H, W, t: F.cross_entropy(F.linear(H, W), t)
    if variant == "liger":
        from liger_kernel.transformers.fused_linear_cross_entropy import (
            LigerFusedLinearCrossEntropyLoss,
        )

        f = LigerFusedLinearCrossEntropyLoss()
        return lambda H, W, t: f(W, H, t)
    if variant in ("cce", "cce-exact"):
        from cut_cross_entropy import linear_cross_entropy

        if variant == "cce":
            return lambda H, W, t: linear_cross_entropy(H, W, t)
        return lambda H, W, t: linear_cross_entropy(H, W, t, filter_eps=None)
    raise ValueError(f"unknown variant {variant!r} (known: {', '.join(RECIPE)})")


def run(N, V, D, variant, repeats, warmup):
    g = torch.Generator(device="cuda").manual_seed(1)
    H = torch.randn(N, D, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
    W = (torch.randn(V, D, device="cuda", generator=g) * (2.0 / math.sqrt(D))).to(torch.bfloat16)
    W.requires_grad_()
    t = torch.randint(0, V, (N,), device="cuda", generator=g)

    f = loss_fn(variant)

    # H, W and t are deleted at the end of run() (the GPU memory freed), after the last step().
    def step():
        loss = f(H, W, t)  # noqa: F821
        loss.backward()
        return loss

    for _ in range(max(1, warmup)):  # the first creates H.grad, W.grad
        step()
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
    try:
        differs = repeat_differs(step, H, W)
    except torch.cuda.OutOfMemoryError:  # the two steps' copies did not fit: times still stand
        differs = None
    del H, W, t
    torch.cuda.empty_cache()
    return times, peak_extra, differs


def repeat_differs(step, H, W):
    """Two more steps from cleared gradients: the names of the outputs (loss, dH, dW) whose bits
    differ between them (empty: the variant repeats bit for bit on these inputs)."""

    def bits(x):
        return x.detach().contiguous().reshape(-1).view(torch.uint8)

    def once():
        H.grad = None
        W.grad = None
        loss = step()
        return [bits(loss).clone(), bits(H.grad).clone(), bits(W.grad).clone()]

    first = once()
    second = once()
    torch.cuda.synchronize()
    return [n for n, a, b in zip(("loss", "dH", "dW"), first, second) if not torch.equal(a, b)]


def csv_problem(path):
    """Why rows cannot be appended to the CSV at path (None when they can): a folder, a missing
    folder, the file or its lock not writable (or the folder, to create them), or an existing
    file whose header lacks some of COLUMNS (a file of something else, or cut short in its
    header), whose rows would lose those fields."""
    if os.path.isdir(path):
        return f"{path} is a folder"
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        return f"the folder {folder} does not exist"
    # append_csv() opens PATH.lock and PATH for appending once every variant has run.
    for f in (path + ".lock", path):
        if os.path.exists(f) and not os.access(f, os.W_OK):
            return f"{f} is not writable"
        if not os.path.exists(f) and not os.access(folder, os.W_OK | os.X_OK):
            return f"the folder {folder} is not writable (for {f})"
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    try:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        return f"{path} cannot be read as a CSV ({e})"
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        return (
            f"{path} has a header without the columns {', '.join(missing)} (not a "
            "`xentlab bench --csv` file nor one this script started): the rows would lose them"
        )
    return None


def append_csv(path, rows):
    """Rows (dicts) under the existing file's header, or a new file with COLUMNS.
    Holds the exclusive lock `xentlab bench` takes on PATH.lock (docs/formats.md) and writes '\n'
    line ends, as the bench's CSV does."""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, newline="") as f:
                header = next(csv.reader(f))
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                needs_newline = f.read(1) != b"\n"
            new = False
        else:
            header = list(COLUMNS)
            new = True
            needs_newline = False
        with open(path, "a", newline="") as f:
            if needs_newline:
                f.write("\n")
            w = csv.DictWriter(f, fieldnames=header, extrasaction="ignore", lineterminator="\n")
            if new:
                w.writeheader()
            for r in rows:
                w.writerow({k: ("" if v is None else v) for k, v in r.items()})


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sizes",
        help="comma list of NxVxD shapes (default: " + DEFAULT_SIZES + ")",
    )
    ap.add_argument("--tokens", "-N", type=int, help="tokens N (with -V and -D: one shape)")
    ap.add_argument("--vocab", "-V", type=int, help="vocabulary V")
    ap.add_argument("--hidden", "-D", type=int, help="hidden size D")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="a named shape")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs (default: %(default)s)")
    ap.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed runs before them, at least 1 (default: %(default)s)",
    )
    ap.add_argument("--json", default="", help="write one JSON line per variant and shape here")
    ap.add_argument("--csv", default="", help="append the rows to this CSV (see above)")
    ap.add_argument(
        "--variants",
        default=",".join(RECIPE),
        help="comma list among " + ", ".join(RECIPE) + " (default: all; a peer whose package "
        "is not installed is a row saying so)",
    )
    a = ap.parse_args()
    variants = []
    for v in (v.strip() for v in a.variants.split(",")):
        if v and v not in RECIPE:
            ap.error(f"--variants: unknown variant {v!r} (known: {', '.join(RECIPE)})")
        if v and v not in variants:  # a variant named twice is measured once
            variants.append(v)
    if not variants:
        ap.error(f"--variants names no variant (known: {', '.join(RECIPE)})")
    # statistics.median() of no timed run raises after the warm-up; a warm-up below 0 is one run
    # (the first creates the gradients) and would be recorded as asked.
    if a.repeats < 1:
        ap.error(f"--repeats {a.repeats}: at least 1 timed run")
    if a.warmup < 0:
        ap.error(f"--warmup {a.warmup}: at least 0 untimed runs")
    if a.csv and (why := csv_problem(a.csv)):
        ap.error(f"--csv: {why}")
    if a.json and (os.path.isdir(a.json) or not os.path.isdir(os.path.dirname(a.json) or ".")):
        ap.error(f"--json: {a.json} is a folder or its folder does not exist")
    # One way of naming the shapes: the others would be dropped without a word.
    ways = [
        w
        for w, given in (
            ("--sizes", a.sizes is not None),
            ("--preset", a.preset is not None),
            ("--tokens/--vocab/--hidden", (a.tokens, a.vocab, a.hidden) != (None, None, None)),
        )
        if given
    ]
    if len(ways) > 1:
        ap.error(f"{' and '.join(ways)} name the shapes twice: give one of them")
    if a.sizes is None:
        a.sizes = DEFAULT_SIZES
    if a.preset:
        sizes = [PRESETS[a.preset]]
    elif (a.tokens, a.vocab, a.hidden) != (None, None, None):
        if None in (a.tokens, a.vocab, a.hidden):
            ap.error("--tokens, --vocab and --hidden go together")
        sizes = [(a.tokens, a.vocab, a.hidden)]
    else:
        sizes = []
        for s in a.sizes.split(","):
            parts = s.split("x")
            # ASCII digits only: str.isdigit() takes "²", which int() refuses (a traceback)
            if len(parts) != 3 or not all(
                p.isascii() and p.isdigit() and int(p) > 0 for p in parts
            ):
                ap.error(
                    f"--sizes: {s!r} is not NxVxD (three positive integers, e.g. 8192x128256x4096)"
                )
            sizes.append(tuple(int(p) for p in parts))
    if any(n < 1 for size in sizes for n in size):
        ap.error("--tokens, --vocab and --hidden must be at least 1")
    if torch is None:
        print(
            "torch_baseline: PyTorch is not installed here (pip install torch; the baseline "
            "needs a CUDA build and an NVIDIA GPU)",
            file=sys.stderr,
        )
        return 4
    if not torch.cuda.is_available():
        print(
            "torch_baseline: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr
        )
        return 4
    gpu = torch.cuda.get_device_name(0)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"torch {torch.__version__}, {gpu}")
    out = open(a.json, "w") if a.json else None
    rows = []
    print(
        f"{'N':<8} {'V':<7} {'D':<5} {'variant':<10} {'median_ms':>10} {'min-max ms':>17} "
        f"{'TFLOP/s':>9} {'extra_GiB':>10}  repeat runs"
    )
    # The rows measured so far are appended even when a variant fails with an error no handler
    # below takes (a Triton compile error, an index overflow): the others stand.
    try:
        for N, V, D in sizes:
            for name in variants:
                row = dict(
                    date_utc=date,
                    gpu=gpu,
                    command=" ".join(sys.argv),
                    preset=a.preset or "",
                    N=N,
                    V=V,
                    D=D,
                    strategy=("torch:" + name) if name not in PACKAGE else name,
                    recipe=RECIPE[name],
                    warmup=a.warmup,
                    input_copies=1,
                )
                try:
                    times, extra, differs = run(N, V, D, name, a.repeats, a.warmup)
                    if differs is None:
                        repeat = "not compared (out of memory for the copies)"
                    else:
                        repeat = (
                            "bit-identical" if not differs else "differ in " + ", ".join(differs)
                        )
                    ms = statistics.median(times)
                    tf = 6.0 * N * V * D / (ms * 1e-3) / 1e12
                    print(
                        f"{N:<8} {V:<7} {D:<5} {name:<10} {ms:>10.2f} "
                        f"{min(times):>8.2f}-{max(times):<8.2f} {tf:>9.1f} {extra / 2**30:>10.3f}  "
                        f"{repeat}",
                        flush=True,
                    )
                    rec = dict(
                        N=N,
                        V=V,
                        D=D,
                        variant=name,
                        median_ms=ms,
                        min_ms=min(times),
                        max_ms=max(times),
                        tflops=tf,
                        peak_extra_bytes=extra,
                        repeat_bit_identical=None if differs is None else not differs,
                    )
                    row.update(
                        status="ok",
                        repeats=len(times),
                        median_ms=ms,
                        min_ms=min(times),
                        max_ms=max(times),
                        tflops=tf,
                        peak_extra_bytes=extra,
                        message="repeat runs " + repeat,
                    )
                except ImportError as e:
                    msg = f"{PACKAGE.get(name, name)} is not installed here ({e})"
                    print(f"{N:<8} {V:<7} {D:<5} {name:<10} not run: {msg}", flush=True)
                    rec = dict(N=N, V=V, D=D, variant=name, missing=True)
                    row.update(status="not-supported", message=msg)
                except torch.cuda.OutOfMemoryError as e:
                    msg = str(e).splitlines()[0][:200]
                    print(f"{N:<8} {V:<7} {D:<5} {name:<10} out of memory: {msg[:120]}", flush=True)
                    rec = dict(N=N, V=V, D=D, variant=name, oom=True)
                    row.update(status="does-not-fit", message="out of memory: " + msg)
                # Outside the handler: the exception's traceback no longer pins run()'s tensors, so
                # the next variant starts with the memory the failed one held released.
                gc.collect()
                torch.cuda.empty_cache()
                rows.append(row)
                if out:
                    out.write(json.dumps(rec) + "\n")
    finally:
        if out:
            out.close()
        if a.csv and rows:
            append_csv(a.csv, rows)
            print(f"csv: {a.csv} ({len(rows)} rows appended)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

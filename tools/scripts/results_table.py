#!/usr/bin/env python3
"""The current strategy table, generated from lab/results/strategies.csv.

Takes the latest `xentlab bench` measurement (and the latest `torch_baseline.py` one: PyTorch and
the peers' kernels) per strategy and N for the recipe bf16/bf16/fp32/fp32, on the GPU of the
newest `xentlab bench` row of that recipe and those N only (timings of two cards are never mixed
in one table; a newer bench of another recipe or size does not change the card), and prints a
Markdown table with one caption line naming the GPU, driver and commit of those
measurements.

    results_table.py            print the table
    results_table.py --write    rewrite the blocks between the markers in README.md and
                                docs/benchmarks.md
    results_table.py --check    exit 1 when a block differs from what would be written

The block carries no date: the README and docs/ say what is; when each figure was measured is in
the CSV (its date, time, commit and command), which the caption names.
"""

import argparse
import csv
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "lab" / "results" / "strategies.csv"
TARGETS = [ROOT / "README.md", ROOT / "docs" / "benchmarks.md"]
BEGIN = "<!-- results-table:begin -->"
END = "<!-- results-table:end -->"
RECIPE = "bf16/bf16/fp32/fp32"
SIZES = (8192, 131072)

# What each row of the table is (the registry's traits, gpu/registry.cpp), in table order.
STRATEGIES = [
    ("naive", "naive", "CPU, CUDA", "every recipe", "yes"),
    ("chunked", "chunked", "CPU, CUDA", "every recipe", "yes"),
    ("checkpointed", "checkpointed", "CPU, CUDA", "every recipe", "yes"),
    (
        "fused",
        "fused",
        "CPU, CUDA (sm_90a wgmma, else mma.sync)",
        "bf16/fp16 inputs, logits in the input dtype",
        "yes",
    ),
    ("vocab_parallel", "vocab_parallel", "CPU, CUDA + NCCL", "every recipe", "yes for P ≤ 2"),
    ("vocab_chunked", "vocab_chunked", "CPU, CUDA", "every recipe, linear heads", "yes"),
    ("pytorch-bf16", "PyTorch, bf16 throughout", "torch", "—", "—"),
    ("pytorch-fp32-upcast", "PyTorch, fp32 upcast", "torch", "—", "—"),
    # The peers (torch_baseline.py); deterministic by their sources, or as measured (determinism()).
    (
        "liger-flce",
        "Liger-Kernel fused linear CE",
        "torch + Triton",
        "bf16 inputs",
        "by its source, yes (ordered addmm)",
    ),
    (
        "cce",
        "Cut Cross-Entropy",
        "torch + Triton",
        "bf16 inputs, gradient filter",
        "by its source, no (spin-locked sums)",
    ),
    (
        "cce-exact",
        "Cut Cross-Entropy, filter_eps=None",
        "torch + Triton",
        "bf16 inputs",
        "by its source, no (spin-locked sums)",
    ),
]
TOOLS = {"xentlab-bench", "torch_baseline"}
COLUMNS = [
    "date",
    "time_utc",
    "commit",
    "gpu",
    "driver",
    "tool",
    "command",
    "N",
    "recipe",
    "strategy",
    "ms",
    "peak_extra_bytes",
    "peak_extra_gib",
    "note",
]


class TableError(Exception):
    """A results file the table cannot be made from (the message names the file and why)."""


def check_number(where, column, text, number):
    """TableError unless text is a number of its column: N and ms positive (a time of 0 would
    divide the × by zero), ms finite, peak_extra_bytes ≥ 0."""
    try:
        value = number(text)
    except ValueError:
        value = None
    least_ok = value is not None and (value >= 0 if column == "peak_extra_bytes" else value > 0)
    if not least_ok or (number is float and not math.isfinite(value)):
        kind = "a number ≥ 0" if column == "peak_extra_bytes" else "a positive number"
        raise TableError(f"{where}: {column} {text!r} is not {kind}")


def load(path):
    """The rows of the strategies CSV at path. TableError naming the file (and the line) when it
    cannot be read, lacks a column of COLUMNS, or has a row of a tool the table takes whose
    fields are missing or whose N or ms is not a positive number (a time of 0 would divide the
    × by zero) or whose peak_extra_bytes is not a number ≥ 0, or a torch_baseline row whose
    note's repeat-run comparison cannot be read (repeat_claim())."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise TableError(
                    f"{path}: its header has no column {', '.join(missing)} (not a strategies CSV)"
                )
            rows = []
            for r in reader:
                if r["tool"] in TOOLS:
                    where = f"{path} line {reader.line_num}"
                    if any(r[c] is None for c in COLUMNS):
                        raise TableError(f"{where}: fewer fields than the header's")
                    for c, number in (("N", int), ("ms", float), ("peak_extra_bytes", int)):
                        if r[c] or c == "N":
                            check_number(where, c, r[c], number)
                    if r["tool"] == "torch_baseline":
                        try:
                            repeat_claim(r["note"])
                        except ValueError as e:
                            raise TableError(f"{where}: {e}") from None
                rows.append(r)
            return rows
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise TableError(f"{path}: cannot be read ({e})") from None


def latest(rows):
    """The latest row per (strategy, N) among the bench's and PyTorch's measurements on the GPU
    of the newest bench row the table shows (recipe RECIPE, N among SIZES). TableError when there
    is none."""
    bench = [
        r
        for r in rows
        if r["tool"] == "xentlab-bench" and r["recipe"] == RECIPE and int(r["N"]) in SIZES
    ]
    if not bench:
        raise TableError(
            f"no `xentlab bench` row of recipe {RECIPE} at N = "
            f"{' or '.join(str(n) for n in SIZES)}: no table to make"
        )
    gpu = max(bench, key=lambda r: (r["date"], r["time_utc"]))["gpu"]
    best = {}
    for r in rows:
        if r["tool"] not in TOOLS or r["gpu"] != gpu:
            continue
        if r["tool"] == "xentlab-bench" and r["recipe"] != RECIPE:
            continue
        key = (r["strategy"], int(r["N"]))
        stamp = (r["date"], r["time_utc"])
        if key not in best or stamp >= (best[key]["date"], best[key]["time_utc"]):
            best[key] = r
    return best


def memory(r):
    if r is None:
        return "—"
    if r["peak_extra_bytes"]:
        b = int(r["peak_extra_bytes"])
        return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"
    if r["peak_extra_gib"]:
        return f"{r['peak_extra_gib']} GiB"
    return "—"


def run_of(r):
    """What identifies the run a row comes from: one process, one command, on one card (two
    cards can start the same command in the same minute)."""
    return (r["tool"], r["command"], r["date"], r["time_utc"], r["gpu"])


def cell(r, naive, rows):
    """A time and its × against naive: naive of the row's own run where that run timed it (a
    bench row), else the latest naive; a bench row compared across runs is marked †."""
    if r is None:
        return "not measured"
    if not r["ms"]:
        return "out of memory" if "out of memory" in r["note"] else "did not run"
    ms = float(r["ms"])
    if r["strategy"] == "naive":
        return f"{ms:.2f} ms"
    mark = ""
    if r["tool"] == "xentlab-bench":
        same = [
            q
            for q in rows
            if run_of(q) == run_of(r)
            and q["strategy"] == "naive"
            and int(q["N"]) == int(r["N"])
            and q["recipe"] == r["recipe"]
            and q["ms"]
        ]
        if same:
            naive = same[-1]
        else:
            mark = "†"
    if naive is not None and naive["ms"]:
        return f"{ms:.2f} ms ({float(naive['ms']) / ms:.2f}×{mark})"
    return f"{ms:.2f} ms"


REPEATED = ("loss", "dH", "dW")  # what torch_baseline.py compares between two repeat runs


def repeat_claim(note):
    """What a torch_baseline row's note says of its repeat runs: None (no comparison), [] (bit-
    identical) or the outputs that differed (among REPEATED). ValueError naming what is wrong
    when the note says it twice, both ways, or names no such output after "differ in"."""
    same = note.count("repeat runs bit-identical")
    differ = note.count("repeat runs differ in")
    if same + differ > 1:
        raise ValueError("its note says more than once how its repeat runs compared")
    if same:
        return []
    if not differ:
        return None
    listed = note.split("repeat runs differ in", 1)[1].split(";")[0]
    what = [w.strip() for w in listed.split(",")]
    if not all(w in REPEATED for w in what):
        raise ValueError(
            f"its note's repeat runs differ in {listed.strip()!r}, not a comma list among "
            f"{', '.join(REPEATED)}"
        )
    return what


def determinism(key, det, best):
    """The deterministic cell: torch_baseline.py's repeat-run comparison where its latest row at a
    size of the table made one ("repeat runs bit-identical" or "repeat runs differ in …" in the
    note, checked by load()), else `det` (the registry's trait, or what a peer's source says)."""
    seen = []  # [verdict, what, [sizes]]: sizes with the same finding share one phrase
    for n in SIZES:
        r = best.get((key, n))
        if r is None or r["tool"] != "torch_baseline":
            continue
        differed = repeat_claim(r["note"])
        if differed == []:
            found = ("yes", "bit-identical on repeat")
        elif differed:
            found = ("no", f"{', '.join(differed)} differ on repeat")
        else:
            continue
        if seen and tuple(seen[-1][:2]) == found:
            seen[-1][2].append(n)
        else:
            seen.append([*found, [n]])
    if not seen:
        return det
    verdict = "no" if any(v == "no" for v, _, _ in seen) else "yes"
    said = "; ".join(f"{w} at N = {' and '.join(str(n) for n in ns)}" for _, w, ns in seen)
    return f"{verdict}, measured ({said})"


def table(rows):
    best = latest(rows)
    used = list(best.values())
    gpus = sorted({r["gpu"] + (f" (driver {r['driver']})" if r["driver"] else "") for r in used})
    commits = sorted({r["commit"] for r in used if r["commit"]})
    commit = ", ".join(commits) if commits else "not recorded"
    lines = [
        f"*Measured on {', '.join(gpus)}, commit {commit} (dates and commands: "
        f"lab/results/strategies.csv); forward + backward medians, "
        f"recipe {RECIPE} (`xentlab bench`, interleaved; PyTorch and the peers: "
        f"`torch_baseline.py`, a process of its own, their × against naive across processes); "
        f"× = throughput vs naive of the same run († of another run); deterministic: for the lab's "
        f"strategies what the registry declares (the GPU tests compare repeat runs), for PyTorch "
        f'and the peers "measured" where `torch_baseline.py` compared two repeat steps bit for '
        f"bit (on its inputs, not a proof), else what their source says.*",
        "",
        "| strategy | backends | recipes | deterministic | N = 8192 | N = 131072 | "
        "peak extra memory at 131072 |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, name, backends, recipes, det in STRATEGIES:
        cells = []
        for n in SIZES:
            cells.append(cell(best.get((key, n)), best.get(("naive", n)), rows))
        mem = memory(best.get((key, SIZES[-1])))
        row = [name, backends, recipes, determinism(key, det, best), cells[0], cells[1], mem]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def replace(text, block):
    a = text.find(BEGIN)
    b = text.find(END)
    if a < 0 or b < a:
        return None
    return text[: a + len(BEGIN)] + "\n" + block + text[b:]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="rewrite the marked blocks in place")
    g.add_argument("--check", action="store_true", help="exit 1 when a marked block is stale")
    p.add_argument("--results", default=str(RESULTS), help="the strategies CSV")
    args = p.parse_args()
    try:
        block = table(load(args.results))
    except TableError as e:
        print(f"results_table.py: {e}", file=sys.stderr)
        return 2
    if not (args.write or args.check):
        sys.stdout.write(block)
        return 0
    # Every target read and its block found before any is written: a target without the block
    # (or that cannot be read) leaves all of them as they were, exit 2 naming it (not a traceback,
    # whose exit 1 --check would read as a stale table).
    news = []
    for path in TARGETS:
        name = path.relative_to(ROOT)
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            print(f"results_table.py: {name}: cannot be read ({e})", file=sys.stderr)
            return 2
        new = replace(text, block)
        if new is None:
            print(f"results_table.py: {name}: no {BEGIN} … {END} block", file=sys.stderr)
            return 2
        news.append((path, name, text, new))
    stale = []
    for path, name, text, new in news:
        if new == text:
            continue
        if not args.write:
            stale.append(str(name))
            continue
        try:
            path.write_text(new)
        except OSError as e:
            print(f"results_table.py: {name}: cannot be written ({e})", file=sys.stderr)
            return 2
        print(f"rewrote {name}")
    if stale:
        print(
            "stale results table: "
            + ", ".join(stale)
            + " (run tools/scripts/results_table.py --write)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

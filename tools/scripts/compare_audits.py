#!/usr/bin/env python3
"""Compare two `xentlab audit` results files (HDF5) and their Markdown summaries for identity.

Used to show that a change of the code's structure changed no result: every group, dataset
(bit for bit) and attribute must be equal, except the provenance that differs between any two
runs (the file's `created`, `updated` and `xentlab_version`; a run's wall time `seconds`).
Attributes and datasets present only in the second file are listed (an additive format change)
and fail the comparison unless their names are given with --allow-new. The Markdown files (`<file>.md`) must be identical
line by line, except lines naming the files themselves (not compared when neither file has one).

Usage: compare_audits.py BEFORE.h5 AFTER.h5 [--allow-new NAME ...]
Exit 0: identical; 1: a difference (each printed); 2: a file cannot be read.
"""

import argparse
import os
import sys

import numpy as np

try:
    import h5py
except ImportError:  # pragma: no cover - the venv of the test command has h5py
    sys.exit("compare_audits.py needs h5py (pip install h5py)")

PROVENANCE = {"created", "updated", "xentlab_version", "seconds"}


def attrs_equal(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=False) or (
            np.asarray(a).dtype.kind == "f"
            and np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
        )
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True  # both NaN
    return a == b


def compare(before, after, allow_new):
    diffs = []

    def visit(path, x, y):
        for k in sorted(set(x.attrs) | set(y.attrs)):
            if k in PROVENANCE:
                continue
            if k not in y.attrs:
                diffs.append(f"{path or '/'}: attribute {k} missing after")
            elif k not in x.attrs:
                if k not in allow_new:
                    diffs.append(f"{path or '/'}: new attribute {k} = {y.attrs[k]!r}")
            elif not attrs_equal(x.attrs[k], y.attrs[k]):
                diffs.append(f"{path or '/'}: attribute {k}: {x.attrs[k]!r} -> {y.attrs[k]!r}")
        if isinstance(x, h5py.Dataset) != isinstance(y, h5py.Dataset):
            before_kind = "a dataset" if isinstance(x, h5py.Dataset) else "a group"
            after_kind = "a dataset" if isinstance(y, h5py.Dataset) else "a group"
            diffs.append(f"{path}: {before_kind} before, {after_kind} after")
            return
        if isinstance(x, h5py.Dataset):
            if x.dtype != y.dtype or x.shape != y.shape:
                diffs.append(f"{path}: {x.dtype}{x.shape} -> {y.dtype}{y.shape}")
            elif x.dtype.kind == "O" or h5py.check_string_dtype(x.dtype) is not None:
                as_text = lambda d: np.array(d.asstr()[()], dtype=object).tolist()  # noqa: E731
                if as_text(x) != as_text(y):
                    diffs.append(f"{path}: values differ")
            elif x[()].tobytes() != y[()].tobytes():
                diffs.append(f"{path}: values differ")
            return
        for k in sorted(set(x) | set(y)):
            if k not in y:
                diffs.append(f"{path}/{k}: missing after")
            elif k not in x:
                if k not in allow_new:
                    diffs.append(f"{path}/{k}: new after")
            else:
                visit(f"{path}/{k}", x[k], y[k])

    with h5py.File(before, "r") as x, h5py.File(after, "r") as y:
        visit("", x, y)
    return diffs


def compare_markdown(before, after):
    if not os.path.exists(before) and not os.path.exists(after):
        print(f"markdown: neither {before} nor {after} exists (not compared)")
        return []
    for p in (before, after):
        if not os.path.exists(p):
            return [f"{p}: missing (the other file has its Markdown summary)"]

    def lines(p):
        with open(p, encoding="utf-8") as f:
            return [line for line in f.read().splitlines() if not line.startswith("results:")]

    a, b = lines(before), lines(after)
    out = [
        f"{before}: line {i + 1}: {x!r} -> {y!r}" for i, (x, y) in enumerate(zip(a, b)) if x != y
    ]
    if len(a) != len(b):
        out.append(f"{before}: {len(a)} lines, {after}: {len(b)} lines")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument(
        "--allow-new",
        nargs="*",
        default=[],
        help="names of attributes or datasets the after file may add",
    )
    a = ap.parse_args()
    try:
        diffs = compare(a.before, a.after, set(a.allow_new))
        diffs += compare_markdown(a.before + ".md", a.after + ".md")
    except (OSError, UnicodeDecodeError) as e:
        print(f"compare_audits.py: cannot read: {e}", file=sys.stderr)
        return 2
    for d in diffs[:200]:
        print(d)
    print(f"{len(diffs)} difference(s)" if diffs else "identical (provenance aside)")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())

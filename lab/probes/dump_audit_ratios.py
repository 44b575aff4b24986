"""Prints, for every run of an xentlab results file, each output's largest error against its bound
(max_ratio), the element where |e| is largest, its value and the reference's. A probe for reading
an audit's incorrect runs on a machine without the Markdown at hand.

    python3 lab/probes/dump_audit_ratios.py RESULTS.h5
"""

import sys

import h5py

with h5py.File(sys.argv[1], "r") as f:
    for rid in sorted(f["runs"]):
        run = f["runs"][rid]
        a = run.attrs
        print(
            f"{rid} {a['problem']} {a['strategy']} {a['recipe']} disposition="
            f"{a.get('disposition', '?')} reason={a.get('reason', '')!s:.300}"
        )
        for name, g in run.items():
            if not isinstance(g, h5py.Group) or "max_ratio" not in g.attrs:
                continue
            s = g.attrs
            print(
                f"    {name:8s} n={s['n']} normwise={s['normwise_rel_err']:.3e} "
                f"max_ratio={s['max_ratio']:.3e} over={s['n_over_bound']} "
                f"max|e|={s['max_abs_err']:.3e} at {s['max_abs_err_index']} "
                f"out={s['max_abs_err_out']:.9e} ref={s['max_abs_err_ref']:.9e} "
                f"p99_ratio={s['p99_ratio']:.3e}"
            )

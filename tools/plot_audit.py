#!/usr/bin/env python3
"""Plots of an xentlab audit results file (schema: docs/audit.md, "Results file").

    python3 tools/plot_audit.py xentlab-audit.h5 plots/

Writes, from the HDF5 file alone:
  error_vs_recipe_<output>.png  normwise relative error of each recipe, one marker per problem
                                (worst over strategies), for loss, dH/dz and dW
  loss_error_vs_ptarget.png     per-token |loss error| against p_target, for three recipes
  loss_error_vs_maxlogit.png    per-token |loss error| against the row's max logit
  ulp_<output>.png              fraction of elements at 0, <=1, <=2, <=4 and >4 ULP per recipe
Needs h5py, numpy, matplotlib (tools/setup.sh --python).
"""
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def runs_table(f):
    rows = []
    for name, g in f["runs"].items():
        a = dict(g.attrs)
        a["id"] = name
        a["outputs"] = {k: dict(g[k].attrs) for k in g if isinstance(g[k], h5py.Group)}
        a["loss_abs_err"] = g["loss_abs_err"][()] if "loss_abs_err" in g else None
        rows.append(a)
    return rows


def s(x):
    return x.decode() if isinstance(x, bytes) else str(x)


def normwise(run, out):
    o = run["outputs"].get(out)
    if o is None:
        return None
    if o["nonfinite_where_ref_finite"] > 0 or o["finiteness_mismatches"] > 0:
        return np.inf
    return float(o["normwise_rel_err"])


def plot_error_vs_recipe(runs, out, path):
    recipes = sorted({s(r["recipe"]) for r in runs})
    problems = sorted({s(r["problem"]) + "." + s(r["input_dtype"]) for r in runs})
    fig, ax = plt.subplots(figsize=(12, 5))
    any_point = False
    for k, p in enumerate(problems):
        xs, ys, inf_x = [], [], []
        for i, rec in enumerate(recipes):
            errs = [normwise(r, out) for r in runs
                    if s(r["recipe"]) == rec and s(r["problem"]) + "." + s(r["input_dtype"]) == p]
            errs = [e for e in errs if e is not None]
            if not errs:
                continue
            e = max(errs)
            if np.isinf(e):
                inf_x.append(i)
            else:
                xs.append(i)
                ys.append(max(e, 1e-18))
        if xs or inf_x:
            any_point = True
            ax.scatter(xs, ys, label=p, marker="o^sDvP*x"[k % 8], color=plt.cm.tab20(k % 20))
            if inf_x:
                ax.scatter(inf_x, [1.0] * len(inf_x), marker="X", color="red")
    if not any_point:
        plt.close(fig)
        return False
    ax.set_yscale("log")
    ax.set_xticks(range(len(recipes)))
    ax.set_xticklabels(recipes, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel(f"normwise relative error of {out} (worst over strategies)")
    ax.set_title(f"{out}: error by recipe (red X: non-finite where the reference is finite)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_loss_vs_covariate(f, runs, covariate, path, xlabel, xscale):
    fig, ax = plt.subplots(figsize=(8, 5))
    chosen = ["bf16/fp32/fp32/bf16", "bf16/bf16/fp32/bf16", "bf16/bf16/bf16/bf16"]
    drawn = False
    for rec in chosen:
        xs, ys = [], []
        for r in runs:
            if s(r["recipe"]) != rec or s(r["strategy"]) != "naive" or r["loss_abs_err"] is None:
                continue
            pg = f["problems"].get(s(r["problem"]) + "." + s(r["input_dtype"]))
            if pg is None:
                continue
            x = pg[covariate][()]
            e = r["loss_abs_err"]
            n = min(len(x), len(e))
            xs.extend(x[:n])
            ys.extend(np.maximum(e[:n], 1e-18))
        if xs:
            drawn = True
            ax.scatter(xs, ys, s=8, label=rec, alpha=0.6)
    if not drawn:
        plt.close(fig)
        return False
    ax.set_yscale("log")
    ax.set_xscale(xscale)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("|loss error| per token (nats), strategy naive")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_ulp(runs, out, path):
    recipes = sorted({s(r["recipe"]) for r in runs})
    fr = []
    for rec in recipes:
        acc = np.zeros(5)
        n = 0
        for r in runs:
            o = r["outputs"].get(out)
            if s(r["recipe"]) != rec or o is None:
                continue
            f0, f1, f2, f4 = (float(o[k]) for k in ("frac_ulp_0", "frac_ulp_le1", "frac_ulp_le2", "frac_ulp_le4"))
            acc += np.array([f0, f1 - f0, f2 - f1, f4 - f2, 1 - f4])
            n += 1
        fr.append(acc / n if n else acc)
    fr = np.array(fr)
    if fr.size == 0 or not fr.any():
        return False
    fig, ax = plt.subplots(figsize=(12, 5))
    bottom = np.zeros(len(recipes))
    for k, lab in enumerate(["0 ULP", "1 ULP", "2 ULP", "3-4 ULP", "> 4 ULP"]):
        ax.bar(range(len(recipes)), fr[:, k], bottom=bottom, label=lab)
        bottom += fr[:, k]
    ax.set_xticks(range(len(recipes)))
    ax.set_xticklabels(recipes, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel(f"fraction of {out} elements")
    ax.set_title(f"{out}: ULP distance to the correctly rounded reference (mean over problems and strategies)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    with h5py.File(src, "r") as f:
        if s(f.attrs.get("format", "")) != "xentlab-results":
            print(f"{src}: not an xentlab results file", file=sys.stderr)
            return 2
        runs = runs_table(f)
        made = []
        for out in ("loss", "dz", "dH", "dW"):
            p = os.path.join(outdir, f"error_vs_recipe_{out}.png")
            if plot_error_vs_recipe(runs, out, p):
                made.append(p)
            p = os.path.join(outdir, f"ulp_{out}.png")
            if plot_ulp(runs, out, p):
                made.append(p)
        p = os.path.join(outdir, "loss_error_vs_ptarget.png")
        if plot_loss_vs_covariate(f, runs, "p_target", p, "p_target (reference)", "log"):
            made.append(p)
        p = os.path.join(outdir, "loss_error_vs_maxlogit.png")
        if plot_loss_vs_covariate(f, runs, "max_logit", p, "max logit of the row", "symlog"):
            made.append(p)
    for p in made:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())

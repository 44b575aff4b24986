#!/usr/bin/env python3
"""Plots of an xentlab audit results file (schema: docs/audit.md, "Results file").

    python3 tools/scripts/plot_audit.py [--force] xentlab-audit.h5 plots/
    python3 tools/scripts/plot_audit.py --check-libraries


Writes, from the HDF5 file alone:
  error_vs_recipe_<output>.png  normwise relative error of each recipe, one marker per problem
                                (worst over strategies), for loss, dH/dz and dW
  loss_error_vs_ptarget.png     per-token |loss error| against p_target, for three recipes
  loss_error_vs_maxlogit.png    per-token |loss error| against the row's max logit
  ulp_<output>.png              fraction of elements at 0, <=1, <=2, <=4 and >4 ULP per recipe
  verdict_heatmap.png           the verdict in one picture: per output, regime x recipe, the error
                                of each recipe / the error of the all-fp32-arithmetic recipe of the
                                same input (X/fp32/fp32/X), with the threshold 2 of the verdict
The folder is created when missing (its parent must exist). A folder that already holds any of
these PNGs is refused unless --force (`xentlab audit --plots DIR` checks the same names before its
run and passes --force on). Each PNG is written to a temporary name and renamed into place.
--check-libraries only imports what the plots need (exit 0, or 3 with the one-line reason):
`xentlab audit` asks it before its run whether it can draw.
Exit status: 0 done, 2 invalid input (arguments, a file that is not a readable results file, a
folder that cannot be used or holds plots), 3 a plot could not be written or h5py/numpy/matplotlib
is missing (tools/setup.sh --python installs them into build/venv). Errors are one line on stderr.
"""

import argparse
import os
import sys

OUTPUTS = ("loss", "dz", "dH", "dW")
# Every file this script may write (cli/audit_cmd.cpp, check_plots_folder, lists the same).
PLOT_NAMES = (
    [f"error_vs_recipe_{o}.png" for o in OUTPUTS]
    + [f"ulp_{o}.png" for o in OUTPUTS]
    + ["loss_error_vs_ptarget.png", "loss_error_vs_maxlogit.png", "verdict_heatmap.png"]
)

PROG = "plot_audit.py"


class BadInput(Exception):
    """Invalid input: exit 2."""


class CannotWrite(Exception):
    """An output that could not be made: exit 3."""


def import_libraries():
    global h5py, np, plt
    try:
        import h5py
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError as e:
        raise CannotWrite(
            f"needs h5py, numpy and matplotlib ({e}); tools/setup.sh --python installs them "
            "into build/venv"
        ) from e


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
            errs = [
                normwise(r, out)
                for r in runs
                if s(r["recipe"]) == rec and s(r["problem"]) + "." + s(r["input_dtype"]) == p
            ]
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
    save(fig, path)
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
    save(fig, path)
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
            f0, f1, f2, f4 = (
                float(o[k]) for k in ("frac_ulp_0", "frac_ulp_le1", "frac_ulp_le2", "frac_ulp_le4")
            )
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
    ax.set_title(
        f"{out}: ULP distance to the correctly rounded reference (mean over problems and strategies)"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path)
    return True


def plot_verdict_heatmap(runs, path):
    """The verdict in one picture. Per output (loss, dH/dz, dW): rows = regime (problem.input X),
    columns = the recipe's logits / accumulation / gradient dtypes (X where it is the input's);
    each cell the worst normwise error of the recipe over the strategies divided by that of
    X/fp32/fp32/X. Bold: beyond the verdict's threshold, max(2 × the X/fp32/fp32/X error, u_X)
    (docs/audit.md), which a small base error can put far above the ratio 2."""
    from matplotlib.colors import LogNorm

    u = {"bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 2.0**-24}

    def worst(problem, recipe, out):
        # "dH/dz": dH of a linear problem, dz of a logits problem (one row each)
        names = out.split("/")
        errs = [
            normwise(r, o)
            for r in runs
            for o in names
            if s(r["recipe"]) == recipe and s(r["problem"]) + "." + s(r["input_dtype"]) == problem
        ]
        errs = [e for e in errs if e is not None]
        return max(errs) if errs else None

    def tail(recipe):
        x, logits, accum, grad = recipe.split("/")
        return "/".join(("X" if d == x else d) for d in (logits, accum, grad))

    regimes = sorted({s(r["problem"]) + "." + s(r["input_dtype"]) for r in runs})
    regimes = [
        g
        for g in regimes
        if len(
            {tail(s(r["recipe"])) for r in runs if s(r["problem"]) + "." + s(r["input_dtype"]) == g}
        )
        > 1
    ]
    tails = sorted({tail(s(r["recipe"])) for r in runs})
    panels = []
    for out in ("loss", "dH/dz", "dW"):
        ratio = np.full((len(regimes), len(tails)), np.nan)
        beyond = np.zeros_like(ratio, dtype=bool)
        for i, reg in enumerate(regimes):
            x = reg.rsplit(".", 1)[1]
            base = worst(reg, f"{x}/fp32/fp32/{x}", out)
            if base is None:
                continue
            for j, t in enumerate(tails):
                e = worst(reg, x + "/" + t.replace("X", x), out)
                if e is None:
                    continue
                ratio[i, j] = np.inf if np.isinf(e) else e / max(base, 1e-300)
                beyond[i, j] = e > max(2 * base, u.get(x, 0.0))
        if not np.isnan(ratio).all():
            panels.append((out, ratio, beyond))
    if not panels:
        return False
    fig, axes = plt.subplots(
        len(panels),
        1,
        squeeze=False,
        figsize=(max(8, 0.7 * len(tails) + 3), 1.5 + 0.4 * len(regimes) * len(panels)),
    )
    norm = LogNorm(vmin=0.5, vmax=1e4)
    for ax, (out, ratio, beyond) in zip(axes[:, 0], panels):
        shown = np.where(np.isinf(ratio), 1e4, ratio)
        im = ax.imshow(np.clip(shown, 0.5, 1e4), norm=norm, cmap="RdYlGn_r", aspect="auto")
        for i in range(ratio.shape[0]):
            for j in range(ratio.shape[1]):
                v = ratio[i, j]
                if np.isnan(v):
                    continue
                txt = "inf" if np.isinf(v) else (f"{v:.2g}" if v < 100 else f"{v:.0e}")
                ax.text(
                    j,
                    i,
                    txt + (" ✗" if beyond[i, j] else ""),
                    ha="center",
                    va="center",
                    fontsize=6,
                    fontweight="bold" if beyond[i, j] else "normal",
                )
        ax.set_yticks(range(len(regimes)))
        ax.set_yticklabels(regimes, fontsize=7)
        ax.set_xticks(range(len(tails)))
        ax.set_xticklabels(
            tails if ax is axes[-1, 0] else [""] * len(tails), rotation=60, ha="right", fontsize=7
        )
        ax.set_title(
            f"{out}: error / error of X/fp32/fp32/X (bold ✗: beyond max(2x, one rounding of X))",
            fontsize=9,
        )
        cb = fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01)
        cb.ax.axhline(2, color="black", linewidth=1.5)
        cb.ax.tick_params(labelsize=6)
    axes[-1, 0].set_xlabel(
        "recipe: logits / accumulation / gradient dtype (X: the input dtype of the row)"
    )
    fig.tight_layout()
    save(fig, path)
    return True


def save(fig, path):
    """Writes the figure to a temporary name beside path and renames it into place."""
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        fig.savefig(tmp, dpi=110, format="png")
        os.replace(tmp, path)
    except OSError as e:
        raise CannotWrite(f"{path}: cannot write the plot: {e.strerror or e}") from e
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)


def check_folder(outdir, force):
    """The folder exists (created when missing, its parent must exist) and, unless force, holds
    none of the plots."""
    if os.path.exists(outdir) and not os.path.isdir(outdir):
        raise BadInput(f"{outdir}: exists and is not a folder")
    if not os.path.exists(outdir):
        try:
            os.mkdir(outdir)
        except OSError as e:
            raise BadInput(f"{outdir}: cannot create the folder: {e.strerror or e}") from e
    if not os.access(outdir, os.W_OK | os.X_OK):
        raise BadInput(f"{outdir}: the folder cannot be written to")
    if force:
        return
    held = [n for n in PLOT_NAMES if os.path.exists(os.path.join(outdir, n))]
    if held:
        raise BadInput(
            f"{outdir}: holds plots already ({', '.join(held)}); pass --force to overwrite them"
        )


def plot_all(src, outdir):
    if not os.path.exists(src):
        raise BadInput(f"no such file: {src}")
    try:
        f = h5py.File(src, "r")
    except OSError as e:
        raise BadInput(f"{src}: not a readable HDF5 file ({e})") from e
    made = []
    with f:
        if s(f.attrs.get("format", "")) != "xentlab-results":
            raise BadInput(
                f'{src}: not an xentlab results file (no format="xentlab-results" attribute)'
            )
        try:
            runs = runs_table(f)
            plots = []
            for out in OUTPUTS:
                plots.append(
                    (
                        f"error_vs_recipe_{out}.png",
                        lambda p, out=out: plot_error_vs_recipe(runs, out, p),
                    )
                )
                plots.append((f"ulp_{out}.png", lambda p, out=out: plot_ulp(runs, out, p)))
            plots.append(
                (
                    "loss_error_vs_ptarget.png",
                    lambda p: plot_loss_vs_covariate(
                        f, runs, "p_target", p, "p_target (reference)", "log"
                    ),
                )
            )
            plots.append(
                (
                    "loss_error_vs_maxlogit.png",
                    lambda p: plot_loss_vs_covariate(
                        f, runs, "max_logit", p, "max logit of the row", "symlog"
                    ),
                )
            )
            plots.append(("verdict_heatmap.png", lambda p: plot_verdict_heatmap(runs, p)))
            for name, plot in plots:
                p = os.path.join(outdir, name)
                if plot(p):
                    made.append(p)
        except (KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
            what = (
                f"missing '{e.args[0]}'"
                if isinstance(e, KeyError) and e.args
                else f"{type(e).__name__}: {e}"
            )
            raise BadInput(f"{src}: not a readable xentlab results file ({what})") from e
        except OSError as e:
            raise BadInput(f"{src}: cannot be read ({e})") from e
    return made


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog=PROG, description="Plots of an xentlab audit results file (see the file's comment)."
    )
    ap.add_argument("results", nargs="?", help="audit results file (xentlab audit --out)")
    ap.add_argument("outdir", nargs="?", help="folder for the PNGs (created when missing)")
    ap.add_argument("--force", action="store_true", help="overwrite plots already in the folder")
    ap.add_argument(
        "--check-libraries",
        action="store_true",
        help="only import h5py, numpy and matplotlib: exit 0, or 3 saying which is missing",
    )
    a = ap.parse_args(argv)  # a usage error exits 2 with one message
    if a.check_libraries:
        try:
            import_libraries()
        except CannotWrite as e:
            print(f"{PROG}: {e}", file=sys.stderr)
            return 3
        return 0
    if a.results is None or a.outdir is None:
        ap.error("the results file and the folder are required")
    try:
        import_libraries()
        check_folder(a.outdir, a.force)
        made = plot_all(a.results, a.outdir)
    except BadInput as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except CannotWrite as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 3
    except Exception as e:  # noqa: BLE001 - anything unforeseen: one line, not a traceback
        print(f"{PROG}: error while plotting {a.results}: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    for p in made:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())

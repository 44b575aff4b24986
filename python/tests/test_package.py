"""The package imports and exposes the lab: catalog, problems, the reference's values and bounds."""

import numpy as np
import pytest

import xentlab


def test_imports_and_names_the_version():
    assert xentlab.__version__.count(".") == 2
    assert issubclass(xentlab.InputError, ValueError)
    assert issubclass(xentlab.FormatError, ValueError)
    assert issubclass(xentlab.OutputError, OSError)


def test_catalog_lists_the_commands_datasets(cli):
    names = [d["name"] for d in xentlab.datasets()]
    listed = cli("datasets").stdout
    assert names and all(n in listed for n in names)
    s = next(d for d in xentlab.datasets() if d["name"] == "stories260k")
    assert (s["N"], s["V"], s["D"], s["dtype"]) == (256, 512, 64, "fp32")


def test_catalog_problem_shapes_and_dtypes():
    p = xentlab.problem("calibrated", N=8, V=1000, D=16)
    assert (p.N, p.V, p.D, p.kind, p.input_dtype) == (8, 1000, 16, "linear", "bf16")
    assert p.H.dtype.name == "bfloat16" and p.H.shape == (8, 16)
    assert p.W.shape == (1000, 16) and p.targets.dtype == np.int64
    assert ((p.targets >= 0) & (p.targets < 1000)).all()
    logits = xentlab.problem("masked", N=4, V=300)
    assert logits.kind == "logits" and logits.logits.shape == (4, 300) and logits.H is None


def test_reference_values_and_bounds_on_an_exact_case():
    # All-equal logits: every logit 0 (H = 0), so lse = ln V and loss = ln V exactly, p = 1/V,
    # dW = dzᵀ·H = 0 and db = mean over rows of (1/V − [j = t]) (docs/cases.md's exact cases).
    N, V, D = 4, 7, 3
    H = np.zeros((N, D), np.float32)
    W = np.arange(V * D, dtype=np.float32).reshape(V, D) / 8
    t = np.array([0, 3, 6, 3])
    r = xentlab.reference(
        xentlab.Problem.linear(H, W, t, bias=np.zeros(V, np.float32)), tier="compensated"
    )
    lnV = np.log(V)
    assert np.all(np.abs(r.loss - lnV) <= r.loss_bound + 2**-52 * lnV)
    assert np.all(np.abs(r.lse - lnV) <= r.lse_bound + 2**-52 * lnV)
    assert np.all(r.dW == 0) and r.dW.shape == (V, D)
    onehot = np.zeros((N, V))
    onehot[np.arange(N), t] = 1
    db = (1.0 / V - onehot).sum(axis=0) / N
    assert np.all(np.abs(r.db - db) <= r.db_bound + 2**-52)
    assert r.dH.shape == (N, D) and r.dH_bound.shape == (N, D) and np.all(r.dH_bound >= 0)
    assert abs(r.reduced_loss - lnV) <= r.reduced_loss_bound + 2**-52 * lnV


def test_reference_samples_rows_and_returns_dz():
    p = xentlab.problem("masked", N=6, V=300)
    r = xentlab.reference(p, token_rows=[1, 4], dz=True)
    assert list(r.token_rows) == [1, 4] and r.partial
    assert r.dz.shape == (2, 300) and r.dz_bound.shape == (2, 300) and r.dH is None
    # masked row 1 keeps only its target: softmax 1 there, dz = 0 to within the bound
    assert np.all(np.abs(r.dz[0]) <= r.dz_bound[0] + 1e-300)


def test_spec_override_changes_the_reference():
    p = xentlab.problem("calibrated", N=8, V=500, D=16)
    base = xentlab.reference(p)
    smooth = xentlab.reference(p, spec={"label_smoothing": 0.1})
    assert smooth.reduced_loss > base.reduced_loss  # smoothing adds ε·(lse − mean z) ≥ 0 per row
    assert p.with_spec({"softcap": 30.0}).spec.softcap == 30.0


def _import_in_child(code, **env_changes):
    """Runs code in a fresh interpreter (the xentlab of this test run on its path), without a
    preset OPENBLAS_CORETYPE (so import xentlab probes), and returns its stdout."""
    import os
    import subprocess
    import sys

    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "XENTLAB_BLAS_PROBE")
    }
    env.update(env_changes)
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_failed_blas_probe_warns_once_with_its_cause_and_the_import_goes_on():
    # The probe's child interpreter inherits the environment: with PYTHONHOME pointing nowhere it
    # cannot start (no module 'encodings'); the parent, started before, is unaffected.
    out = _import_in_child(
        "import os, warnings\n"
        "os.environ['PYTHONHOME'] = '/nonexistent'\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import xentlab\n"
        "print(len(w)); print(w[0].category.__name__); print(w[0].message)\n"
        "print(xentlab.problem('calibrated', N=2, V=10, D=2).N)\n"
    )
    count, category, message, n = out.strip().split("\n")
    assert (count, category, n) == ("1", "RuntimeWarning", "2")
    assert "probe of OpenBLAS's kernels failed" in message
    assert "exited with status 1: ModuleNotFoundError: No module named 'encodings'" in message


def test_a_working_blas_probe_imports_without_a_warning():
    out = _import_in_child(
        "import warnings\nwarnings.simplefilter('error')\nimport xentlab\nprint('ok')\n"
    )
    assert out.strip() == "ok"


def test_golden_arrays_are_read_only_views_and_the_problem_is_made_once(tmp_path):
    import h5py

    p = xentlab.problem("calibrated", N=6, V=200, D=8)
    xentlab.write_golden(tmp_path / "g.h5", p)
    g = xentlab.read_golden(tmp_path / "g.h5")
    assert g.problem is g.problem
    assert g.problem.H.tobytes() == p.H.tobytes() and g.problem.W.tobytes() == p.W.tobytes()
    with h5py.File(tmp_path / "g.h5", "r") as f:
        held = sorted(k for k in f["reference"] if k not in ("token_rows", "vocab_rows"))
        assert sorted(g.reference) == held and len(g.reference) == len(held)
        for name in held:
            a = g.reference[name]
            assert a is g.reference[name]  # made once
            assert not a.flags.writeable and a.dtype == np.float64
            assert a.tobytes() == f["reference"][name][()].tobytes(), name
    assert "dz" not in g.reference and g.reference.get("dz") is None
    dW = g.reference["dW"]
    with pytest.raises(ValueError, match="read-only"):
        dW[0, 0] = 1.0
    del g  # the view keeps the golden's storage alive
    import gc

    gc.collect()
    assert dW.shape == (200, 8) and np.isfinite(dW).all()

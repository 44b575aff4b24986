"""The package imports and exposes the lab: catalog, problems, the reference's values and bounds."""

import numpy as np

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
    r = xentlab.reference(xentlab.Problem.linear(H, W, t, bias=np.zeros(V, np.float32)), tier="compensated")
    lnV = np.log(V)
    assert np.all(np.abs(r.loss - lnV) <= r.loss_bound + 2 ** -52 * lnV)
    assert np.all(np.abs(r.lse - lnV) <= r.lse_bound + 2 ** -52 * lnV)
    assert np.all(r.dW == 0) and r.dW.shape == (V, D)
    onehot = np.zeros((N, V)); onehot[np.arange(N), t] = 1
    db = (1.0 / V - onehot).sum(axis=0) / N
    assert np.all(np.abs(r.db - db) <= r.db_bound + 2 ** -52)
    assert r.dH.shape == (N, D) and r.dH_bound.shape == (N, D) and np.all(r.dH_bound >= 0)
    assert abs(r.reduced_loss - lnV) <= r.reduced_loss_bound + 2 ** -52 * lnV


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

"""The loss semantics beyond g = 1 and the batch's own mean, through the package: the upstream
gradient of reduction none and the caller-given normaliser (``num_items_in_batch``). Expected values
come from the mathematics applied to the reference of reduction sum (dL/dz_i = g_i·(p_i − e_t);
loss = Σ loss_i / n, gradients 1/n of the sum's), with the reference's certified bounds plus the
rounding of the test's own float64 arithmetic as the tolerance."""

import numpy as np
import pytest

import xentlab

from kernels import ce_fp32

U = 2.0**-53  # unit roundoff of float64


@pytest.fixture(scope="module")
def prob():
    return xentlab.problem("calibrated", N=24, V=300, D=16)


def _sum_reference(prob):
    return xentlab.reference(prob, {"reduction": "sum"}, dz=True)


def test_loss_spec_takes_a_normaliser_and_refuses_nonsense():
    s = xentlab.LossSpec(normalizer=100)
    assert s.normalizer == 100 and s.as_dict()["normalizer"] == 100
    assert "normalizer=100" in s.describe()
    assert xentlab.LossSpec().normalizer == 0
    with pytest.raises(TypeError, match="normalizer: expected an integer"):
        xentlab.LossSpec(normalizer=2.5)
    with pytest.raises(xentlab.InputError, match="normalizer must be >= 0"):
        xentlab.LossSpec(normalizer=-1)
    with pytest.raises(xentlab.InputError, match="reduction sum"):
        xentlab.LossSpec(normalizer=10, reduction="sum")
    with pytest.raises(xentlab.InputError, match="reduction none"):
        s.replace(reduction="none")


def test_random_upstream_is_the_commands(cli, tmp_path, prob):
    g = xentlab.random_upstream(24, 1)
    assert g.shape == (24,) and np.all(g * 8 == np.round(g * 8)) and g.min() >= -1 and g.max() <= 2
    assert not np.array_equal(g, xentlab.random_upstream(24, 2))
    r = cli(
        "golden",
        "--dataset",
        "calibrated",
        "-N",
        "24",
        "-V",
        "300",
        "-D",
        "16",
        "--reduction",
        "none",
        "--out",
        tmp_path / "cli.h5",
    )
    assert r.returncode == 0, r.stderr
    assert "upstream random, seed 1" in r.stdout
    cli_golden = xentlab.read_golden(tmp_path / "cli.h5")
    assert np.array_equal(cli_golden.upstream, g)
    xentlab.write_golden(tmp_path / "py.h5", prob, {"reduction": "none"}, upstream=g)
    py_golden = xentlab.read_golden(tmp_path / "py.h5")
    for name in ("loss", "dH", "dW", "db"):
        assert py_golden.reference[name].tobytes() == cli_golden.reference[name].tobytes(), name


def test_golden_with_upstream_gradient_holds_the_chain_rule(tmp_path, prob):
    g = xentlab.random_upstream(prob.N, 5)
    xentlab.write_golden(tmp_path / "g.h5", prob, {"reduction": "none"}, upstream=g)
    gold = xentlab.read_golden(tmp_path / "g.h5")
    assert np.array_equal(gold.upstream, g)
    valid = prob.targets != gold.spec.ignore_index
    assert np.array_equal(gold.covariates["grad_scale"], np.where(valid, g, 0.0))
    r1 = _sum_reference(prob)
    # dH_i = g_i · dH_i(sum): one float64 product, within both certified bounds.
    want = g[:, None] * r1.dH
    tol = gold.reference["dH_bound"] + np.abs(g)[:, None] * r1.dH_bound + U * np.abs(want)
    assert np.all(np.abs(gold.reference["dH"] - want) <= tol)
    # reduced = Σ g_i loss_i (float64 sum of N terms: γ_N·Σ|g loss|).
    terms = g * r1.loss
    n = prob.N
    gamma = n * U / (1 - n * U)
    tol = (
        gold.reduced_loss_bound + np.sum(np.abs(g) * r1.loss_bound) + gamma * np.sum(np.abs(terms))
    )
    assert abs(gold.reduced_loss - terms.sum()) <= tol
    # A golden file without it (g = 1) is another loss: its reduced loss is far outside.
    assert abs(r1.reduced_loss - terms.sum()) > 100 * tol
    with pytest.raises(xentlab.InputError, match="reduction none"):
        xentlab.write_golden(tmp_path / "m.h5", prob, {"reduction": "mean"}, upstream=g)
    with pytest.raises(xentlab.InputError, match="shape"):
        xentlab.write_golden(tmp_path / "s.h5", prob, {"reduction": "none"}, upstream=g[:-1])


def test_normaliser_divides_the_sum(tmp_path, prob):
    nv = int(np.sum(prob.targets != -100))
    n = 3 * nv + 1
    xentlab.write_golden(tmp_path / "n.h5", prob, {"normalizer": n})
    gold = xentlab.read_golden(tmp_path / "n.h5")
    assert gold.spec.normalizer == n and gold.upstream is None
    r1 = _sum_reference(prob)
    want = r1.loss.sum() / n
    gamma = prob.N * U / (1 - prob.N * U)
    tol = (
        gold.reduced_loss_bound
        + r1.loss_bound.sum() / n
        + gamma * np.abs(r1.loss).sum() / n
        + U * abs(want)
    )
    assert abs(gold.reduced_loss - want) <= tol
    w = r1.dW / n
    assert np.all(
        np.abs(gold.reference["dW"] - w)
        <= gold.reference["dW_bound"] + r1.dW_bound / n + U * np.abs(w)
    )


def test_audit_takes_chunk_width_upstream_and_normaliser(tmp_path):
    p = xentlab.problem("calibrated", N=16, V=300, D=16)
    none = xentlab.Problem.linear(
        p.H, p.W, p.targets, spec={"reduction": "none"}, name="calibrated-none"
    )
    res = xentlab.audit(
        datasets=[none],
        strategies=["naive", "chunked"],
        recipes=["fp32/fp32/fp32/fp32"],
        rows=0,
        chunk_tokens=3,
        upstream="random",
        out=tmp_path / "a.h5",
    )
    assert res.passed == 2, res.summary
    assert all(r["chunk_tokens"] == 3 and r["upstream"] == "random" for r in res.runs)
    with pytest.raises(xentlab.InputError, match="chunk_tokens must be an integer >= 0"):
        xentlab.audit(datasets=[none], chunk_tokens=-1)
    with pytest.raises(xentlab.InputError, match="needs reduction none"):
        xentlab.audit(
            datasets=[p], strategies=["naive"], recipes=["fp32/fp32/fp32/fp32"], upstream="random"
        )
    norm = xentlab.Problem.linear(
        p.H, p.W, p.targets, spec={"normalizer": 40}, name="calibrated-norm"
    )
    rn = xentlab.audit(
        datasets=[norm], strategies=["naive"], recipes=["fp32/fp32/fp32/fp32"], rows=0
    )
    assert rn.passed == 1 and "normalizer=40" in rn.runs[0]["spec"], rn.summary


def test_check_passes_the_normaliser_to_the_loss_function(cache_dir):
    p = xentlab.problem("calibrated", N=16, V=300, D=16)
    n = 3 * int(np.sum(p.targets != -100)) + 1
    pn = p.with_spec({"normalizer": n})

    def ce_normalised(H, W, targets, normalizer=0, **spec):  # the sum over the batch, divided by n
        loss, dH, dW = ce_fp32(H, W, targets, **{**spec, "reduction": "sum"})
        f = np.float32(1) / np.float32(normalizer)
        return np.float32(loss * f), dH * f, dW * f

    assert xentlab.check(ce_normalised, problem=pn, policy="fp32", cache_dir=cache_dir).passed
    # A kernel that takes PyTorch's keywords only (the normaliser swallowed by **_) divides by the
    # batch's own count: wrong by the factor n / n_valid.
    rep = xentlab.check(ce_fp32, problem=pn, policy="fp32", cache_dir=cache_dir)
    assert not rep.passed and not rep.output("dH").passed


def test_check_refuses_own_gradients_on_a_golden_with_upstream(tmp_path, prob, cache_dir):
    # The function cannot be given g, so gradients it computes itself are of Σ loss_i, not of
    # Σ g_i·loss_i: refused, naming the cause (autograd applies g; torch on the GPU machine).
    g = xentlab.random_upstream(prob.N, 5)
    xentlab.write_golden(tmp_path / "g.h5", prob, {"reduction": "none"}, upstream=g)
    gold = xentlab.read_golden(tmp_path / "g.h5")
    with pytest.raises(xentlab.InputError, match="upstream gradient"):
        xentlab.check(ce_fp32, problem=gold, policy="fp32", cache_dir=cache_dir)

    # Without gradients the per-token loss alone is judged (g does not enter the loss).
    def loss_only(H, W, targets, **spec):
        return ce_fp32(H, W, targets, **spec)[0]

    rep = xentlab.check(loss_only, problem=gold, policy="fp32", cache_dir=cache_dir)
    assert rep.output("loss").passed


def test_loss_spec_is_immutable_and_upstream_must_be_floats(tmp_path, prob):
    s = xentlab.LossSpec(normalizer=5)
    with pytest.raises(AttributeError, match="replace"):
        s.normalizer = -1
    assert s.normalizer == 5 and s.replace(normalizer=7).normalizer == 7
    for bad in (
        "random",
        np.arange(prob.N),
        np.ones(prob.N, dtype=bool),
        np.ones(prob.N, dtype=complex),
        np.array(["1"] * prob.N, dtype=object),
    ):
        with pytest.raises(TypeError):
            xentlab.write_golden(tmp_path / "u.h5", prob, {"reduction": "none"}, upstream=bad)
    # Values the kernels cannot take as the same g in fp32 are refused by the library, naming the
    # entry (the command's message).
    g = np.full(prob.N, 0.5)
    g[2] = 0.1
    with pytest.raises(xentlab.InputError, match=r"upstream\[2\]"):
        xentlab.write_golden(tmp_path / "u.h5", prob, {"reduction": "none"}, upstream=g)
    assert not (tmp_path / "u.h5").exists()

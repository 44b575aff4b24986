"""check() catches deliberately wrong loss kernels and passes a correct one; the assertion helper
raises with the report."""

import numpy as np
import pytest

import xentlab
import xentlab.testing

from kernels import ce_bf16_sumexp, ce_fp32, ce_smoothing_on_ignored


def test_a_correct_float32_kernel_passes_under_fp32(cache_dir):
    rep = xentlab.check(ce_fp32, problem="stories260k", policy="fp32", cache_dir=cache_dir)
    assert rep.passed, str(rep)
    assert [o.name for o in rep.outputs] == ["reduced_loss", "dH", "dW"]
    for o in rep.outputs:
        assert o.passed and o.dtype == "fp32" and 0 < o.ratio <= 1
        assert o.stats["normwise_rel_err"] < 1e-5
    w = rep.output("dW").worst
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir)
    row, col = w["index"]
    assert w["reference"] == g.reference["dW"][row, col]  # all vocabulary rows: J = V
    assert w["error"] == pytest.approx(abs(w["candidate"] - w["reference"]), rel=1e-12)
    assert "worst element per output" in str(rep) and w["element"] in str(rep)


def test_bf16_accumulation_of_the_sum_of_exponentials_is_caught(cache_dir):
    rep = xentlab.check(ce_bf16_sumexp, problem="stories260k", policy="fp32", cache_dir=cache_dir)
    assert not rep.passed
    bad = rep.output("reduced_loss")
    assert bad.status == "incorrect" and bad.ratio > 1


@pytest.fixture(scope="module")
def smoothed_ignored(cache_dir):
    """A problem with ignored rows and label smoothing 0.1 (fp32, so float32 kernels are judged
    on their arithmetic alone)."""
    return xentlab.cached_golden("part-ignored", N=32, V=2000, D=32, dtype="fp32", cache_dir=cache_dir,
                                 spec={"label_smoothing": 0.1})


def test_label_smoothing_on_ignored_rows_is_caught(smoothed_ignored):
    g = smoothed_ignored
    assert (g.problem.targets == -100).any() and g.spec.label_smoothing == 0.1
    ok = xentlab.check(ce_fp32, problem=g, policy="fp32")
    assert ok.passed, str(ok)
    rep = xentlab.check(ce_smoothing_on_ignored, problem=g, policy="fp32")
    assert not rep.passed
    dH = rep.output("dH")
    assert dH.status == "incorrect"
    token = dH.worst["index"][0]
    assert g.problem.targets[token] == -100  # the worst element is on an ignored row
    assert dH.worst["reference"] == 0.0


def test_per_token_losses_with_reduction_none(cache_dir):
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir, spec={"reduction": "none"})

    def per_token(H, W, targets, **spec):
        assert spec["reduction"] == "none"
        return ce_fp32(H, W, targets, **spec)

    rep = xentlab.check(per_token, problem=g, policy="fp32")
    assert rep.passed and rep.output("loss").shape == [256]


def test_assert_close_to_reference_raises_with_the_report(cache_dir):
    xentlab.testing.assert_close_to_reference(ce_fp32, problem="stories260k", policy="fp32", cache_dir=cache_dir)
    with pytest.raises(AssertionError) as e:
        xentlab.testing.assert_close_to_reference(ce_bf16_sumexp, problem="stories260k", policy="fp32",
                                                  cache_dir=cache_dir)
    assert "incorrect" in str(e.value) and "max e/tol" in str(e.value) and "worst element" in str(e.value)


def test_a_problem_made_from_arrays_is_checked(cache_dir):
    rng = np.random.default_rng(3)
    H = rng.standard_normal((16, 8)).astype(np.float32)
    W = rng.standard_normal((300, 8)).astype(np.float32)
    t = rng.integers(0, 300, 16)
    rep = xentlab.check(ce_fp32, problem=xentlab.Problem.linear(H, W, t), policy="fp32")
    assert rep.passed, str(rep)


def test_unusable_returns_are_refused(cache_dir):
    with pytest.raises(ValueError, match="expected a scalar"):
        xentlab.check(lambda H, W, t, **s: np.zeros(len(t), np.float32), cache_dir=cache_dir)
    with pytest.raises(ValueError, match="returned 5 values"):
        xentlab.check(lambda H, W, t, **s: (1.0, 2, 3, 4, 5), cache_dir=cache_dir)
    with pytest.raises(ValueError, match="framework"):
        xentlab.check(ce_fp32, framework="jax", cache_dir=cache_dir)


def test_missing_gradient_of_a_torch_loss_fails(cache_dir):
    torch = pytest.importorskip("torch")

    def detached_H(H, W, targets, ignore_index, label_smoothing, reduction, **_):
        z = H.detach().float() @ W.float().T
        return torch.nn.functional.cross_entropy(z, targets, ignore_index=ignore_index,
                                                 label_smoothing=label_smoothing, reduction=reduction)

    rep = xentlab.check(detached_H, framework="torch", policy="fp32", cache_dir=cache_dir)
    assert not rep.passed and rep.output("dH").status == "failed"


def test_torch_cross_entropy_passes_and_wrong_smoothing_fails(smoothed_ignored):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    def torch_ce(H, W, targets, ignore_index, label_smoothing, reduction, **_):
        return F.cross_entropy(H @ W.T, targets, ignore_index=ignore_index,
                               label_smoothing=label_smoothing, reduction=reduction)

    def smoothing_everywhere(H, W, targets, ignore_index, label_smoothing, reduction, **_):
        z = H @ W.T
        logp = torch.log_softmax(z, dim=-1)
        valid = targets != ignore_index
        nll = -logp.gather(1, targets.clamp(min=0)[:, None])[:, 0] * valid
        smooth = -logp.mean(dim=-1)  # applied to every row, ignored ones too
        loss = (1 - label_smoothing) * nll + label_smoothing * smooth
        return loss.sum() / valid.sum()

    assert xentlab.check(torch_ce, problem=smoothed_ignored, framework="torch", policy="fp32").passed
    assert not xentlab.check(smoothing_everywhere, problem=smoothed_ignored, framework="torch", policy="fp32").passed


@pytest.mark.parametrize("returned", [None, "2.7731771", True, 3, np.array([1, 2])])
def test_check_refuses_a_loss_that_is_no_number(returned):
    """numpy would coerce these into something that scores (a string even passed): refused."""
    with pytest.raises(TypeError, match="loss_fn returned a loss of type"):
        xentlab.check(lambda *a, **k: returned, problem="stories260k")

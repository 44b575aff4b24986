"""check() catches deliberately wrong loss kernels and passes a correct one; the assertion helper
raises with the report."""

import re

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
    assert bad.status == "failed" and bad.ratio > 1


@pytest.fixture(scope="module")
def smoothed_ignored(cache_dir):
    """A problem with ignored rows and label smoothing 0.1 (fp32, so float32 kernels are judged
    on their arithmetic alone)."""
    return xentlab.cached_golden(
        "part-ignored",
        N=32,
        V=2000,
        D=32,
        dtype="fp32",
        cache_dir=cache_dir,
        spec={"label_smoothing": 0.1},
    )


def test_label_smoothing_on_ignored_rows_is_caught(smoothed_ignored):
    g = smoothed_ignored
    assert (g.problem.targets == -100).any() and g.spec.label_smoothing == 0.1
    ok = xentlab.check(ce_fp32, problem=g, policy="fp32")
    assert ok.passed, str(ok)
    rep = xentlab.check(ce_smoothing_on_ignored, problem=g, policy="fp32")
    assert not rep.passed
    dH = rep.output("dH")
    assert dH.status == "failed"
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
    xentlab.testing.assert_close_to_reference(
        ce_fp32, problem="stories260k", policy="fp32", cache_dir=cache_dir
    )
    with pytest.raises(AssertionError) as e:
        xentlab.testing.assert_close_to_reference(
            ce_bf16_sumexp, problem="stories260k", policy="fp32", cache_dir=cache_dir
        )
    assert (
        "failed" in str(e.value) and "max e/tol" in str(e.value) and "worst element" in str(e.value)
    )


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
    with pytest.raises(ValueError, match="framework 'tensorflow': expected numpy, torch or jax"):
        xentlab.check(ce_fp32, framework="tensorflow", cache_dir=cache_dir)


def test_missing_gradient_of_a_torch_loss_fails(cache_dir):
    torch = pytest.importorskip("torch")

    def detached_H(H, W, targets, ignore_index, label_smoothing, reduction, **_):
        z = H.detach().float() @ W.float().T
        return torch.nn.functional.cross_entropy(
            z,
            targets,
            ignore_index=ignore_index,
            label_smoothing=label_smoothing,
            reduction=reduction,
        )

    rep = xentlab.check(detached_H, framework="torch", policy="fp32", cache_dir=cache_dir)
    assert not rep.passed and rep.output("dH").status == "failed"

    def no_graph(H, W, targets, ignore_index, label_smoothing, reduction, **_):
        with torch.no_grad():  # a kernel without autograd: no gradient at all
            return torch.nn.functional.cross_entropy(
                H.float() @ W.float().T,
                targets,
                ignore_index=ignore_index,
                label_smoothing=label_smoothing,
                reduction=reduction,
            )

    rep = xentlab.check(no_graph, framework="torch", policy="fp32", cache_dir=cache_dir)
    assert not rep.passed
    assert rep.output("dH").status == "failed" and rep.output("dW").status == "failed"


def test_torch_cross_entropy_passes_and_wrong_smoothing_fails(smoothed_ignored):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    def torch_ce(H, W, targets, ignore_index, label_smoothing, reduction, **_):
        return F.cross_entropy(
            H @ W.T,
            targets,
            ignore_index=ignore_index,
            label_smoothing=label_smoothing,
            reduction=reduction,
        )

    def smoothing_everywhere(H, W, targets, ignore_index, label_smoothing, reduction, **_):
        z = H @ W.T
        logp = torch.log_softmax(z, dim=-1)
        valid = targets != ignore_index
        nll = -logp.gather(1, targets.clamp(min=0)[:, None])[:, 0] * valid
        smooth = -logp.mean(dim=-1)  # applied to every row, ignored ones too
        loss = (1 - label_smoothing) * nll + label_smoothing * smooth
        return loss.sum() / valid.sum()

    assert xentlab.check(
        torch_ce, problem=smoothed_ignored, framework="torch", policy="fp32"
    ).passed
    assert not xentlab.check(
        smoothing_everywhere, problem=smoothed_ignored, framework="torch", policy="fp32"
    ).passed


@pytest.mark.parametrize("returned", [None, "2.7731771", True, 3, np.array([1, 2])])
def test_check_refuses_a_loss_that_is_no_number(returned):
    """numpy would coerce these into something that scores (a string even passed): refused."""
    with pytest.raises(TypeError, match="loss_fn returned a loss of type"):
        xentlab.check(lambda *a, **k: returned, problem="stories260k")


def _returning(change):
    """ce_fp32 with its return value (loss, dH, dW) changed by change."""
    return lambda H, W, targets, **spec: change(*ce_fp32(H, W, targets, **spec))


@pytest.mark.parametrize(
    "fn,message",
    [
        (
            _returning(lambda loss, dH, dW: (loss, dH[None], dW)),
            r"dH of shape \(1, 256, 64\); expected \(256, 64\) \(N, D\)",
        ),
        (
            _returning(lambda loss, dH, dW: (loss, dH.reshape(2, 128, 64), dW)),
            r"dH of shape \(2, 128, 64\); expected \(256, 64\)",
        ),
        (
            _returning(lambda loss, dH, dW: (loss, dH, dW.T)),
            r"dW of shape \(64, 512\); expected \(512, 64\) \(V, D\)",
        ),
        (
            _returning(
                lambda loss, dH, dW: {"reduced_loss": loss, "db": np.zeros((512, 1), np.float32)}
            ),
            r"db of shape \(512, 1\); expected \(512,\) \(V\)",
        ),
    ],
)
def test_outputs_of_another_shape_are_refused_naming_the_expected_one(cache_dir, fn, message):
    """A gradient with an extra leading dimension used to crash the worst-element report; no
    shape other than the problem's (or the golden file's sampled rows) is scored."""
    with pytest.raises(ValueError, match=message):
        xentlab.check(fn, problem="stories260k", policy="fp32", cache_dir=cache_dir)


def test_a_dict_with_a_scalar_loss_and_a_reduced_loss_is_refused(cache_dir):
    """A scalar "loss" is the reduced loss: beside a "reduced_loss" of its own, one of the two
    values would be dropped unjudged (a wrong reduced_loss of 99 passed under the right loss)."""
    fn = _returning(lambda loss, dH, dW: {"loss": loss, "reduced_loss": np.float32(99), "dH": dH})
    with pytest.raises(ValueError, match=r"both a scalar loss and a reduced_loss"):
        xentlab.check(fn, problem="stories260k", policy="fp32", cache_dir=cache_dir)


def test_a_per_token_loss_of_shape_N_by_1_is_refused(cache_dir):
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir, spec={"reduction": "none"})
    fn = _returning(lambda loss, dH, dW: (loss[:, None], dH, dW))
    with pytest.raises(ValueError, match=r"loss of shape \(256, 1\); expected \(256,\) \(N\)"):
        xentlab.check(fn, problem=g, policy="fp32")


@pytest.fixture(scope="module")
def sampled_golden(tmp_path_factory):
    """stories260k with 16 sampled token rows: references for the per-token loss, lse and dH on
    those rows; none for the reduced loss, dW, db."""
    path = tmp_path_factory.mktemp("sampled") / "g.h5"
    xentlab.write_golden(path, xentlab.problem("stories260k"), rows=16)
    return xentlab.read_golden(path)


def test_a_sampled_golden_judges_what_it_holds_and_skips_the_rest(sampled_golden):
    g = sampled_golden
    assert g.partial and g.S == 16 and g.reduced_loss is None and "dW" not in g.reference
    rep = xentlab.check(ce_fp32, problem=g, policy="fp32")
    assert rep.passed, str(rep)
    assert rep.output("dH").status == "passed" and rep.output("dH").shape == [16, 64]
    for name in ("reduced_loss", "dW"):
        o = rep.output(name)
        assert o.status == "not judged" and "token rows were sampled" in o.message, name
    # the same function's wrong twin is still caught on what the golden file holds
    assert not xentlab.check(ce_bf16_sumexp, problem=g, policy="fp32").passed


def test_requiring_what_a_golden_cannot_judge_is_refused_before_the_function_runs(sampled_golden):
    ran = []

    def fn(H, W, targets, **spec):
        ran.append(1)
        return ce_fp32(H, W, targets, **spec)

    with pytest.raises(
        ValueError,
        match=r"require: dW cannot be judged on .*: the golden file holds no "
        r"reference dW \(token rows were sampled\)",
    ):
        xentlab.check(fn, problem=sampled_golden, policy="fp32", require=["dH", "dW"])
    assert not ran
    with pytest.raises(
        ValueError, match=r"nothing loss_fn returned \(reduced_loss\) can be judged"
    ):
        xentlab.check(
            lambda H, W, t, **s: ce_fp32(H, W, t, **s)[0], problem=sampled_golden, policy="fp32"
        )


def test_a_forward_only_golden_judges_the_loss_and_skips_the_gradients(tmp_path):
    xentlab.write_golden(tmp_path / "fwd.h5", xentlab.problem("stories260k"), gradients=False)
    rep = xentlab.check(ce_fp32, problem=str(tmp_path / "fwd.h5"), policy="fp32")
    assert rep.passed, str(rep)
    assert rep.output("reduced_loss").status == "passed"
    assert (
        rep.output("dH").status == "not judged"
        and "not computed for this problem" in rep.output("dH").message
    )


def test_cached_golden_of_a_problem_file_follows_its_contents(tmp_path):
    """A problem file changed in place — same path, size and modification time — is a new
    problem: its golden file is written again, not served from the cache."""
    import os

    import h5py

    path = tmp_path / "p.h5"

    def write(seed):
        r = np.random.default_rng(seed)
        with h5py.File(path, "w") as f:
            f["H"] = r.standard_normal((8, 4)).astype(np.float32)
            f["W"] = r.standard_normal((30, 4)).astype(np.float32)
            f["targets"] = r.integers(0, 30, 8)

    write(1)
    first = xentlab.cached_golden(str(path), cache_dir=tmp_path / "cache")
    stat = os.stat(path)
    write(2)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(path).st_size == stat.st_size and os.stat(path).st_mtime_ns == stat.st_mtime_ns
    second = xentlab.cached_golden(str(path), cache_dir=tmp_path / "cache")
    with h5py.File(path, "r") as f:
        H = f["H"][()]
    assert second.problem.H.tobytes() == H.tobytes()
    assert first.problem.H.tobytes() != H.tobytes() and second.path != first.path
    assert (
        xentlab.cached_golden(str(path), cache_dir=tmp_path / "cache").path == second.path
    )  # cached again


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"framework": 1}, r"framework: expected a string, got int 1"),
        ({"tier": None}, r"tier: expected a string, got NoneType None"),
        ({"require": "dH"}, r"require: expected a list of names, got the string 'dH'"),
        ({"require": [1]}, r"require\[0\]: expected a name \(a string\), got int 1"),
        ({"implementation": 3}, r"implementation: expected a string, got int 3"),
    ],
)
def test_check_argument_types_are_named(cache_dir, kwargs, message):
    with pytest.raises(TypeError, match=message):
        xentlab.check(ce_fp32, problem="stories260k", cache_dir=cache_dir, **kwargs)
    with pytest.raises(TypeError, match=r"loss_fn: expected a function, got str"):
        xentlab.check("ce_fp32", problem="stories260k", cache_dir=cache_dir)


def test_a_memory_budget_below_the_estimate_is_refused_before_the_work(cache_dir):
    """memory_budget: below reading the golden file, refused before loss_fn runs; at exactly that
    figure (the refusal names it), refused by verify's estimate, before any output is judged."""
    path = xentlab.cached_golden("stories260k", cache_dir=cache_dir).path
    calls = []

    def fn(*args, **kwargs):
        calls.append(1)
        return ce_fp32(*args, **kwargs)

    with pytest.raises(ValueError, match=r"check of .* would hold an estimated") as e:
        xentlab.check(fn, problem=path, policy="fp32", memory_budget=1024)
    assert not calls and "(1024 bytes, as given)" in str(e.value)
    golden = int(re.search(r"estimated [0-9.]+ GiB \(([0-9]+) bytes\)", str(e.value)).group(1))
    # stories260k: V = 512, D = 64, fp32 W alone is 131072 bytes
    assert golden >= 4 * 512 * 64
    with pytest.raises(ValueError, match=r"verify of .* against .* would hold an estimated"):
        xentlab.check(fn, problem=path, policy="fp32", memory_budget=golden)
    assert calls == [1]


def test_a_memory_budget_beyond_the_machine_is_refused_by_every_entry_point(cache_dir):
    """A budget beyond the machine's memory and swap (2**50 bytes: 1 PiB) is refused before any
    work, by the reference as by check(); one outside int64 is refused naming the limit, not with
    a binding's signature error."""
    problem = xentlab.problem("calibrated", N=8, V=100, D=8)
    with pytest.raises(ValueError, match=r"exceeds this machine's memory and swap"):
        xentlab.reference(problem, memory_budget=2**50)
    with pytest.raises(ValueError, match=r"exceeds this machine's memory and swap"):
        xentlab.check(ce_fp32, problem="stories260k", cache_dir=cache_dir, memory_budget=2**50)
    with pytest.raises(ValueError, match=r"memory_budget must be below 2\*\*63"):
        xentlab.reference(problem, memory_budget=2**64)

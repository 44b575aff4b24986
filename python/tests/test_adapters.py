"""xentlab.adapters with numpy stand-ins of the libraries (fake_libraries.py): the golden problem's
loss spec reaches the library's own arguments (checked on the arguments recorded and by check()
against the certified reference), what a library cannot express is refused naming the option and
the library, a missing library is an ImportError naming its package, and importing xentlab
imports none of them. The real libraries on a GPU: test_adapters_gpu.py."""

import subprocess
import sys

import numpy as np
import pytest

import xentlab
import xentlab.adapters as xa

from fake_libraries import CALLS, install

N, V, D = 24, 300, 16
IGNORE = -1  # not PyTorch's default -100: an adapter that drops ignore_index is seen


def _problem(spec, bias=False):
    rng = np.random.default_rng(11)
    H = rng.standard_normal((N, D)).astype(np.float32)
    W = (rng.standard_normal((V, D)) * 0.5).astype(np.float32)
    t = rng.integers(0, V, N)
    t[::5] = IGNORE  # 5 of the 24 rows ignored
    b = (rng.standard_normal(V) * 0.1).astype(np.float32) if bias else None
    return xentlab.Problem.linear(H, W, t, bias=b, spec=dict(spec, ignore_index=IGNORE))


# What each adapter's library expresses (with the stand-in's signature), the spec options it is
# given here, and the library arguments they must arrive as.
CASES = {
    "torch_cross_entropy": (
        "torch",
        {},
        xa.torch_cross_entropy,
        {"label_smoothing": 0.1, "z_loss": 1e-3, "softcap": 3.0, "logit_scale": 0.5},
        True,
        {"label_smoothing": 0.1},
    ),
    "torch_linear_cross_entropy": (
        "torch",
        {},
        xa.torch_linear_cross_entropy,
        {"label_smoothing": 0.1},
        True,
        {"label_smoothing": 0.1},
    ),
    "liger_fused_linear_cross_entropy": (
        "liger",
        {},
        xa.liger_fused_linear_cross_entropy,
        {"label_smoothing": 0.1, "z_loss": 1e-3, "softcap": 3.0},
        True,
        {"label_smoothing": 0.1, "lse_square_scale": 1e-3, "softcap": 3.0},
    ),
    "cce_repository": (
        "cce",
        {"repository_version": True},
        xa.cce_linear_cross_entropy,
        {"z_loss": 1e-3, "softcap": 3.0},
        True,
        {"softcap": 3.0, "return_lse": True},
    ),
    "cce_pypi_25_1_1": (
        "cce",
        {"repository_version": False},
        xa.cce_linear_cross_entropy,
        {"softcap": 3.0},
        False,
        {"softcap": 3.0},
    ),
}
REDUCTIONS = {
    "mean": ({"reduction": "mean"}, "mean"),
    "sum": ({"reduction": "sum"}, "sum"),
    "none": ({"reduction": "none"}, "none"),
    # mean over 40 tokens (more than the 19 valid ones): the library's sum, divided by 40
    "normalizer": ({"reduction": "mean", "normalizer": 40}, "sum"),
}


def test_importing_xentlab_imports_no_library():
    code = (
        "import sys, xentlab, xentlab.adapters; "
        "print([m for m in ('torch', 'liger_kernel', 'cut_cross_entropy', 'jax') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", CASES)
def test_the_spec_reaches_the_library_and_the_loss_is_the_references(monkeypatch, case, reduction):
    library, variant, factory, spec, with_bias, expected = CASES[case]
    red_spec, library_reduction = REDUCTIONS[reduction]
    install(monkeypatch, library, **variant)
    p = _problem(dict(spec, **red_spec), bias=with_bias)
    adapter = factory()
    assert adapter.refusal(p) is None
    # The numpy stand-ins return the loss alone (no autograd): the loss is what is judged.
    loss_name = "loss" if reduction == "none" else "reduced_loss"
    rep = xentlab.check(adapter, problem=p, policy="fp32", framework="numpy", require=[loss_name])
    assert rep.passed, str(rep)
    assert rep.output(loss_name).passed
    assert adapter.version in rep.implementation
    name, args, kw = [c for c in CALLS if c[0] != "linear"][-1]
    assert kw["ignore_index"] == IGNORE
    assert kw["reduction"] == library_reduction
    for k, v in expected.items():
        assert kw[k] == v, (k, kw)
    H, W = p.H, p.W
    if name == "LigerFusedLinearCrossEntropyLoss":  # forward(lin_weight, _input, target)
        assert np.array_equal(args[0], W) and np.array_equal(args[1], H)
    elif name == "linear_cross_entropy":
        assert np.array_equal(args[0], H) and np.array_equal(args[1], W)
    if with_bias and name == "linear_cross_entropy":
        assert np.array_equal(kw["linear_bias" if "linear_bias" in kw else "bias"], p.bias)


def test_a_library_that_drops_an_argument_is_caught(monkeypatch):
    """A Liger stand-in that takes lse_square_scale but leaves the z-loss out fails the check."""
    install(monkeypatch, "liger", ignores_z_loss=True)
    p = _problem({"z_loss": 1e-2})
    rep = xentlab.check(
        xa.liger_fused_linear_cross_entropy(),
        p,
        "fp32",
        framework="numpy",
        require=["reduced_loss"],
    )
    assert not rep.passed and rep.output("reduced_loss").status == "failed"


REFUSALS = [
    # (library, variant, factory, spec, bias, logits, the option named)
    ("cce", {}, xa.cce_linear_cross_entropy, {"label_smoothing": 0.1}, False, False, "label_smoothing=0.1"),
    ("cce", {}, xa.cce_linear_cross_entropy, {"logit_scale": 2.0}, False, False, "logit_scale=2.0"),
    ("cce", {"repository_version": False}, xa.cce_linear_cross_entropy, {}, True, False, "bias: "),
    ("cce", {"repository_version": False}, xa.cce_linear_cross_entropy, {"z_loss": 1e-3}, False, False, "z_loss=0.001"),
    ("liger", {}, xa.liger_fused_linear_cross_entropy, {"logit_scale": 2.0}, False, False, "logit_scale=2.0"),
    ("liger", {}, xa.liger_fused_linear_cross_entropy, {}, False, True, "a logits problem"),
    ("torch", {}, xa.torch_linear_cross_entropy, {"softcap": 30.0}, False, False, "softcap=30.0"),
    ("torch", {}, xa.torch_linear_cross_entropy, {"z_loss": 1e-3}, False, False, "z_loss=0.001"),
    ("torch", {"with_linear_bias": False}, xa.torch_linear_cross_entropy, {}, True, False, "bias: "),
]  # fmt: skip


@pytest.mark.parametrize("library, variant, factory, spec, bias, logits, option", REFUSALS)
def test_what_a_library_cannot_express_is_refused(
    monkeypatch, library, variant, factory, spec, bias, logits, option
):
    install(monkeypatch, library, **variant)
    adapter = factory()
    if logits:
        rng = np.random.default_rng(2)
        p = xentlab.Problem.from_logits(
            rng.standard_normal((8, 50)).astype(np.float32), rng.integers(0, 50, 8), spec=spec
        )
    else:
        p = _problem(spec, bias=bias)
    why = adapter.refusal(p)
    assert why is not None and option in why and adapter.library in why
    with pytest.raises(xa.UnsupportedOption) as e:
        xentlab.check(adapter, problem=p, policy="fp32", framework="numpy")
    assert str(e.value) == why
    assert isinstance(e.value, ValueError)
    assert not [c for c in CALLS if c[0] != "linear"]  # refused before the library ran
    # the spec alone, without the problem
    assert option in (adapter.refusal(spec, bias=bias, logits=logits) or "")
    assert adapter.refusal(None) is None


def test_torch_cross_entropy_takes_a_logits_problem(monkeypatch):
    install(monkeypatch, "torch")
    rng = np.random.default_rng(5)
    t = rng.integers(0, 40, 12)
    t[3] = IGNORE
    p = xentlab.Problem.from_logits(
        (rng.standard_normal((12, 40)) * 3).astype(np.float32),
        t,
        spec={"ignore_index": IGNORE, "label_smoothing": 0.2, "softcap": 2.0},
    )
    rep = xentlab.check(
        xa.torch_cross_entropy(),
        problem=p,
        policy="fp32",
        framework="numpy",
        require=["reduced_loss"],
    )
    assert rep.passed, str(rep)


def test_a_missing_library_is_an_import_error_naming_its_package(monkeypatch):
    for module in ("torch", "torch.nn", "torch.nn.functional"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "liger_kernel", None)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", None)
    monkeypatch.setitem(sys.modules, "cut_cross_entropy", None)
    for factory, package in (
        (xa.torch_cross_entropy, "torch"),
        (xa.torch_linear_cross_entropy, "torch"),
        (xa.liger_fused_linear_cross_entropy, "liger-kernel"),
        (xa.cce_linear_cross_entropy, "cut-cross-entropy"),
    ):
        with pytest.raises(ImportError, match=f"pip install {package}") as e:
            factory()
        assert isinstance(e.value, xa.MissingLibrary) and factory.__name__ in str(e.value)
    assert set(xa.available()) == {
        "torch_cross_entropy",
        "torch_linear_cross_entropy",
        "liger_fused_linear_cross_entropy",
        "cce_linear_cross_entropy",
    }
    assert all(why and "pip install" in why for why in xa.available().values())


def test_a_torch_without_linear_cross_entropy_is_named(monkeypatch):
    install(monkeypatch, "torch", with_linear_cross_entropy=False)
    xa.torch_cross_entropy()  # F.cross_entropy is there
    with pytest.raises(xa.MissingLibrary, match="torch.nn.functional.linear_cross_entropy"):
        xa.torch_linear_cross_entropy()


def test_library_options_pass_through_and_spec_options_are_not_options(monkeypatch):
    install(monkeypatch, "liger")
    adapter = xa.liger_fused_linear_cross_entropy(accum_dtype="float32-token")
    adapter(*(_problem({}).arrays().values()), reduction="mean")
    assert CALLS[-1][2]["accum_dtype"] == "float32-token"
    with pytest.raises(TypeError, match="takes no option 'chunk_size'"):
        xa.liger_fused_linear_cross_entropy(chunk_size=4)
    for option in ("ignore_index", "lse_square_scale", "reduction"):
        with pytest.raises(TypeError, match=f"{option} comes from the golden problem"):
            xa.liger_fused_linear_cross_entropy(**{option: 1})
    install(monkeypatch, "cce")
    assert "filter_eps=None" in repr(xa.cce_linear_cross_entropy(filter_eps=None))
    with pytest.raises(TypeError, match="return_lse comes from the golden problem"):
        xa.cce_linear_cross_entropy(return_lse=True)


def test_check_takes_the_adapters_framework_by_default(monkeypatch):
    """framework=None: the adapter's own (torch); here set to numpy to run on the stand-in."""
    install(monkeypatch, "torch")
    adapter = xa.torch_cross_entropy()
    assert adapter.framework == "torch"
    adapter.framework = "numpy"
    rep = xentlab.check(adapter, problem=_problem({}), policy="fp32", require=["reduced_loss"])
    assert rep.passed and rep.implementation.endswith("(numpy)")

"""check(framework="jax"): jax arrays in, the loss out, gradients by jax.vjp with the golden file's
upstream gradient as the cotangent. Skipped where jax is not installed."""

import numpy as np
import pytest

import xentlab

jax = pytest.importorskip("jax", reason="jax is not installed (pip install jax: the CPU build)")
jnp = pytest.importorskip("jax.numpy")


def ce_jax(H, W, targets, ignore_index=-100, label_smoothing=0.0, reduction="mean", bias=None, **_):
    """The cross-entropy in float32 from the formulas of numerics/loss_spec.hpp (PyTorch's)."""
    z = H.astype(jnp.float32) @ W.astype(jnp.float32).T
    if bias is not None:
        z = z + bias.astype(jnp.float32)
    return _ce(z, targets, ignore_index, label_smoothing, reduction)


def _ce(z, targets, ignore_index, eps, reduction, lse_dtype=jnp.float32):
    valid = targets != ignore_index
    t = jnp.where(valid, targets, 0)
    m = jax.lax.stop_gradient(z.max(axis=1))
    lse = m + jnp.log(jnp.exp(z - m[:, None]).sum(axis=1).astype(lse_dtype).astype(jnp.float32))
    zt = jnp.take_along_axis(z, t[:, None], axis=1)[:, 0]
    loss_i = jnp.where(valid, lse - (1 - eps) * zt - eps / z.shape[1] * z.sum(axis=1), 0.0)
    if reduction == "none":
        return loss_i
    return loss_i.sum() if reduction == "sum" else loss_i.sum() / valid.sum()


def test_a_jax_loss_passes_with_gradients_from_vjp(cache_dir):
    rep = xentlab.check(ce_jax, "stories260k", "fp32", framework="jax", cache_dir=cache_dir)
    assert rep.passed, str(rep)
    assert [o.name for o in rep.outputs] == ["reduced_loss", "dH", "dW"]
    assert all(o.dtype == "fp32" for o in rep.outputs)
    assert rep.implementation.endswith("(jax)")


def test_the_lse_summed_in_bf16_is_caught(cache_dir):
    def bf16_sum(H, W, targets, ignore_index=-100, reduction="mean", **_):
        z = H @ W.T
        return _ce(z, targets, ignore_index, 0.0, reduction, lse_dtype=jnp.bfloat16)

    rep = xentlab.check(bf16_sum, "stories260k", "fp32", framework="jax", cache_dir=cache_dir)
    assert not rep.passed and rep.output("reduced_loss").status == "failed"


def test_the_upstream_gradient_is_the_cotangent(cache_dir):
    """Per-token losses (reduction none) on a golden file whose upstream gradient holds negatives
    and many values: dH and dW pass only when the vjp is taken with it, not with ones."""
    p = xentlab.problem("part-ignored", N=32, V=500, D=16, dtype="fp32")
    p = p.with_spec({"reduction": "none", "label_smoothing": 0.1})
    g_path = f"{cache_dir}/jax-upstream.h5"
    up = xentlab.random_upstream(p.N, seed=3)
    xentlab.write_golden(g_path, p, upstream=up, force=True)
    g = xentlab.read_golden(g_path)
    assert g.upstream is not None and (g.upstream < 0).any() and len(set(g.upstream)) > 5
    rep = xentlab.check(ce_jax, g, "fp32", framework="jax")
    assert rep.passed, str(rep)
    assert {o.name for o in rep.outputs} == {"loss", "dH", "dW"}


def test_bias_and_logits_problems_give_db_and_dz():
    rng = np.random.default_rng(4)
    H = rng.standard_normal((16, 8)).astype(np.float32)
    W = rng.standard_normal((64, 8)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    t = rng.integers(0, 64, 16)
    rep = xentlab.check(ce_jax, xentlab.Problem.linear(H, W, t, bias=b), "fp32", framework="jax")
    assert rep.passed and rep.output("db").passed, str(rep)

    def from_logits(z, targets, ignore_index=-100, reduction="mean", **_):
        return _ce(z.astype(jnp.float32), targets, ignore_index, 0.0, reduction)

    p = xentlab.Problem.from_logits((H @ W.T).astype(np.float32), t)
    rep = xentlab.check(from_logits, p, "fp32", framework="jax")
    assert rep.passed and rep.output("dz").passed, str(rep)


def test_bf16_inputs_give_bf16_gradients(cache_dir):
    g = xentlab.cached_golden("calibrated", N=16, V=512, D=32, cache_dir=cache_dir)
    assert g.problem.input_dtype == "bf16"
    seen = {}

    def spy(H, W, targets, **spec):
        seen["dtype"] = H.dtype
        return ce_jax(H, W, targets, **spec)

    rep = xentlab.check(spy, g, "bf16", framework="jax")
    assert seen["dtype"] == jnp.bfloat16
    assert rep.output("dH").dtype == "bf16" and rep.output("dW").dtype == "bf16"
    assert rep.output("reduced_loss").dtype == "fp32"


def test_float64_logits_without_x64_are_refused():
    if jax.config.jax_enable_x64:
        pytest.skip("jax_enable_x64 is on in this process")
    rng = np.random.default_rng(1)
    p = xentlab.Problem.from_logits(rng.standard_normal((4, 10)), rng.integers(0, 10, 4))
    with pytest.raises(ValueError, match="jax_enable_x64"):
        xentlab.check(lambda z, t, **s: z.sum(), p, framework="jax")

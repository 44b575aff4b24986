"""xentlab.adapters on the real libraries (PyTorch, Liger-Kernel, Cut Cross-Entropy) on a CUDA
device: every adapter that can be made runs on golden problems of each loss option (bf16, half
the targets ignored), its outputs come back in the problem's shapes and are judged under the bf16
policy, what the installed version cannot express is refused before it runs, and the plain
PyTorch loss with fp32 logits passes. The verdicts of the libraries are findings, not assertions:
each report is written as JSON (CheckReport.to_dict) into $XENTLAB_ADAPTER_RESULTS when set, with
one line per run in its summary.tsv. Skipped without torch or a CUDA device."""

import json
import os

import numpy as np
import pytest

import xentlab
import xentlab.adapters as xa

torch = pytest.importorskip("torch", reason="torch is not installed")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)"
)

N, V, D = 256, 32000, 64
OUT = os.environ.get("XENTLAB_ADAPTER_RESULTS")

CASES = {
    "mean": {},
    "label_smoothing": {"label_smoothing": 0.1},
    "none_upstream": {"reduction": "none"},
    "normalizer": {"normalizer": 2 * N},
    "z_loss_softcap": {"z_loss": 1e-4, "softcap": 30.0},
    "bias": {},
}

ADAPTERS = {
    "torch_cross_entropy": lambda: xa.torch_cross_entropy(),
    "torch_cross_entropy_fp32_logits": lambda: xa.torch_cross_entropy(logits_dtype=torch.float32),
    "torch_linear_cross_entropy": lambda: xa.torch_linear_cross_entropy(),
    "liger_fused_linear_cross_entropy": lambda: xa.liger_fused_linear_cross_entropy(),
    "cce_linear_cross_entropy": lambda: xa.cce_linear_cross_entropy(),
    "cce_linear_cross_entropy_no_filter": lambda: xa.cce_linear_cross_entropy(filter_eps=None),
}


@pytest.fixture(scope="module")
def goldens(tmp_path_factory):
    """One golden file per case: part-ignored (bf16, half the targets ignore_index) with the
    case's spec; the bias case adds a seeded bf16 bias; reduction none a random upstream."""
    import ml_dtypes

    folder = tmp_path_factory.mktemp("adapter-goldens")
    base = xentlab.problem("part-ignored", N=N, V=V, D=D)
    out = {}
    for case, spec in CASES.items():
        p = base.with_spec(spec)
        upstream = None
        if case == "bias":
            b = np.random.default_rng(9).standard_normal(V).astype(ml_dtypes.bfloat16)
            p = xentlab.Problem.linear(p.H, p.W, p.targets, bias=b, spec=p.spec)
        if case == "none_upstream":
            upstream = xentlab.random_upstream(N, seed=2)
        path = folder / f"{case}.h5"
        xentlab.write_golden(path, p, upstream=upstream)
        out[case] = xentlab.read_golden(path)
    return out


def _record(adapter_name, case, line, report=None):
    if not OUT:
        return
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "summary.tsv"), "a") as f:
        f.write(f"{adapter_name}\t{case}\t{line}\n")
    if report is not None:
        with open(os.path.join(OUT, f"{adapter_name}-{case}.json"), "w") as f:
            json.dump(report.to_dict(), f, indent=1, allow_nan=False)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ADAPTERS)
def test_a_library_loss_is_judged_on_the_gpu(goldens, name, case):
    try:
        adapter = ADAPTERS[name]()
    except xa.MissingLibrary as e:
        _record(name, case, f"missing: {e}")
        pytest.skip(str(e))
    g = goldens[case]
    why = adapter.refusal(g)
    if why:
        with pytest.raises(xa.UnsupportedOption) as e:
            xentlab.check(adapter, problem=g, policy="bf16", device="cuda")
        assert str(e.value) == why
        _record(name, case, f"refused: {why}")
        return
    try:
        rep = xentlab.check(adapter, problem=g, policy="bf16", device="cuda")
    except Exception as e:  # noqa: BLE001 - a library's own failure is recorded, then raised
        _record(name, case, f"error: {type(e).__name__}: {str(e)[:300]}")
        raise
    statuses = {o.name: o.status for o in rep.outputs}
    ratios = " ".join(f"{o.name}={o.status}({o.ratio:.3g})" for o in rep.outputs)
    _record(name, case, f"{'PASSED' if rep.passed else 'FAILED'}\t{ratios}", rep)
    loss = "loss" if case == "none_upstream" else "reduced_loss"
    want = {loss, "dH", "dW"} | ({"db"} if case == "bias" else set())
    assert set(statuses) == want, statuses
    assert all(s in ("passed", "failed", "inconclusive") for s in statuses.values()), str(rep)
    if name == "torch_cross_entropy_fp32_logits":  # the plain implementation of the bf16 recipe
        assert rep.passed, str(rep)

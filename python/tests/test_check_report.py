"""CheckReport.to_dict(): the findings of check() as plain JSON types, equal to the report's own."""

import json

import pytest

import xentlab

from kernels import ce_fp32, ce_smoothing_on_ignored


def _json_round_trip(d):
    """Strict JSON (no NaN or Infinity tokens) and back."""
    return json.loads(json.dumps(d, allow_nan=False))


def test_a_passing_report_as_json(cache_dir):
    rep = xentlab.check(ce_fp32, problem="stories260k", policy="fp32", cache_dir=cache_dir)
    d = rep.to_dict()
    assert _json_round_trip(d) == d
    assert d["schema"] == "xentlab.check/1" and d["passed"] is True and d["reason"] == rep.reason
    assert d["policy"] == {
        "description": rep.policy,
        "k": rep.k,
        "strictness": "default",
        "check": "both",
        "explicit": False,
    }
    assert d["baseline"] == {"backend": "cpu"}
    assert list(d["outputs"]) == ["reduced_loss", "dH", "dW"]
    for o in rep.outputs:
        out = d["outputs"][o.name]
        assert out["status"] == "passed" and out["deciding"] is None
        assert out["stats"] == o.stats and out["ratio"] == o.ratio
        assert out["shape"] == list(o.shape) and out["dtype"] == "fp32"
        v = rep.verify.output(o.name)
        assert out["differential"]["baseline"]["normwise"] == v.differential["baseline_normwise"]
        assert out["differential"]["status"] == v.differential["status"]
    w = d["outputs"]["dW"]["worst"]
    assert w["index"] == list(rep.output("dW").worst["index"]) and len(w["index"]) == 2
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir)
    prov = d["provenance"]
    assert prov["framework"] == "numpy" and prov["xentlab_version"] == xentlab.__version__
    assert prov["implementation"] == rep.implementation and "ce_fp32" in prov["implementation"]
    gd = prov["golden"]
    assert (gd["N"], gd["V"], gd["D"], gd["S"], gd["J"]) == (g.N, g.V, g.D, g.S, g.J)
    assert gd["path"] == g.path and gd["provenance"] == g.provenance
    assert gd["spec"] == g.spec.as_dict() and gd["upstream"] is False and gd["kind"] == "linear"


def test_a_failing_report_names_the_deciding_element_and_writes_infinity_as_text(cache_dir):
    """Label smoothing on ignored rows: dH's tolerance there is 0, so its ratio is infinite."""
    g = xentlab.cached_golden(
        "part-ignored",
        N=32,
        V=2000,
        D=32,
        dtype="fp32",
        cache_dir=cache_dir,
        spec={"label_smoothing": 0.1},
    )
    rep = xentlab.check(ce_smoothing_on_ignored, problem=g, policy="fp32", check="bound")
    assert rep.output("dH").ratio == float("inf")
    d = rep.to_dict()
    assert _json_round_trip(d) == d
    assert d["passed"] is False and d["reason"] == rep.reason
    dH = d["outputs"]["dH"]
    assert dH["status"] == "failed" and dH["ratio"] == "inf"
    v = rep.verify.output("dH")
    assert dH["deciding"]["element"] == v.element and dH["deciding"]["reference"] == 0.0
    assert d["baseline"] is None and d["policy"]["check"] == "bound"


def test_explicit_tolerances_run_no_baseline(cache_dir):
    rep = xentlab.check(ce_fp32, "stories260k", atol=1e-3, rtol=1e-3, cache_dir=cache_dir)
    d = rep.to_dict()
    assert d["policy"]["explicit"] is True and d["baseline"] is None


def test_a_skipped_output_is_in_the_dict(cache_dir):
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir)
    path = f"{cache_dir}/rows16.h5"
    xentlab.write_golden(path, g.problem, rows=16, force=True)
    rep = xentlab.check(ce_fp32, problem=path, policy="fp32")
    d = rep.to_dict()
    assert d["outputs"]["dW"]["status"] == "not judged" and d["outputs"]["dW"]["stats"] is None
    assert d["provenance"]["golden"]["S"] == 16
    with pytest.raises(TypeError):  # the converter refuses what JSON cannot hold
        from xentlab._report import _plain

        _plain({"x": object()})

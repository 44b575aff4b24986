"""The pytest plugin: options, cached golden fixtures, and findings in pytest's JUnit XML."""

import importlib.metadata
import os
import xml.etree.ElementTree as ET

import pytest

import xentlab  # imported before pytester's snapshot of sys.modules: never imported twice

HERE = os.path.dirname(os.path.abspath(__file__))
# An installed package registers the plugin by its entry point (pytest11); a build tree does not,
# and the inner pytest is then told to load it.
INSTALLED = any(e.name == "xentlab" for e in importlib.metadata.entry_points(group="pytest11"))
LOAD = () if INSTALLED else ("-p", "xentlab.pytest_plugin")

TESTS = """
import xentlab
from kernels import ce_fp32, ce_bf16_sumexp

def test_golden_is_cached(xentlab_golden):
    g = xentlab_golden("stories260k")
    assert g is xentlab_golden("stories260k") and g.N == 256 and g.path.endswith(".h5")

def test_policy_option(xentlab_policy):
    assert xentlab_policy == "fp32"

def test_correct(xentlab_check):
    rep = xentlab_check(ce_fp32)
    assert rep.policy.startswith("fp32:")

def test_wrong(xentlab_check):
    xentlab_check(ce_bf16_sumexp)
"""


def _run(pytester, *args):
    pytester.makepyfile(test_inner=TESTS)
    # the inner pytest runs in a subprocess from another folder: the package and kernels.py by
    # absolute paths
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(xentlab.__file__)))
    pytester._monkeypatch.setenv("PYTHONPATH", os.pathsep.join([package_root, HERE]))
    return pytester.runpytest_subprocess(*LOAD, *args)


# Any warning of pytest (record_property's "incompatible with junit_family 'xunit2'" among them)
# is an error of the inner run.
NO_PYTEST_WARNINGS = ("-W", "error::pytest.PytestWarning")


def _check_properties(ok, bad):
    assert ok["xentlab.passed"] == "True" and ok["xentlab.dW.status"] == "passed"
    assert float(ok["xentlab.dW.ratio"]) <= 1 and ok["xentlab.dW.worst"].startswith("dW[")
    assert bad["xentlab.passed"] == "False" and bad["xentlab.reduced_loss.status"] == "failed"
    assert float(bad["xentlab.reduced_loss.ratio"]) > 1


def test_fixtures_options_and_junit_xunit1(pytester, tmp_path):
    """junit_family xunit1: the findings are properties of each <testcase>."""
    xml = tmp_path / "junit.xml"
    cache = tmp_path / "cache"
    result = _run(
        pytester,
        "--xentlab-policy",
        "fp32",
        f"--xentlab-cache={cache}",
        f"--junitxml={xml}",
        "-o",
        "junit_family=xunit1",
        *NO_PYTEST_WARNINGS,
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*xentlab 0.*: policy fp32*", "*reduced_loss failed*"])
    result.stdout.no_fnmatch_line("*incompatible with junit_family*")
    assert any(p.suffix == ".h5" for p in cache.iterdir())  # the golden file was cached there
    cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}

    def props(name):
        return {p.get("name"): p.get("value") for p in cases[name].iter("property")}

    ok, bad = props("test_correct"), props("test_wrong")
    _check_properties(ok, bad)
    assert cases["test_wrong"].find("failure") is not None


def test_junit_xunit2_gets_suite_properties_without_warnings(pytester, tmp_path):
    """pytest's default junit_family, xunit2, has no properties in a <testcase>: the findings are
    properties of the <testsuite> named after the test, and no test warns."""
    xml = tmp_path / "junit.xml"
    result = _run(
        pytester,
        "--xentlab-policy",
        "fp32",
        f"--xentlab-cache={tmp_path}",
        f"--junitxml={xml}",
        *NO_PYTEST_WARNINGS,
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.no_fnmatch_line("*incompatible with junit_family*")
    root = ET.parse(xml).getroot()
    assert not [p for c in root.iter("testcase") for p in c.iter("property")]
    suite = {p.get("name"): p.get("value") for p in root.find("testsuite").iter("property")}

    def props(test):
        prefix = f"test_inner.py::{test}::"
        return {k[len(prefix) :]: v for k, v in suite.items() if k.startswith(prefix)}

    ok, bad = props("test_correct"), props("test_wrong")
    _check_properties(ok, bad)


def test_default_policy_is_the_problems_dtype(pytester, tmp_path):
    # without --xentlab-policy the fixture holds None and check() takes stories260k's dtype, fp32
    result = _run(pytester, f"--xentlab-cache={tmp_path}", "-k", "policy_option or correct")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*assert None == 'fp32'*"])


def test_bad_option_values_end_the_session_at_start_up(pytester):
    """One usage error at start-up, not one failure per test."""
    pytester.makepyfile("def test_nothing():\n    pass\n")
    for args, message in (
        (["--xentlab-strictness", "hard"], "expected default, strict or lenient"),
        (["--xentlab-policy", "bf17"], "--xentlab-policy bf17"),
    ):
        r = _run(pytester, *args)
        assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str() + r.stderr.str()
        assert message in r.stderr.str()
    cache_file = pytester.path / "not-a-folder"
    cache_file.write_text("x")
    r = _run(pytester, "--xentlab-cache", str(cache_file))
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "is a file, not a folder" in r.stderr.str()

"""pytest plugin of xentlab (entry point ``pytest11``; in a tree without the installed package:
``pytest -p xentlab.pytest_plugin``).

Options:
  --xentlab-policy P       the verify policy of xentlab_check (bf16, fp16, fp32 or a recipe;
                           default: the problem's input dtype)
  --xentlab-strictness S   default, strict or lenient
  --xentlab-cache DIR      folder of the cached golden files (default: pytest's cache folder,
                           .pytest_cache/d/xentlab-golden)

Fixtures:
  xentlab_golden   (session) factory: ``xentlab_golden("calibrated", N=64, V=4096)`` → the
                   cached :class:`xentlab.Golden` of a catalog problem (written once per cache)
  xentlab_policy   the policy given with --xentlab-policy (or None)
  xentlab_check    ``xentlab_check(loss_fn, problem=..., **options)``: xentlab.check with the
                   options above; records its findings (xentlab.passed, xentlab.policy, and per
                   output xentlab.<output>.status / .ratio / .normwise_rel_err / .worst) and
                   raises AssertionError with the report when an output fails.

Where the findings go in the JUnit XML (--junitxml) depends on ``junit_family``:
  xunit1, legacy   properties of the test's <testcase> (the test's user_properties, as
                   pytest's record_property would put them);
  xunit2           (pytest's default) whose schema has no properties in a <testcase>: properties
                   of the <testsuite>, each name prefixed with the test's node id,
                   ``<nodeid>::xentlab.dW.status``; pytest's "record_property is incompatible
                   with junit_family 'xunit2'" warning is not raised.
Without --junitxml they are the test's user_properties (for other reporting plugins).
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("xentlab", "xentlab: loss functions against the certified reference")
    group.addoption(
        "--xentlab-policy",
        default=None,
        help="verify policy of xentlab_check: bf16, fp16, fp32 or a recipe in/logits/accum/grad "
        "(default: the problem's input dtype)",
    )
    group.addoption("--xentlab-strictness", default="default", help="default, strict or lenient")
    group.addoption(
        "--xentlab-cache",
        default=None,
        help="folder of cached golden files (default: pytest's cache, d/xentlab-golden)",
    )


def pytest_configure(config):
    """Bad option values end the session at start-up with one usage error (not one failure per
    test): the strictness by name, the policy through the library's own parser, the cache folder
    when it names a file."""
    strictness = config.getoption("xentlab_strictness", default="default")
    if strictness not in ("default", "strict", "lenient"):
        raise pytest.UsageError(
            f"--xentlab-strictness {strictness}: expected default, strict or lenient"
        )
    cache = config.getoption("xentlab_cache", default=None)
    if cache and os.path.exists(cache) and not os.path.isdir(cache):
        raise pytest.UsageError(f"--xentlab-cache {cache}: is a file, not a folder")
    policy = config.getoption("xentlab_policy", default=None)
    if policy is not None:
        try:
            from . import _xentlab

            _xentlab.verify_policy_name_check(policy)
        except ImportError:
            return  # reported by the header; the tests that use the package fail on their own
        except ValueError as e:
            raise pytest.UsageError(f"--xentlab-policy {policy}: {e}") from None


def pytest_report_header(config):
    # The plugin is registered in every pytest run of the environment: a package that cannot load
    # (a missing system library) must not end a session that does not use it.
    try:
        import xentlab
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"xentlab: not loaded ({type(e).__name__}: {e})"
    return (
        f"xentlab {xentlab.__version__}: policy {config.getoption('xentlab_policy') or '(input dtype)'}, "
        f"strictness {config.getoption('xentlab_strictness')}"
    )


@pytest.fixture(scope="session")
def xentlab_cache_dir(request, tmp_path_factory) -> str:
    """The folder of the cached golden files."""
    given = request.config.getoption("xentlab_cache")
    if given:
        os.makedirs(given, exist_ok=True)
        return given
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        return os.fspath(cache.mkdir("xentlab-golden"))
    return os.fspath(tmp_path_factory.mktemp("xentlab-golden"))


@pytest.fixture(scope="session")
def xentlab_golden(xentlab_cache_dir):
    """Factory of cached golden problems: ``xentlab_golden(name="stories260k", **params)`` with the
    parameters of :func:`xentlab.cached_golden` (N, V, D, dtype, sigma, seed, params, spec); name
    is a catalog name or a problem file."""
    import xentlab

    memo = {}

    def get(name: str = "stories260k", **params):
        # A problem file may change during the session: cached_golden follows its contents, so
        # only catalog problems are also kept here.
        if isinstance(name, (str, os.PathLike)) and os.path.exists(name):
            return xentlab.cached_golden(name, cache_dir=xentlab_cache_dir, **params)
        key = (name, repr(sorted(params.items())))
        if key not in memo:
            memo[key] = xentlab.cached_golden(name, cache_dir=xentlab_cache_dir, **params)
        return memo[key]

    return get


@pytest.fixture
def xentlab_policy(request):
    """The --xentlab-policy value (None: the problem's input dtype)."""
    return request.config.getoption("xentlab_policy")


def _recorder(request):
    """record(name, value) for one test's findings: a testcase property (xunit1, legacy, or no
    JUnit XML written), else a suite property named after the test (xunit2: see the module
    docstring)."""
    junit = getattr(request.config.option, "xmlpath", None)
    if not junit or request.config.getini("junit_family") in ("xunit1", "legacy"):

        def record(name, value):
            request.node.user_properties.append((name, value))

        return record
    suite = request.getfixturevalue("record_testsuite_property")
    nodeid = request.node.nodeid

    def record_in_suite(name, value):
        suite(f"{nodeid}::{name}", value)

    return record_in_suite


@pytest.fixture
def xentlab_check(request, xentlab_golden, xentlab_policy):
    """``xentlab_check(loss_fn, problem="stories260k", **options)``: see the module docstring."""
    import xentlab

    strictness = request.config.getoption("xentlab_strictness")
    record_property = _recorder(request)

    def run(loss_fn, problem="stories260k", policy=None, **options):
        if isinstance(problem, str) and not os.path.exists(problem):
            problem = xentlab_golden(problem)
        options.setdefault("strictness", strictness)
        report = xentlab.check(loss_fn, problem=problem, policy=policy or xentlab_policy, **options)
        record_property("xentlab.passed", report.passed)
        record_property("xentlab.policy", report.policy)
        for o in report.outputs:
            record_property(f"xentlab.{o.name}.status", o.status)
            if o.stats:
                record_property(f"xentlab.{o.name}.ratio", f"{o.ratio:.6g}")
                record_property(
                    f"xentlab.{o.name}.normwise_rel_err", f"{o.stats['normwise_rel_err']:.6g}"
                )
            if o.worst:
                record_property(f"xentlab.{o.name}.worst", o.worst["element"])
        if not report.passed:
            raise AssertionError(f"{report.reason}\n{report}")
        return report

    return run

"""Assertions for test suites: a user's loss function against the certified reference."""

from __future__ import annotations

from typing import Any, Callable, Optional

from .check import CheckReport, check


def assert_close_to_reference(
    loss_fn: Callable, problem: Any = "stories260k", policy: Optional[str] = None, **options
) -> CheckReport:
    """Runs :func:`xentlab.check` (same arguments) and raises AssertionError whose message is
    the check's report (verify's table, the failing element, the worst element of every output)
    when any output fails; returns the report when every output passes."""
    report = check(loss_fn, problem=problem, policy=policy, **options)
    if not report.passed:
        raise AssertionError(f"{report.reason}\n{report}")
    return report

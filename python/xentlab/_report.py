"""The report of :func:`xentlab.check`: :class:`CheckReport` (what ``str()`` prints, and
:meth:`CheckReport.to_dict`, the same findings as plain JSON types) and :class:`OutputCheck`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from . import _xentlab as _x
from ._golden import VerifyReport


@dataclass
class OutputCheck:
    """One output of a check: ``status`` (verify's: passed, failed, inconclusive, not judged),
    ``stats`` (judge/stats.hpp's statistics, dict), ``ratio`` = max |e| / tolerance (the
    output passes when ratio ≤ k and, for the per-token loss, the bias test holds), and
    ``worst``: the element with the largest ratio — its index in the golden file's numbering
    (token or vocabulary row, column), candidate and reference values, |e| and tolerance."""

    name: str
    status: str
    message: str
    dtype: Optional[str]
    shape: list
    stats: Optional[dict]
    ratio: float
    worst: Optional[dict]

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass
class CheckReport:
    """What :func:`check` found: ``passed``, ``reason``, one :class:`OutputCheck` per output,
    the policy line, and ``verify``, the full verify report. ``str(report)`` is verify's table
    followed by the worst element of each output."""

    passed: bool
    reason: str
    policy: str
    k: float
    outputs: list
    verify: VerifyReport = field(repr=False)
    implementation: str = ""
    #: how the check ran: framework, strictness, check ("bound", "differential", "both"),
    #: baseline_backend (None: no baseline ran), explicit (atol/rtol given)
    settings: dict = field(default_factory=dict, repr=False)
    #: the golden problem: path, provenance, kind, N, V, D, S, J, input_dtype, spec, upstream
    golden: dict = field(default_factory=dict, repr=False)
    #: verify's verdict: "passed", "failed", "inconclusive" or "not judged" (a loss function that
    #: returns only the loss, where the golden file can check gradients, is not judged)
    verdict: str = ""

    def __bool__(self) -> bool:
        """``passed``: ``assert report`` holds only for a passed verdict."""
        return self.passed

    def output(self, name: str) -> OutputCheck:
        for o in self.outputs:
            if o.name == name:
                return o
        raise KeyError(name)

    def to_dict(self) -> dict:
        """The report as plain JSON types (dict, list, str, int, float, bool, None), for
        ``json.dump(report.to_dict(), f, allow_nan=False)``. A non-finite number is the string
        "nan", "inf" or "-inf" (strict JSON has none). Keys:

        - ``schema``: "xentlab.check/1"; ``passed`` (bool); ``verdict`` ("passed", "failed",
          "inconclusive", "not judged"); ``reason`` (verify's one line: why it passed or failed);
        - ``policy``: ``description`` (verify's policy line: recipe, tolerances), ``k``,
          ``strictness``, ``check`` ("bound", "differential" or "both"), ``explicit`` (atol/rtol);
        - ``baseline``: None when no differential baseline ran, else ``backend`` ("cpu", "cuda",
          "all", "auto") — each output's own baseline errors are in its ``differential``;
        - ``outputs``: by name (reduced_loss, loss, lse, dH, dW, db, dz, in verify's order), each
          ``status`` ("passed", "failed", "inconclusive", "not judged"), ``message``, ``dtype``,
          ``shape`` (list), ``ratio`` (max |e| / tolerance), ``bound_status``, ``stats``
          (judge/stats.hpp's statistics: max_abs_err, max_rel_err, normwise_rel_err, max_ulp,
          frac_ulp_le1, bias, max_ratio, … with their flat indices; None when not judged),
          ``worst`` (element, index (list), flat_index, candidate, reference, error, tolerance;
          or None), ``deciding`` (verify's failing element: element, flat_index, candidate,
          reference, error, tolerance; None when it passed) and ``differential`` (status,
          message, normwise, rel_q of the candidate, ``baseline`` {normwise, rel_q} of the
          emulated recipe, limit_normwise, limit_rel_q, quantile_compared);
        - ``provenance``: ``implementation``, ``framework``, ``xentlab_version``, ``golden``
          (path, provenance — the golden file's own line —, kind, N, V, D, S, J, input_dtype,
          spec, upstream: whether it holds a per-token upstream gradient)."""
        vo = {o.name: o for o in self.verify.outputs}
        outputs = {}
        for o in self.outputs:
            v = vo.get(o.name)
            df = dict(v.differential) if v is not None else {}
            differential = (
                {
                    "status": df.get("status", ""),
                    "message": df.get("message", ""),
                    "normwise": df.get("normwise"),
                    "rel_q": df.get("rel_q"),
                    "baseline": {
                        "normwise": df.get("baseline_normwise"),
                        "rel_q": df.get("baseline_rel_q"),
                    },
                    "limit_normwise": df.get("limit_normwise"),
                    "limit_rel_q": df.get("limit_rel_q"),
                    "quantile_compared": df.get("quantile_compared"),
                }
                if df
                else None
            )
            deciding = None
            if v is not None and v.element and o.status != "passed":
                deciding = {
                    "element": v.element,
                    "flat_index": v.index,
                    "candidate": v.candidate,
                    "reference": v.reference,
                    "error": v.error,
                    "tolerance": v.tolerance,
                }
            outputs[o.name] = {
                "status": o.status,
                "message": o.message,
                "dtype": o.dtype,
                "shape": list(o.shape),
                "ratio": o.ratio,
                "bound_status": v.bound_status if v is not None else "",
                "stats": o.stats,
                "worst": o.worst,
                "deciding": deciding,
                "differential": differential,
            }
        s = self.settings
        return _plain(
            {
                "schema": "xentlab.check/1",
                "passed": self.passed,
                "verdict": self.verdict,
                "reason": self.reason,
                "policy": {
                    "description": self.policy,
                    "k": self.k,
                    "strictness": s.get("strictness"),
                    "check": s.get("check"),
                    "explicit": s.get("explicit", False),
                },
                "baseline": (
                    None
                    if s.get("baseline_backend") is None
                    else {"backend": s["baseline_backend"]}
                ),
                "outputs": outputs,
                "provenance": {
                    "implementation": self.implementation,
                    "framework": s.get("framework"),
                    "xentlab_version": _x.__version__,
                    "golden": self.golden,
                },
            }
        )

    def __str__(self) -> str:
        lines = [
            self.verify.text.rstrip("\n"),
            "",
            f"worst element per output (golden file's numbering; ratio = |e| / tolerance, an output "
            f"passes at ratio <= k = {self.k:g}):",
        ]
        for o in self.outputs:
            if o.worst is None:
                lines.append(
                    f"  {o.name:<12} {o.status}: {o.message}"
                    if o.message
                    else f"  {o.name:<12} {o.status}"
                )
                continue
            w = o.worst
            lines.append(
                f"  {o.name:<12} {w['element']:<28} candidate {w['candidate']:.9g}  reference {w['reference']:.9g}"
                f"  |e| {w['error']:.3g}  tolerance {w['tolerance']:.3g}  ratio {o.ratio:.3g}  {o.status}"
            )
        return "\n".join(lines) + "\n"


def _plain(x):
    """x with every value a JSON type: numpy scalars and arrays as Python numbers and lists,
    tuples as lists, non-finite floats as "nan", "inf", "-inf"."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_plain(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        return f if np.isfinite(f) else ("nan" if f != f else ("inf" if f > 0 else "-inf"))
    if x is None or isinstance(x, str):
        return x
    raise TypeError(f"not a JSON value: {type(x).__name__}")

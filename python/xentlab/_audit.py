"""The audit from Python: ``audit`` calls the library function that ``xentlab audit`` calls
(python/src/bind_audit.cpp); ``strategies`` and ``default_recipes`` list the registry's. Errors
as in ``_core``."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from . import _xentlab as _x
from ._core import InputError, Problem, _int, _names, _path, _shown, _text, problem


@dataclass
class AuditResult:
    """The audit's result (harness/audit/audit.hpp): ``runs`` (one dict per strategy × recipe ×
    problem: problem, strategy, recipe, disposition, reason, max_ratio, outputs → statistics),
    ``verdict`` (rows of the verdict on "logits may be bf16 while accumulation must be fp32"), the
    counts (``measured``: runs with nothing found wrong whose recipe has no finite a-priori bound on
    the problem, not counted as passed), and ``summary``, the table ``xentlab audit`` prints."""

    runs: list
    verdict: list
    passed: int
    incorrect: int
    not_supported: int
    failed: int
    summary: str
    markdown: str
    measured: int = 0  # last: an AuditResult made by position before it existed still is

    def __str__(self) -> str:
        return self.summary

    def find(self, problem: str, recipe: str, strategy: str) -> dict:
        """The run of (problem, recipe, strategy); KeyError when there is none."""
        for r in self.runs:
            if (r["problem"], r["recipe"], r["strategy"]) == (problem, recipe, strategy):
                return r
        raise KeyError((problem, recipe, strategy))


def audit(
    problems: Optional[Sequence[str]] = None,
    datasets: Sequence[Any] = (),
    *,
    strategies: Sequence[str] = (),
    recipes: Sequence[str] = (),
    rows: int = 8,
    vocab_rows: int = 256,
    tokens: int = 16,
    hidden: int = 64,
    seed: int = 1,
    policy: str = "audit",
    tier: str = "auto",
    memory_budget: int = 0,
    out=None,
    force: bool = False,
    append: bool = False,
    chunk_tokens: int = 0,
    upstream: str = "ones",
    ranks: Optional[int] = None,
    local_strategy: Optional[str] = None,
    vocab_splits: Optional[int] = None,
) -> AuditResult:
    """Every strategy × recipe on a set of problems against the certified reference, on the CPU
    emulation (``xentlab audit --backend cpu``).

    problems: names of the embedded set (default: all of it when no datasets are given);
    datasets: catalog names, problem files or :class:`Problem` objects; strategies and recipes
    (default: every registered strategy, the default grid); rows / vocab_rows: the sub-batch;
    out: also write the results HDF5 file (docs/audit.md; an existing file only with force or
    append). chunk_tokens: token rows per chunk of chunked and checkpointed, and per token group
    of fused's backward (0 = their default; ``--chunk-tokens``); upstream: "ones" or "random",
    the upstream gradient of problems with reduction "none" (``--upstream``); both recorded per
    run. ranks: the vocabulary-parallel ranks P of vocab_parallel (``--ranks``: 1 to every
    problem's V), local_strategy: the strategy
    each of its ranks runs over its shard ("naive", "chunked", "checkpointed" or "fused";
    ``--local-strategy``, default "chunked"); given, ``strategies`` must name vocab_parallel
    (InputError otherwise, as the command), and its runs record ``ranks`` and ``local_strategy``.
    vocab_splits: the vocabulary splits P of vocab_chunked (``--vocab-splits``: 1 to every
    problem's V; None or 0 = the fewest whose logits slab fits 1 GiB, one split at the audit's
    sub-batches); given, ``strategies`` must name vocab_chunked, and its runs record
    ``vocab_splits``.
    The loss options are each problem's
    spec (a :class:`Problem` made with ``spec=LossSpec(normalizer=…)`` is audited with it). Raises InputError (ValueError) for unknown names, negative counts, an existing
    ``out`` without force/append (before the work), or when no run is supported; TypeError for a
    single string where a list of names is expected."""
    problems = None if problems is None else _names("problems", problems)
    strategies, recipes = _names("strategies", strategies), _names("recipes", recipes)
    if isinstance(datasets, str) or not isinstance(datasets, Iterable):
        raise TypeError(
            f"datasets: expected a list of catalog names, problem files or xentlab.Problem objects, got "
            f"{_shown(datasets)}"
            + (f" (write [{datasets!r}])" if isinstance(datasets, str) else "")
        )
    datasets = list(datasets)
    for i, d in enumerate(datasets):
        if not isinstance(d, (str, os.PathLike, Problem)):
            raise TypeError(
                f"datasets[{i}]: expected a catalog name, a problem file or a xentlab.Problem, got {_shown(d)}"
            )
    seed = _int("seed", seed, minimum=0)
    policy, tier = _text("policy", policy), _text("tier", tier)
    memory_budget = _int("memory_budget", memory_budget, minimum=0)
    for what, v in (
        ("rows", rows),
        ("vocab_rows", vocab_rows),
        ("tokens", tokens),
        ("hidden", hidden),
        ("chunk_tokens", chunk_tokens),
    ):
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, np.integer))
            or v < 0
            or (what in ("tokens", "hidden") and v < 1)
        ):
            raise InputError(
                f"{what} must be an integer >= {1 if what in ('tokens', 'hidden') else 0}"
                f"{' (0 = all)' if what in ('rows', 'vocab_rows') else ''}"
                f"{' (0 = the default)' if what == 'chunk_tokens' else ''}, got {v!r}"
            )
    upstream = _text("upstream", upstream)
    ranks = _int("ranks", ranks, optional=True)
    vocab_splits = _int("vocab_splits", vocab_splits, optional=True)
    if local_strategy is not None:
        local_strategy = _text("local_strategy", local_strategy)
    if out is not None and os.path.exists(_path(out, "out")) and not (force or append):
        raise InputError(
            f"{_path(out)} exists: pass force=True to replace it or append=True to add the runs"
        )
    ps = _x._AuditProblems()
    if problems is not None or not datasets:
        ps.add_default_set(seed, int(tokens), int(hidden), list(problems or []))
    for d in datasets:
        p = d if isinstance(d, Problem) else problem(d, seed=seed)
        ps.add(p.source, p.regime or p.source, p._c, p._c.spec)
    res = _x.run_audit(
        ps,
        strategies,
        recipes,
        "cpu",
        int(rows),
        int(vocab_rows),
        seed,
        policy,
        tier,
        memory_budget,
        None if out is None else _path(out),
        bool(force),
        bool(append),
        int(chunk_tokens),
        upstream,
        ranks,
        local_strategy,
        vocab_splits,
    )
    return AuditResult(**res)


def strategies() -> list:
    """The strategies of the default set (CPU emulation): those an audit without `strategies`
    runs. vocab_parallel and vocab_chunked are registered outside it and run when named
    (``audit(strategies=["vocab_parallel"], ranks=P, local_strategy=...)``,
    ``audit(strategies=["vocab_chunked"], vocab_splits=P)``)."""
    return _x.strategy_names()


def default_recipes() -> list:
    """The default recipe grid of the audit ("in/logits/accum/grad")."""
    return _x.default_recipe_grid()

"""The one place the analysis calls an experiment package's analysis hooks.

The packages' ``analysis.py`` modules import the analysis helpers (:mod:`analysis.findings`,
:mod:`analysis.fidelity`, :mod:`analysis.timelines`, :mod:`analysis.stats` ...); those never
call back into a package. Only this module, :mod:`analysis.figures`, :mod:`analysis.compare` and
the command line reach the packages, through :meth:`lab.registry.Registered.hooks`, so the
import graph has no cycle, the registry's run-time imports included
(tests/test_architecture.py). Every hook gets one :class:`lab.contract.Context`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from analysis.fidelity import COLUMNS, sampler_checks
from analysis.tables import read_table
from analysis.timelines import point_of, spec_timeline
from lab import registry
from lab.contract import Context


def findings(
    experiment: str,
    summary: pd.DataFrame,
    host: Mapping,
    replicates: pd.DataFrame | None = None,
    jobs=None,
    spans: pd.DataFrame | None = None,
) -> dict:
    """``{"experiment", "findings": [sentences], "tables": [{"caption", "columns", "rows"}],
    "headlines": [{"question", "answer"}], "data": {...}}``: the package's ``findings`` hook and,
    where it declares them (:class:`lab.contract.Analysis`), ``tables``, ``headlines`` (the
    report's first screen) and ``data`` (what its artefacts and the comparison of hosts read).
    Every hook gets one :class:`lab.contract.Context` of the summary, ``host``, ``replicates``,
    ``jobs`` (the points' job.json) and ``spans`` (the points' work spans, spans.csv).

    Raises:
        ValueError: for an experiment that is not registered.
        RegistryError: for a package without ``ANALYSIS``.
    """
    hooks = registry.get(experiment).hooks()
    ctx = Context(host, summary=summary, replicates=replicates, jobs=jobs or [], spans=spans)
    out = {"experiment": experiment, "findings": hooks.findings(ctx)}
    out["tables"] = hooks.tables(ctx) if hooks.tables else []
    out["headlines"] = _with_contention(hooks.headlines(ctx) if hooks.headlines else [], summary)
    out["data"] = hooks.data(ctx) if hooks.data else {}
    return out


def _with_contention(lines: list[dict], summary: pd.DataFrame) -> list[dict]:
    """Each headline of an experiment some of whose measured points were contended gets
    ``contended``: ``[k, n]``, k of its n measured points (status ok) contended, as summary.csv's
    ``contended`` flags them; the first screen says so beside the answer (:mod:`report.trust`),
    since a contended point can lose to one it would beat on an idle machine. A headline that
    answers without a measurement (``measured``: False, e.g. "not measured: no native bfloat16")
    gets none."""
    if summary is None or "contended" not in summary or "status" not in summary:
        return lines
    ok = summary[summary["status"] == "ok"]
    k = int(ok["contended"].fillna(False).astype(bool).sum())
    return [h if not k or h.get("measured", True) is False else {**h, "contended": [k, len(ok)]} for h in lines]


def checks(
    summaries: dict[str, pd.DataFrame | None],
    selfcheck: pd.DataFrame | None,
    ncpu: int,
    sample_hz: float,
    host: dict | None = None,
    folders: dict[str, Path] | None = None,
) -> pd.DataFrame:
    """Run every check: each registered experiment's (its summary, or None if it was not run,
    which gives ``n/a`` rows), then the sampler's. A package's ``fidelity`` hook gets a
    :class:`lab.contract.Context`: ``ctx.summary`` (or None), ``ctx.ncpu`` (``ncpu``),
    ``ctx.host`` (host.json: quota, SMT siblings) and, read on first use from the experiment's
    folder where ``folders`` names one, its other tables (``ctx.replicates``, ``ctx.spans``,
    ``ctx.samples``; None where the file is absent).

    Args:
        summaries: experiment -> summary table (``analysis.stats.summarise``).
        selfcheck: the self-check's metrics rows (``lab.selfcheck``) or None.
        ncpu: available CPUs of the host.
        sample_hz: the sampler's rate (samples/s).
        host: host.json.
        folders: experiment -> the folder of its tables (``results/<host>/<experiment>``).

    Returns:
        One row per check with columns :data:`COLUMNS`.

    Raises:
        ValueError: naming the experiment and the column, for a summary without a column its
            checks read.
    """
    rows = []
    facts = {**(host or {}), "available_cpus": ncpu}
    for name, exp in registry.experiments().items():
        check = exp.hooks().fidelity
        if check is None:
            continue
        try:
            rows += check(Context(facts, loader=_tables(name, (folders or {}).get(name)), summary=summaries.get(name)))
        except KeyError as exc:  # a column its checks read is missing: one line, not a traceback
            raise ValueError(
                f"{name}'s summary has no column {exc.args[0]!r}, which its checks read: not a summary.csv"
                f" of {name} as this lab's analysis writes it (a replicates.csv, an older lab's, or edited by"
                " hand); redo the analysis, which writes it again"
            ) from None
    rows += sampler_checks(selfcheck, ncpu, sample_hz, host)
    return pd.DataFrame(rows, columns=COLUMNS)


def _tables(experiment: str, folder: Path | None):
    """A :class:`~lab.contract.Context` loader of ``experiment``'s CSV tables in ``folder``
    (``spans`` -> ``spans.csv``); None for a table whose file is absent, and for the run's jobs
    and findings, which checks do not read."""

    def load(what: str):
        path = folder / f"{what}.csv" if folder is not None and what not in ("jobs", "findings") else None
        return read_table(path, experiment) if path is not None and path.exists() else None

    return load


def timeline_points(experiment: str, summary: pd.DataFrame) -> list[dict]:
    """Configuration points a timeline draws, each ``{key: value}`` in the declared key order,
    as the experiment's ``timeline_points`` hook chooses them (duplicates dropped).

    Raises:
        ValueError: for an experiment without a timeline.
    """
    spec_timeline(experiment)
    exp = registry.get(experiment)
    points, seen = [], set()
    for p in exp.hooks().timeline_points(Context({}, summary=summary)):
        p = point_of(p, exp.spec.keys)
        if tuple(p.values()) not in seen:
            seen.add(tuple(p.values()))
            points.append(p)
    return points

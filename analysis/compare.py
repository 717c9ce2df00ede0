"""Compare hosts: the same experiments measured on different machines (or CPU budgets).

A host directory (``results/<host>/``) is self-describing: ``host.json`` (machine fingerprint,
``schema_version``), ``config.yaml`` (the configuration it ran with) and, per experiment,
``replicates.csv`` (raw replicates) and ``summary.csv``. :func:`analysis.hosts.load_host`
reads one; :func:`compare_hosts` puts several side by side against a baseline host.

Per configuration point present on both hosts with the same parameters:

* ``ratio``: median of the host's metric replicates over the baseline host's (higher-is-better
  throughputs, so > 1 means faster), with a 95% percentile-bootstrap CI resampling both hosts
  independently (:func:`analysis.stats.ratio_ci`);
* a two-sided Mann-Whitney U test on the two hosts' replicates (``scipy.stats.mannwhitneyu``):
  ``faster``/``slower`` when p < :data:`ALPHA` and the CI excludes 1, else ``no significant
  difference``. With few replicates the test cannot reach significance at all: the smallest
  two-sided p of an exact test with n1 and n2 replicates is 2 / C(n1 + n2, n1) (e.g. 0.1 for
  3 vs 3), which the verdict then says;
* ``ratio_per_cpu``: the ratio with each host's median divided by its available CPUs, so a
  2-CPU and a 16-CPU host can be read together;
* no ratio is put at equal one-CPU speed. Measured on 19 pairs of quick runs of one 2-vCPU VM
  (``benchmarks/rate_transfer.py``, docs/benchmarks.md): a rate moved with the capacity probe's
  one-CPU speed (``capacity_1cpu_per_s``) at elasticities of 0.01 (the convoy's sleeping thread)
  to 0.66 by metric, never 1, and multiplying by the probe's speed ratio beside each point moved
  the two runs' ratios further from 1 (median ``|ln ratio|`` 0.034 to 0.069; 0.047 to 0.202
  where the probe's speed moved more than 10%). The figures that transfer between runs are each
  host's own speedups, on whole cores where it gives one (``speedup_norm``), which come along
  with the probe's ``capacity_1cpu_per_s`` and ``cpus_delivered`` beside the point;
  :func:`analysis.hosts.environment_table` gives each host's probe readings over its run, so a
  reader sees where the machines' speed differed.

Points that cannot be compared are kept with the reason, never silently joined or dropped: a
point measured on one host only, a point whose other parameters differ (e.g. ``cpu_iterations``),
an experiment missing on a host, a different results schema version. Parameters that may differ
(``repeats``, warm-up counts ...) are declared by each experiment (``free_params``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from analysis.hosts import HostResults, best_table, environment_table, load_host, point_key
from analysis.stats import ratio_ci
from lab import registry
from lab.declare import FREE_PARAMS, point_label

__all__ = ["ALPHA", "COLUMNS", "compare_experiment", "compare_hosts", "compare_values", "load_host", "package_tables"]

ALPHA = 0.05

#: Not parameters: measurement columns of replicates.csv (everything after ``repeat``).
_MEASURED_FROM = "repeat"

COLUMNS = [
    *("experiment", "point", "host", "baseline_host", "metric", "status", "reason"),
    *("n", "median", "ci_low", "ci_high", "available_cpus", "median_per_cpu"),
    *("speedup", "speedup_ci_low", "speedup_ci_high", "best"),
    *("speedup_norm", "speedup_norm_ci_low", "speedup_norm_ci_high", "capacity_1cpu_per_s", "cpus_delivered"),
    *("ratio", "ratio_ci_low", "ratio_ci_high", "ratio_per_cpu", "mannwhitney_u", "p_value", "verdict"),
]


def _canonical(value) -> str:
    """One text form per value: 2000000, 2000000.0 and "2000000" are the same parameter (a column
    with an empty cell reads as float in files written before typed tables)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(int(f)) if f.is_integer() else repr(f)


def _params(reps: pd.DataFrame, exp: str) -> dict[tuple, dict]:
    """Point key -> the other parameter values its ok point rows ran with (the free ones aside)."""
    keys = list(registry.get(exp).spec.keys)
    free = FREE_PARAMS | registry.get(exp).spec.free_params
    cols = list(reps.columns)
    start = cols.index("experiment") + 1 if "experiment" in cols else 0
    stop = cols.index(_MEASURED_FROM) if _MEASURED_FROM in cols else len(cols)
    params = [c for c in cols[start:stop] if c not in keys and c not in free]
    rows = reps[reps["role"] == "point"] if "role" in reps else reps
    # parameters of ok rows only: a failure record has the keys but no other parameter
    rows = rows[rows["status"] == "ok"]
    out = {}
    for k, grp in rows.groupby(keys, sort=False):
        first = grp.iloc[0]
        out[point_key(k if isinstance(k, tuple) else (k,))] = {
            c: _canonical(first[c]) for c in params if pd.notna(first[c])
        }
    return out


def _ok_values(reps: pd.DataFrame, keys: list[str]) -> dict[tuple, np.ndarray]:
    """Point key -> the metric values of its ``ok`` point replicates."""
    ok = reps[reps["status"] == "ok"]
    if "role" in ok:
        ok = ok[ok["role"] == "point"]
    return {
        point_key(k if isinstance(k, tuple) else (k,)): g["value"].to_numpy(dtype=float)
        for k, g in ok.groupby(keys, sort=False)
    }


def min_two_sided_p(n1: int, n2: int) -> float:
    """Smallest two-sided p-value an exact Mann-Whitney U test can give with n1 and n2
    replicates: both extreme orderings, 2 / C(n1 + n2, n1)."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def compare_values(base: np.ndarray, other: np.ndarray) -> dict:
    """Ratio of medians (other / base) with its bootstrap CI, and a Mann-Whitney U test.

    Returns:
        ``ratio``, ``ratio_ci_low``, ``ratio_ci_high``, ``mannwhitney_u``, ``p_value``,
        ``verdict`` (``faster``, ``slower``, ``no significant difference``) and ``reason``.
    """
    base, other = np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    ratio = float(np.median(other) / np.median(base))
    lo, hi = ratio_ci(other, base)
    u, p = stats.mannwhitneyu(other, base, alternative="two-sided")
    floor = min_two_sided_p(len(other), len(base))
    # the floor first: with ties scipy falls back to the normal approximation, whose p can
    # undercut what an exact test allows (3 vs 3 all tied apart: p = 0.047, exact floor 0.1)
    if floor < ALPHA and p < ALPHA and math.isfinite(lo) and (lo > 1 or hi < 1):
        verdict, reason = ("faster" if ratio > 1 else "slower"), f"p = {p:.2g} < {ALPHA}"
    elif floor >= ALPHA:
        verdict = "no significant difference"
        reason = f"too few replicates for a test at {ALPHA}: {len(other)} vs {len(base)} give p >= {floor:.2g}"
    else:
        verdict, reason = "no significant difference", f"p = {p:.2g}" + ("" if p >= ALPHA else ", CI includes 1")
    stats_ = {"ratio": ratio, "ratio_ci_low": lo, "ratio_ci_high": hi, "mannwhitney_u": float(u), "p_value": float(p)}
    return {**stats_, "verdict": verdict, "reason": reason}


class _Experiment:
    """What comparing one experiment needs, read once: keys, each host's parameters and values."""

    def __init__(self, exp: str, hosts: list[HostResults], baseline: HostResults) -> None:
        self.exp, self.baseline = exp, baseline
        self.keys = list(registry.get(exp).spec.keys)
        self.present = [h for h in hosts if exp in h.summaries]
        self.params = {h.name: _params(h.replicates[exp], exp) for h in self.present}
        self.values = {h.name: _ok_values(h.replicates[exp], self.keys) for h in self.present}
        base = baseline.summaries.get(exp)
        self.base_idx = {point_key(r[self.keys]): r for _, r in base.iterrows()} if base is not None else {}

    def label(self, values) -> str:
        return point_label(dict(zip(self.keys, values)))

    def incomparable(self, h: HostResults, k: tuple, s: pd.Series) -> str:
        """Why point ``k`` of host ``h`` cannot be compared with the baseline host ("" if it can)."""
        b = self.baseline
        mine, theirs = h.host.get("schema_version"), b.host.get("schema_version")
        if mine != theirs:
            mine, theirs = (v if v is not None else "none recorded" for v in (mine, theirs))
            return f"results schema version {mine} on {h.name}, {theirs} on {b.name}"
        if k not in self.base_idx:
            return f"point measured on {h.name} only (not in {b.name}'s grid)"
        if s.get("status") != "ok" or self.base_idx[k].get("status") != "ok":
            return f"status {s.get('status')} on {h.name}, {self.base_idx[k].get('status')} on {b.name}"
        if pd.isna(s.get("median")) or pd.isna(self.base_idx[k].get("median")):
            return "no median to compare: its summary has none (a point its experiment summarises otherwise)"
        mine, theirs = self.params[h.name].get(k, {}), self.params[b.name].get(k, {})
        diff = [f"{c} {mine[c]} vs {theirs[c]}" for c in mine if c in theirs and mine[c] != theirs[c]]
        only = sorted(set(mine) ^ set(theirs))
        if only:
            diff.append("parameter recorded on one host only: " + ", ".join(only))
        return ("other parameters differ: " + "; ".join(diff)) if diff else ""

    def own(self, h: HostResults, s: pd.Series) -> dict:
        """What one summary row of host ``h`` says of itself, against no other host: the point,
        its median, interval and unit, its own speedup (and on whole cores), its capacity."""
        return {
            "experiment": self.exp,
            "point": self.label(s[self.keys]),
            "host": h.name,
            "baseline_host": self.baseline.name,
            **{c: s.get(c) for c in ("metric", "n", "median", "ci_low", "ci_high", "best")},
            "available_cpus": h.cpus,
            "median_per_cpu": s["median"] / h.cpus,
            **{c: s.get(c) for c in ("speedup", "speedup_ci_low", "speedup_ci_high")},
            **{c: s.get(c) for c in ("speedup_norm", "speedup_norm_ci_low", "speedup_norm_ci_high")},
            **{c: s.get(c) for c in ("capacity_1cpu_per_s", "cpus_delivered")},
        }

    def row(self, h: HostResults, s: pd.Series) -> dict:
        """The comparison row of one summary row of host ``h``."""
        k = point_key(s[self.keys])
        row = self.own(h, s)
        if h is self.baseline:
            return {**row, "status": "baseline", "reason": ""}
        reason = self.incomparable(h, k, s)
        mine_v, base_v = self.values[h.name].get(k, np.array([])), self.values[self.baseline.name].get(k, np.array([]))
        if not reason and (len(mine_v) < 2 or len(base_v) < 2):
            reason = f"fewer than 2 ok replicates ({len(mine_v)} vs {len(base_v)})"
        if reason:
            return {**row, "status": "not comparable", "reason": reason}
        cmp = compare_values(base_v, mine_v)
        cmp["ratio_per_cpu"] = cmp["ratio"] * self.baseline.cpus / h.cpus
        return {**row, "status": "compared", **cmp}

    def baseline_only(self, h: HostResults) -> list[dict]:
        """Points of the baseline host's grid that host ``h`` did not measure."""
        mine = {point_key(r[self.keys]) for _, r in h.summaries[self.exp].iterrows()}
        return [
            {
                "experiment": self.exp,
                "point": self.label(k),
                "host": h.name,
                "baseline_host": self.baseline.name,
                "status": "not comparable",
                "reason": f"point measured on {self.baseline.name} only (not in {h.name}'s grid)",
            }
            for k in self.base_idx
            if k not in mine
        ]


def compare_experiment(exp: str, hosts: list[HostResults], baseline: HostResults) -> pd.DataFrame:
    """One row per (point, host) of experiment ``exp`` (columns :data:`COLUMNS`).

    ``status`` is ``compared`` (ratio and test against the baseline host), ``baseline`` (the
    baseline host's own row), or ``not comparable`` with ``reason``.
    """
    c = _Experiment(exp, hosts, baseline)
    rows = [
        {
            "experiment": exp,
            "point": "",
            "host": h.name,
            "status": "not comparable",
            "reason": h.missing.get(exp, f"{exp} missing on {h.name}"),
        }
        for h in hosts
        if exp not in h.summaries
    ]
    for h in c.present:
        for _, s in h.summaries[exp].iterrows():
            if baseline not in c.present:
                why = f"{exp} missing on the baseline host {baseline.name}"
                rows.append({**c.own(h, s), "status": "not comparable", "reason": why})
            else:
                rows.append(c.row(h, s))
        if h is not baseline and baseline in c.present:
            rows += c.baseline_only(h)
    return pd.DataFrame(rows, columns=COLUMNS)


def compare_hosts(hosts: list[HostResults], baseline: str, experiments: list[str]) -> dict[str, pd.DataFrame]:
    """Every comparison table: ``environment``, ``comparison`` (all experiments, :data:`COLUMNS`),
    ``best``.

    Raises:
        ValueError: fewer than 2 hosts, duplicate host names, or ``baseline`` not among them.
    """
    names = [h.name for h in hosts]
    if len(hosts) < 2:
        raise ValueError(
            f"need at least 2 hosts to compare, got {names}: run the pipeline on another machine"
            " (--config host=NAME) and copy its results/NAME/ here, or list its directory under compare: dirs:"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"host names must be unique, got {names}")
    if baseline not in names:
        raise ValueError(f"baseline host {baseline!r} is not one of the compared hosts {names}")
    base = hosts[names.index(baseline)]
    comparison = pd.concat([compare_experiment(e, hosts, base) for e in experiments], ignore_index=True)
    # an experiment no host ran has no `best`: concat would make the column float (True -> 1.0)
    comparison["best"] = comparison["best"].astype("boolean")
    return {"environment": environment_table(hosts), "comparison": comparison, "best": best_table(hosts, experiments)}


def package_tables(hosts: list[HostResults], experiments: list[str]) -> dict[str, list[dict]]:
    """Each experiment's own comparison tables (its analysis ``compare_tables(hosts)``, where it
    has one): experiment -> ``[{"caption", "columns", "rows"}]`` of text."""
    out = {}
    for exp in experiments:
        tables = registry.get(exp).hooks().compare_tables
        if tables is not None:
            out[exp] = tables([h for h in hosts if exp in h.findings])
    return out

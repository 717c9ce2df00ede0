"""Compare hosts: the same experiments measured on different machines (or CPU budgets).

A host directory (``results/<host>/``) is self-describing: ``host.json`` (machine fingerprint,
``schema_version``), ``config.yaml`` (the configuration it ran with) and, per experiment,
``replicates.csv`` (raw replicates) and ``summary.csv``. :func:`load_host` reads one;
:func:`compare_hosts` puts several side by side against a baseline host.

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
  2-CPU and a 16-CPU host can be read together.

Points that cannot be compared are kept with the reason, never silently joined or dropped: a
point measured on one host only, a point whose other parameters differ (e.g. ``cpu_iterations``),
an experiment missing on a host, a different results schema version.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from analysis.load import DataError
from analysis.spec import SPECS
from analysis.stats import ratio_ci

ALPHA = 0.05

#: Parameters that may differ between hosts without making their medians incomparable.
FREE_PARAMS = {"repeats", "warmup", "warmup_steps", "warmup_epochs", "warmup_calls", "sample_hz", "timeout_s"}

#: Not parameters: measurement columns of replicates.csv (everything after ``repeat``).
_MEASURED_FROM = "repeat"

#: host.json fields of the environment table: (label, getter).
ENVIRONMENT = [
    ("CPU model", lambda h: h.get("cpu_model")),
    ("CPU vendor", lambda h: h.get("cpu_vendor")),
    ("logical CPUs", lambda h: h.get("logical_cpus")),
    ("physical cores", lambda h: h.get("physical_cores")),
    ("available CPUs", lambda h: h.get("available_cpus")),
    ("affinity", lambda h: ",".join(map(str, h.get("affinity") or []))),
    ("cgroup CPU quota", lambda h: h.get("cgroup_quota_cpus")),
    ("ISA flags", lambda h: " ".join(k for k, v in (h.get("isa") or {}).items() if v)),
    ("memory GiB", lambda h: h.get("memory_gib")),
    ("kernel", lambda h: h.get("kernel")),
    ("Python", lambda h: f"{h.get('python_implementation', '')} {h.get('python_version', '')}".strip()),
    ("GIL enabled", lambda h: h.get("gil_enabled")),
    ("torch", lambda h: h.get("torch_version")),
    ("ATen parallel backend", lambda h: (h.get("torch_parallel") or {}).get("aten_parallel_backend")),
    ("intra-op threads (default)", lambda h: (h.get("torch_parallel") or {}).get("at_num_threads")),
    ("inter-op threads (default)", lambda h: (h.get("torch_parallel") or {}).get("at_num_interop_threads")),
    ("OMP max threads", lambda h: (h.get("torch_parallel") or {}).get("omp_max_threads")),
    ("MKL max threads", lambda h: (h.get("torch_parallel") or {}).get("mkl_max_threads")),
    ("git commit", lambda h: (h.get("git_commit") or "")[:12] or None),
    ("schema version", lambda h: h.get("schema_version")),
]


@dataclass
class HostResults:
    """One host directory, loaded.

    Attributes:
        name: the host label (directory name).
        path: the directory.
        host: parsed host.json.
        replicates: experiment -> replicates.csv (only experiments whose files exist).
        summaries: experiment -> summary.csv.
        missing: experiment -> why it is absent (no directory, no summary).
    """

    name: str
    path: Path
    host: dict
    replicates: dict[str, pd.DataFrame] = field(default_factory=dict)
    summaries: dict[str, pd.DataFrame] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def cpus(self) -> int:
        return int(self.host.get("available_cpus") or 1)


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise DataError(path, "file is empty (no header, no rows)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(path, f"not a readable CSV file ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    return df


def load_host(path: str | Path, experiments: list[str]) -> HostResults:
    """Read ``host.json`` and every experiment's ``replicates.csv`` and ``summary.csv``.

    An experiment with neither file is recorded in ``missing``; one with only one of them, or
    with a file that cannot be read, is an error.

    Raises:
        DataError: naming the file: host.json missing or not JSON (or without
            ``available_cpus``), a CSV that is empty, corrupt or lacks the experiment's key
            columns, ``metric`` or ``value``, or one of the pair missing.
    """
    path = Path(path)
    hj = path / "host.json"
    if not hj.exists():
        raise DataError(hj, "missing: every host directory needs its host.json (machine fingerprint)")
    try:
        host = json.loads(hj.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(hj, f"not valid JSON ({exc})") from None
    if not isinstance(host, dict) or "available_cpus" not in host:
        raise DataError(hj, "no 'available_cpus' field: not a host fingerprint written by experiments.hostinfo")
    res = HostResults(name=path.name, path=path, host=host)
    for exp in experiments:
        rep, summ = path / exp / "replicates.csv", path / exp / "summary.csv"
        if not rep.exists() and not summ.exists():
            res.missing[exp] = f"{exp} was not run on {res.name} (no {exp}/replicates.csv, no {exp}/summary.csv)"
            continue
        for f in (rep, summ):
            if not f.exists():
                raise DataError(f, "missing while its sibling exists: the host directory is incomplete")
        reps, summary = _read_csv(rep), _read_csv(summ)
        for f, df, cols in ((rep, reps, ("metric", "value", "status", "role")), (summ, summary, ("median", "status"))):
            for col in (*SPECS[exp].keys, *cols):
                if col not in df.columns:
                    raise DataError(f, f"missing column (have: {', '.join(map(str, df.columns))})", column=col)
        res.replicates[exp], res.summaries[exp] = reps, summary
    return res


def _key(values) -> tuple:
    return tuple(str(v) for v in values)


def point_label(spec_keys, values) -> str:
    return " ".join(f"{k}={v}" for k, v in zip(spec_keys, values))


def _params(reps: pd.DataFrame, keys: list[str]) -> dict[tuple, dict]:
    """Point key -> the other parameter values its point rows ran with."""
    cols = list(reps.columns)
    start = cols.index("experiment") + 1 if "experiment" in cols else 0
    stop = cols.index(_MEASURED_FROM) if _MEASURED_FROM in cols else len(cols)
    params = [c for c in cols[start:stop] if c not in keys and c not in FREE_PARAMS]
    point_rows = reps[reps["role"] == "point"] if "role" in reps else reps
    # parameters of ok rows only: a failure record has the keys but no other parameter
    point_rows = point_rows[point_rows["status"] == "ok"] if "status" in point_rows else point_rows
    out = {}
    for k, grp in point_rows.groupby(keys, sort=False):
        k = k if isinstance(k, tuple) else (k,)
        out[_key(k)] = {c: _canonical(grp[c].iloc[0]) for c in params if pd.notna(grp[c].iloc[0])}
    return out


def _canonical(value) -> str:
    """One text form per value: 2000000, 2000000.0 and "2000000" are the same parameter (a column
    with an empty cell reads as float)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(int(f)) if f.is_integer() else repr(f)


def _ok_values(reps: pd.DataFrame, keys: list[str]) -> dict[tuple, np.ndarray]:
    """Point key -> the metric values of its ``ok`` point replicates."""
    ok = reps[reps["status"] == "ok"]
    if "role" in ok:
        ok = ok[ok["role"] == "point"]
    out = {}
    for k, grp in ok.groupby(keys, sort=False):
        out[_key(k if isinstance(k, tuple) else (k,))] = grp["value"].to_numpy(dtype=float)
    return out


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
    return {
        "ratio": ratio,
        "ratio_ci_low": lo,
        "ratio_ci_high": hi,
        "mannwhitney_u": float(u),
        "p_value": float(p),
        "verdict": verdict,
        "reason": reason,
    }


COLUMNS = [
    "experiment",
    "point",
    "host",
    "baseline_host",
    "metric",
    "status",
    "reason",
    "n",
    "median",
    "ci_low",
    "ci_high",
    "available_cpus",
    "median_per_cpu",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "best",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "ratio_per_cpu",
    "mannwhitney_u",
    "p_value",
    "verdict",
]


def compare_experiment(exp: str, hosts: list[HostResults], baseline: HostResults) -> pd.DataFrame:
    """One row per (point, host) of experiment ``exp`` (columns :data:`COLUMNS`).

    ``status`` is ``compared`` (ratio and test against the baseline host), ``baseline`` (the
    baseline host's own row), or ``not comparable`` with ``reason``.
    """
    keys = list(SPECS[exp].keys)
    rows = []
    present = [h for h in hosts if exp in h.summaries]
    params = {h.name: _params(h.replicates[exp], keys) for h in present}
    for h in hosts:
        if exp not in h.summaries:
            rows.append(
                {
                    "experiment": exp,
                    "point": "",
                    "host": h.name,
                    "status": "not comparable",
                    "reason": h.missing.get(exp, f"{exp} missing on {h.name}"),
                }
            )
    if baseline not in present:
        for h in present:
            for _, s in h.summaries[exp].iterrows():
                rows.append(
                    {
                        "experiment": exp,
                        "point": point_label(keys, s[keys]),
                        "host": h.name,
                        "status": "not comparable",
                        "reason": f"{exp} missing on the baseline host {baseline.name}",
                        "median": s["median"],
                        "n": s.get("n"),
                    }
                )
        return pd.DataFrame(rows, columns=COLUMNS)
    base_ver = baseline.host.get("schema_version")
    values = {h.name: _ok_values(h.replicates[exp], keys) for h in present}
    base_idx = {_key(r[keys]): r for _, r in baseline.summaries[exp].iterrows()}
    for h in present:
        summary = h.summaries[exp]
        for _, s in summary.iterrows():
            k = _key(s[keys])
            row = {
                "experiment": exp,
                "point": point_label(keys, s[keys]),
                "host": h.name,
                "baseline_host": baseline.name,
                "metric": s.get("metric"),
                "n": s.get("n"),
                "median": s["median"],
                "ci_low": s.get("ci_low"),
                "ci_high": s.get("ci_high"),
                "available_cpus": h.cpus,
                "median_per_cpu": s["median"] / h.cpus,
                "speedup": s.get("speedup"),
                "speedup_ci_low": s.get("speedup_ci_low"),
                "speedup_ci_high": s.get("speedup_ci_high"),
                "best": s.get("best"),
            }
            if h is baseline:
                rows.append({**row, "status": "baseline", "reason": ""})
                continue
            reason = ""
            if h.host.get("schema_version") != base_ver:
                reason = (
                    f"results schema version {h.host.get('schema_version')} on {h.name}, {base_ver} on {baseline.name}"
                )
            elif k not in base_idx:
                reason = f"point measured on {h.name} only (not in {baseline.name}'s grid)"
            elif s.get("status") != "ok" or base_idx[k].get("status") != "ok":
                reason = f"status {s.get('status')} on {h.name}, {base_idx[k].get('status')} on {baseline.name}"
            else:
                mine, theirs = params[h.name].get(k, {}), params[baseline.name].get(k, {})
                diff = [f"{c} {mine[c]} vs {theirs[c]}" for c in mine if c in theirs and mine[c] != theirs[c]]
                only = sorted(set(mine) ^ set(theirs))
                if only:
                    diff.append("parameter recorded on one host only: " + ", ".join(only))
                if diff:
                    reason = "other parameters differ: " + "; ".join(diff)
            if reason:
                rows.append({**row, "status": "not comparable", "reason": reason})
                continue
            mine_v = values[h.name].get(k, np.array([]))
            base_v = values[baseline.name].get(k, np.array([]))
            if len(mine_v) < 2 or len(base_v) < 2:
                rows.append(
                    {
                        **row,
                        "status": "not comparable",
                        "reason": f"fewer than 2 ok replicates ({len(mine_v)} vs {len(base_v)})",
                    }
                )
                continue
            cmp = compare_values(base_v, mine_v)
            rows.append({**row, "status": "compared", **cmp, "ratio_per_cpu": cmp["ratio"] * baseline.cpus / h.cpus})
        if h is not baseline:
            mine_keys = {_key(r[keys]) for _, r in summary.iterrows()}
            for k in base_idx:
                if k not in mine_keys:
                    rows.append(
                        {
                            "experiment": exp,
                            "point": point_label(keys, k),
                            "host": h.name,
                            "baseline_host": baseline.name,
                            "status": "not comparable",
                            "reason": f"point measured on {baseline.name} only (not in {h.name}'s grid)",
                        }
                    )
    return pd.DataFrame(rows, columns=COLUMNS)


def environment_table(hosts: list[HostResults]) -> pd.DataFrame:
    """One row per fingerprint field, one column per host, and ``differs``."""
    rows = []
    for label, get in ENVIRONMENT:
        values = [get(h.host) for h in hosts]
        rows.append(
            {"field": label, **{h.name: v for h, v in zip(hosts, values)}, "differs": len({str(v) for v in values}) > 1}
        )
    return pd.DataFrame(rows)


def best_table(hosts: list[HostResults], experiments: list[str]) -> pd.DataFrame:
    """The best configuration per host and group (``best`` in each summary: the highest
    speedup whose CI lies above 1, else the baseline), and whether it shifts between hosts.
    A group without any measured point reads ``none (<statuses>)``, e.g. ``none (skipped)``."""
    rows = []
    for exp in experiments:
        spec = SPECS[exp]
        for h in hosts:
            if exp not in h.summaries:
                continue
            s = h.summaries[exp]
            if "best" not in s:
                continue
            best = s[s["best"].astype(str) == "True"]
            for _, grp in s.groupby(list(spec.group), sort=False) if spec.group else [((), s)]:
                if not (grp["best"].astype(str) == "True").any():  # nothing measured in the group
                    statuses = ", ".join(sorted(set(grp["status"].astype(str))))
                    group = point_label(spec.group, grp.iloc[0][list(spec.group)]) if spec.group else "all points"
                    rows.append({"experiment": exp, "group": group, "host": h.name, "best": f"none ({statuses})"})
            for _, r in best.iterrows():
                group = point_label(spec.group, r[list(spec.group)]) if spec.group else "all points"
                rows.append(
                    {
                        "experiment": exp,
                        "group": group,
                        "host": h.name,
                        "best": point_label(
                            [k for k in spec.keys if k not in spec.group],
                            r[[k for k in spec.keys if k not in spec.group]],
                        ),
                        "speedup": r.get("speedup"),
                        "speedup_ci_low": r.get("speedup_ci_low"),
                        "speedup_ci_high": r.get("speedup_ci_high"),
                    }
                )
    df = pd.DataFrame(
        rows, columns=["experiment", "group", "host", "best", "speedup", "speedup_ci_low", "speedup_ci_high"]
    )
    df["shifts"] = df.groupby(["experiment", "group"])["best"].transform(lambda b: b.nunique() > 1)
    return df


def compare_hosts(hosts: list[HostResults], baseline: str, experiments: list[str]) -> dict[str, pd.DataFrame]:
    """Every comparison table: ``environment``, ``comparison`` (all experiments, :data:`COLUMNS`),
    ``best``.

    Raises:
        ValueError: fewer than 2 hosts, duplicate host names, or ``baseline`` not among them.
    """
    names = [h.name for h in hosts]
    if len(hosts) < 2:
        raise ValueError(f"need at least 2 hosts to compare, got {names}")
    if len(set(names)) != len(names):
        raise ValueError(f"host names must be unique, got {names}")
    if baseline not in names:
        raise ValueError(f"baseline host {baseline!r} is not one of the compared hosts {names}")
    base = hosts[names.index(baseline)]
    comparison = pd.concat([compare_experiment(e, hosts, base) for e in experiments], ignore_index=True)
    return {"environment": environment_table(hosts), "comparison": comparison, "best": best_table(hosts, experiments)}

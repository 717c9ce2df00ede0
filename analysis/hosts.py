"""Host directories: reading one, and the tables of the comparison that describe hosts.

A host directory (``results/<host>/``) holds ``host.json`` and, per experiment, ``replicates.csv``
and ``summary.csv`` (docs/csv-schema.md). :func:`load_host` reads one with typed columns
(:func:`analysis.tables.read_table`); :func:`environment_table` puts the fingerprints side by
side and :func:`best_table` each host's best configuration per group.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.tables import DataError, read_table
from lab import registry
from lab.declare import point_label
from lab.fileio import read_findings
from lab.host import Host, cpu_count_problem


@dataclass
class HostResults:
    """One host directory, loaded.

    Attributes:
        name: the host label (directory name).
        path: the directory.
        host: its host.json as a :class:`lab.host.Host` (labelled by the directory name).
        replicates: experiment -> replicates.csv (only experiments whose files exist).
        summaries: experiment -> summary.csv.
        findings: experiment -> findings.json (where it exists).
        missing: experiment -> why it is absent (no directory, no summary).
    """

    name: str
    path: Path
    host: Host
    replicates: dict[str, pd.DataFrame] = field(default_factory=dict)
    summaries: dict[str, pd.DataFrame] = field(default_factory=dict)
    findings: dict[str, dict] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def cpus(self) -> int:
        """Available CPUs of the host (1 where host.json does not say)."""
        return int(self.host.get("available_cpus") or 1)


def compare_dirs(hosts: list[str] | None, dirs: list[str] | None, results: str = "results") -> list[str]:
    """The host directories ``snakemake compare`` reads (config ``compare``): ``results/<h>`` for
    each of ``hosts``, or, where none is listed, every ``results/<host>/`` with a host.json (the
    comparison's own ``results/compare`` left out); then each of ``dirs`` (copied from other
    machines). A directory reached twice (a listed one that is also under results/, by its real
    path) counts once. Paths as given, relative to the working directory."""
    if hosts:
        found = [f"{results}/{h}" for h in hosts]
    else:
        found = sorted(str(p.parent) for p in Path(results).glob("*/host.json") if p.parent.name != "compare")
    seen, unique = set(), []
    for d in found + [os.path.normpath(d) for d in dirs or []]:
        if os.path.realpath(d) not in seen:
            seen.add(os.path.realpath(d))
            unique.append(d)
    return unique


def compare_dirs_problem(dirs: list[str], baseline: str | None = None) -> str | None:
    """Why ``dirs`` (:func:`compare_dirs`) cannot be compared, in one line naming what was found
    and what to do, or None: a directory without a host.json, fewer than 2 directories, two of
    one name (a host is named by its directory) or a ``baseline`` that is not among them."""
    missing = [d for d in dirs if not Path(d, "host.json").is_file()]
    if missing:
        return (
            f"snakemake compare: {', '.join(missing)} has no host.json (not measured here?): measure it"
            " (--config host=NAME) or take it out of config compare.hosts / compare.dirs"
        )
    if len(dirs) < 2:
        return (
            f"snakemake compare needs at least 2 host directories with a host.json, found {len(dirs)}"
            f" ({', '.join(dirs) or 'none'}): measure another host (--config host=NAME), or list"
            " directories copied from other machines under config compare.dirs"
        )
    names = [Path(d).name for d in dirs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        same = ", ".join(d for d in dirs if Path(d).name in twice)
        return (
            f"snakemake compare: a host is named by its directory, and {', '.join(twice)} names more"
            f" than one ({same}): copy one to a directory of another name"
        )
    if baseline and baseline not in names:
        return (
            f"config key compare.baseline: {baseline!r} is not among the hosts compared ({', '.join(names)}):"
            " name one of them, or leave it out (this run's host label where it is compared, else the first)"
        )
    return None


def point_key(values) -> tuple:
    """A point's identity across hosts: its key values as text."""
    return tuple(str(v) for v in values)


def _read_host_json(path: Path) -> Host:
    hj = path / "host.json"
    if not hj.exists():
        raise DataError(hj, "missing: every host directory needs its host.json (machine fingerprint)")
    try:
        host = json.loads(hj.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(hj, f"not valid JSON ({exc})") from None
    if not isinstance(host, dict) or "available_cpus" not in host:
        raise DataError(hj, "no 'available_cpus' field: not a host fingerprint written by lab.hostinfo")
    if problem := cpu_count_problem(host["available_cpus"]):
        raise DataError(hj, problem)
    try:  # the host as every other reader sees it (lab.host.Host), labelled by its directory
        return Host(path.name, host)
    except ValueError as exc:
        raise DataError(hj, f"the directory name is no host label: {exc}") from None


#: The value of a key an older host's CSV lacks (a key the experiment gained after it was
#: measured): its points then match no point of a host that has the key, and the comparison
#: lists them as measured on one host only.
NOT_RECORDED = "not recorded"


def _fill_later_keys(df: pd.DataFrame, later) -> None:
    """Give ``df`` the columns of ``later`` (:attr:`lab.declare.Experiment.later_keys`) it
    lacks, as :data:`NOT_RECORDED`; any other missing key column is left for the caller's check."""
    for k in later:
        if k not in df.columns:
            df[k] = NOT_RECORDED


def load_host(path: str | Path, experiments: list[str]) -> HostResults:
    """Read ``host.json`` and every experiment's ``replicates.csv`` and ``summary.csv``.

    An experiment with neither file is recorded in ``missing``; one with only one of them, or
    with a file that cannot be read, is an error. A key the experiment gained after the host was
    measured (declared in ``later_keys``) reads :data:`NOT_RECORDED` in its tables.

    Raises:
        DataError: naming the file: host.json missing or not JSON (or without
            ``available_cpus``), a CSV that is empty, corrupt or lacks the experiment's key
            columns, ``metric`` or ``value``, or one of the pair missing; a findings.json that is
            not JSON or not of its schema (:func:`lab.fileio.read_findings`).
    """
    path = Path(path)
    res = HostResults(name=path.name, path=path, host=_read_host_json(path))
    for exp in experiments:
        rep, summ = path / exp / "replicates.csv", path / exp / "summary.csv"
        if not rep.exists() and not summ.exists():
            res.missing[exp] = f"{exp} was not run on {res.name} (no {exp}/replicates.csv, no {exp}/summary.csv)"
            continue
        for f in (rep, summ):
            if not f.exists():
                raise DataError(f, "missing while its sibling exists: the host directory is incomplete")
        reps, summary = read_table(rep, exp), read_table(summ, exp)
        keys, later = registry.get(exp).spec.keys, registry.get(exp).spec.later_keys
        for f, df, cols in ((rep, reps, ("metric", "value", "status", "role")), (summ, summary, ("median", "status"))):
            _fill_later_keys(df, later)
            for col in (*keys, *cols):
                if col not in df.columns:
                    raise DataError(f, f"missing column (have: {', '.join(map(str, df.columns))})", column=col)
        res.replicates[exp], res.summaries[exp] = reps, summary
        found = path / exp / "findings.json"
        if found.exists():
            try:
                res.findings[exp] = read_findings(found)
            except ValueError as exc:
                raise DataError(found, str(exc).removeprefix(f"{found}: ")) from None
    return res


#: Two hosts' probe readings differ (:func:`environment_table`) where one median exceeds the other
#: by more than this factor.
PROBE_DIFFERS = 1.10

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


#: The capacity probe's readings in the environment table: (label, summary.csv column, divisor, digits).
PROBE_ROWS = (
    ("one CPU's speed, capacity probe (M loop iterations/s; median, range over points)", "capacity_1cpu_per_s", 1e6, 1),
    ("CPUs delivered with all busy, capacity probe (median, range over points)", "delivered_cpus", 1.0, 2),
)


def probe_readings(h: HostResults) -> dict[str, pd.Series]:
    """What the capacity probe read over host ``h``'s run (:data:`PROBE_ROWS`): per row, the
    values over its points of ``capacity_1cpu_per_s`` (one CPU's speed, in M loop iterations/s)
    and of ``delivered_cpus`` (with all CPUs busy); empty where no point ran the probe. Rates are
    compared as measured (:mod:`analysis.compare`), so these say where two runs' machines moved."""
    out = {}
    for label, col, scale, _ in PROBE_ROWS:
        parts = [pd.to_numeric(s[col], errors="coerce") for s in h.summaries.values() if col in s]
        out[label] = (pd.concat(parts, ignore_index=True).dropna() / scale) if parts else pd.Series(dtype=float)
    return out


def environment_table(hosts: list[HostResults]) -> pd.DataFrame:
    """One row per fingerprint field (:data:`ENVIRONMENT`) and per reading of the capacity probe
    (:func:`probe_readings`), one column per host, and ``differs`` (for a probe reading: the
    hosts' medians more than 10% apart, the drift the lab's runs on one VM showed within an hour)."""
    rows = []
    for label, get in ENVIRONMENT:
        values = [get(h.host) for h in hosts]
        rows.append(
            {"field": label, **{h.name: v for h, v in zip(hosts, values)}, "differs": len({str(v) for v in values}) > 1}
        )
    readings = [probe_readings(h) for h in hosts]
    for label, _, _, digits in PROBE_ROWS:  # "52.9 (36.0-54.1)": the median and the range over the points
        values = [r[label] for r in readings]
        f = f".{digits}f"
        text = [f"{v.median():{f}} ({v.min():{f}}-{v.max():{f}})" if len(v) else None for v in values]
        medians = [v.median() for v in values if len(v)]
        differs = len(medians) > 1 and max(medians) > PROBE_DIFFERS * min(medians)
        rows.append({"field": label, **{h.name: t for h, t in zip(hosts, text)}, "differs": differs})
    return pd.DataFrame(rows)


BEST_COLUMNS = ["experiment", "group", "host", "best", "speedup", "speedup_ci_low", "speedup_ci_high"]


def _best_rows(exp: str, h: HostResults) -> list[dict]:
    """One host's best configuration per group of ``exp``; ``none (<statuses>)`` for a group
    without any measured point."""
    spec = registry.get(exp).spec
    s = h.summaries[exp]
    rest = [k for k in spec.keys if k not in spec.group]
    rows = []
    for _, grp in s.groupby(list(spec.group), sort=False) if spec.group else [((), s)]:
        group = point_label(dict(zip(spec.group, grp.iloc[0][list(spec.group)]))) if spec.group else "all points"
        best = grp[grp["best"]]
        if best.empty:  # nothing measured in the group, or nothing clearly faster than an unswept baseline
            statuses = ", ".join(sorted(set(grp["status"].astype(str))))
            none = "none clearly faster than the baseline" if "ok" in statuses.split(", ") else f"none ({statuses})"
            rows.append({"experiment": exp, "group": group, "host": h.name, "best": none})
            continue
        r = best.iloc[0]
        rows.append(
            {
                "experiment": exp,
                "group": group,
                "host": h.name,
                "best": point_label(dict(zip(rest, r[rest]))),
                **{c: r.get(c) for c in ("speedup", "speedup_ci_low", "speedup_ci_high")},
            }
        )
    return rows


def best_table(hosts: list[HostResults], experiments: list[str]) -> pd.DataFrame:
    """The best configuration per host and group (``best`` in each summary: the highest
    speedup whose CI lies above 1, else the baseline), and whether it shifts between hosts.
    A group without any measured point reads ``none (<statuses>)``, e.g. ``none (skipped)``."""
    # an experiment without a baseline point has no best point (the workload: its recommendation
    # is compared in its own table)
    rows = [
        r
        for exp in experiments
        if registry.get(exp).spec.baseline
        for h in hosts
        if exp in h.summaries and "best" in h.summaries[exp]
        for r in _best_rows(exp, h)
    ]
    df = pd.DataFrame(rows, columns=BEST_COLUMNS)
    df["shifts"] = df.groupby(["experiment", "group"])["best"].transform(lambda b: b.nunique() > 1)
    return df

"""Load and validate the per-point CSVs an experiment wrote.

Every ``metrics.csv`` must have the columns host, experiment, repeat, status and every swept
key of its experiment (see docs/csv-schema.md); when any row has status ``ok`` also wall_s,
cpu_util_pct and the metric, finite, with ``wall_s > 0``. Rows with another status (skipped,
failed, timeout) may leave the measured columns out. Replicate keys (swept keys + repeat)
must be unique. Columns are typed by :func:`analysis.tables.read_table`. Violations raise
:class:`~analysis.tables.DataError` naming the file, the row (1-based, header excluded) and
the column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.tables import DataError, read_table
from lab import registry
from lab.fileio import read_json_object
from lab.host import node_kind

__all__ = ["DataError", "STATUSES", "load_experiment", "load_sidecars", "mark_other_nodes", "read_metrics"]

REQUIRED = ("host", "experiment", "repeat", "status")
STATUSES = ("ok", "skipped", "failed", "timeout")


def _first(path, mask: pd.Series, column: str, message: str, values: pd.Series | None = None) -> None:
    """Raise a DataError at the first row where ``mask`` holds (``{value}`` in the message)."""
    if mask.any():
        i = int(np.flatnonzero(mask.to_numpy())[0])
        shown = (values if values is not None else mask).iloc[i]
        shown = shown.item() if isinstance(shown, np.generic) else shown  # -5.0, not np.float64(-5.0)
        raise DataError(path, message.format(value=shown), row=i + 1, column=column)


def _check_measured(path, df: pd.DataFrame, needed: list[str]) -> None:
    """The measured columns of ``ok`` rows: present, finite and plausible."""
    ok = df["status"] == "ok"
    for col in needed:
        if col not in df.columns:
            if ok.any():
                raise DataError(path, "missing column", column=col)
            df[col] = np.nan
            continue
        values = df[col].astype(float)
        _first(path, ok & ~np.isfinite(values), col, "NaN or missing where a number is required (status ok)")
        if col == "cpu_util_pct":
            _first(path, ok & ((values < 0) | (values > 100)), col, "must be between 0 and 100, got {value!r}", values)
        else:
            _first(path, ok & (values <= 0), col, "must be > 0, got {value!r}", values)


def read_metrics(path: str | Path, experiment: str) -> pd.DataFrame:
    """Read and validate one point's ``metrics.csv`` of ``experiment``.

    Raises:
        DataError: empty file, missing column, unknown status, non-numeric or NaN value
            where a number is required, a row of another experiment, a bad repeat.
    """
    path = Path(path)
    spec = registry.get(experiment).spec
    df = read_table(path, experiment, types={"repeat": "str"})  # repeat: checked below, with its own message
    if df.empty:
        raise DataError(path, "file has a header but no rows")
    for col in (*REQUIRED, *spec.keys):
        if col not in df.columns:
            raise DataError(path, f"missing column (have: {', '.join(df.columns)})", column=col)
    _first(path, ~df["status"].isin(STATUSES), "status", f"status {{value!r}} is not one of {STATUSES}", df["status"])
    needed = ["wall_s", "cpu_util_pct", *sorted({spec.metric(r) for r in df[list(spec.keys)].to_dict("records")})]
    _check_measured(path, df, needed)
    _first(
        path,
        df["experiment"] != spec.name,
        "experiment",
        f"experiment {{value!r}}, expected {spec.name!r}",
        df["experiment"],
    )
    rep = pd.to_numeric(df["repeat"], errors="coerce")
    bad = ~np.isfinite(rep) | (rep < 0) | (rep != np.floor(rep))
    _first(path, bad, "repeat", "repeat must be a whole number >= 0, got {value!r}", df["repeat"])
    df["repeat"] = rep.astype(int)
    return df


def _check_roles(path, df: pd.DataFrame) -> pd.DataFrame:
    if "role" not in df.columns:  # files from before interleaved baselines hold point rows only
        df = df.assign(role="point")
    if not (df["role"] == "point").any():
        raise DataError(path, "no row with role 'point' (only the interleaved baseline)", column="role")
    _first(path, ~df["role"].isin(("point", "baseline")), "role", "role {value!r} is not point or baseline", df["role"])
    return df


def _same(a, b) -> bool:
    """Whether a row's value and a path's ``<key>~<value>`` text name the same value (2, 2.0, "2")."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _check_path(path, df: pd.DataFrame, keys, has_role: bool = True) -> None:
    """The point rows' swept values against the point's directory (``<key>~<value>`` components
    of the file's path, where it has them): a tester's file whose rows said ``workers=3`` under
    ``workers~2`` was summarised as another point. Baseline rows carry the baseline's values;
    without ``role`` (``has_role`` False) every row reads as the point's, and the error says so."""
    named = dict(part.split("~", 1) for part in Path(path).parent.parts if "~" in part)
    for key in (k for k in keys if k in named and k in df):
        wrong = (df["role"] == "point") & ~df[key].map(lambda v, want=named[key]: _same(v, want))
        said = f"{key} {{value!r}} in a row of the point under {key}~{named[key]}: the file is not this point's"
        said += "" if has_role else " (it has no role column, so its baseline's rows read as the point's)"
        _first(path, wrong, key, said, df[key])


def _check_complete(path, df: pd.DataFrame) -> None:
    """A file with fewer rows of a role than the rounds its job measured (``job.json`` beside it,
    ``rounds.done``; the baseline's where the job had one) was cut short, at a line's end where
    the table reader cannot see it: a tester's file cut to 3 of its 6 rounds summarised as a point
    of 1 round, and its finding turned. Files without a readable ``job.json`` or ``rounds`` (runs
    by hand, jobs that choose their own rounds) are not checked."""
    try:
        job = read_json_object(Path(path).with_name("job.json"))
    except (OSError, ValueError):
        return
    done = (job.get("rounds") or {}).get("done")
    if not isinstance(done, int) or isinstance(done, bool):
        return
    for role in ("point", "baseline") if job.get("baseline") else ("point",):
        have = int((df["role"] == role).sum())
        if have < done:
            raise DataError(
                path,
                f"{have} rows with role {role!r}, but the job.json beside it says its job measured {done} rounds:"
                " the file was cut short; measure the point again (delete its directory and rerun)",
                column="role",
            )


def load_experiment(paths: list[str | Path], experiment: str) -> pd.DataFrame:
    """Concatenate and validate every point's metrics of one experiment.

    Returns:
        One row per replicate, with ``role`` (``point``, or ``baseline`` for the baseline
        measured interleaved inside a point's job), ``source`` (the file), a ``metric`` column
        (the name of the point's throughput column) and ``value`` (its value).

    Raises:
        DataError: for any invalid file, duplicated replicate keys (swept keys + repeat), or
            rows of more than one host.
        ValueError: if ``paths`` is empty or ``experiment`` is unknown.
    """
    spec = registry.get(experiment).spec
    if not paths:
        raise ValueError(f"no metrics files given for experiment {experiment!r}")
    frames, seen, host = [], {}, None
    cols = [*spec.keys, "repeat", "role"]
    for path in paths:
        raw = read_metrics(path, experiment)
        df = _check_roles(path, raw)
        _check_complete(path, df)
        _check_path(path, df, spec.keys, "role" in raw)
        if "host" in df and len(df):  # one summary is one host's: another's points would pool with its rounds
            host = host or (df["host"].iloc[0], str(path))
            said = f"where {host[1]} is host {host[0]!r}: summarise each host's points apart"
            said = said.replace("{", "{{").replace("}", "}}")  # literal for _first's format
            _first(path, df["host"] != host[0], "host", "host {value!r}, " + said, df["host"])
        for i, key in enumerate(df[cols].itertuples(index=False)):
            # a baseline measured inside a job belongs to that job only
            ident = (*key, str(path)) if key[-1] == "baseline" else tuple(key)
            if ident in seen:
                where = f"duplicated replicate {dict(zip(cols, key))} (also in {seen[ident]})"
                raise DataError(path, where, row=i + 1, column="repeat")
            seen[ident] = str(path)
        frames.append(df.assign(source=str(path)))
    out = pd.concat(frames, ignore_index=True)
    out["metric"] = [spec.metric(r) for r in out[list(spec.keys)].to_dict("records")]
    out["value"] = [float(out.at[i, m]) for i, m in zip(out.index, out["metric"])]
    return out


def load_sidecars(
    metrics_paths: list[str | Path], name: str, experiment: str, replicates: pd.DataFrame
) -> pd.DataFrame:
    """Concatenate ``name`` (``samples.csv`` or ``spans.csv``) beside each metrics file, with the
    point's swept key values as leading columns, typed as in ``replicates`` (from
    :func:`load_experiment` of the same files: the point rows of each ``source``). A missing file
    contributes nothing (a point directory of an older version); a header-only one, no rows.

    Raises:
        DataError: for a file that cannot be read, or one of 0 bytes: the lab writes the header
            even without rows, so it was cut (as an empty ``metrics.csv`` is refused).
    """
    keys = list(registry.get(experiment).spec.keys)
    frames = []
    for path in metrics_paths:
        side = Path(path).with_name(name)
        if not side.exists():
            continue
        df = read_table(side, experiment)
        if df.empty:
            continue
        own = replicates[(replicates["source"] == str(path)) & (replicates["role"] == "point")]
        point = own[keys].iloc[0]
        for k in reversed(keys):
            df.insert(0, k, point[k])
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=keys)


def mark_other_nodes(reps: pd.DataFrame, host: dict, allow: bool = False) -> pd.DataFrame:
    """Rows measured on a node that is not like the host's: on a cluster a host label's jobs may
    land on nodes of another CPU model when its partition or constraint selects more than one.

    Each job's ``job.json`` (beside its metrics file, ``source``) says which node it ran on
    (``node``: hostname, CPU model, logical CPUs). Rows get ``node`` (the hostname) and
    ``other_node`` (True where the model or the CPU count differs from host.json's). Unless
    ``allow`` (config ``cluster.allow_mixed_nodes``), such rows become ``skipped`` with the
    reason, so the point is listed, not summarised. Files without a ``node`` record (older
    versions, fixtures) are left as they are.

    Returns:
        ``reps`` with the two columns added.
    """
    out = reps.copy()
    out["node"], out["other_node"] = "", False
    want = node_kind(host)
    for source in out["source"].unique() if "source" in out else []:
        job = Path(source).with_name("job.json")
        try:
            node = read_json_object(job).get("node") or {}
        except (OSError, ValueError):
            continue
        if not node or want == (None, None):
            continue
        mine = out["source"] == source
        out.loc[mine, "node"] = str(node.get("hostname") or "")
        got = node_kind(node)
        if got == want:
            continue
        out.loc[mine, "other_node"] = True
        if not allow:
            out.loc[mine & (out["status"] == "ok"), "reason"] = (
                f"measured on node {node.get('hostname')} ({got[0]}, {got[1]} CPUs), not on a node like host "
                f"{host.get('host')}'s ({want[0]}, {want[1]} CPUs); config cluster.allow_mixed_nodes: true keeps it"
            )
            out.loc[mine & (out["status"] == "ok"), "status"] = "skipped"
    return out

"""Load and validate the per-point CSVs an experiment wrote.

Every ``metrics.csv`` must have the columns host, experiment, repeat, status and every swept
key of its experiment (see docs/csv-schema.md); when any row has status ``ok`` also wall_s,
cpu_util_pct and the metric, finite, with ``wall_s > 0``. Rows with another status (skipped,
failed, timeout) may leave the measured columns out. Replicate keys
(swept keys + repeat) must be unique. Violations raise :class:`DataError` naming the file,
the row (1-based, header excluded) and the column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.spec import SPECS, ExperimentSpec

REQUIRED = ("host", "experiment", "repeat", "status")
STATUSES = ("ok", "skipped", "failed", "timeout")


class DataError(ValueError):
    """A metrics file that cannot be analysed; the message names file, row and column."""

    def __init__(self, path, message: str, row: int | None = None, column: str | None = None) -> None:
        where = str(path)
        if row is not None:
            where += f", row {row}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {message}")
        self.path, self.row, self.column = str(path), row, column


def read_metrics(path: str | Path, spec: ExperimentSpec) -> pd.DataFrame:
    """Read and validate one point's ``metrics.csv`` for ``spec``.

    Raises:
        DataError: empty file, missing column, unknown status, non-numeric or NaN value
            where a number is required.
    """
    path = Path(path)
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise DataError(path, "file is empty (no header, no rows)") from None
    if df.empty:
        raise DataError(path, "file has a header but no rows")
    for col in (*REQUIRED, *spec.keys):
        if col not in df.columns:
            raise DataError(path, f"missing column (have: {', '.join(df.columns)})", column=col)
    bad = ~df["status"].isin(STATUSES)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(path, f"status {df['status'].iloc[i]!r} is not one of {STATUSES}", row=i + 1, column="status")
    ok = df["status"] == "ok"
    needed = ["wall_s", "cpu_util_pct"] + sorted({spec.metric_for(r) for r in df[list(spec.keys)].to_dict("records")})
    for col in needed:
        if col not in df.columns:
            if ok.any():
                raise DataError(path, "missing column", column=col)
            df[col] = np.nan
            continue
        values = pd.to_numeric(df[col], errors="coerce")
        nonnum = df[col].notna() & values.isna()
        if nonnum.any():
            i = int(np.flatnonzero(nonnum)[0])
            raise DataError(path, f"non-numeric value {df[col].iloc[i]!r}", row=i + 1, column=col)
        missing = ok & ~np.isfinite(values)
        if missing.any():
            i = int(np.flatnonzero(missing)[0])
            raise DataError(path, "NaN or missing where a number is required (status ok)", row=i + 1, column=col)
        df[col] = values
    for col in needed:
        if col == "cpu_util_pct":
            bad = ok & ((df[col] < 0) | (df[col] > 100))
            rule = "must be between 0 and 100"
        else:
            bad = ok & (df[col] <= 0)
            rule = "must be > 0"
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(path, f"{rule}, got {df[col].iloc[i]!r}", row=i + 1, column=col)
    wrong = df["experiment"].astype(str) != spec.name
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        raise DataError(
            path, f"experiment {df['experiment'].iloc[i]!r}, expected {spec.name!r}", row=i + 1, column="experiment"
        )
    rep = pd.to_numeric(df["repeat"], errors="coerce")
    bad = ~np.isfinite(rep) | (rep < 0) | (rep != np.floor(rep))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            path, f"repeat must be a whole number >= 0, got {df['repeat'].iloc[i]!r}", row=i + 1, column="repeat"
        )
    df["repeat"] = rep.astype(int)
    return df


def load_experiment(paths: list[str | Path], experiment: str) -> pd.DataFrame:
    """Concatenate and validate every point's metrics of one experiment.

    Returns:
        One row per replicate, with ``role`` (``point``, or ``baseline`` for the baseline
        measured interleaved inside a point's job), ``source`` (the file), a ``metric`` column
        (the name of the point's throughput column) and ``value`` (its value).

    Raises:
        DataError: for any invalid file, or duplicated replicate keys (swept keys + repeat).
        ValueError: if ``paths`` is empty or ``experiment`` is unknown.
    """
    if experiment not in SPECS:
        raise ValueError(f"unknown experiment {experiment!r}; known: {sorted(SPECS)}")
    if not paths:
        raise ValueError(f"no metrics files given for experiment {experiment!r}")
    spec = SPECS[experiment]
    frames = []
    seen: dict[tuple, str] = {}
    for path in paths:
        df = read_metrics(path, spec)
        if "role" not in df.columns:
            df["role"] = "point"
        if not (df["role"] == "point").any():
            raise DataError(path, "no row with role 'point' (only the interleaved baseline)", column="role")
        bad = ~df["role"].isin(("point", "baseline"))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(path, f"role {df['role'].iloc[i]!r} is not point or baseline", row=i + 1, column="role")
        cols = [*spec.keys, "repeat", "role"]
        for i, key in enumerate(df[cols].astype(str).itertuples(index=False)):
            # a baseline measured inside a job belongs to that job only
            ident = (*key, str(path)) if key[-1] == "baseline" else tuple(key)
            if ident in seen:
                raise DataError(
                    path,
                    f"duplicated replicate {dict(zip(cols, key))} (also in {seen[ident]})",
                    row=i + 1,
                    column="repeat",
                )
            seen[ident] = str(path)
        df["source"] = str(path)
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out["metric"] = [spec.metric_for(r) for r in out[list(spec.keys)].to_dict("records")]
    out["value"] = [row[m] for m, (_, row) in zip(out["metric"], out.iterrows())]
    return out


def load_sidecars(
    metrics_paths: list[str | Path], name: str, keys: tuple[str, ...], experiment_rows: pd.DataFrame
) -> pd.DataFrame:
    """Concatenate ``name`` (``samples.csv`` or ``spans.csv``) beside each metrics file,
    adding the point's swept key values as columns. Missing or empty files contribute nothing."""
    frames = []
    for path in metrics_paths:
        side = Path(path).with_name(name)
        if not side.exists() or side.stat().st_size == 0:
            continue
        df = pd.read_csv(side)
        if df.empty:
            continue
        own = experiment_rows[(experiment_rows["source"] == str(path)) & (experiment_rows["role"] == "point")]
        point = own[list(keys)].iloc[0]
        for k in reversed(keys):
            df.insert(0, k, point[k])
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*keys])

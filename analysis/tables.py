"""One loader for every CSV the pipeline writes: each column with its real dtype.

:func:`read_table` reads a CSV as text and converts every column it knows to its type, so no
code compares ``"True"`` with a string: booleans become ``bool``, counts ``int64``, measurements
``float64`` and text stays ``str`` with empty cells as ``""``. A column with missing cells keeps
pandas' nullable type (``boolean``, ``Int64``). The types come from

* the columns every experiment writes (:data:`KNOWN`: docs/csv-schema.md);
* the experiment's ``Params`` dataclass for its parameter columns (an ``int`` field is an
  integer column, a ``Literal`` of strings a text column) and its declared columns
  (``EXPERIMENT.columns``, :class:`lab.declare.Col`), through :mod:`lab.registry`;
* for any other column, its content: only ``True``/``False`` is boolean, only whole numbers is
  integer, numbers (``nan`` and empty cells allowed) is float, anything else text.

A cell that does not fit its column's type raises :class:`DataError` naming the file, the row
(1-based, header excluded) and the column.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from lab import registry

BOOL, INT, FLOAT, STR = "bool", "int", "float", "str"

#: Columns whose type does not depend on the experiment (metrics, replicates, summaries, spans,
#: samples, fidelity, jobs, comparison files).
KNOWN = {
    **dict.fromkeys(("host", "experiment", "role", "status", "reason", "metric", "source", "speedup_source"), STR),
    **dict.fromkeys(("top_other", "rounds_stopped", "name", "cmdline", "capacity_note"), STR),
    **dict.fromkeys(("actor", "kind", "series", "check", "expected", "verdict", "job", "phase", "point"), STR),
    **dict.fromkeys(
        ("repeat", "available_cpus", "n", "samples", "rounds", "points", "windows", "pid", "top_other_pid"), INT
    ),
    **dict.fromkeys(("contended", "oversubscribed", "noisy", "best", "differs", "shifts", "other_node"), BOOL),
    **dict.fromkeys(("node",), STR),
    **dict.fromkeys(
        (
            "wall_s",
            "cpu_util_pct",
            "interference_pct",
            "sampler_cpu_pct",
            "pipeline_cpu_pct",
            "steal_pct",
            "cpu_wait_pct",
            "throttled_s",
            "cpu_freq_mhz",
            "top_other_cpu_pct",
            "cpu_pct",
            "window_start_unix",
            "window_end_unix",
            "value",
            "t_s",
            "busy_pct",
            "start_s",
            "end_s",
            "cpu_s",
            "start_unix",
            "end_unix",
            "measured",
        ),
        FLOAT,
    ),
    **dict.fromkeys(("median", "q1", "q3", "iqr", "iqr_pct", "ci_low", "ci_high", "baseline_median"), FLOAT),
    **dict.fromkeys(("speedup", "speedup_ci_low", "speedup_ci_high", "speedup_ratio_of_medians"), FLOAT),
    **dict.fromkeys(("parallel_efficiency", "ratio", "ratio_ci_low", "ratio_ci_high", "ratio_per_cpu"), FLOAT),
    **dict.fromkeys(("median_per_cpu", "mannwhitney_u", "p_value", "worker_scale"), FLOAT),
    # the capacity probe (lab/probe.py), per window and per point
    **dict.fromkeys(("capacity_1cpu_per_s", "capacity_all_per_s", "delivered_cpus", "cpus_delivered"), FLOAT),
    **dict.fromkeys(("probe_s", "cpus_asked", "delivered_cpus_ci_low", "delivered_cpus_ci_high"), FLOAT),
    **dict.fromkeys(("speedup_norm", "speedup_norm_ci_low", "speedup_norm_ci_high"), FLOAT),
    **dict.fromkeys(("speedup_rerun_low", "speedup_rerun_high"), FLOAT),
    **dict.fromkeys(("speedup_norm_rerun_low", "speedup_norm_rerun_high"), FLOAT),
    "unit_clock": STR,  # lab/workspeed.py, per window and per point
}

_PY_TYPES = {bool: BOOL, int: INT, float: FLOAT, str: STR}
_WHOLE = re.compile(r"^[+-]?\d+$")
#: A number as the pipeline writes it (Python's repr of an int or a float), once stripped: read
#: with ``float()``, which gives what ``pandas.to_numeric`` gives for it (both round-trip a
#: float's repr exactly). A column with any other cell goes through ``pandas.to_numeric``.
_PLAIN_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?inf")
#: Cells that read as a missing number.
_BLANK = frozenset(("", "nan", "NaN"))
_TRUTH = {"true": True, "1": True, "false": False, "0": False}


class DataError(ValueError):
    """A file that cannot be analysed; the message names file, row and column."""

    def __init__(self, path, message: str, row: int | None = None, column: str | None = None) -> None:
        where = str(path)
        if row is not None:
            where += f", row {row}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {message}")
        self.path, self.row, self.column = str(path), row, column


def experiment_types(experiment: str) -> dict[str, str]:
    """Column types an experiment adds to :data:`KNOWN`: its parameters and its declared
    columns (``EXPERIMENT.columns``: metrics, flags and the rest), the summarised ones with
    their ``_ci_low``/``_ci_high`` (floats).

    Raises:
        ValueError: for an experiment that is not registered.
    """
    from lab.params import field_types

    exp = registry.get(experiment)
    types = {name: _PY_TYPES.get(tp, STR) for name, tp in field_types(exp.params_cls).items()}
    types |= {name: col.type for name, col in exp.spec.columns.items()}
    for col in exp.spec.summarised_columns:
        types |= dict.fromkeys((col, f"{col}_ci_low", f"{col}_ci_high"), FLOAT)
    types |= {f.column: STR if f.aggregate == "text" else BOOL for f in exp.spec.flags}
    return types


def _bad(path, col: str, raw: pd.Series, bad, message: str) -> DataError:
    i = int(np.flatnonzero(np.asarray(bad))[0])
    return DataError(path, message.format(value=raw.iloc[i]), row=i + 1, column=col)


def _plain_floats(cells: list[str]) -> list[float] | None:
    """``cells`` as floats where each is blank (:data:`_BLANK`, a NaN) or a plain number
    (:data:`_PLAIN_NUMBER`); None where any is neither. A table's columns hold a few to a few
    thousand cells: in Python this costs a microsecond a cell, where pandas' string methods cost
    about a millisecond a column (44 tables of a quick run, 2,030 columns of 505 rows: 1.96 s)."""
    out = []
    for cell in cells:
        text = cell.strip()
        if text in _BLANK:
            out.append(np.nan)
        elif _PLAIN_NUMBER.fullmatch(text):
            out.append(float(text))
        else:
            return None
    return out


def _numbers(raw: pd.Series, path, col: str) -> pd.Series:
    plain = _plain_floats(raw.tolist())
    if plain is not None:
        return pd.Series(plain, index=raw.index, dtype=float)
    blank = raw.str.strip().isin(_BLANK)
    values = pd.to_numeric(raw.where(~blank, np.nan), errors="coerce")
    bad = ~blank & values.isna()
    if bad.any():
        raise _bad(path, col, raw, bad, "non-numeric value {value!r}")
    return values.astype(float)


def _convert(raw: pd.Series, kind: str, path, col: str) -> pd.Series:
    """``raw`` (text, empty cells ``""``) as ``kind``; see the module docstring."""
    if kind == STR:
        return raw
    if kind == BOOL:
        text = [cell.strip().lower() for cell in raw.tolist()]
        mapped = [_TRUTH.get(t) for t in text]
        bad = np.array([t != "" and v is None for t, v in zip(text, mapped)], dtype=bool)
        if bad.any():
            raise _bad(path, col, raw, bad, "expected True or False, got {value!r}")
        whole = all(v is not None for v in mapped)
        return pd.Series(mapped, index=raw.index, dtype=bool if whole else "boolean")
    values = _numbers(raw, path, col)
    if kind == FLOAT:
        return values
    v = values.to_numpy()
    present = ~np.isnan(v)
    bad = present & (v != np.floor(v))
    if bad.any():
        raise _bad(path, col, raw, bad, f"{col} must be a whole number, got {{value!r}}")
    return values.astype("int64") if present.all() else values.astype("Int64")


def infer(raw: pd.Series) -> str:
    """The type of a column that no declaration names, from its non-empty cells."""
    stripped = [t for t in (cell.strip() for cell in raw.tolist()) if t]
    if not stripped:
        return FLOAT
    if all(t in ("True", "False") for t in stripped):
        return BOOL
    if all(_WHOLE.match(t) for t in stripped):
        return INT
    if all(t.lower() == "nan" or _PLAIN_NUMBER.fullmatch(t) for t in stripped):
        return FLOAT
    cells = pd.Series(stripped)  # what pandas.to_numeric reads, beyond plain numbers
    nan = cells.str.lower().eq("nan")
    return FLOAT if (pd.to_numeric(cells.mask(nan), errors="coerce").notna() | nan).all() else STR


def read_table(path: str | Path, experiment: str | None = None, types: dict[str, str] | None = None) -> pd.DataFrame:
    """Read a CSV written by the pipeline with every column typed (see the module docstring).

    Args:
        path: the CSV file.
        experiment: the experiment whose columns it holds, if any (adds
            :func:`experiment_types`).
        types: further column types, overriding the others (``bool``, ``int``, ``float``, ``str``).

    Returns:
        The table; a header-only file gives an empty table with its columns.

    Raises:
        DataError: an empty file (no header), a file whose last line is cut off (no final
            newline: a copy or a write that stopped part-way), an unreadable CSV, or a cell that
            does not fit its column's type, naming file, row and column.
    """
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size and (f.seek(size - 1), f.read(1))[1] != b"\n":
            raise DataError(path, "the last line is cut off (no final newline): the file is truncated")
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise DataError(path, "file is empty (no header, no rows)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(path, f"not a readable CSV file ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    if experiment:
        raw = with_added_keys(raw, experiment)
    known = KNOWN | (experiment_types(experiment) if experiment else {}) | (types or {})
    out = {col: _convert(raw[col], known.get(col) or infer(raw[col]), path, col) for col in raw.columns}
    return pd.DataFrame(out, index=raw.index)


def with_added_keys(raw: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """A table of an experiment run under every interpreter (``Experiment.interpreters``) that
    was written before the key ``interpreter`` existed, with that column added: ``default``,
    the pipeline's own Python, which is what those points ran under. Any other table, or one
    with none of the experiment's other keys, is returned as it is."""
    from lab.interpreters import DEFAULT

    spec = registry.get(experiment).spec
    others = [k for k in spec.keys if k != "interpreter"]
    if not spec.interpreters or "interpreter" in raw.columns or not any(k in raw.columns for k in others):
        return raw
    raw = raw.copy()
    first = next(k for k in others if k in raw.columns)
    at = raw.columns.get_loc(first) if spec.keys.index("interpreter") == 0 else len(raw.columns)
    raw.insert(at, "interpreter", DEFAULT[0]["label"])
    return raw

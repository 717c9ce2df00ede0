"""File output of the whole project: every file it writes is written atomically.

A reader (Snakemake, the next job, a user, an interrupted run's next attempt) never sees a
half-written file. :func:`atomic_write` writes to a hidden temporary file beside the target,
``.<name>.tmp<pid>``, flushes and fsyncs it, then renames it over the target with
``os.replace``, which POSIX makes atomic within one file system. If writing fails, or the
process is interrupted, the temporary file is removed and the target is left as it was.
(``lab.supervise`` also clears ``.<name>.tmp*`` files of a job it had to kill.)

The helpers below are the only ways the project writes files: CSV rows (:func:`write_csv`),
pandas frames (:func:`write_frame`), JSON (:func:`write_json`), text (:func:`write_text`) and
matplotlib figures as PNG (:func:`write_figure`); and a process's running log
(:func:`log_stream`, not atomic: it is read only by people); and lines appended to a record
that several processes add to at once (:func:`append_line`). This module imports neither pandas nor
matplotlib: measurement jobs use it too.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any


def atomic_write(path: str | Path, write: Callable[[IO], None], *, binary: bool = False) -> Path:
    """Write a file atomically: ``write(fh)`` fills a temporary file, which then replaces ``path``.

    Args:
        path: the target; its directory is created if missing.
        write: called once with the open temporary file (text, UTF-8, ``newline=""``; or
            binary with ``binary=True``).
        binary: open the temporary file in binary mode.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: if the directory cannot be created or the file cannot be written; the target
            is then unchanged and the temporary file removed. Whatever ``write`` raises, too.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    mode = {"mode": "wb"} if binary else {"mode": "w", "newline": "", "encoding": "utf-8"}
    try:
        with open(tmp, **mode) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def log_stream(path: str | Path) -> IO:
    """A log file a long-running process writes into as it goes (the job server's, opened
    for its standard output and error): the one file here that is not written atomically, since
    nothing reads it as a result and it must show what happened up to a crash. Truncated first;
    the caller closes it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "w", encoding="utf-8")  # noqa: SIM115 - the caller owns it


def append_line(path: str | Path, line: str) -> None:
    """Append ``line`` and a newline to ``path`` (created if missing) in one ``write`` to a
    descriptor opened with ``O_APPEND``: lines that several processes append at once land whole,
    one after another (POSIX: each write goes to the end of the file as one operation). For short
    records (benchmarks/peer_pyperf.py's timed loops), not for results."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) atomically."""
    return atomic_write(path, lambda fh: fh.write(text))


def emit(text: str, markdown: str | None) -> None:
    """Print a benchmark's report and, where ``markdown`` names a file, write it there too
    (:func:`write_text`)."""
    print(text)
    if markdown:
        write_text(Path(markdown), text)


def write_csv(path: str | Path, rows: list[dict], columns: list[str] | None = None) -> Path:
    """Write dict ``rows`` as CSV atomically, with a header even when there are no rows.

    Args:
        columns: the header, in order; default: every key of ``rows`` in first-seen order.

    Raises:
        ValueError: if a row has a key that is not in ``columns``.
    """
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))

    def write(fh):
        w = csv.DictWriter(fh, fieldnames=columns, extrasaction="raise")
        w.writeheader()
        w.writerows(rows)

    return atomic_write(path, write)


def write_frame(path: str | Path, frame) -> Path:
    """Write a pandas DataFrame as CSV atomically, without its index."""
    return atomic_write(path, lambda fh: frame.to_csv(fh, index=False))


def finite(obj: Any) -> Any:
    """``obj`` with NaN and infinities replaced by None (JSON has no NaN) and numpy scalars
    turned into Python numbers, recursively through mappings (a :class:`lab.host.Host` too),
    lists and tuples."""
    if isinstance(obj, Mapping):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalar
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: str | Path, data: Any, *, sort_keys: bool = False) -> Path:
    """Write ``data`` as indented JSON atomically; NaN and infinities become null, and objects
    JSON does not know (paths, for example) their ``str``."""
    text = json.dumps(finite(data), indent=2, sort_keys=sort_keys, allow_nan=False, default=str)
    return write_text(path, text + "\n")


def write_figure(path: str | Path, fig) -> Path:
    """Save a matplotlib Figure as PNG atomically, cropped to its content, with no
    ``Software`` metadata (so the same figure gives the same bytes)."""
    return atomic_write(
        path, lambda fh: fig.savefig(fh, format="png", bbox_inches="tight", metadata={"Software": None}), binary=True
    )


def read_json_object(path: str | Path) -> dict:
    """The JSON object in the file ``path`` (host.json, job.json, findings.json, ...).

    Raises:
        OSError: if it cannot be read (missing, a directory, no permission), as ``open`` does.
        ValueError: naming the file, if it is not JSON or holds something other than an object
            (a list, a number): one line instead of a traceback from the first key looked up.
    """
    try:
        text = Path(path).read_text()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a JSON file ({exc})") from None
    return json_object(text, str(path), "a JSON file")


def json_object(text: str, where: str, what: str = "JSON") -> dict:
    """The JSON object ``text`` holds (a file's text, an option's value).

    Raises:
        ValueError: naming ``where`` (a file, ``--json``), if ``text`` is not ``what`` (JSON) or
            holds something other than an object (a list, a number).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not {what} ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: holds a JSON {type(data).__name__}, where a JSON object ({{...}}) belongs")
    return data


FINDINGS_SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "findings.schema.yaml"


def read_findings(path: str | Path) -> dict:
    """An experiment's ``findings.json`` (docs/csv-schema.md, section 3.4), checked against
    ``schemas/findings.schema.yaml`` before anything reads a key of it.

    Raises:
        OSError: if it cannot be read, as :func:`read_json_object`.
        ValueError: naming the file, the key path of the first violation and what belongs there
            (jsonschema's ``best_match``), for a file the analysis did not write that way (edited by
            hand, or written by an older lab): one line instead of a template's TypeError.
    """
    from jsonschema.exceptions import best_match

    data = read_json_object(path)
    err = best_match(_findings_validator().iter_errors(data))
    if err is None:
        return data
    where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
    title = err.schema.get("title") if isinstance(err.schema, dict) else None
    value = repr(err.instance)
    value = value if len(value) <= 60 else value[:57] + "..."
    allowed = f"; allowed: {title}" if title else ""
    raise ValueError(f"{path}: {where} = {value} is not valid ({err.message}){allowed}. {redo_analysis(path)}")


@functools.cache
def _findings_validator():
    """The validator of :data:`FINDINGS_SCHEMA`, read once per process (a report reads every
    experiment's findings.json)."""
    from jsonschema import Draft202012Validator

    from lab.configcheck import read_schema

    return Draft202012Validator(read_schema(FINDINGS_SCHEMA))


def redo_analysis(path: str | Path) -> str:
    """How to write an experiment's analysis outputs at ``path`` (results/<host>/<experiment>/...)
    again without measuring: with the run's own configuration (results/<host>/config.yaml, which
    names its host label) where the host directory holds it, since a plain command would run
    the default configuration under this machine's label; measurements are kept by
    ``--rerun-triggers mtime`` (README, "After updating the lab's code")."""
    import shlex

    host_dir = Path(path).parent.parent
    config = host_dir / "config.yaml"
    redo = "--rerun-triggers mtime --forcerun analyse"
    if config.is_file():
        return (
            f"Redo the analysis, which writes it again, from the checkout whose results/ holds {host_dir.name}:"
            f" snakemake --cores 4 --configfile {shlex.quote(str(config))} {redo}"
        )
    return (
        f"Redo the analysis, which writes it again: snakemake --cores 4 {redo}, with the --configfile and"
        f" --config host={shlex.quote(host_dir.name)} it was measured with"
    )


def output_dir_problem(path: str) -> str | None:
    """Why ``path`` cannot be the directory a job writes its files into, or None if it can: it
    is empty, it or one of its parents is a file, or the nearest existing ancestor refuses a
    new directory (tried, and removed again). Checked before a job measures, so that a typo
    costs no measurement."""
    if not path.strip():
        return "is empty: name the directory for the point's files"
    p = Path(path).resolve()
    while not p.exists():
        p = p.parent
    if not p.is_dir():
        return f"cannot be a directory: {p} is a file"
    try:  # a real write, not os.access: root passes that for /proc and read-only mounts
        os.rmdir(tempfile.mkdtemp(prefix=".lab-write-check-", dir=p))
    except OSError as exc:
        return f"cannot be written: {p} refuses a new directory ({exc.strerror or exc})"
    return None


def output_file_problem(path: str) -> str | None:
    """Why ``path`` cannot be a file a script writes at its end, or None if it can: it is
    empty, it is a directory, or its directory cannot be (:func:`output_dir_problem`). Checked
    before a benchmark measures, so that a typo costs no measurement."""
    if not str(path).strip():
        return "is empty: name the file"
    if Path(path).is_dir():
        return "is a directory: name a file"
    problem = output_dir_problem(str(Path(path).resolve().parent))
    return f"cannot be written: {problem.split(': ', 1)[-1]}" if problem else None  # the cause, once


def output_args_problem(args, names: tuple[str, ...] = ("json", "markdown")) -> str | None:
    """The first of the ``--<name>`` file options of parsed ``args`` that is set and cannot be
    written (:func:`output_file_problem`), as one line naming the option; None if all can."""
    for name in names:
        value = getattr(args, name, None)
        problem = output_file_problem(str(value)) if value is not None else None
        if problem:
            return f"--{name} {value} {problem}"
    return None

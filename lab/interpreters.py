"""The Python interpreters whose measured code the lab runs: config, probe and child processes.

Config ``interpreters:`` is a list of ``{label, command, python_gil}``: ``command`` a path or a
name on PATH (omitted: the pipeline's own Python, ``sys.executable``), ``python_gil`` ``"0"`` or
``"1"`` on a free-threaded build (omitted: the build's default). The same binary listed twice,
with ``python_gil`` 0 and 1, measures the GIL's effect with nothing else changed.

An experiment whose declaration sets ``interpreters=True`` sweeps the key ``interpreter`` over
the labels (``interpreter~<label>`` in the path scheme) and reads ``results/<host>/interpreters.json``,
which the ``interpreters`` rule writes with this module's CLI: per label, the command as given
and as found, the ``PYTHON_GIL`` setting, and what the interpreter says of itself (version,
implementation, ``Py_GIL_DISABLED`` of its build, ``sys._is_gil_enabled()`` at run time), or
why it did not start. The measured code runs in a child process started by :func:`start`:
standard library only, with ``-I`` (isolated: no user site, no ``PYTHON*`` variables) and the
GIL chosen with ``-X gil=N``, which ``-I`` does not override.

Usage (the ``interpreters`` rule):
``python -m lab.interpreters --config JSON --out interpreters.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path

from lab.declare import Col
from lab.fileio import write_json
from lab.host import die_with_parent
from lab.results import PointError

#: The metrics columns an experiment run under these interpreters writes from what the measured
#: process said about itself (``EXPERIMENT.columns`` of gil, singlethread and convoy).
COLUMNS = {
    "free_threaded": Col("bool", "that interpreter is a free-threaded build (`Py_GIL_DISABLED`)", "-"),
    "gil_enabled": Col(
        "bool", "`sys._is_gil_enabled()` in the measured process; the report flags a point `GIL off` when False", "-"
    ),
}

#: The default of ``interpreters:``: the pipeline's own Python.
DEFAULT = ({"label": "default"},)

_PROBE = (
    "import json, sys, sysconfig; g = getattr(sys, '_is_gil_enabled', None); "
    "print(json.dumps({'version': sys.version.split()[0], 'implementation': sys.implementation.name, "
    "'executable': sys.executable, 'free_threaded': sysconfig.get_config_var('Py_GIL_DISABLED') == 1, "
    "'gil_enabled': bool(g()) if g else True}))"
)


def labels(entries: Sequence[Mapping] | None) -> list[str]:
    """The labels of config ``interpreters`` (the default's when it is empty or None)."""
    return [str(e["label"]) for e in (entries or DEFAULT)]


def found(entries: Sequence[Mapping] | None) -> dict[str, str]:
    """Where each configured interpreter's command is found now (``shutil.which``; ``""`` where
    it is not), by label: a parameter of the ``interpreters`` rule, so that an interpreter
    installed after a run that skipped its points (or one moved or removed) probes them again,
    and the points that read interpreters.json are measured again with it."""
    return {str(e["label"]): shutil.which(argv(e)[0]) or "" for e in (entries or DEFAULT)}


def python_gil(entry: Mapping) -> str:
    """The entry's ``python_gil`` as text: ``"0"``, ``"1"`` or ``""`` (the build's default)."""
    value = entry.get("python_gil")
    return "" if value is None else str(value)


def argv(entry: Mapping) -> list[str]:
    """The command line that starts ``entry``'s interpreter before the script or ``-c``:
    the command (``sys.executable`` when omitted, ``~`` expanded), ``-I`` and, where set,
    ``-X gil=N``."""
    command = os.path.expanduser(str(entry["command"])) if entry.get("command") else sys.executable
    gil = python_gil(entry)
    return [command, "-I", *(["-X", f"gil={gil}"] if gil else [])]


def child_env(entry: Mapping) -> dict[str, str]:
    """The child's environment: this one, with ``PYTHON_GIL`` set as configured (recorded for
    the reader; ``-I`` makes the child ignore it, ``-X gil`` decides)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    if python_gil(entry):
        env["PYTHON_GIL"] = python_gil(entry)
    return env


def probe(entry: Mapping, timeout_s: float = 60) -> dict:
    """Start ``entry``'s interpreter once and read what it says of itself.

    Returns:
        ``{label, command, python_gil, path, ok, reason, version, implementation, executable,
        free_threaded, gil_enabled}``; ``ok`` False with the ``reason`` when the command is not
        found or the interpreter does not start (e.g. ``-X gil=0`` on a build with the GIL).
    """
    cmd = argv(entry)
    out = {
        "label": str(entry["label"]),
        "command": str(entry.get("command") or ""),
        "python_gil": python_gil(entry),
        "path": shutil.which(cmd[0]) or "",
    }
    if not out["path"]:
        return {
            **out,
            "ok": False,
            "reason": f"interpreter {cmd[0]!r} not found (config interpreters, label {out['label']!r})",
        }
    try:
        done = _run_probe([*cmd, "-c", _PROBE], child_env(entry), timeout_s)
    except (OSError, subprocess.SubprocessError) as exc:
        return {**out, "ok": False, "reason": f"interpreter {cmd[0]!r} did not start: {exc}"}
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["no output"]
        said = next((line for line in lines if line.startswith("Fatal Python error")), lines[-1])
        return {**out, "ok": False, "reason": f"interpreter {' '.join(cmd)!r} exited {done.returncode}: {said}"}
    said = _said(done.stdout)
    if said is None:
        shown = (done.stdout.strip().splitlines() or ["nothing"])[-1][:80]
        why = f"interpreter {' '.join(cmd)!r} did not answer as a Python interpreter: it printed {shown!r}"
        return {**out, "ok": False, "reason": why}
    if out["python_gil"] and not said["free_threaded"]:
        why = f"python_gil {out['python_gil']} needs a free-threaded build; {cmd[0]} ({said['version']}) has the GIL"
        return {**out, **said, "ok": False, "reason": why}
    return {**out, **said, "ok": True, "reason": ""}


def _run_probe(cmd: list[str], env: dict, timeout_s: float) -> subprocess.CompletedProcess:
    """Run the probe in a session of its own; past ``timeout_s`` its whole process group is
    killed (a wrapper script's children too), then TimeoutExpired is raised; on Ctrl-C
    (KeyboardInterrupt) too, which its own session does not receive."""
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _said(stdout: str) -> dict | None:
    """What the probe printed of itself (its last line, a JSON object with its keys), or None."""
    lines = stdout.strip().splitlines()
    try:
        said = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    keys = ("version", "free_threaded", "gil_enabled")
    return said if isinstance(said, dict) and all(k in said for k in keys) else None


def collect(entries: Sequence[Mapping] | None) -> dict:
    """The content of ``interpreters.json``: ``{"interpreters": [probe(e), ...]}`` in config order."""
    return {"interpreters": [probe(e) for e in (entries or DEFAULT)]}


def describe(entry: Mapping) -> str:
    """An interpreter in words, from its probe: ``CPython 3.13.5, free-threaded build, GIL off
    (PYTHON_GIL=0)``, or ``not run: <reason>``."""
    if not entry.get("ok"):
        return f"not run: {entry.get('reason', 'unknown')}"
    impl = {"cpython": "CPython", "pypy": "PyPy"}.get(entry.get("implementation", ""), entry.get("implementation"))
    parts = [f"{impl} {entry.get('version', '')}".strip()]
    if entry.get("free_threaded"):
        parts.append("free-threaded build, GIL " + ("on" if entry.get("gil_enabled") else "off"))
    else:
        parts.append("GIL build")
    text = ", ".join(parts)
    if entry.get("python_gil"):
        text += f" (PYTHON_GIL={entry['python_gil']})"
    return text


def named(label: str, host: Mapping) -> str:
    """``3.13t (CPython 3.13.5, free-threaded build, GIL off (PYTHON_GIL=0))``: a label with
    :func:`describe` of its entry in ``host["interpreters"]`` (the label alone when absent)."""
    for entry in host.get("interpreters", []):
        if entry["label"] == label:
            return f"{label} ({describe(entry)})"
    return label


def known(host_files: Mapping | None) -> dict:
    """The content of ``interpreters.json`` from a job's host files; the default interpreter,
    probed now, only when the job was given none (a measurement module run by hand)."""
    given = (host_files or {}).get("interpreters.json")
    return given if given else collect(None)


def find(interpreters_json: Mapping, label: str) -> dict:
    """The probe of ``label`` in the content of ``interpreters.json``.

    Raises:
        lab.results.PointError: naming the label and the labels there are.
    """
    for entry in interpreters_json.get("interpreters", []):
        if entry["label"] == label:
            return entry
    known = ", ".join(repr(e["label"]) for e in interpreters_json.get("interpreters", []))
    raise PointError(
        f"interpreter {label!r} is not in interpreters.json; allowed: {known}"
        " (labels of config interpreters; pass the run's with --host-file results/<host>/interpreters.json)"
    )


def start(entry: Mapping, script: Path, stderr: typing.IO[bytes], extra: tuple[Path, ...] = ()) -> subprocess.Popen:
    """Start ``script`` under ``entry``'s interpreter as a child that reads requests on stdin
    and answers on stdout, one JSON line each (its stderr goes to the open file ``stderr``);
    ``extra``: task files of an experiment the script loads by path (:func:`lab.pytasks.load_requests`)."""
    return subprocess.Popen(
        [*argv(entry), str(script), *map(str, extra)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=child_env(entry),
        text=True,
        bufsize=1,
        preexec_fn=die_with_parent,  # the harness has no other thread; a killed job leaves no child
    )


#: The share of a task's iterations a warm-up run does (:meth:`Child.warm_up`).
WARMUP_SHARE = 0.1


class Child:
    """A script (:mod:`lab.pytasks`) running under one interpreter: started on
    creation, it answers one JSON line per request line.

    Creating it does not wait for the interpreter (about 50 ms): the first use of
    :attr:`hello` or :meth:`ask` does, so two children created one after the other start at
    the same time.

    Raises:
        RuntimeError: when the child does not start or a run fails in it (the message holds
            the child's error and the end of its stderr); raised by the first :attr:`hello` or
            :meth:`ask`.
    """

    def __init__(self, entry: Mapping, script: Path, extra: tuple[Path, ...] = ()) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - open for the child's life, closed in close()
        self.label = entry["label"]
        self.proc = start(entry, script, self.stderr, extra)
        self._hello: dict | None = None

    @property
    def hello(self) -> dict:
        """What the interpreter said of itself when it started (version, build, GIL at run time)."""
        if self._hello is None:
            self._hello = self._read()["hello"]
        return self._hello

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.stderr.seek(0)
            tail = self.stderr.read().decode(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"interpreter {self.label!r} stopped answering: " + " | ".join(tail))
        return json.loads(line)

    def warm_up(self, request: dict, times: int) -> None:
        """Run ``request`` ``times`` times at a tenth of its length (:data:`WARMUP_SHARE` of its
        iterations, at least one), untimed: enough for the interpreter to specialise its code and
        for a first fork to be paid, without a full window's worth of time per warm-up. A request
        that forks runs its task only in the forks, which specialise their own copy and lose it:
        the gil experiment's loop ran as fast cold in a fork as warmed (docs/benchmarks.md,
        2026-12-06 early morning)."""
        short = {kind: dict(spec) for kind, spec in request.items()}
        for spec in short.values():
            for key in ("iterations", "io_iterations"):
                if key in spec:
                    spec[key] = max(1, int(spec[key] * WARMUP_SHARE))
        for _ in range(times):
            self.ask(short)

    def ask(self, request: dict) -> dict:
        """Send one request line; return the child's answer (raises on ``{"error": ...}``)."""
        _ = self.hello  # its first line
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(f"under interpreter {self.label!r}: {reply['error']}")
        return reply

    def close(self) -> None:
        """End the child (end of input) and close its stderr file."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a child that does not stop is killed
            self.proc.kill()
        self.stderr.close()


def main(argv_: list[str] | None = None) -> int:
    """``python -m lab.interpreters --config JSON --out interpreters.json``."""
    p = argparse.ArgumentParser(prog="python -m lab.interpreters", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="config interpreters as a JSON list")
    p.add_argument("--out", required=True, help="path of interpreters.json to write")
    args = p.parse_args(argv_)
    entries = json.loads(args.config)
    if not isinstance(entries, list):
        p.error(f"--config must be a JSON list, got {args.config!r}")
    data = collect(entries)
    for e in data["interpreters"]:
        print(f"{e['label']}: " + (f"{e['implementation']} {e['version']}" if e["ok"] else e["reason"]))
    write_json(Path(args.out), data, sort_keys=True)
    return 0


if __name__ == "__main__":
    from lab.supervise import exit_quietly_on_interrupt

    exit_quietly_on_interrupt(main, "interpreters")

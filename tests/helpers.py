"""Builders of fixture metrics files with known values (no measurement involved)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path


def write_point(root: Path, experiment: str, point: dict, rows: list[dict]) -> Path:
    """Write ``root/<experiment>/<k>~<v>/.../metrics.csv`` with common columns filled in."""
    d = root / experiment
    for k, v in point.items():
        d = d / f"{k}~{v}"
    d.mkdir(parents=True, exist_ok=True)
    full = []
    for i, r in enumerate(rows):
        full.append(
            {
                "host": "fixture",
                "experiment": experiment,
                **point,
                "repeat": i,
                "status": "ok",
                "reason": "",
                "cpu_util_pct": 50.0,
                "available_cpus": 2,
                **r,
            }
        )
    cols = list(full[0])
    with open(d / "metrics.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(full)
    return d / "metrics.csv"


def gil_fixture(root: Path) -> list[Path]:
    """gil points, 2 tasks: cpu sequential 1,2,3,4 tasks/s (median 2.5); threads 2.5 (x4);
    processes 5 (x4); io sequential 1 (x4), threads 2, processes 2."""
    paths = []
    spec = {
        ("cpu", "sequential"): [1.0, 2.0, 3.0, 4.0],
        ("cpu", "threads"): [2.5] * 4,
        ("cpu", "processes"): [5.0] * 4,
        ("io", "sequential"): [1.0] * 4,
        ("io", "threads"): [2.0] * 4,
        ("io", "processes"): [2.0] * 4,
    }
    for (workload, mode), tps in spec.items():
        rows = [{"wall_s": 2 / t, "tasks_per_s": t} for t in tps]
        paths.append(write_point(root, "gil", {"workload": workload, "mode": mode, "workers": 2}, rows))
    return paths


def venv_env(env: dict | None = None) -> dict:
    """``env`` (default: this process's environment) with this interpreter's venv first on PATH."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    return env


def snakemake_in(work: Path, *args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m snakemake ARGS`` in ``work`` with this interpreter's venv on PATH."""
    env = venv_env(env)
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=work, capture_output=True, text=True, timeout=timeout, env=env
    )


def start_busy_stranger() -> int:
    """A busy-looping Python process that is not our descendant (its parent shell exits, so it
    is re-parented): the pid."""
    out = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())

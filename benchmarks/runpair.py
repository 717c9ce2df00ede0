"""What two runs of the pipeline differ in besides their numbers, in sentences for the
benchmarks that compare them (``repeatability.py``, ``worker_scale.py``): what the machine did
across them (its single-CPU speed, the VM restores and clones the kernel logged), and what makes
them other than two runs of one thing (an experiment in one run only, two commits of the lab,
two configurations); and which pairs are stored, and whether a list of pair labels can be
compared.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.runinfo import vm_events  # noqa: E402
from lab import registry  # noqa: E402


def machine_between(results: Path, a: str, b: str) -> str:
    """What the machine did across the two runs: each run's median single-CPU speed over its
    jobs (run.json ``capacity``, the capacity probe) and every VM restore or clone the kernel
    logged from run ``a``'s start to run ``b``'s end (:func:`analysis.runinfo.vm_events` over
    both runs' job.json files); "" without both run.json files."""
    paths = [results / h / "run.json" for h in (a, b)]
    if not all(p.is_file() for p in paths):
        return ""
    runs = [json.loads(p.read_text()) for p in paths]
    start, end = runs[0]["start_unix"], runs[1]["end_unix"]
    speeds = [(r.get("capacity") or {}).get("single_median") for r in runs]
    text = ""
    if all(speeds):
        text = (
            f"One CPU ran {speeds[0] / 1e6:.1f} M loop iterations/s in run 1 and {speeds[1] / 1e6:.1f} M/s in run 2"
            f" (the medians over their jobs of the capacity probe; {100 * (speeds[1] / speeds[0] - 1):+.0f}%). "
        )
    jobs = [json.loads(p.read_text()) for h in (a, b) for p in (results / h).rglob("job.json")]
    vm = vm_events(jobs, pd.DataFrame(), start, end)
    if vm["unreadable"]:
        return text + f"No job of either run read the kernel log for VM restores or clones: {vm['unreadable']}."
    if not vm["events"]:
        return text + "The kernel logged no VM restore or clone between run 1's start and run 2's end."

    def when(t: float) -> str:
        return (
            "during run 1"
            if t <= runs[0]["end_unix"]
            else "during run 2"
            if t >= runs[1]["start_unix"]
            else "between the runs"
        )

    said = [
        f"a {e['event']} at {time.strftime('%H:%M:%S', time.gmtime(e['unix']))} UTC"
        f" ({when(e['unix'])}, {e['at_s'] / 60:.1f} min after run 1 began)"
        for e in vm["events"]
    ]
    return text + f"The kernel logged {' and '.join(said)}."


def runs_differ(results: Path, a: str, b: str) -> str:
    """What makes runs ``a`` and ``b`` other than two runs of one thing, in sentences ("" if
    nothing): experiments with a summary in one run only (left out of every figure here), and
    different commits of the lab (host.json ``git_commit``) or configurations (the runs'
    ``config.yaml``)."""
    said = []
    for exp in registry.experiments():
        has = [(results / h / exp / "summary.csv").is_file() for h in (a, b)]
        if has[0] != has[1]:
            said.append(f"{exp} has a summary in run {1 if has[0] else 2} only: left out.")
    hosts = [json.loads((results / h / "host.json").read_text()) for h in (a, b)]
    commits = [str(h.get("git_commit") or "?")[:7] for h in hosts]
    if commits[0] != commits[1]:
        said.append(f"The runs came from different commits of the lab ({commits[0]}, {commits[1]}).")
    configs = [results / h / "config.yaml" for h in (a, b)]
    if all(c.is_file() for c in configs):
        read = [{k: v for k, v in (yaml.safe_load(c.read_text()) or {}).items() if k != "host"} for c in configs]
        if read[0] != read[1]:
            keys = sorted(k for k in set(read[0]) | set(read[1]) if read[0].get(k) != read[1].get(k))
            said.append(f"Their configurations differ (results/<host>/config.yaml: {', '.join(keys)}).")
    return " ".join(said)


def stored_pairs(results: Path) -> list[str]:
    """The labels of the pairs under ``results``: each ``<label>`` with ``<label>-1/host.json``
    and ``<label>-2/host.json``."""
    ones = sorted(h.parent.name[:-2] for h in results.glob("*-1/host.json"))
    return [label for label in ones if (results / f"{label}-2" / "host.json").is_file()]


def labels_problem(text: str, labels: list[str], no_run: bool, option: str = "--label") -> str | None:
    """Why ``option text`` (split into ``labels``) cannot be compared, or None. A label names
    the runs ``<label>-1`` and ``<label>-2``, directories under the results directory: a path
    (``/``, a leading ``.``) would read, or for a benchmark that summarises again write, beside
    another run's files."""
    if not all(labels):
        return f"{option} {text}: an empty label; give one label, or several separated by commas (x1,w1)"
    if bad := [label for label in labels if "/" in label or "\\" in label or label.startswith(".")]:
        return (
            f"{option} {text}: {', '.join(repr(b) for b in bad)} is a path; a label is the name of the runs"
            " <label>-1 and <label>-2 under --results, without '/' or a leading '.'"
        )
    if len(labels) > 1 and not no_run:
        return f"{option} {text}: several labels pool stored pairs, so only with --no-run; one label to run a pair"
    if len(set(labels)) < len(labels):
        return f"{option} {text}: a label given twice would count its pair twice; give each once"
    return None


def missing_runs_problem(results: Path, labels: list[str], option: str, text: str) -> str | None:
    """Why the stored pairs of ``labels`` cannot be read (a run ``<label>-1`` or ``-2`` without its
    host.json under ``results``, naming the pairs that are there), or None."""
    absent = [str(results / f"{x}-{i}" / "host.json") for x in labels for i in (1, 2)]
    absent = [a for a in absent if not Path(a).is_file()]
    if not absent:
        return None
    there = ", ".join(stored_pairs(results)) or "none"
    need = "each label L needs L-1 and L-2 with a host.json"
    return f"{option} {text}: {need}; missing: {', '.join(absent)} (pairs there: {there})"

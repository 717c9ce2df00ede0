"""End to end: a run next to a busy process names it and explains the warnings it caused; a
run inside a child cgroup with a CPU quota reports the quota and the cgroup that set it.

Both run one gil point (CPU-bound Python, 2 processes against the sequential baseline its job
interleaves) in the end-to-end checkout, each under a host label of its own (about 15 s each on
2 CPUs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest
from helpers import start_busy_stranger, venv_env

SMALL = (
    "experiments: [gil]\n"
    "selfcheck: {duration_s: 0.3, repeats: 2}\n"
    "rounds: {target_ci_pct: 0, workers: 1}\n"
    "gil: {workload: [cpu], mode: [processes], workers: [2], repeats: 6}\n"
)


def _run(work, tmp_path, host: str, **popen) -> subprocess.CompletedProcess:
    cfg = tmp_path / f"{host}.yaml"
    cfg.write_text(SMALL)
    cmd = [sys.executable, "-m", "snakemake", "--cores", "4", "--configfile", "config.quick.yaml", str(cfg)]
    return subprocess.run(
        [*cmd, "--config", f"host={host}"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=900,
        env=venv_env(),
        **popen,
    )


@pytest.mark.slow
def test_a_run_next_to_a_busy_process_names_it(quick_run, tmp_path):
    busy = start_busy_stranger()
    stranger = psutil.Process(busy)
    try:
        proc = _run(quick_run, tmp_path, "e2e-busy")
        own = stranger.cpu_times()  # the kernel's account of the stranger's CPU time, by another clock
        own_pct = 100 * (own.user + own.system) / (time.time() - stranger.create_time())
    finally:
        os.kill(busy, 9)
    assert proc.returncode == 0, proc.stderr[-3000:]
    host = quick_run / "results" / "e2e-busy"
    others = pd.read_csv(host / "interference.csv")
    top = others.iloc[0]
    assert top["pid"] == busy and "while True: pass" in top["cmdline"], others.head()
    # what the sampler read of it agrees with what the kernel gave it over the run (the windows
    # share its CPUs with our jobs, so the run's average is the floor, within the windows' spread)
    assert top["cpu_pct_median"] >= 0.5 * own_pct, (top.to_dict(), own_pct)
    contention = json.loads((host / "run.json").read_text())["contention"]
    assert contention["contended_points"] == contention["points"] > 0
    # the others' CPU includes the stranger's, and what is left is the CPUs minus it (run.json)
    assert contention["other_cpu_median"] >= 0.8 * top["cpu_pct_median"] / 100, contention
    assert contention["cpus_left"] == pytest.approx(contention["cpus"] - contention["other_cpu_median"])
    summary = pd.read_csv(host / "gil" / "summary.csv")
    assert (summary["top_other_pid"] == busy).all() and summary["contended"].all()
    # the findings and the warnings state the measured cause, naming the process
    text = " ".join(json.loads((host / "gil" / "findings.json").read_text())["findings"])
    assert f"most of all pid {busy} `python" in text, text
    fidelity = pd.read_csv(host / "fidelity.csv").set_index("check")
    check = fidelity.loc["CPU-bound Python: 2 processes over sequential"]
    if check["verdict"] == "warn":  # "2 processes got x CPUs", or, with the probe's reading, "2 processes ran x"
        said = check["reason"]
        assert f"pid {busy}" in said and ("2 processes got" in said or "2 processes ran" in said), check.to_dict()
    html = (host / "report.html").read_text()
    assert f"pid {busy}" in html and "were contended" in html and "CPUs left" in html
    assert f"contended (pid {busy} python" in html  # the table's flag names it too


@pytest.mark.slow
def test_a_run_in_a_child_cgroup_reports_its_quota(quick_run, tmp_path, child_cgroup):
    proc = _run(quick_run, tmp_path, "e2e-quota", preexec_fn=child_cgroup.enter)
    assert proc.returncode == 0, proc.stderr[-3000:]
    host = quick_run / "results" / "e2e-quota"
    info = json.loads((host / "host.json").read_text())
    assert info["cgroup_quota_cpus"] == 1.0 and info["cgroup_quota_cgroup"] == child_cgroup.cgroup
    assert info["available_cpus"] == 1 and len(info["affinity"]) == len(os.sched_getaffinity(0))
    job = json.loads(
        (
            host / "gil" / "interpreter~default" / "workload~cpu" / "mode~processes" / "workers~2" / "job.json"
        ).read_text()
    )
    assert job["capacity"]["quota_cgroup"] == child_cgroup.cgroup
    metrics = pd.read_csv(
        host / "gil" / "interpreter~default" / "workload~cpu" / "mode~processes" / "workers~2" / "metrics.csv"
    )
    assert (metrics["available_cpus"] == 1).all()
    text = " ".join(json.loads((host / "gil" / "findings.json").read_text())["findings"])
    assert f"this host has 1 available CPU (a CPU quota of 1 CPU set by cgroup {child_cgroup.cgroup})" in text
    html = (host / "report.html").read_text()
    assert f"1 CPU, set by cgroup {child_cgroup.cgroup}" in html

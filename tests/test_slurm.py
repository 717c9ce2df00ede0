"""On a real SLURM: a single-node cluster from Debian's packages (scripts/slurm-test-cluster.sh)
runs the quick config through Snakemake's SLURM executor as two host labels, one per partition,
then `snakemake compare` puts them side by side; the cluster is torn down after.

The node is this machine: `debug` (with the node feature `cpulab` as the label's constraint)
gives its jobs every CPU, `onecpu` is the label whose jobs ask for one CPU (SLURM's
task/affinity binds them to it, as a confined cluster job is). Skipped
where SLURM cannot be brought up here (not root, no apt), except with LAB_REQUIRE_SLURM=1 (CI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pandas as pd
import pytest
from conftest import IGNORE, ROOT
from helpers import venv_env

SCRIPT = ROOT / "scripts" / "slurm-test-cluster.sh"

#: The quick config, smaller: the self-check and two experiments with short windows, so that
#: both host labels' SLURM jobs (each starts Snakemake again inside, about 7 s) fit in minutes.
OVERLAY = """
cluster:
  hosts:
    slurm-2cpu: {partition: debug, constraint: cpulab, cpus: %(cpus)d}
    slurm-1cpu: {partition: onecpu, cpus: 1}
experiments: [gil, intraop]
selfcheck: {duration_s: 0.3, repeats: 2}
rounds: {target_ci_pct: 0, workers: 1}
gil: {workload: [cpu, io], mode: [sequential, processes], workers: [2]}
intraop: {workload: [matmul], threads: [1, 2]}
"""

DAEMONS = ("slurmctld", "slurmd", "munged")


def _daemons() -> list[str]:
    """The SLURM and munge daemons running now."""
    return [d for d in DAEMONS if subprocess.run(["pgrep", "-x", d], capture_output=True).returncode == 0]


@pytest.fixture(scope="module")
def slurm():
    """The cluster, up for the module's tests; down (no daemon left) after them."""
    why = ""
    if os.geteuid() != 0:
        why = "bringing SLURM up needs root"
    elif shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        why = "no apt-get to install SLURM from Debian's packages"
    if why:
        if os.environ.get("LAB_REQUIRE_SLURM"):
            pytest.fail(f"LAB_REQUIRE_SLURM is set but {why}")
        pytest.skip(why)
    t = time.perf_counter()
    up = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-3000:]
    print(f"SLURM up in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    try:
        yield
    finally:
        t = time.perf_counter()
        down = subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, text=True, timeout=120)
        print(f"SLURM down in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        assert down.returncode == 0, down.stderr[-2000:]
        assert _daemons() == [], _daemons()


@pytest.mark.slow
def test_two_host_labels_through_the_slurm_executor_then_compare(slurm, tmp_path):
    work = tmp_path / "repo"
    shutil.copytree(ROOT, work, ignore=IGNORE)
    (work / "cluster.yaml").write_text(OVERLAY % {"cpus": os.cpu_count()})
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "--jobs", "3"]
    cmd += ["--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "1"]
    cmd += ["--seconds-between-status-checks", "1", "--latency-wait", "5"]
    cmd += ["--configfile", "config.quick.yaml", "cluster.yaml"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=1500, env=venv_env())
    took = time.perf_counter() - t
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(f"SLURM run of both host labels: {took:.0f} s", file=sys.stderr)
    results = work / "results"
    hosts = {h: json.loads((results / h / "host.json").read_text()) for h in ("slurm-2cpu", "slurm-1cpu")}
    # host.json was collected in a job on a node of each label; the one-CPU label's job was bound
    # to the CPU it asked for, and every measurement says so
    assert hosts["slurm-2cpu"]["available_cpus"] == os.cpu_count()
    assert hosts["slurm-1cpu"]["available_cpus"] == 1 and len(hosts["slurm-1cpu"]["affinity"]) == 1
    for label, host in hosts.items():
        jobs = [json.loads(p.read_text()) for p in (results / label).rglob("job.json")]
        assert len(jobs) >= 5
        for job in jobs:
            assert job["node"]["hostname"] == host["hostname"] and job["node"]["cpu_model"] == host["cpu_model"]
            assert job["node"]["slurm_job_id"], job["node"]  # measured inside a SLURM job
        metrics = pd.concat(pd.read_csv(p) for p in (results / label / "gil").rglob("metrics.csv"))
        assert set(metrics["available_cpus"]) == {host["available_cpus"]}
        assert (results / label / "report.html").exists()
    # the comparison, run as usual (no SLURM): both labels side by side
    compare = [sys.executable, "-m", "snakemake", "--cores", "4", "compare", "--configfile", "cluster.yaml"]
    proc = subprocess.run(compare, cwd=work, capture_output=True, text=True, timeout=600, env=venv_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((results / "compare" / "hosts.json").read_text())
    assert sorted(h["name"] for h in meta["hosts"]) == ["slurm-1cpu", "slurm-2cpu"]
    table = pd.read_csv(results / "compare" / "comparison.csv")
    assert (table["status"] == "compared").sum() >= 4
    assert "slurm-1cpu" in (results / "compare" / "report.html").read_text()

"""On a real SLURM: a single-node cluster from Debian's packages (scripts/slurm-test-cluster.sh)
runs the quick config through Snakemake's SLURM executor as two host labels, one per partition,
then `snakemake compare` puts them side by side; the cluster is torn down after.

The node is this machine: `debug` (with the node feature `cpulab` as the label's constraint)
gives its jobs every CPU, `onecpu` is the label whose jobs ask for one CPU (SLURM's
task/affinity binds them to it, as a confined cluster job is).

Bringing the cluster up writes /etc/slurm/slurm.conf and starts munged, slurmctld and slurmd, so
it runs only when asked (``LAB_ALLOW_SLURM=1``; ``LAB_REQUIRE_SLURM=1`` in CI, where it fails
instead of skipping) or where the machine has nothing to lose: root, SLURM installed, no
slurm.conf and no SLURM or munge daemon running. Debian's packages are installed only when
asked. The script's own safety (it refuses beside a SLURM it did not start, stops only the pids
it started, and a crash between up and down leaves nothing that down cannot undo) is tested
here too, the crash with the real daemons.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from side_runs import DAEMONS, SCRIPT, pid_alive, slurm_permission, slurm_running, slurm_script


def _refuse(why: str, required: bool) -> None:
    """Skip with ``why``, or fail under LAB_REQUIRE_SLURM (CI), where the cluster must run."""
    if required:
        pytest.fail(f"LAB_REQUIRE_SLURM is set but {why}")
    pytest.skip(why)


def _permission() -> dict:
    """The environment to bring the cluster up with, or a skip (a failure under
    LAB_REQUIRE_SLURM) that says what it would touch and how to allow it."""
    env, why, required = slurm_permission()
    if env is None:
        _refuse(why, required)
    return env


def _fake_daemon(tmp_path: Path, name: str) -> subprocess.Popen:
    """A process whose name is a SLURM daemon's (a copy of sleep): stands for a SLURM of the
    machine's own, and is only ever stopped by the test that started it."""
    exe = tmp_path / "bin" / name
    exe.parent.mkdir(exist_ok=True)
    shutil.copy("/bin/sleep", exe)
    return subprocess.Popen([str(exe), "300"])


def test_up_refuses_beside_a_slurm_it_did_not_start_and_down_stops_only_its_own_pids(tmp_path):
    """No root needed: the refusal comes before anything is touched; ``down`` after a crash puts
    the kept-aside slurm.conf back, and a pid file whose pid is now another program's (here the
    foreign daemon's) stops nothing."""
    foreign = _fake_daemon(tmp_path, "slurmd")
    try:
        conf, cluster = tmp_path / "slurm.conf", tmp_path / "c"
        env = {**os.environ, "LAB_SLURM_DIR": str(cluster), "LAB_SLURM_CONF": str(conf)}
        up = slurm_script("up", env=env, timeout=60)
        assert up.returncode == 3 and up.stdout == "", (up.returncode, up.stdout, up.stderr)
        assert len(up.stderr.strip().splitlines()) == 1 and f"slurmd (pid {foreign.pid})" in up.stderr, up.stderr
        assert "did not start" in up.stderr and not cluster.exists() and not conf.exists()
        # what a crashed `up` leaves: its marker, slurm.conf written over the user's, the user's kept
        # aside, and a pid file that names a pid which is now the foreign daemon's
        (cluster / "run").mkdir(parents=True)
        (cluster / ".cpulab-slurm").write_text("")
        conf.write_text("# Written by cpu-lab scripts/slurm-test-cluster.sh; put back by its 'down'.\n")
        (cluster / "slurm.conf.saved").write_text("# the administrator's own\n")
        (cluster / "written").write_text(str(conf))
        (cluster / "run" / "slurmctld.pid").write_text(str(foreign.pid))
        status = slurm_script("status", env=env, timeout=60)
        assert f"not ours: slurmd (pid {foreign.pid})" in status.stdout and "running:" not in status.stdout
        down = slurm_script("down", env=env, timeout=60)
        assert down.returncode == 0, down.stderr
        assert conf.read_text() == "# the administrator's own\n" and not cluster.exists()
        assert foreign.poll() is None  # still running: never stopped by name, nor by a stale pid
        # where there was no slurm.conf, the one `up` wrote is removed; a file of someone else's
        # at that path since is left alone
        for text, kept in (
            ("# Written by cpu-lab scripts/slurm-test-cluster.sh; put back ...\n", False),
            ("x\n", True),
        ):
            (cluster / "run").mkdir(parents=True)
            (cluster / ".cpulab-slurm").write_text("")
            (cluster / "written").write_text(str(conf))
            conf.write_text(text)
            assert slurm_script("down", env=env, timeout=60).returncode == 0
            assert conf.exists() == kept and not cluster.exists()
        # a directory that is not the script's own is never removed
        cluster.mkdir()
        (cluster / "notes.txt").write_text("mine")
        down = slurm_script("down", env=env, timeout=60)
        assert down.returncode == 2 and "not made by this script" in down.stderr
        assert (cluster / "notes.txt").read_text() == "mine"
    finally:
        foreign.kill()
        foreign.wait()


def _ours(env: dict) -> dict[str, int]:
    """Daemon -> pid of the daemons the script's pid files name (``status``)."""
    out = slurm_script("status", env=env, timeout=60).stdout.splitlines()
    return {ln.split()[1]: int(ln.split("pid ")[1].rstrip(")")) for ln in out if ln.startswith("running: ")}


@pytest.mark.slow
def test_a_crash_between_up_and_down_leaves_nothing_that_down_or_up_cannot_undo(tmp_path):
    """The real daemons, with slurm.conf at a path of the test's (LAB_SLURM_CONF) that holds an
    administrator's file: the process that ran ``up`` is killed; the next ``up`` takes over what
    it left (its own daemons, not a foreign SLURM), and ``down`` run by hand after a second kill
    stops every pid it started and puts the administrator's slurm.conf back."""
    env = _permission()
    conf = tmp_path / "slurm.conf"
    conf.write_text("# the administrator's own\n")
    cluster = Path(f"/tmp/cpulab-slurm-crash-{os.getpid()}")  # short: munge's socket path is limited
    env = {**env, "LAB_SLURM_DIR": str(cluster), "LAB_SLURM_CONF": str(conf)}
    holder = (
        "import subprocess, sys, time\n"
        f"r = subprocess.run(['bash', {str(SCRIPT)!r}, 'up'], capture_output=True, text=True)\n"
        "print(r.returncode, r.stderr[-2000:].replace(chr(10), ' '), flush=True)\n"
        "time.sleep(3600)\n"
    )
    try:
        seen = []
        for _ in range(2):  # the test process that brought it up is killed, twice
            proc = subprocess.Popen([sys.executable, "-c", holder], env=env, stdout=subprocess.PIPE, text=True)
            line = proc.stdout.readline()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert line.startswith("0"), line
            pids = _ours(env)
            assert sorted(pids) == sorted(DAEMONS), pids  # the crash left them running
            assert conf.read_text().startswith("# Written by cpu-lab")
            seen.append(pids)
        # the second `up` stopped what the first left and started its own
        assert not any(pid_alive(pid) for pid in seen[0].values())
        down = slurm_script("down", env=env, timeout=120)
        assert down.returncode == 0, down.stderr
        assert conf.read_text() == "# the administrator's own\n" and not cluster.exists()
        assert not any(pid_alive(pid) for pid in seen[1].values())
        assert slurm_running() == []
    finally:
        if cluster.exists():
            slurm_script("down", env=env, timeout=120)


@pytest.mark.slow
@pytest.mark.side_run("slurm")
def test_two_host_labels_through_the_slurm_executor_then_compare(side_runs):
    """The run itself is tests/side_runs.py's ``run_slurm`` (beside the other side runs): the
    cluster up, the quick config through the SLURM executor as two host labels, then
    ``snakemake compare``; the cluster down with no daemon left and slurm.conf put back."""
    run = side_runs["slurm"].value()
    cluster = run["cluster"]
    if cluster.env is not None:  # down, whatever the run did
        assert cluster.down[0] == 0, cluster.down[1]
        assert cluster.left == [] and slurm_running() == [], cluster.left  # no daemon left
        assert cluster.conf_restored  # slurm.conf put back, or removed as it was absent
    if "skipped" in run:
        _refuse(run["skipped"], run["required"])
    assert "up_error" not in run, run["up_error"]
    assert run["proc"][0] == 0, run["proc"][1]
    print(f"SLURM run of both host labels: {run['took']:.0f} s", file=sys.stderr)
    work = run["work"]
    results = work / "results"
    hosts = {h: json.loads((results / h / "host.json").read_text()) for h in ("slurm-2cpu", "slurm-1cpu")}
    # host.json was collected in a job on a node of each label; the one-CPU label's job was bound
    # to the CPU it asked for, and every measurement says so
    assert hosts["slurm-2cpu"]["available_cpus"] == len(os.sched_getaffinity(0))
    assert hosts["slurm-1cpu"]["available_cpus"] == 1 and len(hosts["slurm-1cpu"]["affinity"]) == 1
    for label, host in hosts.items():
        jobs = [json.loads(p.read_text()) for p in (results / label).rglob("job.json")]
        assert len(jobs) == 2  # the self-check and gil's point, each a SLURM job
        for job in jobs:
            assert job["node"]["hostname"] == host["hostname"] and job["node"]["cpu_model"] == host["cpu_model"]
            assert job["node"]["slurm_job_id"], job["node"]  # measured inside a SLURM job
        metrics = pd.concat(pd.read_csv(p) for p in (results / label / "gil").rglob("metrics.csv"))
        assert set(metrics["available_cpus"]) == {host["available_cpus"]}
        assert (results / label / "report.html").exists()
    # the local rules (analysis, figures, reports) forked from a job server on this machine that
    # imports no torch; the measurements did not (each ran in its SLURM job, bound to the CPUs
    # it asked for: the one-CPU label's available_cpus above)
    assert "preloaded for analysis and report jobs only, no torch" in run["server_log"], run["server_log"]
    # the comparison, run as usual (no SLURM) after the run: both labels side by side
    assert run["compare"][0] == 0, run["compare"][1]
    meta = json.loads((results / "compare" / "hosts.json").read_text())
    assert sorted(h["name"] for h in meta["hosts"]) == ["slurm-1cpu", "slurm-2cpu"]
    table = pd.read_csv(results / "compare" / "comparison.csv")
    # gil's point: the baseline label's row, and the other label's compared with it
    assert sorted(table["status"]) == ["baseline", "compared"], table
    assert "slurm-1cpu" in (results / "compare" / "report.html").read_text()

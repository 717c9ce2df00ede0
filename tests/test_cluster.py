"""A cluster run without a cluster: the workflow's SLURM requests per host label (dry run), the
config's checks, and points measured on a node unlike the host's."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import venv_env, write_point

from analysis.__main__ import main as analysis_main

CLUSTER = """
cluster:
  hosts:
    big: {partition: amd, constraint: zen4, cpus: 8}
    small: {cpus: 1}
experiments: [gil, intraop]
intraop: {workload: [matmul], threads: auto}
"""


def _dry_run(root, tmp_path, text: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text(text)
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "16", "--configfile", "config.quick.yaml", str(cfg)]
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300, env=venv_env())


#: The rules that measure: on a cluster, SLURM jobs holding a node.
MEASURING = {"host_info", "user_env", "interpreters", "selfcheck", "measure"}


def _jobs(stdout: str) -> list[dict]:
    """The dry run's jobs: rule name and the lines describing it."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", stdout):
        m = re.match(r"(?:local)?rule (\w+):", block.strip())
        if m:
            jobs.append({"rule": m.group(1), "text": block})
    return jobs


def test_every_rule_that_does_not_measure_is_a_local_rule(root):
    """On a cluster only measurements are SLURM jobs; analysis, figures and reports run where
    Snakemake runs. Read from the rule files: every rule, and every `localrules:` block."""
    files = [root / "Snakefile", *root.glob("*/rules.smk")]
    text = "\n".join(f.read_text() for f in files)
    rules = set(re.findall(r"^rule (\w+):", text, re.MULTILINE))
    local = {
        name.strip().rstrip(",")
        for block in re.findall(r"^localrules:\n((?:    \w+,?\n)+)", text, re.MULTILINE)
        for name in block.split()
    }
    assert MEASURING <= rules
    assert local == rules - MEASURING, local ^ (rules - MEASURING)


@pytest.mark.slow
def test_every_host_label_is_measured_on_whole_nodes_of_its_own(root, tmp_path):
    proc = _dry_run(root, tmp_path, CLUSTER)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(proc.stdout)
    assert {j["rule"] for j in jobs} >= MEASURING
    for job in jobs:
        text = job["text"]
        if job["rule"] in MEASURING:
            assert "slurm_extra=--exclusive" in text, text
            if "host=big" in text:
                assert "slurm_partition=amd" in text and "constraint=zen4" in text and "threads: 8" in text
            else:
                # one thread: the dry run prints no threads line
                assert "host=small" in text and "threads:" not in text and "constraint=" not in text
            assert "measure=" not in text  # the node is held exclusively: no global limit
    # sweeps resolve with each label's CPUs: threads auto = 1, 2, 4, 8 plus 16 on big, 1 and 2 on small
    big = {m for m in re.findall(r"host=big, experiment=intraop, point=workload~matmul/threads~(\d+)", proc.stdout)}
    small = {m for m in re.findall(r"host=small, experiment=intraop, point=workload~matmul/threads~(\d+)", proc.stdout)}
    assert big == {"1", "2", "4", "8", "16"} and small == {"1", "2"}
    for label in ("big", "small"):
        assert f"results/{label}/report.html" in proc.stdout


def test_bad_cluster_config_is_named(root, tmp_path):
    """A host label without its node's CPUs stops Snakemake in one line; the config's other
    cluster refusals come from the same check (lab.configcheck.validate_config), tested without
    starting Snakemake in tests/test_config.py."""
    proc = _dry_run(root, tmp_path, "cluster: {hosts: {big: {partition: amd}}}")
    assert proc.returncode != 0 and "config key cluster.hosts.big: " in proc.stderr, proc.stderr[-2000:]


def _point(root, mode, tps, node):
    path = write_point(
        root, "gil", {"workload": "cpu", "mode": mode, "workers": 2}, [{"wall_s": 1.0, "tasks_per_s": t} for t in tps]
    )
    path.with_name("job.json").write_text(json.dumps({"node": node}))
    return path


def test_points_from_a_node_unlike_the_host_are_left_out_or_flagged(tmp_path):
    like = {"hostname": "n1", "cpu_model": "AMD EPYC 9654", "logical_cpus": 192}
    unlike = {"hostname": "n7", "cpu_model": "AMD EPYC 7763", "logical_cpus": 128}
    paths = [_point(tmp_path, "sequential", [1.0] * 6, like), _point(tmp_path, "processes", [2.0] * 6, unlike)]
    host = tmp_path / "host.json"
    host.write_text(
        json.dumps({"host": "epyc", "cpu_model": "AMD EPYC 9654", "logical_cpus": 192, "available_cpus": 192})
    )
    args = ["summarise", "--experiment", "gil", "--host-json", str(host)]
    assert analysis_main([*args, "--out-dir", str(tmp_path / "out"), *map(str, paths)]) == 0
    s = pd.read_csv(tmp_path / "out" / "summary.csv").set_index("mode")
    assert s.loc["processes", "status"] == "skipped" and s.loc["sequential", "status"] == "ok"
    assert s.loc["processes", "reason"].startswith("measured on node n7 (AMD EPYC 7763, 128 CPUs), not on a node like")
    assert "cluster.allow_mixed_nodes: true keeps it" in s.loc["processes", "reason"]
    assert analysis_main([*args, "--allow-mixed-nodes", "--out-dir", str(tmp_path / "kept"), *map(str, paths)]) == 0
    s = pd.read_csv(tmp_path / "kept" / "summary.csv").set_index("mode")
    assert s.loc["processes", "status"] == "ok" and bool(s.loc["processes", "other_node"])
    assert not bool(s.loc["sequential", "other_node"])
    reps = pd.read_csv(tmp_path / "kept" / "replicates.csv")
    assert set(reps["node"]) == {"n1", "n7"}


def test_the_slurm_plugin_accepts_what_the_workflow_asks_for():
    """The pinned plugin validates slurm_extra and refuses the options it sets itself
    (--constraint, --mem, ...): the workflow passes those as the plugin's own resources."""
    validation = pytest.importorskip("snakemake_executor_plugin_slurm.validation")
    from types import SimpleNamespace

    def job(extra):
        return SimpleNamespace(resources=SimpleNamespace(slurm_extra=extra))

    validation.validate_slurm_extra(job("--exclusive"))  # what MEASURE_RESOURCES passes
    for refused in ("--exclusive --constraint=zen4", "--exclusive --mem=0"):
        with pytest.raises(Exception, match="not allowed"):
            validation.validate_slurm_extra(job(refused))


def test_the_slurm_profile_without_cluster_hosts_is_refused_before_any_submission(root, tmp_path):
    """profiles/slurm with no cluster.hosts would submit measurements that share nodes (and,
    without --cores, stopped on Snakemake's 'requires a total number of cores')."""
    import shutil

    from conftest import IGNORE

    work = tmp_path / "repo"
    shutil.copytree(root, work, ignore=IGNORE)
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "--configfile", "config.quick.yaml"]
    # the executor plugin waits --slurm-init-seconds-before-status-checks (40 s by default) before
    # it lets a run that stopped at DAG building exit: 1 s here, the refusal is the same
    cmd += ["--slurm-init-seconds-before-status-checks", "1"]
    cmd += ["--config", "experiments=[gil]", "host=noclu"]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=300, env=venv_env())
    assert proc.returncode != 0
    assert "config key cluster.hosts: none set, but the executor is 'slurm'" in proc.stderr, proc.stderr[-2000:]
    assert "Submitted" not in proc.stderr and not (work / "results" / "noclu").exists()


def test_a_run_without_a_host_label_says_which_one_it_took(root, tmp_path):
    """`--config host=` (empty), null or no host at all: the hostname, said once on stderr with the
    directory and how to set another; a run that names its label, or a cluster's, says nothing."""
    from lab.host import default_host

    proc = _dry_run(root, tmp_path, "host:\nexperiments: [gil]\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    label = default_host()
    assert f"host label {label!r}, this machine's hostname: measurements go under results/{label}/" in proc.stderr
    named = _dry_run(root, tmp_path, "host: mylaptop\nexperiments: [gil]\n")
    assert named.returncode == 0 and "this machine's hostname" not in named.stderr


def test_compare_with_one_host_stops_before_any_job_starts(root, tmp_path):
    """`snakemake compare` with fewer than 2 host directories is refused, in one line, as the
    Snakefile is read, naming what it found and what to do, rather than in a job after the run
    started, or inside Snakemake's InputFunctionException block. (Run in an empty directory, so
    that no results/ of this checkout's own counts; the target is the comparison's table, which
    reads no template.) The other refusals come from the same check
    (analysis.hosts.compare_dirs_problem): test_compare_refuses_what_it_cannot_compare."""
    one = tmp_path / "one"
    one.mkdir()
    (one / "host.json").write_text("{}")
    cfg = tmp_path / "one.yaml"
    cfg.write_text(f"compare: {{hosts: [], dirs: [{one}]}}\n")
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "4", "results/compare/comparison.csv"]
    cmd += ["--configfile", str(cfg), "--directory", str(tmp_path), "--snakefile", str(root / "Snakefile")]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300, env=venv_env())
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "InputFunctionException" not in out and "Traceback" not in out, out[-2000:]
    assert f"snakemake compare needs at least 2 host directories with a host.json, found 1 ({one})" in out


def test_compare_refuses_what_it_cannot_compare(tmp_path, monkeypatch):
    """The host directories compare reads (analysis.hosts.compare_dirs) and why they cannot be
    compared: a listed host never measured, two directories of one name (a host is named by its
    directory), a baseline that is not among the hosts; one directory reached twice counts once."""
    from analysis.hosts import compare_dirs, compare_dirs_problem

    monkeypatch.chdir(tmp_path)
    for d in ("results/here", "results/compare", "elsewhere/here", "two"):
        Path(d).mkdir(parents=True)
        Path(d, "host.json").write_text("{}")
    assert compare_dirs(None, None) == ["results/here"]  # the comparison's own directory left out
    assert compare_dirs([], [str(tmp_path / "results" / "here"), "two/"]) == ["results/here", "two"]
    said = compare_dirs_problem(compare_dirs(["neverhere"], None))
    assert said.startswith("snakemake compare: results/neverhere has no host.json (not measured here?)")
    both = compare_dirs(None, ["elsewhere/here"])
    assert compare_dirs_problem(both) == (
        "snakemake compare: a host is named by its directory, and here names more than one"
        " (results/here, elsewhere/here): copy one to a directory of another name"
    )
    pair = compare_dirs(None, ["two"])
    assert compare_dirs_problem(pair) is None and compare_dirs_problem(pair, "two") is None
    assert compare_dirs_problem(pair, "nope").startswith(
        "config key compare.baseline: 'nope' is not among the hosts compared (here, two)"
    )
    assert "found 0 (none)" in compare_dirs_problem([])


def test_a_failed_points_command_keeps_the_runs_profile(root, tmp_path):
    """A failed point's advice (``analysis status``) measures it again with the run's own
    ``--profile`` (a cluster run's, which names the executor and its account) as well as its
    config files and overrides: it was ``snakemake --cores 4`` with the config alone, which
    would have measured on the login node. Read from a dry run's point_status command."""
    profile = tmp_path / "my profile"
    profile.mkdir()
    (profile / "config.yaml").write_text("cores: 2\n")
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-n",
        "-p",
        "--profile",
        str(profile),
        "--configfile",
        "config.quick.yaml",
    ]
    cmd += ["--config", "host=cl", "experiments=[gil]"]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300, env=venv_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = [j["text"] for j in _jobs(proc.stdout) if j["rule"] == "point_status"]
    assert len(status) == 1, proc.stdout[-3000:]
    rerun = re.search(r"--rerun-args ('(?:[^']|'\"'\"')*')", status[0]).group(1)
    words = shlex.split(shlex.split(rerun)[0])  # one shell word holding the arguments
    assert words[:4] == ["--profile", str(profile), "--configfile", "config.quick.yaml"], words
    assert words[4:] == ["--config", 'host="cl"', 'experiments=["gil"]'], words


def test_a_label_whose_directory_holds_another_machine_is_refused_before_measuring(root, tmp_path):
    """results/<label>/host.json copied from another machine (or left by this label on a VM of
    another CPU model): a local run measured every point, then set each aside as measured on
    another node, exited 0 and reported under the other machine's name. A run that would
    measure is refused before its first job, naming both machines; one that measures nothing
    there (here the user's environment; a copied directory's report redone) goes on."""
    from lab.hostinfo import node

    here = node()
    host = tmp_path / "results" / "zz" / "host.json"
    host.parent.mkdir(parents=True)
    host.write_text(json.dumps({"hostname": "laptop", "cpu_model": "Apple M2", "logical_cpus": 8}))
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", str(root / "config.quick.yaml")]
    cmd += ["--config", "host=zz", "experiments=[gil]", "--directory", str(tmp_path)]
    cmd += ["--snakefile", str(root / "Snakefile")]
    env = venv_env({**os.environ, "PYTHONPATH": str(root)})  # the jobs' python -m lab..., from here

    def run(target: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cmd, target], cwd=root, capture_output=True, text=True, timeout=300, env=env)

    proc = run("results/zz/selfcheck/metrics.csv")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out, out[-2000:]
    assert "Invalid host label 'zz': results/zz/host.json describes another machine (laptop, Apple M2, 8 CPUs)" in out
    assert f"not this one ({here['hostname']}, {here['cpu_model']}, {here['logical_cpus']} CPUs)" in out
    assert "--config host=NAME" in out and not (tmp_path / "results" / "zz" / "selfcheck").exists()
    proc = run("results/zz/user_env.json")  # measures nothing under the label's host.json
    assert proc.returncode == 0 and (tmp_path / "results" / "zz" / "user_env.json").exists(), proc.stderr[-2000:]


def test_a_file_where_a_run_writes_a_directory_is_named_in_one_line(root, tmp_path):
    """results/<label> or logs/<label> a file (or a directory that refuses new files): the run
    stopped in a 30-line traceback of Snakemake's (NotADirectoryError). It stops as the Snakefile
    is read, in one line naming the path and why."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "F").write_text("hi")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "G").write_text("hi")
    for label, said in (("F", "Cannot write results/F/: it cannot be a directory:"), ("G", "Cannot write logs/G/")):
        cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "4", "--configfile", str(root / "config.quick.yaml")]
        cmd += ["--config", f"host={label}"]
        cmd += ["--directory", str(tmp_path), "--snakefile", str(root / "Snakefile")]
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300, env=venv_env())
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "Traceback" not in out and said in out, out[-2000:]
        assert f"{tmp_path / ('results' if label == 'F' else 'logs') / label} is a file" in out


def test_an_interpreter_installed_after_a_run_is_probed_again(root, tmp_path):
    """An interpreter missing at the first run gives skipped points; installed afterwards (the
    README's own order: run, then scripts/build-free-threaded-python.sh), a plain run said
    "Nothing to be done" and kept them skipped. Where each command is found is a parameter of
    the interpreters rule, so the next run probes again (and measures the points that read it)."""
    late = tmp_path / "late-python"
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", str(root / "config.quick.yaml")]
    cmd += [
        "--config",
        "host=ip",
        "experiments=[convoy]",
        f"interpreters=[{{label: default}}, {{label: late, command: {late}}}]",
    ]
    cmd += ["--directory", str(tmp_path), "--snakefile", str(root / "Snakefile"), "results/ip/interpreters.json"]
    env = venv_env({**os.environ, "PYTHONPATH": str(root)})  # the job's python -m lab.interpreters, from here

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cmd, *extra], cwd=root, capture_output=True, text=True, timeout=300, env=env)

    first = run()
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    probed = json.loads((tmp_path / "results" / "ip" / "interpreters.json").read_text())["interpreters"]
    assert [e["ok"] for e in probed] == [True, False] and "not found" in probed[1]["reason"]
    same = run("-n")
    assert "Nothing to be done" in same.stdout + same.stderr  # nothing changed: nothing runs
    late.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    late.chmod(0o755)
    again = run("-n")
    assert "rule interpreters" in again.stdout and "Params have changed" in again.stdout, again.stdout[-3000:]

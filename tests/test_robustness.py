"""Faults: crashes, timeouts and interrupts of a measurement job (lab.supervise), and
what the analysis, the report and the status check make of them."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from analysis.__main__ import main as analysis_main
from lab.supervise import point_from_dir

ROOT = Path(__file__).resolve().parent.parent

#: A child that starts a grandchild (like a DataLoader worker), writes both pids, then runs BODY.
CHILD = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    def worker():
        time.sleep(600)
    if __name__ == "__main__":
        p = multiprocessing.get_context("fork").Process(target=worker, daemon=False)
        p.start()
        open(sys.argv[1], "w").write(f"{os.getpid()} {p.pid}")
        BODY
    """
)


@pytest.fixture(scope="module")
def job_server(tmp_path_factory):
    """A job server (lab/server.py) as the workflow starts one: ``(socket path, its process)``."""
    from lab import serverctl

    d = tmp_path_factory.mktemp("srv")
    path = str(d / "s.sock")
    procs = serverctl.start(path, {**os.environ, "PYTHONPATH": str(ROOT)}, str(d / "server.log"))
    try:
        yield path, procs[0]
    finally:
        serverctl.stop(procs)


def _supervise(tmp_path, body: str, timeout_s: float = 60, wait: bool = True, served: str | None = None):
    """``python -m lab.supervise ... -- python child.py PIDS``, or with ``served`` (a job server's
    socket) the rule's form, ``-- python -m lab.server run -- supervised_child PIDS``."""
    out = tmp_path / "results" / "h" / "gil" / "interpreter~default" / "workload~cpu" / "mode~threads" / "workers~2"
    pids = tmp_path / "pids.txt"
    script = tmp_path / "supervised_child.py"
    script.write_text(CHILD.replace("BODY", body))
    log = tmp_path / "job.log"
    cmd = [
        sys.executable,
        "-m",
        "lab.supervise",
        "--timeout-s",
        str(timeout_s),
        "--log",
        str(log),
        "--host",
        "h",
        "--experiment",
        "gil",
        "--out",
        str(out),
        "--",
        sys.executable,
        *(["-m", "lab.server", "run", "--", script.stem] if served else [str(script)]),
        str(pids),
    ]
    env = {**os.environ, "LAB_JOB_SERVER": served or "", "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    fh = open(log, "w")  # noqa: SIM115 - the child writes into it as a job's log
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env)
    if wait:
        proc.wait(timeout=120)
        fh.close()
    return proc, out, pids, log


def _pids(path: Path) -> list[int]:
    for _ in range(200):
        if path.exists() and path.read_text().strip():
            return [int(p) for p in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError("the child never wrote its pids")


def _gone(pids: list[int], timeout_s: float = 5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.1)
    return False


def test_point_from_dir():
    assert point_from_dir(Path("results/h/gil/workload~cpu/mode~threads/workers~2")) == {
        "workload": "cpu",
        "mode": "threads",
        "workers": "2",
    }


def test_crash_is_recorded_as_failed_with_the_log(tmp_path, capsys):
    proc, out, pids, log = _supervise(tmp_path, "p.kill(); raise RuntimeError('boom: the worker broke')")
    assert proc.returncode == 0
    m = pd.read_csv(out / "metrics.csv")
    assert m.loc[0, "status"] == "failed"
    assert "exit status 1" in m.loc[0, "reason"] and "RuntimeError: boom: the worker broke" in m.loc[0, "reason"]
    assert f"log: {log}" in m.loc[0, "reason"]
    assert m.loc[0, ["workload", "mode", "workers"]].tolist() == ["cpu", "threads", 2]
    assert pd.read_csv(out / "spans.csv").empty and pd.read_csv(out / "samples.csv").empty
    # the analysis accepts it, and the status check fails naming the point and the log
    summary_dir = tmp_path / "results" / "h" / "gil"
    assert (
        analysis_main(["summarise", "--experiment", "gil", "--out-dir", str(summary_dir), str(out / "metrics.csv")])
        == 0
    )
    s = pd.read_csv(summary_dir / "summary.csv")
    assert s.loc[0, "status"] == "failed" and s.loc[0, "n"] == 0
    assert analysis_main(["status", "--out", str(tmp_path / "status.csv"), str(summary_dir / "summary.csv")]) == 1
    st = pd.read_csv(tmp_path / "status.csv")
    assert st.loc[0, "metrics"].endswith("gil/interpreter~default/workload~cpu/mode~threads/workers~2/metrics.csv")
    err = capsys.readouterr().err
    point = shlex.quote(st.loc[0, "metrics"])  # a path with ~ (or a space) quoted for the shell
    assert f"--forcerun {point} --config host=h" in err and "fix that key" not in err
    # run by the workflow, the command carries the run's own config files and overrides
    rerun = "--configfile config.quick.yaml 'my run.yaml' --config 'host=\"h\"' job_timeout_s=4"
    args = ["status", "--rerun-args", rerun, "--out", str(tmp_path / "status.csv"), str(summary_dir / "summary.csv")]
    assert analysis_main(args) == 1
    err = capsys.readouterr().err
    assert f"Measure the others again with: snakemake --cores 4 {rerun} --forcerun {point}" in err


def test_timeout_kills_the_whole_tree(tmp_path):
    t0 = time.monotonic()
    proc, out, pids, _ = _supervise(tmp_path, "time.sleep(600)", timeout_s=1.5)
    assert proc.returncode == 0 and time.monotonic() - t0 < 30
    m = pd.read_csv(out / "metrics.csv")
    assert m.loc[0, "status"] == "timeout" and "exceeded the job timeout of 1.5 s" in m.loc[0, "reason"]
    assert _gone(_pids(pids))  # the child and its worker


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_interrupt_stops_the_tree_and_writes_nothing(tmp_path, signum):
    proc, out, pids, log = _supervise(tmp_path, "time.sleep(600)", wait=False)
    family = _pids(pids)
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == 128 + signum
    assert _gone(family)
    assert not (out / "metrics.csv").exists()


def test_supervisor_killed_outright_takes_the_child_along(tmp_path):
    proc, out, pids, _ = _supervise(tmp_path, "time.sleep(600)", wait=False)
    family = _pids(pids)
    os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up: PR_SET_PDEATHSIG must do it
    proc.wait(timeout=10)
    assert _gone(family[:1])
    psutil.Process(family[1]).kill() if psutil.pid_exists(family[1]) else None  # the test's own plain worker


def test_success_passes_through(tmp_path):
    point = "results/h/gil/interpreter~default/workload~cpu/mode~threads/workers~2"
    csv = "host,experiment,interpreter,workload,mode,workers,repeat,status\\nh,gil,default,cpu,threads,2,0,ok\\n"
    body = (
        f"p.kill(); d = os.path.join(os.path.dirname(sys.argv[1]), '{point}'); os.makedirs(d, exist_ok=True); "
        f"open(os.path.join(d, 'metrics.csv'), 'w').write('{csv}')"
    )
    proc, out, _, _ = _supervise(tmp_path, body)
    assert proc.returncode == 0
    assert pd.read_csv(out / "metrics.csv").loc[0, "status"] == "ok"


def test_a_served_job_is_the_supervisors_own_and_stops_with_it(tmp_path, job_server):
    """The rule's form with a server: no client interpreter between the supervisor and the job,
    which the server forked; an interrupt stops the job's whole tree, a timeout records the
    point, and a supervisor killed outright takes the job along (the server sees it go)."""
    path, server = job_server
    proc, out, pids, _ = _supervise(tmp_path, "time.sleep(600)", wait=False, served=path)
    family = _pids(pids)
    assert psutil.Process(family[0]).ppid() == server.pid and not psutil.Process(proc.pid).children()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM and _gone(family)
    assert not (out / "metrics.csv").exists()

    pids.unlink()
    proc, out, pids, _ = _supervise(tmp_path, "time.sleep(600)", wait=False, served=path)
    family = _pids(pids)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert _gone(family)

    pids.unlink()
    proc, out, pids, _ = _supervise(tmp_path, "time.sleep(600)", timeout_s=1.5, served=path)
    assert proc.returncode == 0 and _gone(_pids(pids))
    assert pd.read_csv(out / "metrics.csv").loc[0, "status"] == "timeout"


def test_a_server_that_does_not_answer_is_timed_out_and_an_early_interrupt_leaves_it_serving(tmp_path, job_server):
    """The job's timeout counts from before the request (a server stopped here never answers);
    a supervisor interrupted before the server named the job hangs up, and the server, once it
    runs again, kills that job and goes on serving (it died of the broken pipe before)."""
    path, server = job_server
    os.kill(server.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        proc, out, _, _ = _supervise(tmp_path, "time.sleep(600)", timeout_s=1.5, served=path)
        assert proc.returncode == 0 and time.monotonic() - t0 < 30
        assert pd.read_csv(out / "metrics.csv").loc[0, "status"] == "timeout"
        (tmp_path / "int").mkdir()
        proc, out, _, _ = _supervise(tmp_path / "int", "time.sleep(600)", wait=False, served=path)
        time.sleep(1.0)  # its request sent, no pid back
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 128 + signal.SIGINT
    finally:
        os.kill(server.pid, signal.SIGCONT)
    time.sleep(1.0)  # the server takes both requests, whose clients have hung up
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and psutil.Process(server.pid).children():
        time.sleep(0.1)
    assert server.poll() is None and not psutil.Process(server.pid).children()  # serving, no job left
    (tmp_path / "ok").mkdir()
    proc, out, pids, _ = _supervise(tmp_path / "ok", "time.sleep(600)", wait=False, served=path)
    assert psutil.Process(_pids(pids)[0]).ppid() == server.pid  # forked by the server, still serving
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM


def test_a_served_jobs_crash_is_recorded_with_its_exit_status(tmp_path, job_server):
    proc, out, _, log = _supervise(tmp_path, "p.kill(); raise SystemExit(3)", served=job_server[0])
    reason = pd.read_csv(out / "metrics.csv").loc[0, "reason"]
    assert proc.returncode == 0 and "crashed (exit status 3)" in reason and f"log: {log}" in reason


def test_the_supervisors_help_lists_its_options_and_a_missing_command_is_named(capsys):
    from lab.supervise import main

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--timeout-s" in capsys.readouterr().out
    base = ["--timeout-s", "3", "--out", "o", "--host", "h", "--experiment", "gil"]
    for argv in (base, [*base, "--"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2 and "no command after --" in capsys.readouterr().err


@pytest.mark.parametrize("display", [None, ":99"])
def test_figures_draw_without_a_display(tmp_path, display):
    """DISPLAY unset, or naming a display that does not exist: charts still render (Agg)."""
    import json

    from helpers import gil_fixture

    paths = gil_fixture(tmp_path / "points")
    host = tmp_path / "h"
    (host / "gil").mkdir(parents=True)
    (host / "host.json").write_text(json.dumps({"available_cpus": 2}))
    assert analysis_main(["summarise", "--experiment", "gil", "--out-dir", str(host / "gil"), *map(str, paths)]) == 0
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MPLBACKEND")}
    if display:
        env["DISPLAY"] = display
    out = tmp_path / "gil_speedup.png"
    proc = subprocess.run(
        [sys.executable, "-m", "analysis", "figure", "gil_speedup", "--host-dir", str(host), "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("out", ["", "a-file", "a-file/below"])
def test_an_output_directory_that_cannot_be_one_is_refused_before_measuring(tmp_path, out):
    (tmp_path / "a-file").write_text("kept\n")
    cmd = [sys.executable, "-m", "lab.point", "gil", "--workload", "io", "--io-iterations", "2", "--repeats", "1"]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.run([*cmd, "--out", out], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"--out {out!r} " in proc.stderr and ("is empty" in proc.stderr or "a-file is a file" in proc.stderr)
    assert "[gil]" not in proc.stderr  # refused before the job started measuring
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"] and (tmp_path / "a-file").read_text() == "kept\n"


def test_missing_inputs_of_analysis_and_report_are_named_without_a_traceback(tmp_path, capsys):
    from report.__main__ import main as report_main

    missing = tmp_path / "none" / "metrics.csv"
    assert analysis_main(["summarise", "--experiment", "gil", "--out-dir", str(tmp_path / "s"), str(missing)]) == 1
    assert f"error: cannot read {missing}: No such file or directory" in capsys.readouterr().err
    assert analysis_main(["trace", "gil", "--host-dir", str(tmp_path), "--out", str(tmp_path / "t.json")]) == 1
    assert f"cannot read {tmp_path / 'gil' / 'spans.csv'}" in capsys.readouterr().err
    for given, said in (
        ("{bad", "--json: not JSON (Expecting property name"),
        ("[1, 2]", "--json: holds a JSON list, where a JSON object"),
    ):
        assert analysis_main(["config", "--json", given, "--out", str(tmp_path / "c.yaml")]) == 1
        assert said in capsys.readouterr().err and not (tmp_path / "c.yaml").exists()
    out = ["--html", str(tmp_path / "r.html"), "--md", str(tmp_path / "r.md")]
    for args, said in (
        (["--host-dir", str(tmp_path), "--experiments", "gil"], f"cannot read {tmp_path / 'gil' / 'summary.csv'}"),
        (["--compare-dir", str(tmp_path / "none")], "cannot read"),
        (["--host-dir", str(tmp_path), "--experiments", "nosuch"], "unknown experiment 'nosuch'; known: "),
    ):
        with pytest.raises(SystemExit) as stop:
            report_main([*args, *out])
        assert stop.value.code == 1 and said in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


def test_json_inputs_of_the_wrong_shape_and_unwritable_outputs_are_named_in_one_line(tmp_path, capsys):
    """A host.json that is not JSON, or holds a list, is named with what is wrong (it was a
    traceback from the first key looked up); an output under /proc (which root's os.access
    calls writable) is refused before anything is read, for analysis and report alike."""
    from report.__main__ import main as report_main

    metrics = str(tmp_path / "none" / "metrics.csv")
    for text, said in (("not json", "not a JSON file (Expecting value"), ("[1, 2]", "holds a JSON list, where a JSON")):
        (tmp_path / "host.json").write_text(text)
        args = ["summarise", "--experiment", "gil", "--out-dir", str(tmp_path / "s"), "--host-json"]
        assert analysis_main([*args, str(tmp_path / "host.json"), metrics]) == 1
        assert f"error: {tmp_path / 'host.json'}: {said}" in capsys.readouterr().err
    assert analysis_main(["summarise", "--experiment", "gil", "--out-dir", "/proc/lab-x", metrics]) == 1
    assert "error: --out-dir /proc/lab-x cannot be written: /proc refuses a new directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        report_main(["--host-dir", str(tmp_path), "--experiments", "gil", "--html", "/proc/r.html", "--md", "r.md"])
    assert stop.value.code == 2
    assert "--html /proc/r.html cannot be written: /proc refuses a new directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host.json"]


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--rounds-max", "-1"], "--rounds-max must be >= 0"),
        (["--repeats", "12", "--rounds-workers", "9"], "--rounds-workers must be 1-8 (config rounds.workers; at most"),
        (["--rounds-workers", "0"], "--rounds-workers must be 1-1 (config rounds.workers; at most --repeats 1), got 0"),
        (
            ["--repeats", "2", "--rounds-workers", "3"],
            "must be 1-2 (config rounds.workers; at most --repeats 2), got 3",
        ),
        (["--max-oversubscription", "-2"], "--max-oversubscription must be > 0"),
        (["--rounds-probe-ms", "-1"], "--rounds-probe-ms=-1.0 is out of range; it must be >= 0"),
        (["--rounds-budget-s", "-5"], "--rounds-budget-s=-5.0 is out of range; it must be >= 0"),
        (["--rounds-target-ci-pct", "-3"], "--rounds-target-ci-pct=-3.0 is out of range; it must be >= 0"),
        (["--rounds-lead-budget-s", "-1"], "--rounds-lead-budget-s=-1.0 is out of range; it must be >= 0"),
        (["--rounds-lead-target-ci-pct", "-2"], "--rounds-lead-target-ci-pct=-2.0 is out of range; it must be >= 0"),
    ],
)
def test_out_of_range_job_options_are_named_before_measuring(tmp_path, option, said):
    cmd = [sys.executable, "-m", "lab.point", "gil", "--workload", "io", "--io-iterations", "2", "--repeats", "1"]
    proc = subprocess.run([*cmd, "--out", str(tmp_path / "p"), *option], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert not (tmp_path / "p").exists()


def test_the_lead_round_options_say_what_applies_unset_not_a_default_of_none():
    """``--rounds-lead-*`` unset means "the same as --rounds-*": the help says so, and argparse
    adds "(default: None)" after no option (``--host``, ``--lock`` say what applies unset too);
    unset, the rounds policy reads None (the same)."""
    from experiments.gil.measure import Params
    from lab.cli import build_parser, rounds_policy

    parser = build_parser(Params, "gil")
    text = " ".join(parser.format_help().split())
    assert "default: the same [>= 0] --rounds-lead-budget-s" in text and "(default: None)" not in text
    for extra, lead in (([], (None, None)), (["--rounds-lead-budget-s", "8"], (None, 8.0))):
        args = parser.parse_args(["--out", "x", *extra])
        policy = rounds_policy(args, "gil", Params(), parser)
        assert (policy.lead_target_ci_pct, policy.lead_budget_s) == lead


def _benchmark(name: str):
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_worker_scale_benchmark_names_a_pair_it_cannot_compare(tmp_path, capsys):
    """An interrupted run (a host.json, no experiment summaries) and a stored file cut short are
    named in an error, with no traceback and nothing written."""
    for run in ("r-1", "r-2"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "host.json").write_text('{"cpu_model": "fixture", "available_cpus": 2}')
    out = tmp_path / "out.md"
    with pytest.raises(SystemExit) as exit_:
        _benchmark("worker_scale").main(["--pairs", "r", "--results", str(tmp_path), "--markdown", str(out)])
    assert exit_.value.code == 2
    assert "no point measured in both runs of r (an interrupted run" in capsys.readouterr().err
    point = tmp_path / "r-1" / "jit" / "model~mlp" / "mode~eager"
    point.mkdir(parents=True)
    (point / "metrics.csv").write_text("experiment,model,mode,repeat,status,wall_s,samples_per_s\njit,mlp,ea")
    with pytest.raises(SystemExit) as exit_:
        _benchmark("worker_scale").main(["--pairs", "r", "--results", str(tmp_path), "--markdown", str(out)])
    assert exit_.value.code == 2
    assert "metrics.csv" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("peers", ["--json", "{dir}"], "--json {dir} is a directory: name a file"),
        ("peers", ["--markdown", "{file}/x.md"], "--markdown {file}/x.md cannot be written: {file} is a file"),
        ("warmup", ["--markdown", "{dir}"], "--markdown {dir} is a directory"),
        ("window_length", ["--markdown", ""], "--markdown  is empty: name the file"),
        ("between_processes", ["--markdown", "{dir}"], "--markdown {dir} is a directory"),
        ("workload_search", ["--markdown", "{dir}"], "--markdown {dir} is a directory"),
        ("workload_search", ["--rounds", "1"], "--rounds must be >= 2"),
        ("workload_search", ["--max-oversubscription", "0"], "--max-oversubscription must be > 0"),
        ("workload_search", ["--window-s", "-1"], "--window-s -1.0 is out of range; it must be > 0"),
        ("workload_search", ["--max-rounds", "0"], "--max-rounds 0 is out of range; it must be >= 4"),
        ("workload_search", ["--entry", "nosuch:build"], "--entry: 'nosuch:build': cannot find module nosuch"),
        ("repeatability", ["--json", "{dir}", "--no-run"], "--json {dir} is a directory"),
        ("repeatability", ["--results", "{dir}"], "--results {dir}: the runs write into"),
        ("repeatability", ["--results", "{dir}", "--no-run", "--label", "r"], "{dir}/r-1/host.json and {dir}/r-2/host"),
        ("repeatability", ["--gap-min", "-1"], "--gap-min >= 0"),
        (
            "repeatability",
            ["--label", "x1,w1"],
            "--label x1,w1: several labels pool stored pairs, so only with --no-run",
        ),
        (
            "repeatability",
            ["--no-run", "--label", "x1,,w1"],
            "--label x1,,w1: an empty label; give one label, or several",
        ),
        ("repeatability", ["--no-run", "--label", "x1,x1"], "--label x1,x1: a label given twice would count its pair"),
        ("between_processes", ["--processes", "0"], "--processes and --repeats must be >= 2"),
        ("spin_settle", ["--delays-ms", "-1"], "--delays-ms [-1.0], --readings 25"),
        ("spin_settle", ["--readings", "2"], "at least 3 readings"),
        ("spin_settle", ["--markdown", "{dir}"], "--markdown {dir} is a directory"),
        ("worker_scale", ["--pairs", "nosuch"], "results/nosuch-1/host.json"),
        ("worker_scale", ["--pairs", ","], "--pairs ,: an empty label"),
        ("worker_scale", ["--pairs", "../b1"], "--pairs ../b1: '../b1' is a path"),  # it writes <tmp>/<rule>/<label>-1
        ("worker_scale", ["--pairs", "x,x"], "--pairs x,x: a label given twice would count its pair twice"),
        ("repeatability", ["--no-run", "--label", "x,a/b"], "--label x,a/b: 'a/b' is a path"),
        ("worker_scale", ["--pairs", "x", "--markdown", "{dir}"], "--markdown {dir} is a directory"),
        ("window_length", ["--lengths", "-1"], "--lengths must be finite and > 0 s"),
        ("window_length", ["--probe-ms", "nan"], "--probe-ms finite and >= 0"),
        ("window_length", ["--targets", "-1"], "--targets finite and > 0 (%)"),
        ("warmup", ["--workloads", "bogus"], "invalid choice: 'bogus'"),
        ("probe_noise", ["--lengths", "5"], "at least two different loop lengths above 0 ms"),
        ("probe_noise", ["--group", "1"], "--group >= 2"),
        ("probe_noise", ["--markdown", "{dir}"], "--markdown {dir} is a directory"),
        ("process_state", ["--processes", "1"], "--processes 1, --readings 8, --seconds 0.25: allowed: at least 2"),
        ("process_state", ["--seconds", "0"], "seconds > 0"),
        ("process_state", ["--markdown", "{dir}"], "--markdown {dir} is a directory"),
        ("host_phases", ["--chunk-ms", "0"], "--chunk-ms 0: allowed: 0.05-100 (ms)"),
        ("host_phases", ["--slow", "1"], "--slow 1: allowed: above 1"),
        ("host_phases", ["--slow", "inf"], "--slow inf: allowed: above 1, finite"),
        ("host_phases", ["--seconds", "0"], "--seconds 0: allowed: above 0"),
        ("host_phases", ["--markdown", "{dir}"], "--markdown {dir} is a directory"),
        ("host_phases", ["--windows", "5", "3000"], "--windows 5 3000: allowed: from --chunk-ms to a quarter"),
    ],
)
def test_benchmark_scripts_refuse_bad_arguments_before_measuring(tmp_path, capsys, script, args, message):
    """Each benchmark script checks its arguments and output files first: a typo costs no
    measurement (each of these would otherwise have measured for minutes first)."""
    (tmp_path / "file").write_text("")
    fill = {"dir": str(tmp_path), "file": str(tmp_path / "file")}
    with pytest.raises(SystemExit) as exit_:
        _benchmark(script).main([a.format(**fill) for a in args])
    assert exit_.value.code == 2
    assert message.format(**fill) in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing written, nothing measured


def test_the_peers_script_without_pyperf_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    """pyperf comes with requirements-dev.txt only: without it the peers' script stops at once
    with what to install, before anything is measured."""
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyperf" else find(name, *a))
    with pytest.raises(SystemExit) as exit_:
        _benchmark("peers").main(["--passes", "1", "--json", str(tmp_path / "p.json")])
    assert exit_.value.code == 2
    assert "pyperf is not installed here: pip install -r requirements-dev.txt" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_snakemakes_scheduler_keeps_one_reevaluation_timer():
    """Snakemake 9.27.1 starts a 1 s re-evaluation timer after every scheduling pass, and every
    finished job starts a chain of its own: late in a run its main process took 0.12-0.23 CPU
    from the measurements (lab/schedfix.py). Patched, a scheduler asked for 20 re-evaluations at
    once keeps one pending timer, which wakes it once, and the next request after that starts
    a new one."""
    import threading
    import time

    from snakemake.scheduling.job_scheduler import JobScheduler

    from lab.schedfix import one_timer_at_a_time

    assert one_timer_at_a_time() and one_timer_at_a_time()  # found, and patching twice is harmless
    sched = JobScheduler.__new__(JobScheduler)  # the method reads only _open_jobs
    sched._open_jobs = threading.Semaphore(0)
    before = threading.active_count()
    for _ in range(20):
        sched._schedule_reevalutation(0.2)
    assert threading.active_count() - before == 1
    assert sched._open_jobs.acquire(timeout=2)  # woken once
    assert not sched._open_jobs.acquire(timeout=0.5)  # and only once
    time.sleep(0.05)
    sched._schedule_reevalutation(0.05)  # a later pass asks again: a new timer
    assert sched._open_jobs.acquire(timeout=2)
    # an earlier wake-up than the pending one's is not dropped: a 10 s wait, then a 0.05 s check
    sched._schedule_reevalutation(10)
    sched._schedule_reevalutation(0.05)
    assert sched._open_jobs.acquire(timeout=2)


@pytest.mark.parametrize(
    ("module", "config", "name"),
    [
        ("lab.userenv", ["--env", "{}"], "user_env"),
        ("lab.interpreters", ["--config", '[{"label": "slow", "command": "SLOW"}]'], "interpreters"),
    ],
)
def test_ctrl_c_in_a_job_outside_the_job_server_says_so_in_one_line(tmp_path, module, config, name):
    """Ctrl-C in Snakemake reaches every job, and the profile shows a failed job's log: the two
    jobs that run outside the job server (each waits on a child interpreter it started) printed a
    KeyboardInterrupt traceback there. Each says it was interrupted in one line, exits 128 + 2 as
    the measurement jobs do, writes nothing and leaves no child behind."""
    out, slow = tmp_path / "out.json", tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep 30\nexec {sys.executable} "$@"\n')  # an interpreter slow to start
    slow.chmod(0o755)
    config = [c.replace("SLOW", str(slow)) for c in config]
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *config, "--out", str(out)],
        stderr=subprocess.PIPE,
        text=True,
        # as a terminal's Ctrl-C finds it: a job started in the background inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline, children = time.monotonic() + 30, []
    while time.monotonic() < deadline and not children and proc.poll() is None:
        children = psutil.Process(proc.pid).children()  # its child interpreter has started
        time.sleep(0.05)
    assert children, "the job ended before it started its child interpreter"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT and err == f"[{name}] interrupted by SIGINT: nothing recorded\n"
    assert not out.exists() and _gone([c.pid for c in children])


def test_a_point_that_failed_on_its_input_gets_the_key_and_the_command_for_fixed_code():
    """A point whose reason names a config key failed on its input: fixing the key reruns it
    (Snakemake's params trigger), but fixing the code the key names does not (a user's module is
    no input of the rule), and the advice said "the next run measures again" for both. It now
    gives the --forcerun command for that case, with the run's own arguments."""
    from analysis.__main__ import _advice

    bad = pd.DataFrame(
        {
            "reason": ["config key workload.entry: 'm:build': task train needs a loss", "exit status 1"],
            "metrics": ["results/h/workload/stage~search/metrics.csv", "results/h/gil/mode~x/metrics.csv"],
        }
    )
    text = _advice(bad, "h", "--profile p --config host=h")
    assert "fix that key, and the next run measures them again" in text
    fixed = "once it is fixed with: snakemake --cores 4 --profile p --config host=h --forcerun"
    assert f"{fixed} 'results/h/workload/stage~search/metrics.csv'." in text
    assert "Measure the others again with: snakemake --cores 4 --profile p --config host=h --forcerun" in text
    assert text.endswith(" --forcerun 'results/h/gil/mode~x/metrics.csv'")
    assert _advice(bad.iloc[:1], "h").endswith(
        "--forcerun 'results/h/workload/stage~search/metrics.csv' --config host=h."
    )


def test_the_command_that_redoes_an_analysis_uses_the_runs_own_configuration(tmp_path):
    """The repair for an analysis output of the wrong shape ran the default configuration under
    this machine's label (a full measurement run); it names the run's own config.yaml, which
    holds its host label, where the host directory has one."""
    from lab.fileio import redo_analysis

    found = tmp_path / "my host" / "gil" / "findings.json"
    found.parent.mkdir(parents=True)
    assert "--config host='my host' it was measured with" in redo_analysis(found)
    (found.parent.parent / "config.yaml").write_text("host: my host\n")
    said = redo_analysis(found)
    assert f"--configfile '{tmp_path}/my host/config.yaml' --rerun-triggers mtime --forcerun analyse" in said


def test_a_summary_without_a_column_its_checks_read_is_named_by_the_fidelity_command(tmp_path, capsys):
    """``python -m analysis fidelity`` given a replicates.csv or a summary of an older lab
    stopped in a 45-line KeyError traceback; it names the experiment and the column."""
    gil = tmp_path / "gil"
    gil.mkdir()
    (gil / "summary.csv").write_text(
        "experiment,interpreter,workload,mode,workers,metric,status\ngil,default,cpu,processes,2,tasks_per_s,ok\n"
    )
    (tmp_path / "host.json").write_text('{"available_cpus": 2}')
    args = ["fidelity", "--host-json", str(tmp_path / "host.json"), "--sample-hz", "40"]
    assert analysis_main([*args, "--out", str(tmp_path / "f.csv"), str(gil / "summary.csv")]) == 1
    err = capsys.readouterr().err
    assert "error: gil's summary has no column " in err and "which its checks read" in err, err
    assert not (tmp_path / "f.csv").exists()


def test_the_peers_tables_judge_the_lab_by_the_figure_its_headline_gives():
    """Two passes in which the lab's 2 processes read 1.20x and 1.70x measured but 1.88x and
    1.87x on whole cores (its headline's figure): their raw rerun intervals disagree, the
    headline's agree; a peer at 1.90x lies inside the headline's interval only; a peer's
    processes at 1.50x measured are judged against the headline's interval on whole cores by
    their own figure there (1.90x inside, 2.10x not)."""
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "benchmarks"))
    tables = _benchmark("peer_tables")

    def lab(v, lo, hi, n, nlo, nhi):
        raw = {"value": v, "low": lo, "high": hi, "rerun_low": lo, "rerun_high": hi}
        return raw | {"norm": n, "norm_rerun_low": nlo, "norm_rerun_high": nhi}

    one = {"x": lab(1.20, 1.10, 1.30, 1.88, 1.85, 1.93)}
    two = {"x": lab(1.70, 1.30, 1.90, 1.87, 1.84, 1.91)}
    assert tables.agreement(one, two, "rerun_") == (0, 2)
    assert tables.agreement(one, two, "rerun_", headline=True) == (0, 2)  # not the headline's figure: as measured
    for v in (*one.values(), *two.values()):
        v["headline"] = "norm"
    assert tables.agreement(one, two, "rerun_", headline=True) == (2, 2)
    # medians that come as numpy numbers (the lab's GFLOP/s and samples/s) count both directions too:
    # numpy's True + True is True, which once made the lab's 13 of 14 read 11 in the written tables
    import numpy as np

    rates = [{"y": {k: np.float64(v) for k, v in lab(x, 90.0, 110.0, x, 90.0, 110.0).items()}} for x in (95.0, 100.0)]
    assert tables.agreement(*rates, "rerun_") == (2, 2)
    peer = {"values": {"x": {"value": 1.90}}, "delivered": 2.0}
    row = tables.against_lab(peer, {"values": one})[0]
    assert not row["inside_rerun"] and row["inside_headline"]
    # a parallel point the peer also put on whole cores is judged by that figure against the headline's
    mine = lab(1.20, 1.10, 1.30, 1.88, 1.85, 1.93) | {"headline": "norm", "norm_low": 1.86, "norm_high": 1.90}
    name = "gil cpu: 2 processes over sequential"
    for peer_norm, inside in ((1.90, True), (2.10, False)):
        peer = {"values": {name: {"value": 1.50, "norm": peer_norm}}}
        row = tables.against_lab(peer, {"values": {name: mine}})[0]
        assert (row["inside_rerun"], row["inside_headline"]) == (False, inside), row


def test_pyperfs_loops_time_themselves_and_put_its_processes_on_whole_cores(tmp_path):
    """peer_pyperf's benchmark calls, run directly with ``PEER_UNITS`` set: the loops are grouped
    by call and process; a sequential call lasts at least its two loops one after another
    (``call_in_loops`` >= 2) and a processes call at least its slower child's loop (>= 1), and
    the slowest process's time per loop is at least the median loop's in a processes call. A
    file without loops is named with what to do."""
    import math

    peers, pyperf_side = _benchmark("peers"), _benchmark("peer_pyperf")
    n = 200_000  # about 5-15 ms a loop on the CPUs seen
    switch = sys.getswitchinterval()
    # the two threads' 5-15 ms loops take turns within a loop only where the GIL is handed over
    # more often than its 5 ms default: else one loop can run whole before the other starts
    sys.setswitchinterval(0.0005)
    try:
        for name in ("cpu_sequential", "cpu_processes", "cpu_threads"):
            pyperf_side.UNITS = str(tmp_path / f"{name}.units")
            mode, fn, _ = pyperf_side.BENCHMARKS[name]
            for _ in range(3):
                mode(fn, n)
    finally:
        sys.setswitchinterval(switch)
    seq = peers.pyperf_units(tmp_path / "cpu_sequential.units")
    par = peers.pyperf_units(tmp_path / "cpu_processes.units")
    thr = peers.pyperf_units(tmp_path / "cpu_threads.units")
    assert (seq["calls"], seq["loops"], par["calls"], par["loops"], thr["loops"]) == (3, 6, 3, 6, 6)
    assert seq["call_in_loops"] >= 2 and par["call_in_loops"] >= 1, (seq, par)
    assert par["slowest_ms"] >= par["elapsed_ms"] and math.isfinite(seq["cpu_ms"])
    with pytest.raises(ValueError, match="PEER_UNITS"):
        peers.pyperf_units(tmp_path / "none.units")
    # GIL-bound threads, one on a CPU at a time: a loop's CPU time is its pace, its elapsed time holds the
    # other thread's turn; at the sequential loop's pace the speedup scales by the two loops' CPU times
    assert 0 < thr["cpu_ms"] < thr["elapsed_ms"], thr
    paced = peers.at_sequential_pace(1.2, seq, thr)
    assert paced == pytest.approx(1.2 * thr["cpu_ms"] / seq["cpu_ms"])
    assert math.isnan(peers.at_sequential_pace(1.2, seq, thr | {"cpu_ms": 0.0}))
    # the tables give each benchmark's loop pace, and the threads at the sequential loop's pace
    tables = _benchmark("peer_tables")
    units = {"sequential": seq, "cpu_threads": thr}
    cell = tables._cell({"value": 1.2, "low": 1.0, "high": 1.4, "units": units, "norm": paced})
    assert f"a loop {seq['elapsed_ms']:.1f} ms sequential" in cell and f"sequential loop's pace {paced:.3g}" in cell
    # and against the lab, the threads are compared at that pace where the lab gives its figure so
    lab = {"values": {"gil cpu: 2 threads over sequential": {"value": 1.1, "low": 1.0, "high": 1.2}}}
    lab["values"]["gil cpu: 2 threads over sequential"] |= {"rerun_low": 0.9, "rerun_high": 1.3, "headline": "norm"}
    lab["values"]["gil cpu: 2 threads over sequential"] |= {"norm": 1.0, "norm_low": 0.95, "norm_high": 1.05}
    lab["values"]["gil cpu: 2 threads over sequential"] |= {"norm_rerun_low": 0.9, "norm_rerun_high": 1.1}
    peer = {"values": {"gil cpu: 2 threads over sequential": {"value": 1.34, "low": 1.2, "high": 1.5, "norm": 0.97}}}
    (row,) = tables.against_lab(peer, lab)
    assert (row["inside_rerun"], row["inside_norm_rerun"], row["inside_headline"]) == (False, True, True)


@pytest.mark.parametrize(("elasticity", "closer_pct"), [(1.0, 100.0), (0.3, 0.0)])
def test_the_rate_transfer_benchmark_recovers_how_far_rates_follow_the_probe(elasticity, closer_pct):
    """Rates that follow the probe's one-CPU speed at a planted elasticity: the slope recovers it,
    and taking the speed out brings every point to 1 where it is 1 (closer: 100%), and none
    where a rate follows the speed by only 0.3 of its move (the correction then overshoots by
    0.7 of it against the measured 0.3: closer 0%)."""
    import numpy as np

    bench = _benchmark("rate_transfer")
    speed = np.array([0.7, 0.8, 0.9, 1.1, 1.25, 1.4])  # run 1's probe speed over run 2's
    df = pd.DataFrame({"ratio": (1 / speed) ** elasticity, "point_speed": speed, "run_speed": speed, "metric": "m"})
    out = bench.judge(df).set_index("correction")
    assert out.loc["as measured", "median_abs_log"] > 0.05
    for corr in ("x point's speed", "x run's speed"):
        assert out.loc[corr, "elasticity"] == pytest.approx(elasticity)
        assert out.loc[corr, "closer_pct"] == closer_pct
    assert out.loc["x point's speed", "median_abs_log"] == pytest.approx(
        (1 - elasticity) * out.loc["as measured", "median_abs_log"] / elasticity, abs=1e-9
    )

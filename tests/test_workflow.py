"""End to end: config.quick.yaml through Snakemake in a temporary copy of the repository."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import physics
import pytest
import yaml
from conftest import FIXTURE_CONFIG, QUICK_CONFIG, ROOT, e2e_figures
from helpers import snakemake_in
from scipy.stats import mannwhitneyu
from side_runs import INTERRUPT_TARGETS

from analysis.figures import draw_figure
from analysis.trace import validate_trace
from lab import registry
from lab.fileio import read_findings

SPECS = {name: e.spec for name, e in registry.experiments().items()}
#: The experiments the end-to-end run runs (its config's list, the fixture nap left out: it is
#: registered only in the run's copy); singlethread needs a second interpreter (test_interpreters).
RAN = {name: SPECS[name] for name in yaml.safe_load(FIXTURE_CONFIG)["experiments"] if name in SPECS}
TIMELINES = [name for name, spec in RAN.items() if spec.timeline]


@pytest.mark.slow
def test_the_gil_findings_say_where_the_processes_time_went(quick_run):
    """The report's gil findings carry the processes' chunk-by-chunk account of the run's own
    spans and windows (experiments/gil/shortfall.py), over the rounds the point measured."""
    from experiments.gil.shortfall import shortfall

    gil = quick_run / "results" / "e2e" / "gil"
    found = json.loads((gil / "findings.json").read_text())["findings"]
    line = next((f for f in found if "where 2 processes' time went" in f), None)
    assert line, found
    point = {"interpreter": "default", "workload": "cpu", "mode": "processes", "workers": 2}
    got = shortfall(pd.read_csv(gil / "spans.csv"), pd.read_csv(gil / "replicates.csv"), point)
    summary = pd.read_csv(gil / "summary.csv")
    rounds = int(summary.query("workload == 'cpu' and mode == 'processes' and workers == 2")["n"].iloc[0])
    assert got["rounds"] == rounds and f"took {got['chunk_ratio']:.2f}x the CPU time" in line, (got, line)
    assert 0 < got["outside_pct"] < 100 and 0 <= got["imbalance_pct"] < 100, got


@pytest.mark.slow
def test_processes_time_their_own_units_and_gil_bound_threads_their_cpu_time(quick_run):
    """gil's processes and their sequential baseline record the time of a chunk on their
    slowest worker in every window (lab.workspeed), equal to what the window's spans give, and
    the speedup on whole cores of 2 processes comes from it; CPU-bound threads under the GIL,
    one running at a time, record their chunks' CPU time (below their elapsed time, which holds
    the other thread's turn) and get their speedup at the sequential loop's pace from it; other
    threads, which may slow each other down by design, record none."""
    from lab.workspeed import unit_ms

    gil = quick_run / "results" / "e2e" / "gil"
    reps = pd.read_csv(gil / "replicates.csv")
    spans = pd.read_csv(gil / "spans.csv")
    ok = reps[reps["status"] == "ok"]
    cpu = ok[ok["workload"] == "cpu"]
    assert len(cpu) and (cpu["unit_ms"] > 0).all()
    assert ok[(ok["workload"] != "cpu") & (ok["mode"] == "threads")]["unit_ms"].isna().all()
    summary = pd.read_csv(gil / "summary.csv")
    for mode, cpu_time in (("processes", False), ("threads", True)):
        one = cpu[cpu["mode"] == mode].iloc[0]
        keys = {"workload": "cpu", "mode": mode, "repeat": one["repeat"], "role": "point"}
        mine = spans[np.logical_and.reduce([spans[k] == v for k, v in keys.items()])].to_dict("records")
        assert one["unit_ms"] == pytest.approx(unit_ms(mine, cpu=cpu_time)), mode
        row = summary.query(f"workload == 'cpu' and mode == '{mode}'").iloc[0]
        assert row["speedup_norm_source"] == "in-window" and row["speedup_norm"] > 0, row
        clock = "cpu" if cpu_time else "elapsed"  # what unit_ms timed, in every round and the summary
        assert (cpu[cpu["mode"] == mode]["unit_clock"] == clock).all() and row["unit_clock"] == clock, mode
    assert unit_ms(mine, cpu=True) < unit_ms(mine)  # the threads' chunks: CPU time against elapsed
    assert ok[ok["unit_ms"].isna()]["unit_clock"].isna().all()  # read back empty where nothing was timed


@pytest.mark.slow
def test_the_gil_threads_check_names_the_pace_its_own_spans_measured(quick_run):
    """Where the CPU-bound threads' check names the loop's pace per CPU-second, it is the pace of
    the run's own spans (experiments/gil/shortfall.py ``pace``); where that pace differs by 5% or
    more and the check warns, the reason names it, or a load measured while the threads ran. The
    check judges the figure the headline gives: at the sequential loop's pace where it leads."""
    from analysis.findings import transfer_case
    from experiments.gil.shortfall import pace, paced_of, shortfall

    gil = quick_run / "results" / "e2e" / "gil"
    point = {"interpreter": "default", "workload": "cpu", "mode": "threads", "workers": 2}
    parts = shortfall(pd.read_csv(gil / "spans.csv"), pd.read_csv(gil / "replicates.csv"), point)
    summary = pd.read_csv(gil / "summary.csv")
    r = summary.query("workload == 'cpu' and mode == 'threads' and workers == 2").iloc[0]
    table = pd.read_csv(quick_run / "results" / "e2e" / "fidelity.csv")
    row = table[table["check"] == "CPU-bound Python: 2 threads over sequential"].iloc[0]
    lead = transfer_case(r) == "on_whole_cores"
    assert row["measured"] == pytest.approx(r["speedup_norm"] if lead else r["speedup"]), (row.to_dict(), r.to_dict())
    said = pace(parts, r["speedup"], paced_of(r))
    if "per CPU-second" in row["reason"]:
        assert said and said in row["reason"], (said, row.to_dict())
    elif row["verdict"] == "warn" and said:
        assert " while " in row["reason"], (said, row.to_dict())  # a load measured while they ran comes first


@pytest.mark.slow
def test_every_output_exists(quick_run):
    host = quick_run / "results" / "e2e"
    assert (host / "host.json").exists()
    for exp, spec in RAN.items():
        for name in ("replicates.csv", "summary.csv", "findings.json"):
            assert (host / exp / name).stat().st_size > 0, (exp, name)
        assert read_findings(host / exp / "findings.json")["experiment"] == exp  # the schema holds
        summary = pd.read_csv(host / exp / "summary.csv")
        measured = summary["status"] == "ok"
        assert measured.sum() >= 2 and (summary.loc[measured, "n"] >= 3).all(), exp
        # what was not measured is a skip this machine explains (intraop matmul_bf16 without native bf16)
        assert set(summary.loc[~measured, "status"]) <= {"skipped"}, exp
        assert all(isinstance(r, str) and r for r in summary.loc[~measured, "reason"]), exp
        for fig in spec.all_figures:
            assert (host / "figures" / f"{fig}.png").stat().st_size > 10_000, fig
    for exp in RAN:
        summary = pd.read_csv(host / exp / "summary.csv")
        not_base = summary[(summary["speedup_source"] != "baseline") & (summary["status"] == "ok")]
        if exp == "workload":  # its search is summarised by its verification: no speedup of its own
            not_base = not_base[not_base["stage"] == "verify"]
        if exp == "convoy":  # the sleeper next to a CPU-bound thread, under the GIL: late by the interval
            half = not_base["switch_interval_ms"] / 2
            assert (not_base["latency_p50_ms"] >= half).all(), not_base[["switch_interval_ms", "latency_p50_ms"]]
            # the histogram's legend gives the same median as the findings' text and the table (3 digits)
            from report.format import fmt

            fig = draw_figure("convoy_latency", host)
            legends = {ax.get_title(): ax.get_legend().get_texts()[1].get_text() for ax in fig.axes if ax.get_visible()}
            for _, r in not_base.iterrows():
                title = f"{r['interpreter']}, switch interval {r['switch_interval_ms']:g} ms"
                assert legends[title].endswith(f"(median {fmt(r['latency_p50_ms'])} ms)"), (legends, r)
            fig.canvas.draw()  # and it sits above the bars, not across them
            renderer = fig.canvas.get_renderer()
            for ax in (a for a in fig.axes if a.get_visible()):
                box = ax.get_legend().get_window_extent(renderer)
                bars = [p.get_window_extent(renderer) for p in ax.patches if p.get_height() > 0]
                assert not any(box.overlaps(b) for b in bars), ax.get_title()
        assert len(not_base) and (not_base["speedup_source"] == "interleaved").all(), exp
    run = json.loads((host / "run.json").read_text())
    assert 0 < run["measured_share_pct"] < 100
    assert (host / "figures" / "job_schedule.png").stat().st_size > 10_000
    for name in [*TIMELINES, "jobs"]:
        trace = json.loads((host / "traces" / f"{name}.json").read_text())
        assert validate_trace(trace) > 10, name
        assert any(e["ph"] == "X" for e in trace["traceEvents"]), name
    dl_trace = json.loads((host / "traces" / "dataloader.json").read_text())
    threads = {e["args"]["name"] for e in dl_trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"main", "worker-0", "worker-1"} <= threads  # fetches measured inside the workers
    assert set(pd.read_csv(host / "status.csv")["status"]) <= {"ok", "skipped"}
    assert "experiments:" in (host / "config.yaml").read_text()  # the host directory is self-describing
    jobs = pd.read_csv(host / "jobs.csv")
    assert jobs["job"].nunique() == run["measurement_jobs"]
    html = (host / "report.html").read_text()
    assert '<section id="trust">' in html
    md = (host / "report.md").read_text()
    for exp in RAN:
        assert f'<section id="{exp}">' in html
        assert f'<a id="{exp}"></a>' in md
    # nothing is loaded from a network: links to Perfetto are fine, sources are not
    assert not re.search(r'(src|srcset|data)="(https?:)?//', html) and "url(http" not in html


@pytest.mark.slow
def test_the_prose_of_the_markdown_report_shows_dunder_names_as_text(quick_run):
    """A section's question, what and why come from its report.yaml: ``__getitem__`` there is
    escaped, where unescaped it would render as bold "getitem" on a Git forge."""
    md = (quick_run / "results" / "e2e" / "report.md").read_text()
    prose = [ln for ln in md.splitlines() if ln.startswith(("**What was run.**", "**Why.**"))]
    assert any("\\_\\_getitem\\_\\_" in ln for ln in prose)
    assert not any(re.search(r"(?<!\\)__getitem__", re.sub(r"`[^`]*`", "", ln)) for ln in prose)


@pytest.mark.slow
def test_an_experiment_is_one_folder_and_a_config_section(quick_run):
    """The fixture experiment (tests/fixtures/nap), added to the checkout as experiments/nap/
    with a nap: config section and nothing else, ran to its CSVs, summary, figure, findings and
    a report section with caption and alt text."""
    added = {
        str(p.relative_to(quick_run))
        for p in quick_run.rglob("*")
        if p.is_file() and not ({"results", "logs", ".snakemake", "__pycache__"} & set(p.relative_to(quick_run).parts))
    } - {str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()}
    assert added == {f"experiments/nap/{f}" for f in os.listdir(ROOT / "tests" / "fixtures" / "nap")} | {"nap.yaml"}
    host = quick_run / "results" / "e2e"
    for n in (1, 2):
        m = pd.read_csv(host / "nap" / f"sleepers~{n}" / "metrics.csv")
        # at least its 6 rounds, in the quick config's worker processes; sleeping threads reach the
        # +-10% target there
        workers = yaml.safe_load((ROOT / "config.quick.yaml").read_text())["rounds"]["workers"]
        assert (m["status"] == "ok").all() and len(m[m["role"] == "point"]) >= 6
        assert set(m["worker"]) == set(range(workers))
        assert set(m["role"]) == ({"point"} if n == 1 else {"point", "baseline"})  # interleaved baseline
        assert (pd.read_csv(host / "nap" / f"sleepers~{n}" / "samples.csv")["series"] == "tree").any()
    # job.json says the point beat its baseline (and so would go by rounds.lead_* where set: the
    # quick config leaves them null) and the baseline's own job, with nothing to beat, did not
    quick = yaml.safe_load((ROOT / "config.quick.yaml").read_text())["rounds"]
    rounds = {n: json.loads((host / "nap" / f"sleepers~{n}" / "job.json").read_text())["rounds"] for n in (1, 2)}
    assert rounds[2]["lead"] and not rounds[1]["lead"], rounds
    assert [rounds[2][k] for k in ("lead_target_ci_pct", "lead_budget_s")] == [
        quick.get("lead_target_ci_pct"),
        quick.get("lead_budget_s"),
    ]
    summary = pd.read_csv(host / "nap" / "summary.csv").set_index("sleepers")
    assert summary.loc[2, "speedup_source"] == "interleaved"
    ideal = 2  # two sleepers overlap whatever the CPUs deliver: sleeping takes none
    assert 0.75 * ideal < summary.loc[2, "speedup"] < 1.15 * ideal
    assert summary.loc[2, "parallel_efficiency"] == pytest.approx(summary.loc[2, "speedup"] / 2)
    found = json.loads((host / "nap" / "findings.json").read_text())["findings"]
    assert found == [f"2 sleeping threads gave {summary.loc[2, 'speedup']:.2f}x" + found[0].split("x", 1)[1]]
    assert (host / "figures" / "nap_speedup.png").stat().st_size > 10_000
    html = (host / "report.html").read_text()
    section = html.split('<section id="nap">')[1].split("</section>")[0]
    assert "Nap: sleeping threads (test fixture)" in section and found[0] in section
    assert '<figure id="fig-nap_speedup">' in section
    assert "<figcaption>Speedup of N sleeping threads over one" in section
    assert 'alt="Line chart of the speedup of sleeping threads' in section
    assert section.count("<tr>") == 3  # header and one row per point
    md = (host / "report.md").read_text()
    assert '<a id="nap"></a>' in md and "(figures/nap_speedup.png)" in md


@pytest.mark.slow
def test_your_workload_is_searched_verified_and_answered_first(quick_run):
    """The quick run's built-in workload: a search, a verification, the recommendation files,
    and the report's first screen that opens with it and ends with the trust verdict."""
    host = quick_run / "results" / "e2e"
    summary = pd.read_csv(host / "workload" / "summary.csv").set_index("stage")
    assert set(summary["status"]) == {"ok"} and summary.loc["search", "n"] >= 12  # at least two comparisons
    # the search's row has no median of its own, and its table row says why instead of empty cells
    assert summary.loc["search", "reason"].startswith("no median of its own: windows of many configurations")
    assert summary.loc["search", ["speedup", "speedup_norm", "speedup_norm_rerun_low"]].isna().all()  # nor a speedup
    (row,) = [line for line in (host / "report.md").read_text().splitlines() if line.startswith("| search |")]
    assert row.rstrip(" |").endswith("compared in the search's table"), row
    verify = summary.loc["verify"]
    assert verify["n"] == 10 and verify["speedup_ci_low"] <= verify["speedup"] <= verify["speedup_ci_high"]
    # repeat 0: one epoch of each side (the timeline, its spans); the 10 rounds of steps: the gain
    m = pd.read_csv(host / "workload" / "stage~verify" / "metrics.csv")
    epochs = m[m["window"] == "epoch"]
    assert sorted(epochs["role"]) == ["baseline", "point"] and set(epochs["repeat"]) == {0}
    assert (epochs["batches"] == epochs["epoch_batches"]).all() and (m[m["window"] == "steps"]["repeat"] > 0).all()
    spans = pd.read_csv(host / "workload" / "stage~verify" / "spans.csv")
    assert set(spans["repeat"]) == {0} and set(spans["role"]) == {"baseline", "point"}
    main_steps = spans[(spans["actor"] == "main") & (spans["kind"] == "step")].groupby("role").size()
    assert (main_steps == epochs.set_index("role")["batches"]).all()  # the whole epoch is drawn
    search = json.loads((host / "workload" / "stage~search" / "job.json").read_text())["outcome"]
    assert search["trail"] and search["stopped"] in {"converged", "budget", "passes"} and search["current_source"]
    # the budget's clock starts at the first comparison: the diagnosis before it is timed apart,
    # and a search that ended on its own stayed within the budget (a round under way may finish)
    assert search["diagnosis"] and search["diagnosis_s"] > 0
    if search["stopped"] != "budget":
        assert search["spent_s"] <= search["budget_s"] + max(c["rounds"] for c in search["trail"]) * 2, search
    rec = json.loads((host / "workload" / "recommended.json").read_text())
    # verified: a gain whose CI clears 1 for settings other than the current ones (where the search
    # kept the current settings, the verification measures them against themselves: a CI above 1
    # there is an A/A comparison's chance, 1.01-1.17 in one CI run, and recommends nothing)
    changed = rec["best_found"] != rec["current"]
    assert rec["verified"] == (bool(verify["speedup_ci_low"] > 1) and changed), (rec["verified"], changed)
    assert rec["gain"] == pytest.approx(verify["speedup"])
    assert rec["recommended"] == (search["winner"] if rec["verified"] else search["start"])
    assert f"OMP_NUM_THREADS={rec['recommended']['threads']}" in (host / "workload" / "recommended.env").read_text()
    py = (host / "workload" / "recommended.py").read_text()
    assert f"torch.set_num_threads({rec['recommended']['threads']})" in py
    assert f"num_workers={rec['recommended']['num_workers']}" in py
    md = (host / "report.md").read_text()
    glance = md.split("## At a glance")[1].split("## Contents")[0]
    assert md.index("## At a glance") < md.index("## Environment")
    intro = " ".join(md.split("## At a glance")[0].split())  # the probe ran: "on whole cores" explained first
    said = 'Where a speedup is given "on whole cores" (where the machine gave a point\'s work another share of a core'
    said += " than its baseline's)"
    # the intro explains the term wherever the probe ran; the first screen uses it only where the
    # correction is worth its spread (analysis.findings.transfer_case), which a run need not have
    assert f"{said}, it is the measured one divided by" in intro
    lines = [ln for ln in glance.splitlines() if ln.startswith("- ")]
    if lines[0].startswith("- [Measured under contention:](#trust)"):  # the run was contended: said first
        lines = lines[1:]
    assert lines[0].startswith("- [What should I change for my workload on this machine?](#workload)")
    assert "x (95% CI " in lines[0] and "; 95% rerun interval " in lines[0]  # what decided; what a rerun reads
    assert lines[-1].startswith("- [Can these numbers be trusted?](#trust)")
    assert any("(#gil)" in ln for ln in lines) and any("(#dataloader)" in ln for ln in lines)
    section = md.split('<a id="workload"></a>')[1].split("<a id=")[0]
    first = section.split("### Findings")[1].strip().splitlines()[0]
    assert first.startswith(("- Recommendation:", "- Your current settings are fine here", "- No recommendation yet:"))
    assert "(figures/workload_timeline.png)" in section and "| knob | current | best found | recommended |" in section


@pytest.mark.slow
def test_measurement_jobs_never_overlap(quick_run):
    jobs = [json.loads(p.read_text()) for p in (quick_run / "results" / "e2e").rglob("job.json")]
    assert len(jobs) >= 20
    from lab.host import NO_SPACES, measurement_tmpdir
    from lab.threads import LOAD_TIME_VARIABLES

    short_tmp = measurement_tmpdir(str(quick_run))
    assert " " in str(quick_run) and not re.search(r"\s", short_tmp)
    for j in jobs:  # caches inside the pipeline's directory, TMPDIR in the short one it owns
        for var, path in j["env"].items():
            if var.endswith("_NUM_THREADS") or var in LOAD_TIME_VARIABLES:  # counts and settings, not paths
                continue
            if var == "TMPDIR":
                assert path == short_tmp and len(path) < 50, path
            elif var in NO_SPACES:  # the checkout's path has a space: g++ would split it
                assert path == f"{short_tmp}/inductor", (var, path)
            else:
                assert path and ".snakemake/lab" in path, (var, path)
    by_lock = sorted(jobs, key=lambda j: j["lock_acquired_unix"])
    for a, b in zip(by_lock, by_lock[1:]):
        assert b["lock_acquired_unix"] >= a["lock_released_unix"], (a["params"], b["params"])
    # Whole job processes, not just the measured part, ran one at a time (Snakemake's
    # scheduling, not the lock).
    by_start = sorted(jobs, key=lambda j: j["job_start_unix"])
    for a, b in zip(by_start, by_start[1:]):
        assert b["job_start_unix"] >= a["job_end_unix"], (a["params"], b["params"])
        assert b["lock_wait_s"] < 0.5  # nobody had to wait for the lock: jobs were serialised


@pytest.mark.slow
def test_threads_recorded_and_explicit(quick_run):
    host = quick_run / "results" / "e2e"
    intra = pd.read_csv(host / "intraop" / "replicates.csv")
    assert (intra["torch_threads"] == intra["threads"]).all()
    # Snakemake exported OMP_NUM_THREADS = the rule's threads (all cores); torch ignored it
    assert (intra["omp_num_threads_env"].astype(str) == "4").all()
    mp = pd.read_csv(host / "multiprocessing" / "replicates.csv")
    assert (mp["torch_threads"] == mp["threads"]).all()


@pytest.mark.slow
def test_each_wait_policy_ran_in_a_job_that_started_with_it(quick_run):
    """OMP_WAIT_POLICY is read once, when torch loads libgomp: every multiprocessing job started
    with its point's value (unset for default), recorded in its job.json; the passive policy ran
    at every split with more than one thread per process, and only there."""
    base = quick_run / "results" / "e2e" / "multiprocessing"
    jobs = sorted(base.glob("processes~*/threads~*/omp_wait_policy~*/job.json"))
    points = {tuple(part.split("~")[1] for part in j.parent.relative_to(base).parts) for j in jobs}
    # another policy only where a process has threads that wait for each other (Experiment.include)
    teams = {(p, t) for p, t, policy in points if policy == "default" and int(t) > 1}
    assert teams and {(p, t) for p, t, policy in points if policy == "passive"} == teams, points
    for j in jobs:
        job = json.loads(j.read_text())
        want = {"default": None, "passive": "PASSIVE"}[job["params"]["omp_wait_policy"]]
        assert job["env"].get("OMP_WAIT_POLICY") == want, (j, job["env"])


def _round_ratios(reps: pd.DataFrame, **point) -> np.ndarray:
    """A point's paired ratios, round by round: its window's throughput over the interleaved
    baseline window of the same round (``repeat``) in the same job (:mod:`analysis.stats`)."""
    ok = reps[reps["status"] == "ok"]
    mine = ok[(ok["role"] == "point") & np.logical_and.reduce([ok[k] == v for k, v in point.items()])]
    base = ok[(ok["role"] == "baseline") & ok["source"].isin(mine["source"])]
    paired = mine.merge(base, on=["source", "repeat"], suffixes=("", "_base"))
    return (paired["value"] / paired["value_base"]).to_numpy(dtype=float)


@pytest.mark.slow
def test_oversubscribed_threads_that_sleep_while_they_wait_beat_threads_that_spin(quick_run):
    """Where processes x threads exceed the CPUs, libgomp's default wait (spinning, as long as a
    process's own team fits the CPUs) takes the CPUs the other process's threads need; waiting
    threads that sleep at once give the CPUs back. On a machine that delivered parallel capacity
    and was not contended, passive's rounds read faster than the default's: a one-sided
    Mann-Whitney U test of the two points' paired round ratios (``scipy.stats.mannwhitneyu``)
    gives p < 0.01. On 18 quick runs on the 2-vCPU EPYC VM every passive round read above every
    default round (0.64-1.65x against 0.01-0.92x).

    Not the points' intervals: the default point's workers can disagree several-fold (one
    spinning through capped 2 s windows, the next finishing in 0.4 s), and its own rounds then
    span two orders of magnitude. A CI run read the default at 0.16x (95% CI 0.007-2.89), and
    another, before the worker scale factor (:func:`analysis.stats.worker_scale`) left
    oversubscribed points out of its mean, read passive's interval down to 0.11x."""
    host = quick_run / "results" / "e2e"
    physics.conditions(host).require()
    s = pd.read_csv(host / "multiprocessing" / "summary.csv")
    over = s[s["oversubscribed"].astype(bool) & (s["threads"] > 1) & (s["status"] == "ok")]
    if over.empty:
        pytest.skip("no multiprocessing point was oversubscribed on this machine's CPUs")
    reps = pd.read_csv(host / "multiprocessing" / "replicates.csv")
    for (processes, threads), pair in over.groupby(["processes", "threads"]):
        assert set(pair["omp_wait_policy"]) == {"default", "passive"}, pair.to_dict("records")
        ratios = {
            policy: _round_ratios(reps, processes=processes, threads=threads, omp_wait_policy=policy)
            for policy in ("default", "passive")
        }
        assert all(len(r) >= 3 for r in ratios.values()), ratios
        test = mannwhitneyu(ratios["passive"], ratios["default"], alternative="greater")
        assert test.pvalue < 0.01, ((processes, threads), test, ratios)


@pytest.mark.slow
def test_cpu_pressure_tells_threads_that_wait_from_workers_that_sleep(quick_run):
    """Both ask for more CPUs than there are: intraop's matmul threads at twice the CPUs run
    (OpenMP's team spins while it waits), and one of them always waits on a run queue, which the kernel's
    CPU pressure counts (``cpu_wait_pct``); DataLoader workers that sleep in ``__getitem__``
    (the io dataset) make nothing wait, so the dataloader does not call them oversubscribed (a
    tester read the flag on such a point, its CPUs 8% busy, as a fault)."""
    from lab.pressure import WAITED_PCT, cpu_wait_us

    if cpu_wait_us() is None:
        pytest.skip("this kernel has no CPU pressure (PSI: /proc/pressure/cpu unreadable)")
    host = quick_run / "results" / "e2e"
    physics.conditions(host).require()
    intraop = pd.read_csv(host / "intraop" / "summary.csv")
    # a dense matmul splits over every thread (the tiny workload's ops are too small to split:
    # its 4 threads read 13% on the 2-vCPU EPYC VM, one thread busy)
    dense = intraop["workload"].astype(str).str.startswith("matmul")
    threads = intraop[(intraop["status"] == "ok") & dense & intraop["oversubscribed"].astype(bool)]
    loader = pd.read_csv(host / "dataloader" / "summary.csv")
    io = loader[(loader["status"] == "ok") & (loader["dataset"] == "io") & (loader["num_workers"] > 0)]
    assert len(threads) and len(io), (threads, io)
    assert (threads["cpu_wait_pct"] > WAITED_PCT).all(), threads[["workload", "threads", "cpu_wait_pct"]]
    assert io["cpu_wait_pct"].max() < threads["cpu_wait_pct"].min(), (io.to_dict("records"), threads["cpu_wait_pct"])
    assert not io["oversubscribed"].any(), io[["num_workers", "cpu_wait_pct", "cpu_util_pct"]].to_dict("records")


@pytest.mark.slow
def test_rerun_has_nothing_to_do(quick_run):
    """And a host.json newer than the points (``cp -r`` without ``-p``, a ``touch``) re-measures
    none of them: a tester's dry run planned all 44 again. The report's jobs, which read it, may rerun."""
    proc = snakemake_in(quick_run, "--cores", "4", *QUICK_CONFIG, "--config", "host=e2e", "-n")
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr
    host = quick_run / "results" / "e2e" / "host.json"
    was = host.stat()
    try:
        os.utime(host)  # now: newer than every point's files
        proc = snakemake_in(quick_run, "--cores", "4", *QUICK_CONFIG, "--config", "host=e2e", "-n")
    finally:
        os.utime(host, ns=(was.st_atime_ns, was.st_mtime_ns))
    planned = proc.stdout
    assert proc.returncode == 0 and "rule measure:" not in planned and "rule selfcheck:" not in planned, planned[-3000:]


#: Checks that held with a wide margin in every run on the development VM: sleeping threads
#: (1.99-2.00x for >= 1.80x) and the sampler on a busy loop (within 2 points of the kernel's CPU
#: time, for +- 10). The sampler check used to expect
#: 100 / ncpu = 50%; a CI run read 27% when the VM gave the loop only about half a CPU, so
#: it is judged against the loop's own process_time now. The convoy under the GIL: the median
#: wake-up delay was 5.23 ms at a 5 ms switch interval and 50.2 ms at 50 ms, for >= half of it.
STRICT = ("sleep loop", "sampler: one busy", "Convoy")
#: Checks whose outcome depends on what the host delivers at that moment. On the shared
#: 2-vCPU VM of development and CI, two processes gave 1.02x or 1.87x over one within the same
#: few minutes (the vCPUs sometimes share a physical core), and two GIL-bound threads over
#: sequential ranged from 0.696x to 1.07x against a 0.70x lower bound. There the verdict is a
#: finding about the host, and the test checks it is consistent with the numbers.
HOST_DEPENDENT = ("threads over sequential", "processes over sequential", "matmul GFLOP/s", "sampler's own cost")
#: The sampler's own cost per sample may be at most this many times what the machine charged
#: beside it for waking at the same rate and reading two /proc files (``wake_read_ms``; tests/
#: test_experiments.py gives the measured range, 2.2-4.9 times). Its verdict follows its 1 ms
#: goal, a finding about the host; the test also bounds it, so that work leaking into the windows
#: (the edge counters) would still fail it on any host.
SAMPLER_OVER_FLOOR_MAX = 8.0


@pytest.mark.slow
def test_fidelity_checks(quick_run):
    table = pd.read_csv(quick_run / "results" / "e2e" / "fidelity.csv")
    table["verdict"] = table["verdict"].fillna("n/a")  # pandas reads the verdict "n/a" as missing
    # gil: CPU-bound threads, sleeping threads, processes, sha256 threads; intraop; the sampler's
    # two; convoy at the 5 and 50 ms switch intervals (0.5 ms is under 1 ms: no check)
    assert len(table) == 9, table["check"].tolist()
    ncpu = json.loads((quick_run / "results" / "e2e" / "host.json").read_text())["available_cpus"]
    for _, r in table.iterrows():
        if r["verdict"] == "n/a":  # only a scaling check, only on 1 CPU, and it says why
            assert ncpu == 1 and r["reason"].startswith("1 available CPU"), r.to_dict()
        elif any(k in r["check"] for k in STRICT):
            assert r["verdict"] == "pass", r.to_dict()
        else:
            assert any(k in r["check"] for k in HOST_DEPENDENT), r["check"]
            if " to " in r["expected"]:  # a range, e.g. "0.70x to 1.15x"
                bounds = [float(x.strip(" x")) for x in r["expected"].split(" to ")]
                inside = bounds[0] <= r["measured"] <= bounds[1]
            elif "own cost" in r["check"]:
                idle = pd.read_csv(quick_run / "results" / "e2e" / "selfcheck" / "metrics.csv").query("load == 'idle'")
                per_sample_ms = 10 * r["measured"] / idle["sample_hz"].iloc[0]
                assert per_sample_ms <= SAMPLER_OVER_FLOOR_MAX * idle["wake_read_ms"].median(), r.to_dict()
                assert f"{per_sample_ms:.2f} ms per sample" in r["reason"], r.to_dict()
                bounds = [float(r["expected"].split("%")[0].strip("< "))]
                inside = r["measured"] < bounds[0]
            else:  # ">= 1.39x" or ">= 1.39x (70% of the 1.99 CPUs delivered)"
                bounds = [float(r["expected"].split()[1].rstrip("x"))]
                inside = r["measured"] >= bounds[0]
            # the expected text rounds its bounds to 2 decimals: within that of one, either verdict is right
            # (a bound of 0.7 x 1.7476 = 1.2233 reads "1.22x"; 1.2204 measured is below it)
            if min(abs(r["measured"] - b) for b in bounds) >= 0.005:
                assert r["verdict"] == ("pass" if inside else "warn"), r.to_dict()


@pytest.mark.slow
def test_snakemake_report_collects_every_figure(quick_run, tmp_path):
    import zipfile

    out = tmp_path / "report.zip"
    proc = snakemake_in(quick_run, "--cores", "4", *QUICK_CONFIG, "--config", "host=e2e", "--report", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = zipfile.ZipFile(out).namelist()
    for fig in e2e_figures():
        assert any(n.endswith(f"/{fig}.png") for n in names), fig


@pytest.mark.slow
@pytest.mark.side_run("one_cpu")
def test_compare_with_a_one_cpu_host(quick_run, side_runs, tmp_path):
    """A second real host: the gil experiment and the workload pinned to one CPU
    (tests/side_runs.py's ``run_one_cpu``, beside the other side runs), its results directory
    then put beside the quick run's, as one from another machine would be; then `snakemake
    compare`. The comparison must not measure anything or touch either host's files."""
    import hashlib

    def digest(d):
        return {p: hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()}

    run = side_runs["one_cpu"].value()
    assert run["proc"][0] == 0, run["proc"][1]
    first = run["cpu"]
    shutil.copytree(run["host"], quick_run / "results" / "e2e-1cpu", dirs_exist_ok=True)
    one = json.loads((quick_run / "results" / "e2e-1cpu" / "host.json").read_text())
    assert one["available_cpus"] == 1 and one["affinity"] == [first]
    assert (quick_run / "results" / "e2e-1cpu" / "config.yaml").exists()
    before = {**digest(quick_run / "results" / "e2e"), **digest(quick_run / "results" / "e2e-1cpu")}
    # e2e-1cpu named twice (a label under results/ and a directory) is compared once
    both = "compare={baseline: e2e, hosts: [e2e, e2e-1cpu], dirs: [./results/e2e-1cpu]}"
    proc = snakemake_in(quick_run, "--cores", "4", "compare", "--config", both)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "measure" not in proc.stderr.split("Job stats:")[1].split("Reasons")[0]
    from lab.host import measurement_tmpdir  # the run's jobs only analyse and report: a server without torch

    server_log = Path(measurement_tmpdir(quick_run), "server.log").read_text()
    assert "preloaded for analysis and report jobs only, no torch" in server_log, server_log
    after = {**digest(quick_run / "results" / "e2e"), **digest(quick_run / "results" / "e2e-1cpu")}
    assert after == before  # neither host directory was touched
    c = pd.read_csv(quick_run / "results" / "compare" / "comparison.csv")
    gil = c[(c["experiment"] == "gil") & (c["host"] == "e2e-1cpu")]
    # same gil grid and parameters (repeats may differ): every point compared, with a CI and a test
    assert len(gil) == 12 and set(gil["status"]) == {"compared"}  # 4 workloads x 3 modes
    assert gil["ratio_ci_low"].notna().all() and gil["p_value"].between(0, 1).all()
    cpus = json.loads((quick_run / "results" / "e2e" / "host.json").read_text())["available_cpus"]
    assert (gil["ratio_per_cpu"] == gil["ratio"] * cpus).all()  # the baseline's CPUs over this host's one
    assert set(gil["verdict"]) <= {"faster", "slower", "no significant difference"}
    others = c[~c["experiment"].isin(["gil", "workload"]) & (c["host"] == "e2e-1cpu")]
    ran = set(RAN) - {"gil", "workload"}  # one row each (the fixture nap is not compared)
    assert others["reason"].str.contains("was not run on e2e-1cpu").all() and set(others["experiment"]) == ran
    assert len(others) == len(ran)
    # the workload: its verification compared across hosts; each host's recommendation side by side
    wl = c[(c["experiment"] == "workload") & (c["host"] == "e2e-1cpu")].set_index("point")
    assert wl.loc["stage=verify", "status"] == "compared" and "no median" in wl.loc["stage=search", "reason"]
    (own,) = json.loads((quick_run / "results" / "compare" / "tables.json").read_text())["workload"]
    assert own["columns"] == ["knob", "e2e", "e2e-1cpu", "differs between hosts"]
    knobs = {r[0]: r for r in own["rows"]}
    assert knobs["threads"][2].split()[0] == "1"  # one CPU: one intra-op thread
    assert knobs["gain over the current settings"][1].endswith(("verified", "not clearly faster"))
    html = (quick_run / "results" / "compare" / "report.html").read_text()
    assert "e2e-1cpu" in html and "1 available CPU)" in html and "Each host&#39;s recommendation" in html
    # a host directory copied from elsewhere, listed under compare: dirs
    elsewhere = tmp_path / "from-another-machine" / "laptop"
    shutil.copytree(quick_run / "results" / "e2e-1cpu", elsewhere)
    cfg = tmp_path / "cmp.yaml"
    cfg.write_text(f"compare:\n  hosts: [e2e]\n  dirs: ['{elsewhere}']\n  baseline: laptop\n")
    proc = snakemake_in(quick_run, "--cores", "4", "compare", "--configfile", "config.yaml", str(cfg))
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((quick_run / "results" / "compare" / "hosts.json").read_text())
    assert [h["name"] for h in meta["hosts"]] == ["e2e", "laptop"] and meta["baseline"] == "laptop"
    assert meta["hosts"][1]["path"] == str(elsewhere)
    # a comparison that fails (a host.json that is no fingerprint) leaves no report that looks like
    # its own: the last one's is kept under another name, and the console says so
    broken = tmp_path / "broken" / "nohost"
    broken.mkdir(parents=True)
    (broken / "host.json").write_text("{}")
    cfg.write_text(f"compare:\n  hosts: [e2e]\n  dirs: ['{broken}']\n")
    proc = snakemake_in(quick_run, "--cores", "4", "compare", "--configfile", "config.yaml", str(cfg))
    out = quick_run / "results" / "compare"
    assert proc.returncode != 0 and "1 could be read (e2e), and nohost could not" in proc.stderr, proc.stderr[-3000:]
    for ext in ("html", "md"):
        moved = f"results/compare/report.previous.{ext}"
        said = f"results/compare/report.{ext} is the previous comparison's: moved to {moved}"
        assert said in proc.stderr and not (out / f"report.{ext}").exists()
        assert "laptop" in (out / f"report.previous.{ext}").read_text()


@pytest.mark.slow
def test_run_writes_only_where_it_owns(quick_run):
    """With an empty HOME and DISPLAY naming no display: no file in HOME, and in the checkout
    only results/, logs/ and .snakemake/ (caches live in .snakemake/lab/). Snakemake itself
    creates its empty source-cache directories under ~/.cache/snakemake before it reads the
    Snakefile; no job writes there."""
    home = quick_run.parent.parent / "home"
    assert [p for p in home.rglob("*") if not p.is_dir()] == []
    assert {p.name for p in home.iterdir()} <= {".cache"}
    if (home / ".cache").exists():
        assert {p.name for p in (home / ".cache").iterdir()} == {"snakemake"}
    written = (quick_run.parent.parent / "written.txt").read_text().splitlines()
    written = [p for p in written if "__pycache__" not in p]
    outside = [p for p in written if p.split("/")[0] not in ("results", "logs", ".snakemake")]
    assert outside == []
    assert any(p.startswith(".snakemake/lab/tmp") for p in written) or (quick_run / ".snakemake/lab/tmp").is_dir()


@pytest.mark.slow
def test_the_last_lines_of_a_run_say_where_its_report_is(quick_run):
    """1,500 lines of Snakemake's log end by naming the report the run wrote, so a new user
    need not guess the host label's directory."""
    tail = (quick_run.parent.parent / "log-tail.txt").read_text()
    assert "Report: results/e2e/report.html and results/e2e/report.md" in tail, tail


@pytest.mark.slow
def test_changing_one_sweep_value_reruns_only_what_depends_on_it(quick_run, tmp_path):
    extra = tmp_path / "more-workers.yaml"
    extra.write_text("gil:\n  workers: [2, 3]\n")
    proc = snakemake_in(quick_run, "-n", "--cores", "4", *QUICK_CONFIG, str(extra), "--config", "host=e2e")
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = proc.stdout.split("Job stats:")[1].split("\n\n")[0]
    counts = {line.split()[0]: int(line.split()[1]) for line in stats.splitlines()[3:] if line.strip()}
    assert counts["measure"] == 12  # workers=3 for 4 workloads x 3 modes; nothing else re-measured
    assert counts["analyse"] == 1  # only gil
    from analysis.runinfo import RUN_FIGURES

    assert counts.get("figure", 0) <= 3 + len(RUN_FIGURES)  # the three gil figures and the run's own
    assert "selfcheck" not in counts and "host_info" not in counts


@pytest.mark.slow
def test_changed_analysis_code_redoes_its_analysis_and_measures_nothing(quick_run):
    """An update that changes one experiment's analysis module redoes that experiment's
    analysis, figures and the report, and measures nothing (Snakemake compares a newer input's
    content, so the module's text changes, not only its time); the file is put back as it was,
    so the run is as it was for the other tests."""
    module = quick_run / "experiments" / "jit" / "analysis.py"
    text, before = module.read_bytes(), module.stat()
    module.write_bytes(text + b"# an update\n")
    try:
        proc = snakemake_in(quick_run, "-n", "--cores", "4", *QUICK_CONFIG, "--config", "host=e2e")
    finally:
        module.write_bytes(text)
        os.utime(module, (before.st_atime, before.st_mtime))
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = proc.stdout.split("Job stats:")[1].split("\n\n")[0]
    counts = {line.split()[0]: int(line.split()[1]) for line in stats.splitlines()[3:] if line.strip()}
    assert counts["analyse"] == 1 and counts["report"] == 1, counts  # jit's, and the report built on it
    assert counts["figure"] == len(SPECS["jit"].all_figures) and counts["fidelity"] == 1, counts
    assert "measure" not in counts and "selfcheck" not in counts, counts


@pytest.mark.slow
@pytest.mark.side_run("interrupted")
def test_interrupted_run_leaves_no_orphans_and_resumes(side_runs):
    """Ctrl-C during the dataloader and during the multiprocessing experiment: no process of
    the run survives, no point looks complete that is not, and the next run finishes the rest
    (tests/side_runs.py's ``run_interrupted``, beside the other side runs)."""
    run = side_runs["interrupted"].value()
    for experiment in INTERRUPT_TARGETS:
        seen = run[experiment]
        assert seen["rc"] != 0
        assert seen["orphans"] == [], f"orphans after interrupting {experiment}"
        assert seen["done"] == [], f"{experiment}: an interrupted point left {seen['done']}"
        assert seen["incomplete"] == []  # every point that looks complete is complete
    # SIGINT to Snakemake alone during an analysis job (`timeout -s INT`) leaves no process, and
    # the plain rerun redoes what it left marked incomplete instead of refusing. (Whether a mark
    # is left depends on the moment: by hand, 1 of 2 tries left one, which stopped the rerun
    # with IncompleteFilesException before the profile's rerun-incomplete.)
    assert run["analysis"]["orphans"] == []
    assert run["resumed"][0] == 0, run["resumed"][1]
    assert run["host_json_kept"]  # resumed, not restarted
    assert (run["host"] / "report.html").exists()
    assert set(pd.read_csv(run["host"] / "status.csv")["status"]) == {"ok"}


@pytest.mark.slow
@pytest.mark.side_run("images")
def test_the_image_workload_is_diagnosed_searched_and_answered_honestly(side_runs):
    """examples/imagefolder by changing only the config: a ResNet on JPEG files decoded and
    augmented with PIL (narrowed for the test: width 16, 64-pixel crops, steps of about 0.05 s;
    tests/side_runs.py's ``run_images``, beside the other side runs). The search fits its budget
    or says it is incomplete; every knob of the config is tried, skipped with the diagnosis's
    reason, or named as not tried; the first screen's answer is the findings' answer."""
    from experiments.workload import KNOBS

    run = side_runs["images"].value()
    assert run["proc"][0] == 0, run["proc"][1]
    host = run["host"]
    rows = pd.read_csv(host / "workload" / "replicates.csv")
    assert set(rows["entry"]) == {"examples.imagefolder.bench:build"} and set(rows["status"]) == {"ok"}
    search = json.loads((host / "workload" / "stage~search" / "job.json").read_text())["outcome"]
    assert search["current_source"] == "your current settings" and search["start"]["num_workers"] == 0
    diag = search["diagnosis"]
    assert search["diagnosis_s"] > 0  # timed apart from the search's spent_s
    assert diag["input_dims"] == 4 and diag["steps"] >= 1 and 0 <= diag["data_stall_pct"] <= 100
    assert (rows["window"] == "diagnosis").sum() == 1  # one measured epoch before the search
    md = (host / "report.md").read_text()
    glance = md.split("## At a glance")[1].split("## Contents")[0]
    answer = next(ln for ln in glance.splitlines() if "(#workload)" in ln)
    incomplete = search["stopped"] == "budget"
    if incomplete:  # it says so at the top, with what a complete search needs
        said = ("would try all", "before it converged", "took longer than its steps predicted")
        assert "search incomplete:" in answer and any(s in answer for s in said), answer
    else:  # it fitted: the budget held (a comparison under way may finish its round)
        assert search["spent_s"] <= search["budget_s"] + max(c["rounds"] for c in search["trail"]) * 2, search
    params = json.loads((host / "workload" / "stage~search" / "job.json").read_text())["params"]
    tried = {c["knob"] for c in search["trail"] if c["rounds"] or c["decision"] in ("invalid", "excluded")}
    for knob in KNOBS:
        if len(set(params[knob])) > 1:
            untried = answer.split("not tried: ")[1] if "not tried: " in answer else ""
            said = knob in tried or knob in search["skipped_knobs"] or knob in untried
            assert said, (knob, search["skipped_knobs"], answer)
    found = json.loads((host / "workload" / "findings.json").read_text())["findings"]
    rec = json.loads((host / "workload" / "recommended.json").read_text())
    if rec["verified"]:
        assert "verified faster" in answer and found[0].startswith("Recommendation:")
    elif incomplete:
        assert found[0].startswith("No recommendation yet: search incomplete:"), found[0]
    else:
        assert "searched completely, nothing clearly faster" in answer and "fine here" in found[0]
    assert any(f.startswith("Diagnosis. One epoch of the start") for f in found)


@pytest.mark.slow
@pytest.mark.side_run("broken")
def test_a_broken_workload_fails_alone_and_the_report_says_why(side_runs):
    """A workload whose entry exists but does not import (a typo is refused before any job,
    tests/test_config.py; tests/side_runs.py's ``run_broken``, beside the other side runs): its
    jobs record the reason, the other experiments (here the fixture's) still run, and the report
    lists the workload as failed; the run's last job then fails, naming the key to fix, and the
    command that measures the points again once the code the key names is fixed."""
    run = side_runs["broken"].value()
    code, stderr = run["proc"]
    assert code == 1 and "Error in rule point_status" in stderr, stderr[-3000:]
    # the reason on the console too (the profile's show-failed-logs), not only in the log
    assert "failed: workload stage~search: config key workload.entry: 'mylab.missing:build'" in stderr, stderr
    log = (run["work"] / "logs" / "e2e-broken" / "point_status.log").read_text()
    assert "failed: workload stage~search: config key workload.entry: 'mylab.missing:build'" in log
    assert "failed: workload stage~verify: the search did not finish (config key workload.entry:" in log
    # a fixed key reruns by itself; a fixed module does not, and gets the command that measures again
    assert "fix that key, and the next run measures them again" in log
    assert "where the fault was in the code the key names, measure them again once it is fixed with: snakemake" in log
    assert "--forcerun results/e2e-broken/workload/stage~search/metrics.csv" in log.replace("'", "")
    host = run["host"]
    summary = pd.read_csv(host / "workload" / "summary.csv").set_index("stage")
    assert set(summary["status"]) == {"failed"}
    why = "config key workload.entry: 'mylab.missing:build': cannot import mylab.missing"
    assert summary.loc["search", "reason"].startswith(why)
    assert summary.loc["verify", "reason"].startswith("the search did not finish (" + why)
    assert set(pd.read_csv(host / "nap" / "summary.csv")["status"]) == {"ok"}  # the rest ran
    rec = json.loads((host / "workload" / "recommended.json").read_text())
    assert rec["status"] == "failed" and rec["reason"].startswith("the search did not finish")
    md = (host / "report.md").read_text()
    glance = md.split("## At a glance")[1].split("## Contents")[0]
    assert "no recommendation (failed: " in glance and "cannot import mylab.missing" in glance
    section = md.split('<a id="workload"></a>')[1].split("<a id=")[0]
    assert "No recommendation: the search did not finish" in section and "mylab.missing" in section
    assert '<a id="nap"></a>' in md

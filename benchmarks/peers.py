"""Peers side by side: pyperf, torch.utils.benchmark and the lab on the same points, each
twice, with the lab's capacity probe reading the machine around every peer measurement.

Points, the same work for every tool:

* pyperf (``bench_func``, ``--fast``: 6 worker processes): the seed's CPU-bound counting loop
  run twice sequentially, in 2 threads and in 2 forked processes; the sleep loop sequentially
  and in 2 threads; speedups = sequential mean / mode mean, with pyperf's own uncertainty (its
  mean +- standard deviation, propagated to the ratio). Each counting loop also times itself
  (:func:`pyperf_units`), so its pace in every benchmark is known;
* torch.utils.benchmark (``Timer.blocked_autorange``, at least 1 s each): a 1024 x 1024 float32
  matmul at 1 and 2 threads (GFLOP/s = 2 n^3 / median time) and one SGD step of the lab's MLP
  (samples/s); its stated uncertainty is the interquartile range of its blocks. The matmul points
  also get their sustained rate (all calls over all blocks' time, stalled calls included, the
  lab's kind of figure) and the steal time over their measurement;
* the lab, by its own command line with interleaved baselines, 2 worker processes and the
  capacity probe (``python -m lab.point gil``, ``lab.point intraop``): the same points with
  their 95% intervals, raw and on whole cores (``speedup_norm``, analysis/wholecores.py: from the
  work's own units where gil's processes and GIL-bound threads timed them), and their 95% rerun
  intervals (:mod:`analysis.rerun`: where another measurement of the point is expected to read,
  the interval the report's headlines give), the lab's statement a peer's value, another
  measurement, should be judged by; both are reported.

Around every peer measurement the capacity probe (:mod:`lab.probe`) measures the CPUs the machine
delivered, so torch.utils.benchmark's speedup can be put on whole cores (``speedup x CPUs /
delivered``) before it is compared with the lab's interval; pyperf's processes are put there by
their loops' own times and its GIL-bound threads at the sequential loop's pace, as the lab's are.

It reports every value with its stated uncertainty, each tool's rerun agreement (the share of
values whose second measurement lies inside the first one's stated interval, and the reverse;
for the lab by its 95% CI, by its rerun interval, and by the rerun interval of the figure its
report's headlines give: on whole cores where they lead with it, ``analysis.findings.transfer_case``),
its wall time, and whether each peer value lies inside the lab's interval, raw and on whole
cores. A benchmark, not a test. Usage (repository root, the venv of requirements-dev.txt)::

    python benchmarks/peers.py [--passes 2] [--json out.json] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]  # the lab, and peer_tables.py beside this file

from peer_tables import markdown  # noqa: E402

from lab.fileio import output_args_problem, write_json, write_text  # noqa: E402
from lab.probe import Probe  # noqa: E402
from lab.workspeed import unit_ms  # noqa: E402

#: Iterations of the counting loop per task: about 0.1-0.2 s on the CPUs seen here, as in the
#: quick config.
CPU_ITERATIONS = 2_000_000
#: The sleep loop: 10 sleeps of 10 ms per task.
IO_ITERATIONS = 10
MATMUL = 1024


#: pyperf's benchmarks, each run on its own (with the probe before it).
PYPERF_BENCHMARKS = ("cpu_sequential", "cpu_threads", "cpu_processes", "io_sequential", "io_threads")


def probe_reading(seconds: float = 1.0) -> tuple[float, float]:
    """``(one CPU's speed, delivered CPUs with all busy)``: medians over ``seconds`` of 20 ms probes."""
    ncpu = len(os.sched_getaffinity(0))
    single, delivered = [], []
    with Probe(ncpu, 20) as p:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            r = p.measure()
            single.append(r["capacity_1cpu_per_s"])
            delivered.append(r["delivered_cpus"])
    return statistics.median(single), statistics.median(delivered)


def _ratio(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """``a / b`` of two ``(mean, standard deviation)`` pairs with the relative deviations added
    in quadrature (first-order error propagation)."""
    r = a[0] / b[0]
    return r, r * math.hypot(a[1] / a[0], b[1] / b[0])


def run_pyperf(work: Path) -> dict:
    """pyperf's points: speedups with their propagated standard deviation, and wall time. Each
    benchmark runs on its own, after a 1 s probe reading, so its ratio can also be given with
    the drift between the two benchmarks taken out (``drift_corrected``: each mean time times
    the single-CPU speed the probe read before it); not for the sleep loop, whose time
    does not follow the CPU's speed (a correction there read 1.11x and 2.33x for a raw 1.99x).

    Every counting loop also timed itself (``PEER_UNITS``, peer_pyperf.py), so each CPU-bound
    speedup gets the loop's own pace in both benchmarks (:func:`pyperf_units`): ``units``, and
    ``norm``, the speedup had both run their loops at the same pace, the lab's way
    (:mod:`analysis.wholecores`): for the processes the ratio of the two benchmarks' calls, each
    in its own loops (``call_in_loops``); for the threads :func:`at_sequential_pace`."""
    import pyperf

    script = Path(__file__).with_name("peer_pyperf.py")
    t = time.perf_counter()
    stats, probes, units = {}, {}, {}
    for name in PYPERF_BENCHMARKS:
        probes[name] = probe_reading()
        out, loops = work / f"pyperf-{name}.json", work / f"pyperf-{name}.units"
        cmd = [
            sys.executable,
            str(script),
            name,
            "--fast",
            "--quiet",
            "-o",
            str(out),
            "--inherit-environ",
            "PEER_UNITS",
        ]
        subprocess.run(cmd, check=True, env=os.environ | {"PEER_UNITS": str(loops)})
        b = pyperf.Benchmark.load(str(out))
        stats[name] = (b.mean(), b.stdev())
        units[name] = pyperf_units(loops) if name.startswith("cpu") else None
    wall = time.perf_counter() - t
    values = {}
    for name, base, mode in (
        ("gil cpu: 2 threads over sequential", "cpu_sequential", "cpu_threads"),
        ("gil cpu: 2 processes over sequential", "cpu_sequential", "cpu_processes"),
        ("gil io: 2 threads over sequential", "io_sequential", "io_threads"),
    ):
        s, sd = _ratio(stats[base], stats[mode])
        values[name] = {"value": s, "low": s - sd, "high": s + sd, "stated": "mean +- stdev"}
        values[name] |= {"single_before": (probes[base][0], probes[mode][0])}
        if base == "io_sequential":  # a sleep's length does not follow the CPU's speed: no drift to take out
            continue
        drift = probes[base][0] / probes[mode][0]  # time x speed: the work in one CPU's units
        values[name] |= {"drift_corrected": s * drift, "units": {"sequential": units[base], mode: units[mode]}}
        if mode == "cpu_processes":  # each child's loop ran alone on a CPU: its pace is the machine's
            values[name]["norm"] = units[base]["call_in_loops"] / units[mode]["call_in_loops"]
        elif math.isfinite(paced := at_sequential_pace(s, units[base], units[mode])):  # NaN: compared raw only
            values[name]["norm"] = paced
    return {"wall_s": wall, "values": values}


def at_sequential_pace(speedup: float, sequential: dict, threads: dict) -> float:
    """GIL-bound threads' speedup at the sequential loop's pace: ``speedup`` x their loop's ``cpu_ms``
    over the sequential one's (:func:`pyperf_units`; one thread runs at a time, so CPU time is a
    loop's pace, as the lab times them: :mod:`lab.workspeed` ``cpu``). NaN where one is not > 0."""
    a, b = threads.get("cpu_ms", math.nan), sequential.get("cpu_ms", math.nan)
    return speedup * a / b if a > 0 and b > 0 else math.nan


def pyperf_units(path: Path) -> dict:
    """The counting loop's own times in one pyperf benchmark, from the lines its loops and calls
    appended to ``path`` (peer_pyperf.py), calibration and warm-up calls included::

        {"loops": n, "calls": n,
         "elapsed_ms", "cpu_ms": medians over the loops (ms per loop of CPU_ITERATIONS),
         "slowest_ms": median over the calls of the slowest process's mean time per loop,
         "call_in_loops": median over the calls of the call's time over that}

    ``slowest_ms`` is the lab's :func:`lab.workspeed.unit_ms` of each call's loops (a sequential
    call's one process, a processes call's slower child). ``call_in_loops`` is the call's length in its own
    loops: about 2 for two loops one after another, 1 for two at once, plus what the call spent
    outside them (forking, joining). Two benchmarks' ratio of it is their speedup had their loops
    run at the same pace, the lab's speedup on whole cores (:mod:`analysis.wholecores`), taken
    call by call, as the lab takes it round by round. A loop's CPU time against its elapsed time
    is the share of it on a CPU (under the GIL, threads wait for it: their elapsed time is not
    the loop's pace).

    Raises:
        ValueError: where the file holds no loop (pyperf's workers did not inherit ``PEER_UNITS``).
    """
    calls: dict[str, dict[str, list[tuple[float, float]]]] = {}
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines():
        call, pid, wall, cpu = line.split()
        calls.setdefault(call, {}).setdefault(pid, []).append((float(wall), float(cpu)))
    loops = [u for by_pid in calls.values() for pid, us in by_pid.items() if pid != "call" for u in us]
    if not loops:
        raise ValueError(f"{path}: no loop timed itself; pyperf's workers must inherit PEER_UNITS")
    slowest, in_loops = [], []
    for by_pid in calls.values():
        # each loop a span of its process; a call whose loops did not report (a child that failed) gives NaN
        unit = (
            unit_ms(
                [
                    {"actor": pid, "start_s": 0.0, "end_s": w}
                    for pid, us in by_pid.items()
                    for w, _ in us
                    if pid != "call"
                ]
            )
            / 1e3
        )
        if not unit > 0:
            continue
        slowest.append(unit)
        if "call" in by_pid:
            in_loops.append(by_pid["call"][0][0] / unit)
    return {
        "loops": len(loops),
        "calls": len(calls),
        "elapsed_ms": 1e3 * statistics.median(w for w, _ in loops),
        "cpu_ms": 1e3 * statistics.median(c for _, c in loops),
        "slowest_ms": 1e3 * statistics.median(slowest),
        "call_in_loops": statistics.median(in_loops) if in_loops else math.nan,
    }


def _steal_s() -> float | None:
    """Steal time (s) of this process's CPUs so far (/proc/stat; None without the column)."""
    from lab.capacity import read_proc_stat, steal_seconds

    return steal_seconds(read_proc_stat(), sorted(os.sched_getaffinity(0)))


def run_tub() -> dict:
    """torch.utils.benchmark's points: matmul GFLOP/s at 1 and 2 threads, their ratio, and the
    MLP step's samples/s, each with its interquartile range.

    The matmul points come twice. torch.utils.benchmark states the median of its blocks (here
    one call each, 10-40 ms), which leaves out the calls the host stalled as long as they are
    under half; the lab states throughput over windows of 0.1-0.3 s, which include them. So each
    matmul point is also given ``sustained``: all its calls' flop over all its blocks' time
    (what a long run gets), with the steal time /proc/stat counted over its measurement."""
    import torch
    import torch.utils.benchmark as tub

    from lab.models import classification_batch, mlp, train_step_fn

    t = time.perf_counter()
    before = probe_reading()[1]
    a, b = torch.randn(MATMUL, MATMUL), torch.randn(MATMUL, MATMUL)
    flop = 2.0 * MATMUL**3
    values, per, sustained = {}, {}, {}
    for threads in (1, 2):
        steal0, t0 = _steal_s(), time.perf_counter()
        m = tub.Timer("a @ b", globals={"a": a, "b": b}, num_threads=threads).blocked_autorange(min_run_time=1.0)
        steal1, wall = _steal_s(), (time.perf_counter() - t0) * len(os.sched_getaffinity(0))
        stolen = 100.0 * (steal1 - steal0) / wall if None not in (steal0, steal1) else math.nan
        per[threads] = m
        sustained[threads] = flop * m.number_per_run * len(m.raw_times) / sum(m.raw_times) / 1e9
        values[f"intraop matmul: GFLOP/s at {threads} thread{'s' if threads > 1 else ''}"] = {
            "value": flop / m.median / 1e9,
            "low": flop / m._p75 / 1e9,
            "high": flop / m._p25 / 1e9,
            "stated": "interquartile range",
            "sustained": sustained[threads],
            "steal_pct": stolen,
        }
    s = per[1].median / per[2].median
    spread = math.hypot(per[1].iqr / per[1].median, per[2].iqr / per[2].median) / 2
    values["intraop matmul: 2 threads over 1"] = {
        "value": s,
        "low": s * (1 - spread),
        "high": s * (1 + spread),
        "stated": "interquartile ranges, combined",
        "sustained": sustained[2] / sustained[1],
    }
    torch.set_num_threads(1)
    model, (x, y) = mlp(64, 256), classification_batch(256, 64)
    step = train_step_fn(model)
    m = tub.Timer("step(x, y)", globals={"step": step, "x": x, "y": y}, num_threads=1).blocked_autorange(
        min_run_time=1.0
    )
    values["intraop mlp: samples/s at 1 thread"] = {
        "value": 256 / m.median,
        "low": 256 / m._p75,
        "high": 256 / m._p25,
        "stated": "interquartile range",
    }
    after = probe_reading()[1]
    return {"wall_s": time.perf_counter() - t, "delivered": statistics.mean([before, after]), "values": values}


def _lab_point(work: Path, experiment: str, args: list[str], baseline: list[str], tag: str):
    import pandas as pd

    from analysis.load import load_experiment
    from analysis.stats import summarise

    out = work / tag
    cmd = [sys.executable, "-m", "lab.point", experiment, *args, "--out", str(out), "--rounds-workers", "2"]
    cmd += ["--rounds-probe-ms", "20", "--rounds-target-ci-pct", "5", "--rounds-budget-s", "6", "--rounds-max", "30"]
    cmd += ["--baseline", *baseline] if baseline else []
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    reps = load_experiment([out / "metrics.csv"], experiment)
    s: pd.DataFrame = summarise(reps, experiment)
    return s.iloc[0], reps


def run_lab(work: Path) -> dict:
    """The lab's matching points: speedups with their 95% CIs, raw and on whole cores."""
    t = time.perf_counter()
    values = {}
    gil = ["--workload", "cpu", "--workers", "2", "--cpu-iterations", str(CPU_ITERATIONS), "--repeats", "6"]
    for mode in ("threads", "processes"):
        r, _ = _lab_point(work, "gil", [*gil, "--mode", mode], ["mode=sequential"], f"gil-{mode}")
        values[f"gil cpu: 2 {mode} over sequential"] = _lab_value(r)
    io = ["--workload", "io", "--workers", "2", "--io-iterations", str(IO_ITERATIONS), "--repeats", "6"]
    r, _ = _lab_point(work, "gil", [*io, "--mode", "threads"], ["mode=sequential"], "gil-io")
    values["gil io: 2 threads over sequential"] = _lab_value(r)
    mm = ["--workload", "matmul", "--matmul-size", str(MATMUL), "--iterations", "8", "--repeats", "6"]
    r, reps = _lab_point(work, "intraop", [*mm, "--threads", "2"], ["threads=1"], "matmul")
    values["intraop matmul: 2 threads over 1"] = _lab_value(r)
    values["intraop matmul: GFLOP/s at 2 threads"] = _with_rerun(
        {"value": r["median"], "low": r["ci_low"], "high": r["ci_high"], "stated": "95% CI"}, int(r["n"])
    )
    ok = reps[reps["status"] == "ok"]
    values["intraop matmul: 2 threads over 1"]["steal_pct"] = float(ok[ok["role"] == "point"]["steal_pct"].median())
    base = ok[ok["role"] == "baseline"]["gflop_per_s"]
    values["intraop matmul: GFLOP/s at 1 thread"] = _median_value(base.to_numpy())
    mlp = ["--workload", "mlp", "--threads", "1", "--iterations", "20", "--repeats", "6"]
    r, _ = _lab_point(work, "intraop", mlp, [], "mlp")
    values["intraop mlp: samples/s at 1 thread"] = _with_rerun(
        {"value": r["median"], "low": r["ci_low"], "high": r["ci_high"], "stated": "95% CI"}, int(r["n"])
    )
    return {"wall_s": time.perf_counter() - t, "values": values}


def _lab_value(r) -> dict:
    from analysis.findings import transfer_case

    return {
        "value": float(r["speedup"]),
        "low": float(r["speedup_ci_low"]),
        "high": float(r["speedup_ci_high"]),
        "norm": float(r["speedup_norm"]),
        "norm_low": float(r["speedup_norm_ci_low"]),
        "norm_high": float(r["speedup_norm_ci_high"]),
        "delivered": float(r["cpus_delivered"]),
        "stated": "95% CI",
        "rerun_low": float(r["speedup_rerun_low"]),
        "rerun_high": float(r["speedup_rerun_high"]),
        "norm_rerun_low": float(r["speedup_norm_rerun_low"]),
        "norm_rerun_high": float(r["speedup_norm_rerun_high"]),
        # the figure the report's headline gives (analysis.findings.transfer_case): on whole cores
        # where the work timed its own units and the correction is worth giving, else as measured
        "headline": "norm" if transfer_case(r) == "on_whole_cores" else "value",
    }


def _with_rerun(v: dict, n: int) -> dict:
    """``v`` (a lab median of ``n`` values with its 95% CI) with its 95% rerun interval,
    ``rerun_low`` and ``rerun_high``: the CI widened as the analysis widens the speedups'
    (:mod:`analysis.rerun`: where a rerun is expected to read)."""
    from analysis.rerun import rerun_interval

    v["rerun_low"], v["rerun_high"] = (float(x) for x in rerun_interval(v["value"], v["low"], v["high"], n))
    return v


def _median_value(values) -> dict:
    from lab.intervals import median_ci

    lo, hi = median_ci(values)
    return _with_rerun(
        {"value": float(statistics.median(values)), "low": lo, "high": hi, "stated": "95% CI"}, len(values)
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passes", type=int, default=2, help="how many times each tool measures every point")
    p.add_argument("--json", default=None, help="write the raw results here")
    p.add_argument("--markdown", default=None, help="write the tables here")
    args = p.parse_args(argv)
    if problem := output_args_problem(args):
        p.error(problem)
    if args.passes < 1:
        p.error(f"--passes must be >= 1, got {args.passes}")
    if importlib.util.find_spec("pyperf") is None:
        p.error("pyperf is not installed here: pip install -r requirements-dev.txt (it pins pyperf)")
    passes = []
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        for i in range(args.passes):
            work = Path(tmp) / f"pass{i + 1}"
            work.mkdir()
            t = time.perf_counter()
            one = {"pyperf": run_pyperf(work), "tub": run_tub(), "lab": run_lab(work)}
            one["wall_s"] = time.perf_counter() - t
            passes.append(one)
            print(f"pass {i + 1}: {one['wall_s']:.0f} s", file=sys.stderr)
    text = markdown(passes)
    print(text)
    if args.json:
        write_json(Path(args.json), passes)
    if args.markdown:
        write_text(Path(args.markdown), text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Search benchmark: does the workload experiment's search find what measuring every
configuration finds, in a fraction of the time?

On a grid small enough to measure in full, it runs

* the **exhaustive** measurement: every valid configuration against the same reference (the
  search's start, PyTorch's defaults), ``--rounds`` interleaved rounds each (A B, B A, ...), the
  configuration's score being the geometric mean of its per-round throughput ratios to the
  reference, with the same 95% interval the search decides with
  (:func:`experiments.workload.search.geomean_ci`);
* the **search** as the pipeline runs it (:func:`experiments.workload.measure.search`: the
  diagnosis epoch, windows sized in time, the knobs it keeps in its order, the stopping rule,
  the default ``budget_s: auto`` capped at ``budget_max_s``), from the same start; its time to
  a complete search, and whether the default budget let it complete.

and reports: the exhaustive best and its score; the search's winner and its exhaustive score;
whether the winner is within 5% of the best or their 95% intervals overlap (the goal); and the
time each took, wall clock and inside measured windows (goal: the search at most 30% of the
exhaustive measurement time). This is a benchmark, not a test: numbers go to docs/benchmarks.md.

Workloads: the built-in CNN (``--entry ""``) or a user's, such as the ResNet-18 on JPEG files of
``examples/imagefolder`` (``--entry examples.imagefolder.bench:build``).

Usage (from the repository root, in the project's venv)::

    python benchmarks/workload_search.py [--entry E] [--rounds 8] [--window-s 0.5] [--max-rounds 10] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import itertools
import platform
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.workload import measure  # noqa: E402
from experiments.workload.bench import Bench, key  # noqa: E402
from experiments.workload.candidates import defaults, invalid_reason  # noqa: E402
from experiments.workload.loader import WorkloadError, load  # noqa: E402
from experiments.workload.search import geomean_ci  # noqa: E402
from lab.capabilities import native_bf16  # noqa: E402
from lab.fileio import emit, output_args_problem  # noqa: E402
from lab.hostinfo import cpuinfo  # noqa: E402
from lab.params import oversubscription_problem  # noqa: E402
from lab.window import Meter  # noqa: E402

#: The grid: 3 x 2 x 2 x 2 x 2 combinations of the built-in workload, of which 40 are valid
#: (``persistent_workers`` applies with workers only).
GRID = {
    "num_workers": [0, 1, 2],
    "persistent_workers": [False, True],
    "threads": [1, 2],
    "precision": ["float32", "bfloat16"],
    "channels_last": [False, True],
    "mode": ["eager"],
    "processes": [1],
    "prefetch_factor": [2],
}


class Timed:
    """A round function that also counts the time spent inside measured windows."""

    def __init__(self, bench: Bench) -> None:
        self.bench, self.window_s = bench, 0.0

    def value(self, cfg: dict) -> float:
        win, row, _ = self.bench.measure(cfg)
        self.window_s += win.wall_s
        return row["samples_per_s"]

    def round(self, cand: dict, inc: dict, r: int) -> tuple[float, float]:
        if r == 0:
            self.bench.release_except({key(cand), key(inc)})
        if r % 2 == 0:
            a = self.value(cand)
            return a, self.value(inc)
        b = self.value(inc)
        return self.value(cand), b


def exhaustive(timed: Timed, start: dict, configs: list[dict], rounds: int) -> dict:
    """Score of every configuration: ``(geometric mean ratio to start, low, high)`` over ``rounds``."""
    scores = {}
    for cfg in configs:
        ratios = [a / b for a, b in (timed.round(cfg, start, r) for r in range(rounds))]
        scores[key(cfg)] = geomean_ci(ratios)
    return scores


def summary_lines(args, pipeline: dict, s_wall: float, scores: dict, ex: tuple, ncpu: int, n_configs: int) -> list[str]:
    """The benchmark's result as Markdown lines: machine, grid, diagnosis, the exhaustive and
    the search's cost (s wall; ``ex`` is the exhaustive's (wall s, s inside windows)), the
    exhaustive best and where the search's winner scores on the exhaustive's scale."""
    winner, trail = pipeline["winner"], pipeline["trail"]
    complete = pipeline["stopped"] != "budget"
    best = max(scores, key=lambda k: scores[k][0])
    won = scores.get(key(winner), (float("nan"),) * 3)
    within = won[0] >= 0.95 * scores[best][0]
    overlap = won[2] >= scores[best][1]
    bf16, flags = native_bf16()
    model = cpuinfo().get("model name") or platform.machine()
    return [
        f"Machine: {model}, {ncpu} CPUs, native bf16: {'yes' if bf16 else 'no'} ({flags}),"
        f" Python {platform.python_version()}.",
        f"Grid: {n_configs} configurations of {args.entry or 'the built-in workload'},"
        f" {pipeline['steps']} steps per window"
        f" ({1000 * pipeline['diagnosis']['step_s']:.0f} ms per step of the start).",
        f"Diagnosis: {pipeline['diagnosis']['sentence']}; searched in this order: {', '.join(pipeline['order'])};"
        f" skipped: {pipeline['skipped_knobs'] or 'none'}.",
        f"Exhaustive ({args.rounds} rounds each): {ex[0]:.0f} s wall, {ex[1]:.0f} s inside windows.",
        f"Search (the pipeline's, diagnosis included): {len(trail)} comparisons, {s_wall:.0f} s wall"
        f" ({100 * s_wall / ex[0]:.0f}% of the exhaustive); stopped: {pipeline['stopped']}"
        f" ({'complete' if complete else 'incomplete'} within its {pipeline['budget_s']:.0f} s budget, auto;"
        f" estimated beforehand: {pipeline['needed_s']:.0f} s).",
        f"Exhaustive best: {best}: {scores[best][0]:.3f}x ({scores[best][1]:.3f}-{scores[best][2]:.3f}).",
        f"Search winner: {key(winner)}: exhaustive score {won[0]:.3f}x ({won[1]:.3f}-{won[2]:.3f});"
        f" within 5% of the best: {'yes' if within else 'no'}; intervals overlap: {'yes' if overlap else 'no'}.",
        "",
        "| configuration | exhaustive score (x start, geometric mean, 95% CI) |",
        "|---|---|",
        *(f"| {k} | {v[0]:.3f} ({v[1]:.3f}-{v[2]:.3f}) |" for k, v in sorted(scores.items(), key=lambda kv: -kv[1][0])),
    ]


def _checked(p: argparse.ArgumentParser, args) -> tuple:
    """``(measure.Params, the loaded workload)`` from the parsed ``args``; a bad value exits 2
    with one line naming the option and what is allowed."""
    if problem := output_args_problem(args):
        p.error(problem)
    if args.rounds < 2:
        p.error(f"--rounds must be >= 2 (an interval needs two rounds), got {args.rounds}")
    if problem := oversubscription_problem(args.max_oversubscription):
        p.error(problem)
    grid_params = {k: tuple(v) for k, v in GRID.items()}
    options = {"window_s": "--window-s", "max_rounds": "--max-rounds", "budget_max_s": "--budget-max-s"}
    try:
        params = measure.Params(entry=args.entry, **{k: getattr(args, k) for k in options}, **grid_params)
        return params, load(args.entry, "train", 32)
    except (ValueError, WorkloadError) as exc:
        text = str(exc).replace("config key workload.entry", "--entry")
        for field, option in options.items():
            text = text.replace(f"{field}=", f"{option} ")
        p.error(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8, help="rounds per configuration, exhaustive")
    p.add_argument("--entry", default="", help="workload.entry ('': the built-in CNN)")
    p.add_argument("--window-s", type=float, default=0.5, help="workload.window_s")
    p.add_argument("--max-rounds", type=int, default=10, help="the search's rounds per comparison at most")
    p.add_argument("--budget-max-s", type=float, default=300.0, help="workload.budget_max_s (the default)")
    p.add_argument("--max-oversubscription", type=float, default=4.0, help="as in config.yaml")
    p.add_argument("--markdown", default=None, help="also write the result to this file")
    args = p.parse_args(argv)
    params, workload = _checked(p, args)  # before measuring: a typo costs no measurement
    start = {**defaults({}), "threads": 2, **workload.current}  # 2: torch's default in a plain shell here
    workload_params = SimpleNamespace(batch_size=32)
    t0 = time.monotonic()
    pipeline = measure.search(params, {"user_env.json": {"torch_threads": 2}}, args.max_oversubscription).outcome
    s_wall = time.monotonic() - t0
    steps = pipeline["steps"]

    def invalid(cfg: dict) -> str:
        return invalid_reason(cfg, workload_params, workload, {}, args.max_oversubscription)

    combos = [dict(zip(GRID, values)) for values in itertools.product(*GRID.values())]
    configs = [c for c in combos if not invalid(c)]
    with Meter(10) as meter:
        job = {"entry": args.entry, "task": "train", "batch_size": 32}
        bench = Bench(workload, job, meter, steps, warmup=pipeline.get("warmup", 2))
        try:
            timed = Timed(bench)
            t0 = time.monotonic()
            scores = exhaustive(timed, start, configs, args.rounds)
            ex_wall, ex_windows = time.monotonic() - t0, timed.window_s
        finally:
            bench.close()
    lines = summary_lines(args, pipeline, s_wall, scores, (ex_wall, ex_windows), meter.ncpu, len(configs))
    text = "\n".join(lines) + "\n"
    emit(text, args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

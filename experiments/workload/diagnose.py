"""Diagnose, then search: one measured epoch of the start says which knobs can matter, how long
a window must be and how long a complete search takes.

A performance engineer handed a training job looks before turning knobs: does the loop wait for
data, are the CPUs full, how long is a step, does this CPU compute in bfloat16 natively? The lab
does the same, measured, before the search (:mod:`experiments.workload.search`):

* **The step time.** Two untimed steps of the start, timed: windows are then sized in time, not
  steps: ``max(1, round(window_s / step_s))`` steps fill the window length the noise
  measurements call efficient (docs/benchmarks.md, "Window length"), so a ResNet-18 step of
  0.65 s gets windows of one step and a 5 ms step windows of a hundred.
* **One epoch of the start** (at most ``diagnose_s`` of it), measured as every window is: the
  share of the loop's time spent waiting for a batch (data stall), the CPUs the training process
  and its DataLoader workers kept busy, the intra-op threads in use, the CPU's native bfloat16
  and AMX, the input's dimensions and memory format.
* **What can help**, from that: more DataLoader workers only where the loop waits for data (or
  already has workers to rearrange); threads and processes where the CPUs are not full (or are
  oversubscribed); bfloat16, channels_last and the inference mode where the step computes
  (first where it is compute bound, after the data knobs where the loop waits). The search takes
  the knobs that can help in that order and skips the others with the reason. The thresholds
  are rules of thumb, stated here, not measured laws: a stall under :data:`STALL_MIN_PCT` % of
  the loop, CPUs over :data:`CPU_FULL_PCT` % busy, compute bound under
  :data:`COMPUTE_BOUND_STALL_PCT` % stall, data bound over :data:`DATA_BOUND_STALL_PCT` %.
* **How long a complete search takes**: one pass over the searched knobs, each value compared
  with the best in :data:`EXPECTED_ROUNDS` rounds of two windows, plus a setup of a few steps per
  candidate. With ``budget_s: auto`` the budget is what it takes at ``max_rounds`` rounds a
  comparison (the most a comparison may take), capped at ``budget_max_s``; a search the budget
  cuts short says so at the top of the report, with the time a complete one needs.
"""

from __future__ import annotations

import dataclasses
import math
import time

from experiments.workload import KNOBS
from experiments.workload.candidates import to_compare

#: The loop waited for data less than this share of an epoch (%): more workers cannot help.
STALL_MIN_PCT = 5.0
#: Under this data stall (%) the step is compute bound: precision, layout and mode come first.
COMPUTE_BOUND_STALL_PCT = 20.0
#: Over this data stall (%) faster compute saves little: precision, layout and mode are skipped
#: (at 80%, halving the compute gains at most 11%).
DATA_BOUND_STALL_PCT = 80.0
#: CPUs busier than this (% of the available) leave no CPU time for more threads or processes.
CPU_FULL_PCT = 80.0
#: Rounds a comparison is expected to take (it is decided from 4 on, at most ``max_rounds``;
#: the search benchmark's comparisons took 5 to 8, docs/benchmarks.md).
EXPECTED_ROUNDS = 6
#: Steps a new candidate runs before its first window (setup, the first call, the warm-up).
SETUP_STEPS = 3
#: Time (s) a window costs beyond its steps: the sampler's edges, the capacity of a switch.
WINDOW_OVERHEAD_S = 0.05

#: Knob groups, in the order the search takes them when the diagnosis says each can help.
DATA = ("num_workers", "persistent_workers", "prefetch_factor")
PARALLEL = ("threads", "processes")
COMPUTE = ("precision", "channels_last", "mode")


@dataclasses.dataclass
class Diagnosis:
    """What one epoch of the start measured (see the module docstring).

    Attributes:
        step_s: time of one step (or inference call) of the start, s.
        steps: steps per window from ``window_s``; warmup: untimed steps before each window (a
            quarter of the window, at least one, at most the config's ``warmup``).
        batches: steps the diagnosis epoch ran in one process (``epoch_batches``: the epoch's
            length).
        data_stall_pct: the loop's time waiting for a batch, % of the epoch.
        cpu_util_pct: the process tree's CPU, % of the available CPUs.
        loop_cpus, workers_cpus: CPUs the training process and its DataLoader workers kept busy
            (``workers_cpus`` NaN where the split was not read, data-parallel replicas: then
            ``loop_cpus`` is every process's together).
        processes: training processes of the start (replicas).
        ncpu: available CPUs; threads: intra-op threads of the start.
        native_bf16: the CPU computes bfloat16 natively (``bf16_what``: which instructions).
        input_dims: dimensions of one batch's input; layout: its memory format.
        contended: other processes took CPU during the epoch.
    """

    step_s: float
    steps: int
    warmup: int
    batches: int
    epoch_batches: int | None
    data_stall_pct: float
    cpu_util_pct: float
    loop_cpus: float
    workers_cpus: float
    ncpu: int
    threads: int
    num_workers: int
    native_bf16: bool
    bf16_what: str
    input_dims: int
    layout: str
    contended: bool
    processes: int = 1

    def cpus_text(self, loop: str = "the training process", workers: str = "its workers") -> str:
        """``1.86 CPUs the training process, 0.40 its workers`` (``..., which has no DataLoader
        workers`` without them); where the split was not read,
        ``1.14 CPUs the 2 training processes and their workers together``."""
        if math.isfinite(self.workers_cpus) and not self.num_workers:
            return f"{self.loop_cpus:.2f} CPUs {loop}, which has no DataLoader workers"
        if math.isfinite(self.workers_cpus):
            return f"{self.loop_cpus:.2f} CPUs {loop}, {self.workers_cpus:.2f} {workers}"
        return f"{self.loop_cpus:.2f} CPUs the {self.processes} training processes and their workers together"

    def reasons(self, task: str) -> dict[str, str]:
        """Knob -> why it cannot help here ("" where it can), in words."""
        out = dict.fromkeys(KNOBS, "")
        stall = self.data_stall_pct
        if stall < STALL_MIN_PCT and self.num_workers == 0:
            why = f"the loop waited for data {stall:.0f}% of the epoch: DataLoader workers cannot make it faster"
            out |= dict.fromkeys(DATA, why)
        full = self.cpu_util_pct >= CPU_FULL_PCT and self.threads + self.num_workers <= self.ncpu
        if full:
            why = (
                f"the CPUs were {self.cpu_util_pct:.0f}% busy ({self.cpus_text('the loop')}): more threads or"
                " processes find no idle CPU"
            )
            out |= dict.fromkeys(PARALLEL, why)
        if stall >= DATA_BOUND_STALL_PCT:
            why = (
                f"the loop waited for data {stall:.0f}% of the epoch: faster compute would save at most"
                f" {100 - stall:.0f}% of it"
            )
            out |= dict.fromkeys(COMPUTE, why)
        if task == "train":
            out["mode"] = out["mode"] or "TorchScript and torch.compile are searched for inference"
        return out

    def order(self) -> list[str]:
        """The knobs in the order the search takes them: the group the diagnosis points at first."""
        if self.data_stall_pct >= COMPUTE_BOUND_STALL_PCT:
            groups = (DATA, PARALLEL, COMPUTE)
        elif self.cpu_util_pct < CPU_FULL_PCT:
            groups = (COMPUTE, PARALLEL, DATA)
        else:
            groups = (COMPUTE, DATA, PARALLEL)
        return [k for g in groups for k in g]

    def sentence(self) -> str:
        """The diagnosis as a performance engineer would write it down."""
        epoch = f"{self.batches} of {self.epoch_batches}" if self.epoch_batches else f"{self.batches}"
        bf16 = f"native bfloat16: {'yes' if self.native_bf16 else 'no'} ({self.bf16_what})"
        workers = f"its {self.num_workers} DataLoader worker{'s' if self.num_workers != 1 else ''}"
        text = (
            f"One epoch of the start ({epoch} steps of {1000 * self.step_s:.0f} ms): the loop waited for data"
            f" {self.data_stall_pct:.0f}% of the time; the CPUs were {self.cpu_util_pct:.0f}% busy"
            f" ({self.cpus_text(workers=workers)}, of {self.ncpu});"
            f" {self.threads} intra-op thread{'s' if self.threads != 1 else ''}; {bf16}; inputs"
            f" {self.input_dims}-D, {self.layout}; windows of {self.steps} step{'s' if self.steps != 1 else ''}"
        )
        return text + (" (measured while other processes took CPU)" if self.contended else "")


def step_time(bench, cfg: dict, steps: int = 2) -> float:
    """Seconds per step of ``cfg`` (made ready by the caller): ``steps`` untimed steps, timed."""
    pool, setup, _ = bench._ready(cfg)
    t = time.perf_counter()
    bench._run(pool, setup, steps, False)
    return (time.perf_counter() - t) / steps


def steps_for(window_s: float, step_s: float) -> int:
    """Steps that fill a window of ``window_s`` (s) at ``step_s`` per step: at least one."""
    return max(1, round(window_s / step_s)) if step_s > 0 else 1


def cpus_of(row: dict) -> tuple[float, float]:
    """CPUs the training process and its workers kept busy in a window (``loop_cpu_s``,
    ``workers_cpu_s`` over ``wall_s``); where the split was not read (replicas), the tree's CPU
    and NaN."""
    wall = row.get("wall_s") or float("nan")
    loop, workers = row.get("loop_cpu_s"), row.get("workers_cpu_s")
    if loop is None or not math.isfinite(loop):
        return row["cpu_util_pct"] * row["available_cpus"] / 100, float("nan")
    return loop / wall, (workers or 0.0) / wall


def estimate_s(
    space: dict, start: dict, step_s: float, steps: int, warmup: int, max_rounds: int
) -> tuple[float, float, int]:
    """``(expected s, at most s, comparisons)`` of a complete search: one pass over the knobs of
    ``space`` (each value but the start's compared once), each comparison :data:`EXPECTED_ROUNDS`
    rounds (at most ``max_rounds``) of two windows (``steps`` steps and ``warmup`` untimed ones
    each) after a setup of :data:`SETUP_STEPS` steps. A slower candidate (workers that start,
    a model that compiles) takes longer: the figures are for the start's step time."""
    comparisons = sum(len([v for v in values if v != start.get(k)]) for k, values in space.items())
    window = (steps + warmup) * step_s + WINDOW_OVERHEAD_S

    def total(rounds: int) -> float:
        return comparisons * (rounds * 2 * window + SETUP_STEPS * step_s)

    return total(min(EXPECTED_ROUNDS, max_rounds)), total(max_rounds), comparisons


def diagnose(rec, workload, start: dict, params, ncpu: int) -> Diagnosis:
    """Time the start's step, size the windows, then measure one epoch of it (at most
    ``diagnose_s`` s) as a window of its own (``window`` = ``diagnosis``). ``rec`` is the search
    job's recorder (:class:`experiments.workload.record.Recorder`), ``params`` its Params;
    ``ncpu`` the CPUs available. Raises what the user's workload raises."""
    from lab.capabilities import native_bf16

    step_s = step_time(rec.bench, start)
    if not params.steps:
        rec.bench.steps = steps_for(params.window_s, step_s)
        # a warm-up of a quarter of a window, at least one step: 2 untimed steps of 0.65 s before
        # every 1-step window would cost more than the windows
        rec.bench.warmup = min(params.warmup, max(1, round(rec.bench.steps / 4)))
    cap = max(3, int(params.diagnose_s / step_s)) if params.diagnose_s else 0
    row = rec.window(start, "baseline", epoch=True, epoch_cap=cap, comparison=-1)
    row["window"] = "diagnosis"
    rec.repeat += 1
    loop, workers = cpus_of(row)
    bf16, what = native_bf16()
    return Diagnosis(
        step_s=step_s,
        steps=rec.bench.steps,
        warmup=rec.bench.warmup,
        batches=int(row["batches"]) // int(start["processes"]),  # summed over the replicas
        epoch_batches=row.get("epoch_batches"),
        data_stall_pct=float(row["data_stall_pct"]),
        cpu_util_pct=float(row["cpu_util_pct"]),
        loop_cpus=loop,
        workers_cpus=workers,
        ncpu=ncpu,
        threads=int(start["threads"]),
        num_workers=int(start["num_workers"]),
        native_bf16=bf16,
        bf16_what=what,
        input_dims=workload.input_dims,
        layout=workload.layout,
        contended=bool(row["contended"]),
        processes=int(start["processes"]),
    )


def plan_search(diag: Diagnosis, space: dict, skipped: dict, start: dict, params) -> tuple[dict, dict]:
    """The search's knob space in the order the diagnosis gives, the knobs it cannot help
    fixed at the start's value (``skipped``, with the reason), the time a complete search
    needs and the budget. Returns ``(space, plan)``, ``plan`` for the job's outcome."""
    why = diag.reasons(params.task)
    searched, by_diagnosis = {}, {}
    for knob in diag.order():
        values = space[knob]
        if len(values) > 1 and why[knob] and knob not in skipped:
            by_diagnosis[knob] = why[knob]
            values = [start[knob]]
        searched[knob] = values
    skipped |= by_diagnosis
    warmup = diag.warmup
    needed, most, comparisons = estimate_s(searched, start, diag.step_s, diag.steps, warmup, params.max_rounds)
    auto = params.budget_s == "auto"
    budget = min(most, params.budget_max_s) if auto else float(params.budget_s)
    plan = {
        "diagnosis": dataclasses.asdict(diag) | {"sentence": diag.sentence()},
        "order": to_compare(searched, start),
        "needed_s": needed,
        "planned_comparisons": comparisons,
        "budget_s": budget,
        "budget_auto": auto,
        "steps": diag.steps,
        "warmup": warmup,
    }
    return searched, plan

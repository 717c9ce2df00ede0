"""Workload experiment, measurement: search the knobs of the user's workload, then verify the winner.

``stage = search``: import and check the workload (:func:`experiments.workload.loader.load`;
a bad workload gives one ``failed`` row whose reason names the config key, before anything is
measured), then :class:`experiments.workload.search.Search` over the knob space, every window a
row (``role`` ``point``: the candidate, ``baseline``: the best of that moment; ``comparison``:
which comparison; ``repeat``: a round counter over the whole search). The job's outcome
(``job.json``) is the start, the winner and the trail of comparisons. ``stage = verify``: the
search's start (``baseline``) against its winner (``point``), in ``verify_processes`` worker
processes (:mod:`experiments.workload.verify`). Columns: see
:meth:`experiments.workload.bench.Bench.measure`, plus ``max_abs_diff``, ``loss_after`` and
``loss_after_fp32`` on bfloat16 windows (the numerical cost of autocast).

The start is the user's ``current`` settings over PyTorch's defaults: ``num_workers`` 0,
``persistent_workers`` False, ``prefetch_factor`` 2, the intra-op threads torch picks in the
user's own shell (measured, ``user_env.json``), 1 process, float32, eager, no channels_last.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

from experiments.workload import KNOBS
from experiments.workload.candidates import defaults, fit_threads, invalid_reason, knob_space, to_compare
from experiments.workload.loader import WorkloadError
from experiments.workload.record import Recorder, user_failure, where
from experiments.workload.search import MIN_ROUNDS
from lab.params import Declared, check_min, param, repeats_field, sample_hz_field
from lab.results import RunResult
from lab.window import Meter

Precision = Literal["float32", "bfloat16"]
Mode = Literal["eager", "script", "compile"]

#: ``package.module:function``, or empty for the built-in workload.
ENTRY_PATTERN = r"^$|^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"


@dataclass(frozen=True)
class Params(Declared):
    """The workload experiment's settings (config section ``workload``); the tuple fields are the
    search space, one value fixes a knob (declared once: :mod:`lab.params`).

    Raises:
        ValueError: for a value outside its bounds, an empty knob, a bad ``budget_s`` or
            ``repeats`` under 2 x ``verify_processes`` (the message names the field).
    """

    stage: Literal["search", "verify"] = param(
        "search",
        config=["search", "verify"],
        help="search: find the best settings; verify: measure them against the current ones (needs search)",
    )
    entry: str = param(
        "",
        element={"type": "string", "pattern": ENTRY_PATTERN, "title": "empty, or package.module:function"},
        help="package.module:function returning {model, dataset, loss, current}; "
        "empty: the built-in CNN on synthetic images",
    )
    task: Literal["train", "infer"] = param("train", help="train: training steps; infer: inference calls")
    batch_size: int = param(32, min=1, unit="samples", help="batch of the workload's DataLoader")
    window_s: float = param(
        0.5,
        above=0,
        unit="s",
        help="window length: the steps per window come from the measured step time (at least 1)",
        quick=0.25,
    )
    steps: int = param(
        0, min=0, help="training steps or inference calls per window; 0: from window_s and the step time"
    )
    # One untimed step, and a second after a change of intra-op threads (Bench.warmup_for): a
    # second step before every window cost 23 ms a window of the quick search on the EPYC VM.
    warmup: int = param(1, min=0, help="untimed steps before every window (one more after a change of threads)")
    diagnose_s: float = param(
        10, min=0, unit="s", help="the diagnosis epoch of the start stops after this long; 0: the whole epoch"
    )
    num_workers: tuple[int, ...] = param((0, 1, 2, 4), min=0, help="DataLoader num_workers to try", quick=[0, 1, 2])
    persistent_workers: tuple[bool, ...] = param(
        (False, True), help="DataLoader persistent_workers to try", quick=[True]
    )
    prefetch_factor: tuple[int, ...] = param((2,), min=1, help="DataLoader prefetch_factor to try")
    threads: tuple[int, ...] = param(
        (1, 2),
        min=1,
        config="auto",
        symbols=("auto",),
        help="intra-op threads of the training process; auto: 1, 2, 4, ... up to the available CPUs and their number",
    )
    processes: tuple[int, ...] = param((1, 2), min=1, help="DDP replicas (train) or instances (infer)")
    precision: tuple[Precision, ...] = param(
        ("float32", "bfloat16"), help="bfloat16: torch.autocast('cpu', dtype=torch.bfloat16)"
    )
    channels_last: tuple[bool, ...] = param((False, True), help="channels_last memory format (for images) to try")
    mode: tuple[Mode, ...] = param(
        ("eager", "script"),
        help="inference only: eager, TorchScript, torch.compile (compile: about 15-40 s first call, cold cache)",
    )
    bf16: Literal["native", "any"] = param(
        "native", help="search bfloat16 only where the CPU has native bf16 (avx512_bf16 or AMX); any: always"
    )
    budget_s: str = param(
        "auto",
        symbols=("auto",),
        element={"type": "number", "minimum": 0},
        unit="s",
        help="time budget of the search; auto: the time a complete search needs at the measured step time, "
        "at most budget_max_s",
    )
    budget_max_s: float = param(300, min=0, unit="s", help="the most an auto budget may be", quick=60)
    max_rounds: int = param(
        10,
        min=MIN_ROUNDS,  # fewer could never decide
        help=f"rounds per comparison at most (a comparison is decided from {MIN_ROUNDS} on)",
        quick=8,
    )
    repeats: int = repeats_field(10, help="verification rounds (current, recommended)")
    verify_processes: int = param(
        2,
        min=1,
        max=8,
        help="worker processes the verification's rounds are split over, one after the other: what differs "
        "between processes shows in its interval (experiments/workload/verify.py)",
    )
    verify_epochs: bool = param(False, help="verification windows of a whole epoch instead of steps")
    timeline_steps_max: int = param(
        200,
        min=0,
        help="the timeline's epoch (one per side, in the verification) stops after this many steps; 0: the whole epoch",
    )
    memory_budget_gb: float = param(
        0, min=0, unit="GB", help="exclude configurations whose peak PSS exceeds it; 0: no limit"
    )
    numerics_steps: int = param(5, min=1, help="training steps compared in float32 and bfloat16")
    sample_hz: float = sample_hz_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        budget = str(self.budget_s)
        if budget != "auto":
            try:
                check_min("budget_s", float(budget), 0)
            except ValueError as exc:
                raise ValueError(f"budget_s={self.budget_s!r}; allowed: auto or a number >= 0 ({exc})") from None
        object.__setattr__(self, "budget_s", budget)
        for knob in KNOBS:
            if not getattr(self, knob):
                raise ValueError(f"{knob} needs at least one value")
        if self.repeats < 2 * self.verify_processes:  # as check_config (experiments/workload/__init__.py)
            raise ValueError(
                f"repeats={self.repeats} is out of range; it must be >= 2 x verify_processes ="
                f" {2 * self.verify_processes} (2 verification rounds a worker process)"
            )

    @property
    def job(self) -> dict:
        """What a replica needs to load the workload itself."""
        return {"entry": self.entry, "task": self.task, "batch_size": self.batch_size}


def _open(params: Params, host_files: dict | None, max_oversubscription: float | None):
    """Load the workload and work out the knob space and the start; raises WorkloadError."""
    from experiments.workload.loader import load

    workload = load(params.entry, params.task, params.batch_size)
    user_env = (host_files or {}).get("user_env.json", {})
    start = {**defaults(user_env), **workload.current}
    space, skipped = knob_space(params, workload)
    limit = max_oversubscription or math.inf
    return workload, start, space, skipped, lambda cfg: invalid_reason(cfg, params, workload, skipped, limit)


def _check_start(bench, workload, start: dict, params: Params) -> None:
    """Run one step of the start (the current settings) before the search, so that a start
    that cannot run is reported as such and not blamed on the candidates.

    Raises:
        WorkloadError: naming the settings and the cause.
    """
    from experiments.workload.session import CandidateError, label

    source = "your current settings" if workload.current else "PyTorch's defaults"
    try:
        bench.check(start)
    except (CandidateError, RuntimeError) as exc:
        raise WorkloadError(f"{where(params)}: {source} ({label(start)}) do not run on this workload: {exc}") from None


def _numerics(bench, params: Params, space: dict) -> dict:
    return {p: bench.local.numerics(p, params.numerics_steps) for p in space["precision"] if p != "float32"}


def search(params: Params, host_files: dict | None, max_oversubscription: float | None) -> RunResult:
    """Stage ``search`` (see the module docstring)."""
    from experiments.workload.bench import Bench
    from experiments.workload.diagnose import diagnose, plan_search
    from experiments.workload.search import Search

    try:
        workload, start, space, skipped, invalid = _open(params, host_files, max_oversubscription)
    except WorkloadError as exc:
        return RunResult.failed(str(exc))
    with Meter(params.sample_hz) as meter:
        bench = Bench(workload, params.job, meter, params.steps or None, params.warmup)
        try:
            _check_start(bench, workload, start, params)
            numerics = _numerics(bench, params, space)
            rec = Recorder(bench, params, numerics, params.memory_budget_gb * 1024)
            t0 = time.monotonic()
            auto = params.budget_s == "auto"
            plan = {"budget_s": 0.0 if auto else float(params.budget_s), "steps": params.steps}
            to_decide = bool(to_compare(space, start))  # a value of some knob other than the start's
            if to_decide and (auto or plan["budget_s"] > 0):
                diag = diagnose(rec, workload, start, params, meter.ncpu)
                space, plan = plan_search(diag, space, skipped, start, params)
            adjust = fit_threads(meter.ncpu, space)
            s = Search(space, start, rec.round, invalid, plan["budget_s"], max_rounds=params.max_rounds, adjust=adjust)
            t_search = time.monotonic()  # the budget counts from here (Search.run), the diagnosis apart
            winner, trail = s.run()
        except WorkloadError as exc:
            return RunResult.failed(str(exc))
        except Exception as exc:
            return user_failure(exc, params)
        finally:
            bench.close()
    if not rec.result.rows:  # nothing was compared: one row that says why, so the point is not empty
        why = (
            "nothing to compare: every knob's values are the start's, or no candidate could be measured (see the trail)"
        )
        rec.result.rows.append({"repeat": 0, "role": "point", "status": "skipped", "reason": why, "stage": "search"})
    rec.result.outcome = {
        "start": start,
        "current_source": "your current settings" if workload.current else "PyTorch's defaults",
        "winner": winner,
        "stopped": s.stopped if to_decide else "nothing to search",  # every knob's values are the start's
        "spent_s": time.monotonic() - t_search,
        "diagnosis_s": t_search - t0,
        "skipped_knobs": skipped,
        "numerics": numerics,
        "trail": [c.as_dict() for c in trail],
        **plan,
    }
    return rec.result


def run(
    params: Params,
    baseline: Params | None = None,
    after: list[dict] | None = None,
    host_files: dict | None = None,
    max_oversubscription: float | None = None,
) -> RunResult:
    """Measure one stage of the workload experiment (see the module docstring).

    Args:
        after: the search job's ``job.json`` (stage ``verify``).
        host_files: ``{"user_env.json": ...}``: the user's shell (PyTorch's default threads).
        max_oversubscription: candidates asking for more than this many times the available
            CPUs (processes x (threads + num_workers)) are not measured.

    Returns:
        A :class:`~lab.results.RunResult`: rows per window, spans of the verification,
        the outcome for ``job.json``; or one ``failed`` row naming the config key.
    """
    if params.stage == "search":
        return search(params, host_files, max_oversubscription)
    from experiments.workload.verify import verify

    return verify(params, after)

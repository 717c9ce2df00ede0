"""How many interleaved rounds a job measures: a fixed number, or until its interval is narrow.

A job measures its point and, interleaved, its baseline in rounds (A B, then B A, ...; see
:func:`lab.results.interleave`). With a :class:`Rounds` policy whose
``target_ci_pct`` is above 0 it keeps measuring rounds after the first ``min_rounds`` until the
95% interval of its speedup (the median of the per-round ratios point / baseline,
:func:`lab.intervals.median_ci`) has a half-width below ``target_ci_pct`` % of the
speedup, or until its next round would overrun ``budget_s``, or ``max_rounds`` are done. A point
without a baseline (the baseline point itself) is judged on the interval of its own metric's
median instead. This is the idea of ``torch.utils.benchmark.Timer.adaptive_autorange``, which
measures until the interquartile range is small relative to the median or a time limit is hit,
applied to the ratio the lab reports.

A point whose median speedup so far is above 1 (it beats its baseline: a candidate for the
first screen's best of its group, :func:`analysis.stats.summarise`) may have its own, tighter
target and larger budget (``lead_target_ci_pct``, ``lead_budget_s``): the figures a reader sees
first get the rounds, the points that lose get the minimum.

Stopping when an interval is narrow enough makes the interval a little optimistic (the rule
looks at the data), the price of adaptive designs in general; ``min_rounds`` of at least
:data:`lab.intervals.MIN_N` keeps the first look from being a lucky few rounds. The
target applies to the interval of the job's own rounds; the analysis may widen the reported
interval after the run by the spread it measures between worker processes
(:func:`analysis.stats.worker_scale`), so a point that reached the target can be reported wider.
The job records how its rounds ended (:meth:`Rounds.record`, ``job.json`` ``rounds``), and the
report lists the points that stopped on the budget with their interval still wide.
"""

from __future__ import annotations

import dataclasses
import math

from lab.intervals import half_width_pct
from lab.params import check_min

#: The most worker processes a point's rounds may be split over (config rounds.workers' maximum).
MAX_ROUNDS_WORKERS = 8

#: Why a job's rounds ended.
STOPPED = {
    "fixed": "measured the configured number of rounds (no target)",
    "target": "the 95% CI half-width reached the target",
    "budget": "the time budget ran out before the 95% CI half-width reached the target",
    "max_rounds": "max_rounds ran out before the 95% CI half-width reached the target",
}


#: The command-line option of each policy field (``python -m lab.point``; :func:`lab.cli.rounds_policy`).
OPTIONS = {
    "repeats": "--repeats",
    "target_ci_pct": "--rounds-target-ci-pct",
    "budget_s": "--rounds-budget-s",
    "lead_target_ci_pct": "--rounds-lead-target-ci-pct",
    "lead_budget_s": "--rounds-lead-budget-s",
    "max_rounds": "--rounds-max",
    "workers": "--rounds-workers",
    "probe_ms": "--rounds-probe-ms",
}


def as_option(message: str) -> str:
    """A policy's error message (``probe_ms=-1.0 is out of range ...``) naming the command-line
    option (``--rounds-probe-ms=-1.0 ...``) instead of the field."""
    name = message.split("=", 1)[0]
    return OPTIONS[name] + message[len(name) :] if name in OPTIONS else message


def median(values: list[float]) -> float:
    """The median of ``values``, NaNs left out (NaN for none)."""
    x = sorted(v for v in values if v == v)
    n = len(x)
    if not n:
        return math.nan
    return x[n // 2] if n % 2 else (x[n // 2 - 1] + x[n // 2]) / 2


@dataclasses.dataclass(frozen=True)
class Rounds:
    """A job's rounds: at least ``min_rounds``; with ``target_ci_pct > 0``, more until the
    interval is narrow, the budget is spent or ``max_rounds`` are done.

    Attributes:
        min_rounds: rounds always measured (the experiment's ``repeats``).
        target_ci_pct: stop once the 95% CI half-width is below this % of the estimate; 0:
            measure exactly ``min_rounds``.
        budget_s: wall time (s) the rounds of one job may take; a round that would end past
            it is not started (the first ``min_rounds`` always run).
        max_rounds: at most this many rounds (>= ``min_rounds``).
        metric: the metrics column whose interval decides (the experiment's throughput
            metric for the point).
        workers: processes the rounds are split over, one after the other
            (:mod:`lab.workers`); the policy of one of them is :meth:`for_worker`.
        prior_point, prior_baseline: the metric of the windows earlier workers measured, one
            per round; the interval that decides pools them with this worker's.
        probe_ms: before each round, the capacity probe (:mod:`lab.probe`) runs its
            loop this long (ms) on one CPU, on the round's own number of CPUs and on all of
            them; 0: no probe.
        lead_target_ci_pct, lead_budget_s: the target and budget of a point whose median
            speedup so far is above 1 (:meth:`decide`); None: ``target_ci_pct`` and ``budget_s``.
        setup_alone: the workers set up one at a time, not together (an experiment that times
            its set-up, :attr:`lab.declare.Experiment.times_setup`; :mod:`lab.turns`).

    Raises:
        ValueError: for a value out of range (the message names it).
    """

    min_rounds: int
    target_ci_pct: float = 0.0
    budget_s: float = 0.0
    max_rounds: int = 0
    metric: str = ""
    workers: int = 1
    prior_point: tuple[float, ...] = ()
    prior_baseline: tuple[float, ...] = ()
    probe_ms: float = 0.0
    setup_alone: bool = False
    lead_target_ci_pct: float | None = None
    lead_budget_s: float | None = None

    def __post_init__(self) -> None:
        check_min("repeats", self.min_rounds, 1)
        check_min("probe_ms", self.probe_ms, 0)
        check_min("workers", self.workers, 1)
        check_min("target_ci_pct", self.target_ci_pct, 0)
        check_min("budget_s", self.budget_s, 0)
        if self.lead_target_ci_pct is not None:
            check_min("lead_target_ci_pct", self.lead_target_ci_pct, 0)
        if self.lead_budget_s is not None:
            check_min("lead_budget_s", self.lead_budget_s, 0)
        if self.adaptive:
            check_min("max_rounds", self.max_rounds, self.min_rounds)
            if not self.metric:
                raise ValueError("an adaptive Rounds policy needs the metric column that decides")

    @property
    def adaptive(self) -> bool:
        """Whether rounds go on past ``min_rounds`` while the interval is wide."""
        return self.target_ci_pct > 0

    def judged(self, point: list[float], baseline: list[float]) -> list[float]:
        """The values whose median's interval decides, earlier workers' included: per-round
        ratios point / baseline, or the point's own values without a baseline."""
        point, baseline = [*self.prior_point, *point], [*self.prior_baseline, *baseline]
        if not baseline:
            return list(point)
        return [p / b for p, b in zip(point, baseline) if b > 0]

    def for_worker(self, w: int, done: int, elapsed_s: float, point: list[float], baseline: list[float]) -> Rounds:
        """The policy of worker ``w`` (0-based) of :attr:`workers`, after earlier workers
        measured ``done`` rounds in ``elapsed_s`` with these metric values: each measures its
        share of the ``min_rounds`` left (rounded up, at least one: 4 rounds over 3 workers are
        2, 1 and 1); only the last one goes on while the pooled interval is wide, within what is
        left of the budget and of ``max_rounds``."""
        share = max(1, math.ceil((self.min_rounds - done) / (self.workers - w)))
        if w < self.workers - 1 or not self.adaptive:
            return dataclasses.replace(self, min_rounds=share, target_ci_pct=0.0, workers=1)
        return dataclasses.replace(
            self,
            min_rounds=share,
            budget_s=max(0.0, self.budget_s - elapsed_s),
            lead_budget_s=None if self.lead_budget_s is None else max(0.0, self.lead_budget_s - elapsed_s),
            max_rounds=max(share, self.max_rounds - done),
            workers=1,
            prior_point=tuple(point),
            prior_baseline=tuple(baseline),
        )

    def _beats(self, judged: list[float], baseline: list[float]) -> bool:
        """Whether the point beats its baseline so far: a baseline exists and the median of
        ``judged`` (:meth:`judged`'s per-round ratios, earlier workers' included) is above 1."""
        return bool(baseline or self.prior_baseline) and bool(median(judged) > 1.0)

    def _goal(self, judged: list[float], baseline: list[float]) -> tuple[float, float]:
        """The target (%) and budget (s) that apply now: the lead ones (where set) while the
        point beats its baseline (:meth:`_beats`), else ``target_ci_pct`` and ``budget_s``."""
        if self._beats(judged, baseline):
            target = self.target_ci_pct if self.lead_target_ci_pct is None else self.lead_target_ci_pct
            return target, self.budget_s if self.lead_budget_s is None else self.lead_budget_s
        return self.target_ci_pct, self.budget_s

    def decide(self, done: int, elapsed_s: float, point: list[float], baseline: list[float]) -> str | None:
        """Why to stop after ``done`` rounds that took ``elapsed_s``, or None to measure one more.
        The target and budget are those of :meth:`_goal`: a point that beats its baseline so far
        may go on longer, and one that falls back stops on the usual ones.

        Args:
            point, baseline: the metric of the point's and the baseline's windows so far, one
                per round, in round order (``baseline`` empty when there is none).
        """
        if done < self.min_rounds:
            return None
        if not self.adaptive:
            return "fixed"
        values = self.judged(point, baseline)
        target, budget = self._goal(values, baseline)
        width = half_width_pct(values, median(values))
        if math.isfinite(width) and width <= target:
            return "target"
        if done >= self.max_rounds:
            return "max_rounds"
        if elapsed_s / done * (done + 1) > budget:
            return "budget"
        return None

    def record(self, done: int, stopped: str, elapsed_s: float, point: list[float], baseline: list[float]) -> dict:
        """What ``job.json`` keeps of the rounds: ``done``, ``stopped`` (a key of
        :data:`STOPPED`), ``elapsed_s``, the final ``ci_half_width_pct`` and the policy."""
        values = self.judged(point, baseline)
        width = half_width_pct(values, median(values))
        return {
            "done": done,
            "stopped": stopped,
            "lead": bool(self.adaptive and self._beats(values, baseline)),
            "elapsed_s": round(elapsed_s, 3),
            "ci_half_width_pct": round(width, 3) if math.isfinite(width) else None,
            **{k: v for k, v in dataclasses.asdict(self).items() if not k.startswith("prior_")},
        }

"""The search: coordinate descent over the knobs, each candidate measured interleaved with the
current best until the 95% interval of their ratio excludes 1, its rounds are spent, or the
budget is.

Starting from the user's current settings (PyTorch's defaults without them), the search takes
the knobs in order (:data:`experiments.workload.KNOBS`) and, for each value of a knob other than
the current best's, measures that candidate against the current best in rounds: each round one
window of each, in alternating order (A B, B A, ...), so the machine's drift cancels out of their
ratio. After every round it has the paired ratios ``candidate / best``; from
:data:`MIN_ROUNDS` rounds on it computes a 95% confidence interval of their geometric mean
(:func:`geomean_ci`: Student's t on the logarithms of the ratios) and stops the comparison when the
interval lies above 1 (the candidate becomes the best) or below 1. Otherwise it stops at
``max_rounds`` ("no clear difference": the best stays). Further passes over the knobs follow
while a pass changes the best (knobs interact: bfloat16 may pay only once workers feed the
loop); a candidate already compared with the same best is not measured again. The time budget
ends the search wherever it is; the answer is then the best so far.

Measured here (the built-in workload, 2 vCPUs): the logarithm of the ratio of two consecutive
windows of one configuration has a standard deviation of about 0.12 (16 and 32 steps per
window), so 4 rounds resolve a difference of about 20%, 10 rounds about 9%. Looking at the
interval after every round is sequential testing: simulated with that noise (log-normal, sd
0.12, ``max_rounds`` 10, 5000 comparisons each), a candidate no faster than the best is adopted
7% of the time (not the 2.5% of one look), one 10% faster 71%, one 20% faster 99%, after 9.4,
7.3 and 5.0 rounds on average. The verification, a separate job with its own rounds, is what
guards the recommendation against the first kind. This is the idea
of torch.utils.benchmark's ``adaptive_autorange`` (measure until the estimate is good enough)
applied to a comparison; coordinate descent is what a person tuning knob by knob does, made
reproducible. The module is pure logic: measuring a round is a function passed in, so tests
can search a known landscape.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable

#: Fewest paired rounds before a comparison may be decided.
MIN_ROUNDS = 4


def geomean_ci(ratios: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of ``ratios`` with its confidence interval: the mean of the logarithms
    plus or minus Student's t quantile times their standard error, exponentiated.

    Ratios of throughputs are multiplicative, so their logarithms are close to symmetric; the
    interval is exact for log-normal ratios and conservative when the noise has heavy tails
    (outliers widen the standard error).

    Returns:
        ``(geometric mean, low, high)``; ``low`` and ``high`` are NaN with fewer than 2 ratios.
    """
    from scipy import stats

    logs = [math.log(r) for r in ratios if r > 0]
    n = len(logs)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = statistics.fmean(logs)
    if n < 2:
        return math.exp(mean), math.nan, math.nan
    half = float(stats.t.ppf((1 + level) / 2, n - 1)) * statistics.stdev(logs) / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


@dataclasses.dataclass
class Comparison:
    """One candidate against the best of its moment.

    Attributes:
        knob: the knob that differs.
        candidate, incumbent: the two configurations (knob -> value).
        ratios: per round, candidate throughput / best throughput.
        decision: ``better`` (adopted), ``worse``, ``no clear difference``, ``budget`` (stopped
            by the time budget), or ``invalid`` / ``excluded`` (not measured, or dropped after its
            first round, with ``reason``).
        reason: why, in words.
    """

    knob: str
    candidate: dict
    incumbent: dict
    ratios: list[float] = dataclasses.field(default_factory=list)
    decision: str = ""
    reason: str = ""

    def as_dict(self) -> dict:
        """A JSON-ready record (``job.json``'s outcome), with the geometric mean ratio and its CI."""
        ratio, low, high = geomean_ci(self.ratios)
        return {**dataclasses.asdict(self), "rounds": len(self.ratios), "ratio": ratio, "ci": [low, high]}


class Excluded(Exception):
    """Raised by a round function for a candidate that must not be adopted (over the memory
    budget, a setup that failed); the message is the reason."""


def decide(ratios: list[float], max_rounds: int) -> str:
    """``better``, ``worse``, ``no clear difference`` (rounds spent), or "" to measure on."""
    if len(ratios) >= MIN_ROUNDS:
        _, low, high = geomean_ci(ratios)
        if low > 1:
            return "better"
        if high < 1:
            return "worse"
    return "no clear difference" if len(ratios) >= max_rounds else ""


@dataclasses.dataclass
class Search:
    """Coordinate descent (see the module docstring).

    Attributes:
        space: knob -> values to try (a knob with one value is fixed).
        start: the configuration to start from (every knob set).
        measure_round: ``(candidate, incumbent, round) -> (candidate value, incumbent value)``,
            higher is better; may raise :class:`Excluded`.
        invalid: ``configuration -> reason`` if it cannot run at all, else "".
        budget_s: time budget of the whole search (s, by ``clock``); a comparison is not started
            when the mean time of the comparisons so far would overrun it.
        max_rounds: rounds per comparison at most (at least :data:`MIN_ROUNDS`).
        passes: passes over the knobs at most.
        adjust: ``(candidate, knob) -> candidate``: knobs that move together (the workload: more
            DataLoader workers with fewer intra-op threads, so they fit the CPUs).
    """

    space: dict
    start: dict
    measure_round: Callable[[dict, dict, int], tuple[float, float]]
    invalid: Callable[[dict], str]
    budget_s: float
    max_rounds: int = 10
    passes: int = 3
    clock: Callable[[], float] = time.monotonic
    adjust: Callable[[dict, str], dict] = lambda cfg, knob: cfg
    trail: list[Comparison] = dataclasses.field(default_factory=list)
    stopped: str = ""
    _spent: list[float] = dataclasses.field(default_factory=list)

    def _compare(self, c: Comparison, deadline: float) -> None:
        round_ = 0
        while not c.decision:
            if self.clock() > deadline:
                c.decision, c.reason = "budget", "the search's time budget ran out during this comparison"
                return
            try:
                cand, inc = self.measure_round(c.candidate, c.incumbent, round_)
            except Excluded as exc:
                c.decision, c.reason = "excluded", str(exc)
                return
            c.ratios.append(cand / inc)
            c.decision = decide(c.ratios, max(self.max_rounds, MIN_ROUNDS))
            round_ += 1

    def run(self) -> tuple[dict, list[Comparison]]:
        """Search; returns ``(best configuration, comparisons)``; :attr:`stopped` says why it
        ended (``converged``: a pass changed nothing; ``passes``; ``budget``)."""
        deadline = self.clock() + self.budget_s
        best, seen = dict(self.start), set()
        for _ in range(self.passes):
            changed = False
            for knob, values in self.space.items():
                for value in values:
                    cand = self.adjust({**best, knob: value}, knob)
                    key = (tuple(sorted(cand.items())), tuple(sorted(best.items())))
                    if value == best[knob] or cand == best or key in seen:
                        continue
                    seen.add(key)
                    c = Comparison(knob, cand, dict(best))
                    why = self.invalid(cand)
                    mean = sum(self._spent) / len(self._spent) if self._spent else 0.0
                    if why:
                        c.decision, c.reason = "invalid", why
                    elif self.clock() + mean > deadline:
                        c.decision, c.reason = "budget", "not started: the time budget would run out"
                    else:
                        t = self.clock()
                        self._compare(c, deadline)
                        self._spent.append(self.clock() - t)
                    self.trail.append(c)
                    if c.decision == "better":
                        best, changed = cand, True
                    if c.decision == "budget":
                        self.stopped = "budget"
                        return best, self.trail
            if not changed:
                self.stopped = "converged"
                return best, self.trail
        self.stopped = "passes"
        return best, self.trail

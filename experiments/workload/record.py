"""Workload experiment: what its two stages share: the recorder of a job's windows and the
failure a workload's own code causes (:mod:`experiments.workload.measure`,
:mod:`experiments.workload.verify`)."""

from __future__ import annotations

from lab.results import RunResult


def where(params) -> str:
    """Where the workload comes from, as a failure's reason names it."""
    return f"config key workload.entry: {params.entry!r}" if params.entry else "the built-in workload"


def user_failure(exc: BaseException, params) -> RunResult:
    """The failed point for ``exc`` (raised while the job measured), when it came from the
    workload's own code (a ``__getitem__`` that raises at item 100, say): one row whose reason
    names the config key and what was raised.

    Raises:
        BaseException: ``exc`` itself, where it is the lab's own error.
    """
    from experiments.workload.loader import raised_by_user

    if not raised_by_user(exc, params.entry):
        raise exc
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()] or [""]
    said = lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"  # a worker's: where, then what
    return RunResult.failed(f"{where(params)}: the workload raised {type(exc).__name__} while measured: {said}")


class Recorder:
    """Rows, samples and spans of a job's windows (``result``, rounds counted by ``repeat``); the
    round function of the search (:meth:`round`)."""

    def __init__(self, bench, params, numerics: dict, memory_budget_mb: float) -> None:
        self.bench, self.params, self.numerics, self.budget_mb = bench, params, numerics, memory_budget_mb
        self.result = RunResult()
        self.repeat, self.comparison = 0, -1

    def window(
        self, cfg: dict, role: str, spans: bool = False, epoch: bool = False, epoch_cap: int = 0, **extra
    ) -> dict:
        from experiments.workload.bench import key

        limit = self.params.timeline_steps_max if epoch and not self.params.verify_epochs else 0
        if epoch_cap:
            limit = min(limit, epoch_cap) if limit else epoch_cap
        win, row, sp = self.bench.measure(cfg, epoch=epoch, epoch_steps_max=limit)
        numbers = self.numerics.get(cfg["precision"], {})
        full = self.result.add_window(self.repeat, win, role=role, stage=self.params.stage, **row, **numbers, **extra)
        if spans:
            self.result.spans.extend({"repeat": self.repeat, "role": role, **s} for s in sp)
        full["config"] = key(cfg)
        return full

    def round(self, candidate: dict, incumbent: dict, r: int) -> tuple[float, float]:
        from experiments.workload.bench import key
        from experiments.workload.search import Excluded

        if r == 0:
            self.comparison += 1
            self.bench.release_except({key(candidate), key(incumbent)})
        from experiments.workload.session import CandidateError

        order = [("point", candidate), ("baseline", incumbent)]
        try:
            rows = {role: self.window(cfg, role, comparison=self.comparison) for role, cfg in order[:: 1 - 2 * (r % 2)]}
        except CandidateError as exc:  # this workload cannot run the candidate
            raise Excluded(str(exc)) from None
        except RuntimeError as exc:  # a replica failed or hung: drop the candidate, keep searching
            raise Excluded(f"its processes failed: {exc}") from None
        self.repeat += 1
        if self.budget_mb and rows["point"]["peak_pss_mb"] > self.budget_mb:
            raise Excluded(f"peak PSS {rows['point']['peak_pss_mb']:.0f} MB exceeds memory_budget_gb")
        return rows["point"]["samples_per_s"], rows["baseline"]["samples_per_s"]

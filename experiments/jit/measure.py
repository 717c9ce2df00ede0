"""JIT experiment: does TorchScript or torch.compile speed up CPU inference, and at what cost?

For a model (``mlp``: 256 -> 512 -> 512 -> 10 on a batch of 64; ``cnn``: three conv layers on
16 images of 3 x 32 x 32) in ``eval()`` mode under ``torch.no_grad()``, a mode is one of

* ``eager``: the ``nn.Module`` itself (the baseline);
* ``script``: ``torch.jit.script(model)``;
* ``trace``: ``torch.jit.trace(model, example)``;
* ``compile``: ``torch.compile(model)`` (inductor, which needs a working C++ compiler; without
  one the point is written with status ``skipped`` and the reason).

Up-front cost is measured once per job, before the steady state: ``setup_s`` (creating the
scripted, traced or compiled object) and ``first_call_s`` (the first call: TorchScript's
profiling run, inductor's compilation). torch.compile keeps what it compiled in an on-disk cache,
and a later process that finds it there compiles in a fraction of the time (27.7 s against 2.6 s
for the cnn on an Intel Xeon VM): each job points that cache at a directory of its own, empty
when the job starts (:func:`lab.host.job_scratch`), so the job's first worker process measures
the cold compile (``first_call_s``) and later ones the first call with the cache filled
(``first_call_warm_s``), whatever earlier runs left in the pipeline's cache. (Inductor's
precompiled C++ headers are not in that cache: they stay under ``$TMPDIR`` for every job after
the first that built them, a once-per-machine cost.) Then
``warmup_calls`` untimed calls (TorchScript runs profiling and optimisation passes during its
first calls), then ``repeats`` timed repeats of ``iterations`` calls each. Every mode's output
is compared with eager on the same input (``torch.allclose``, rtol 1e-4, atol 1e-5) and the
result recorded in ``allclose``.

torch.jit.script/trace are deprecated in torch 2.x and warn; the warning is silenced here.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lab.capabilities import cxx_compiler
from lab.host import INDUCTOR_CACHE, JOB_SCRATCH
from lab.params import Declared, param, repeats_field, sample_hz_field
from lab.results import Measured, RunResult, interleave
from lab.rounds import Rounds
from lab.threads import set_torch_threads
from lab.window import Meter


@dataclass(frozen=True)
class Params(Declared):
    """One configuration point of the jit experiment (declared once: :mod:`lab.params`).

    Raises:
        ValueError: for a value outside its bounds (the message names the field).
    """

    model: Literal["mlp", "cnn"] = param(
        "mlp",
        config=["mlp", "cnn"],
        help="mlp: 256 -> 512 -> 512 -> 10 on a batch of 64; cnn: three conv layers",
        quick=["cnn"],
    )
    mode: Literal["eager", "script", "trace", "compile"] = param(
        "eager",
        config=["eager", "script", "trace", "compile"],
        help="eager: the nn.Module; script, trace: TorchScript; compile: torch.compile (inductor)",
        quick=["eager", "script", "trace"],
        quick_why="torch.compile's cold first call alone takes 15-40 s",
    )
    threads: int = param(1, min=1, help="intra-op threads")
    iterations: int = param(
        200,
        min=1,
        per_key=True,
        config={"mlp": 200, "cnn": 50},
        help="timed calls per repeat, per model",
        quick={"mlp": 200, "cnn": 80},
    )
    warmup_calls: int = param(20, min=0, help="untimed calls before the repeats", quick=10)
    repeats: int = repeats_field(6)
    sample_hz: float = sample_hz_field()

    def cpus_requested(self) -> int:
        """CPUs this point asks for at once: the intra-op threads."""
        return self.threads


def make_model(name: str):
    """Return ``(model, example_input)`` for ``mlp`` or ``cnn``, seeded, in eval mode."""
    import torch

    from lab.models import cnn, mlp

    torch.manual_seed(0)
    if name == "mlp":
        return mlp(256, 512, 10).eval(), torch.randn(64, 256)
    return cnn().eval(), torch.randn(16, 3, 32, 32)


def build(mode: str, model, example):
    """Return the callable for ``mode`` (see the module docstring)."""
    import torch

    if mode == "eager":
        return model
    if mode == "script":
        return torch.jit.script(model)
    if mode == "trace":
        return torch.jit.trace(model, example)
    return torch.compile(model)


def _silence_torchscript() -> None:
    """Inside ``warnings.catch_warnings()``: hide TorchScript's deprecation warnings (torch 2.x)."""
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*TorchScript.*")
    warnings.filterwarnings("ignore", message=".*torch.jit.*")


def inductor_cache() -> tuple[bool, Path | None]:
    """Point torch.compile's on-disk cache (``$TORCHINDUCTOR_CACHE_DIR``, which inductor reads
    at every compile) at the job's own directory (``$LAB_JOB_SCRATCH``/inductor) and say whether
    it was empty: ``(True, None)`` for a cold compile (the job's first worker process), ``(False,
    None)`` when an earlier worker process of the job filled it. Outside a job it is a new
    temporary directory, cold, returned second so that the caller removes it (:meth:`Runner.close`
    also puts the variable back)."""
    scratch = os.environ.get(JOB_SCRATCH)
    own = None if scratch else Path(tempfile.mkdtemp(prefix="inductor-"))
    cache = own or Path(scratch) / INDUCTOR_CACHE
    cold = not cache.is_dir() or not any(cache.iterdir())
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    return cold, own


class Runner:
    """The model in one mode, built, called once (first-call cost) and warmed up."""

    def __init__(self, params: Params, meter: Meter) -> None:
        import torch

        self.params, self.meter = params, meter
        self.cache_before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        self.cold, self.own_cache = inductor_cache() if params.mode == "compile" else (True, None)
        set_torch_threads(params.threads)
        model, self.x = make_model(params.model)
        with torch.no_grad(), warnings.catch_warnings():
            _silence_torchscript()
            ref = model(self.x)
            t = time.perf_counter()
            self.fn = build(params.mode, model, self.x)
            self.setup_s = time.perf_counter() - t
            t = time.perf_counter()
            out = self.fn(self.x)
            self.first_call_s = time.perf_counter() - t
            for _ in range(params.warmup_calls):
                out = self.fn(self.x)
        self.allclose = bool(torch.allclose(out, ref, rtol=1e-4, atol=1e-5))
        self.max_abs_diff = float((out - ref).abs().max())

    def once(self) -> Measured:
        """Time ``iterations`` inference calls."""
        import torch

        p = self.params
        info = set_torch_threads(p.threads)
        with torch.no_grad(), warnings.catch_warnings():
            _silence_torchscript()
            with self.meter.window() as win:
                for _ in range(p.iterations):
                    self.fn(self.x)
        row = {
            "samples_per_s": self.x.shape[0] * p.iterations / win.wall_s,
            "latency_ms": 1000.0 * win.wall_s / p.iterations,
            "setup_s": self.setup_s,
            "first_call_s": self.first_call_s if self.cold else math.nan,
            "first_call_warm_s": math.nan if self.cold else self.first_call_s,
            "upfront_s": self.setup_s + self.first_call_s,  # timed once per runner: the run counts it as measuring
            "allclose": self.allclose,
            "max_abs_diff": self.max_abs_diff,
            **info,
        }
        return Measured(win, row)

    def close(self) -> None:
        if self.own_cache is not None:  # outside a job: its own cache goes, the variable comes back
            shutil.rmtree(self.own_cache, ignore_errors=True)
            if self.cache_before is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = self.cache_before


def run(params: Params, baseline: Params | None = None, rounds: Rounds | None = None) -> RunResult:
    """Measure up-front and steady-state cost of one (model, mode) point, its steady state
    interleaved with ``baseline`` (eager) if given.

    Returns:
        A :class:`~lab.results.RunResult` with one row per repeat and role: ``wall_s``
        (s), ``samples_per_s``, ``latency_ms`` (ms per call), ``setup_s``, ``first_call_s``
        (NaN in a worker process that found the compile cache filled), ``first_call_warm_s``
        (compile only, in such a process; NaN elsewhere), ``upfront_s`` (s, setup plus the first
        call: the runner's timed up-front measurement), ``allclose``, ``max_abs_diff``,
        ``torch_threads``; or one row with status ``skipped``
        and the reason when the mode cannot run here.
    """
    if params.mode == "compile":
        compiler, why = cxx_compiler()
        if compiler is None:
            info = set_torch_threads(params.threads)
            reason = f"torch.compile needs a working C++ compiler; inductor found none ({why})"
            return RunResult.skipped(reason, **info)
    return interleave(Runner, params, baseline, rounds=rounds)

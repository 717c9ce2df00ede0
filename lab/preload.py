"""What a job finds imported when it starts: the job server's preload, and a fresh job's.

A measurement job forked from a job server (:mod:`lab.server`) starts with torch, numpy,
psutil and every experiment's modules already imported; a job that must start as a fresh
process (its OpenMP settings differ from every server's, :data:`lab.threads.LOAD_TIME_VARIABLES`:
a job run by hand beside a running workflow) imports what a measurement that uses torch needs
before it begins (:func:`fresh`), so that its worker processes, and the processes they fork, do
not import it each again.
"""

from __future__ import annotations

import importlib
import runpy
import sys

#: What :func:`fresh` imports before the job: what a measurement job that uses torch needs.
FRESH_PRELOAD = ("numpy", "psutil", "torch", "torch.nn", "torch.utils.data", "lab.cli", "lab.results")

#: What the analysis and report jobs import (no torch: none of them uses it): all that a server
#: whose run has only such jobs imports (``lab.server serve --analysis-only``).
ANALYSIS_PRELOAD = (
    "pandas",
    "scipy.stats",
    "analysis.plotting",  # matplotlib, headless
    "analysis.__main__",
    "report.__main__",
)

#: Modules the server imports before it forks jobs (each experiment's measurement and analysis
#: modules are added by :func:`lab.server.serve`): what every job would otherwise import at its start.
PRELOAD = (*FRESH_PRELOAD, *ANALYSIS_PRELOAD)


def preload_one(load, name: str) -> None:
    """Import one module for the jobs; one that fails is left for the job to import (and to
    report), and the server says so in its log."""
    try:
        load()
    except Exception as exc:  # noqa: BLE001 - a job that needs it reports it properly
        print(f"[preload] not preloaded: {name} ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)


def warm() -> None:
    """What torch imports lazily on first use, imported now: creating an optimizer imports
    ``torch._dynamo`` and, with it, sympy (about 800 modules, 1.1 s a job). Creates one tensor of
    one element; runs no parallel operation, so no OpenMP thread pool exists before a fork."""
    import torch

    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


def fresh(module: str, args: list[str]) -> int:
    """Run ``python -m module args`` in this process, started afresh for a job whose environment
    differs from the server's in :data:`lab.threads.LOAD_TIME_VARIABLES` (settings of torch's
    OpenMP runtime), after importing :data:`FRESH_PRELOAD` and what torch imports lazily
    (:func:`warm`), as the server does: without that, each of the job's worker processes, and
    each process they fork, would import it again (5 s more for a 2-process multiprocessing
    point on 2 CPUs). Returns the module's exit status."""
    for name in FRESH_PRELOAD:
        preload_one(lambda name=name: importlib.import_module(name), name)
    preload_one(warm, "torch.optim")
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    return 0

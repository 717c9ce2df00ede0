"""Keep Snakemake's scheduler from taking CPU from the measurements: one re-evaluation timer at
a time.

What was measured (2026-12-04, AMX Xeon VM, 2 vCPUs, Snakemake 9.27.1, quick config): the main
Snakemake process used 0.01-0.02 CPU for the first 110 s of the measurement phase and 0.12-0.23
CPU in its last 50 s (its ``/proc/<pid>/stat`` read once a second). The measurement jobs of that
stretch recorded it as ``pipeline_cpu_pct``, a median 13-19% of one CPU in every window of the
last 15 jobs, against 0 before; the capacity probe read 1.66 delivered CPUs for the 2-process
gil point measured there, 1.91-1.99 where it ran earlier in three other runs.

Why: after every scheduling pass Snakemake (``JobScheduler.schedule``, with the default job rate
limit ``--max-jobs-per-timespan 100/1s``) starts a ``threading.Timer`` that wakes the scheduler
one second later, and that pass starts another. A finished job wakes the scheduler too, and its
pass starts a chain of its own: after N jobs, N chains each wake it every second (``py-spy
dump`` showed 31-35 live timer threads), and each pass re-evaluates the params and resources of
every ready job (late in the run, every analysis job is ready and waits for the measurements).
Upstream: snakemake/snakemake pull request 3744 (the scheduler "triggered multiple times").

:func:`one_timer_at_a_time` makes ``_schedule_reevalutation`` start a timer only where none is
pending that wakes the scheduler as early: a pass that asks for a re-evaluation then gets it
from the pending one, which is all the rate limiter needs; a request for an earlier wake-up
(a 1 s rate-limit check while a 10 s queue-input wait is pending) starts its own. Its timers
are daemon threads, so a run no longer waits up to a second for one at exit. Where the method is
missing (another Snakemake), it says so on stderr and changes nothing.
"""

from __future__ import annotations

import sys
import threading
import time


def one_timer_at_a_time() -> bool:
    """Patch Snakemake's ``JobScheduler._schedule_reevalutation`` (see the module docstring);
    return whether the method was found and patched (False on a Snakemake without it, which
    then runs as it is)."""
    try:
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:
        JobScheduler = None  # noqa: N806
    name = next((n for n in NAMES if JobScheduler is not None and hasattr(JobScheduler, n)), None)
    if name is None:
        print(
            "lab/schedfix.py: this Snakemake's scheduler has no re-evaluation timer to patch; its own"
            " CPU shows in each window's pipeline_cpu_pct",
            file=sys.stderr,
        )
        return False
    if getattr(getattr(JobScheduler, name), "lab_one_timer", False):
        return True

    def reevaluate(self, delay) -> None:
        due = time.monotonic() + delay
        pending = getattr(self, "_lab_reevaluation_due", None)
        if pending is not None and pending <= due:
            return  # the pending timer wakes the scheduler no later than this one would

        def fire() -> None:
            if getattr(self, "_lab_reevaluation_due", None) == due:
                self._lab_reevaluation_due = None  # before the wake-up: its pass may start the next
            self._open_jobs.release()

        timer = threading.Timer(delay, fire)
        timer.daemon = True
        self._lab_reevaluation_due = due
        timer.start()

    reevaluate.lab_one_timer = True
    setattr(JobScheduler, name, reevaluate)
    return True


#: The method's name in Snakemake 9.27.1 (sic), and as it would read if upstream corrects it.
NAMES = ("_schedule_reevalutation", "_schedule_reevaluation")

"""The kernel's CPU pressure, and what makes a point oversubscribed.

A point is oversubscribed where more of its threads and processes want a CPU than there are
CPUs: they preempt each other, and a thread that spins while it waits holds a CPU another needs.
Counting the threads a point starts says it may be; the kernel's pressure stall information
(PSI) says whether something waited. :func:`cpu_wait_us` reads it; :class:`lab.window.Meter`
takes it at each window's two ends (``cpu_wait_pct``), and :func:`oversubscribed` decides.
"""

from __future__ import annotations

#: The kernel's CPU pressure stall information (PSI, Linux 4.20+ with ``CONFIG_PSI``): its
#: ``some ... total=`` line counts the microseconds in which a runnable task waited for a CPU,
#: each CPU's share weighted by the time it was busy (Documentation/accounting/psi.rst).
PSI_CPU = "/proc/pressure/cpu"

#: A point whose threads and workers outnumber the available CPUs is oversubscribed only where
#: some task waited for a CPU in more than this share of its window (``cpu_wait_pct``, %): the
#: threshold of :data:`lab.window.CONTENDED_PCT`, 10%, on the time axis.
WAITED_PCT = 10.0


def cpu_wait_us(path: str = PSI_CPU) -> float | None:
    """Microseconds since boot in which at least one runnable task waited for a CPU (PSI's
    ``some total``, :data:`PSI_CPU`); None where the kernel has no PSI (``CONFIG_PSI`` off, or
    booted with ``psi=0``: reading the file fails) or the line is not of that form."""
    try:
        with open(path, encoding="ascii") as fh:
            first = fh.readline()
        return float(first.rsplit("total=", 1)[1]) if first.startswith("some ") else None
    except (OSError, IndexError, ValueError):
        return None


def oversubscribed(asked: int, ncpu: int, cpu_wait_pct: float) -> bool:
    """Whether a point was oversubscribed: it ran more threads and worker processes than the
    ``ncpu`` available CPUs (``asked``) and, where the kernel measures CPU pressure, some task
    waited for a CPU in more than :data:`WAITED_PCT` % of the window (``cpu_wait_pct``; NaN: not
    measured, the count alone decides). Workers that sleep (a DataLoader reading slow files)
    outnumber the CPUs without making anything wait."""
    if asked <= ncpu:
        return False
    return not cpu_wait_pct <= WAITED_PCT  # NaN: not measured


#: The ``oversubscribed`` column of the experiments whose points start DataLoader workers, which
#: may sleep (docs/parameters.md).
WORKERS_OVERSUBSCRIBED = (
    "`num_workers + threads > available_cpus` and, where the kernel measures CPU pressure, a task waited for a CPU"
    f" in more than {WAITED_PCT:.0f}% of the window (`cpu_wait_pct`; `lab.pressure.oversubscribed`): sleeping"
    " workers that outnumber the CPUs are not"
)

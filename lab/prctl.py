"""Two Linux process controls (``prctl(2)``), in a module that imports nothing but the standard
library, so that a launcher that needs them (:mod:`lab.supervise`, which Snakemake starts for
every measurement job) does not pay for psutil's import between two jobs."""

from __future__ import annotations


def set_parent_death_signal(signum: int) -> bool:
    """Ask Linux to send ``signum`` to this process when its parent dies
    (``prctl(PR_SET_PDEATHSIG)``); return whether the call was available."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signum)  # 1 = PR_SET_PDEATHSIG
        return True
    except (OSError, AttributeError):
        return False


def set_process_name(name: str) -> None:
    """Name this process (``prctl(PR_SET_NAME)``: ``ps -o comm``, psutil's ``name()``, 15
    bytes at most), so that a forked helper reads as what it is rather than as its parent; a
    no-op where prctl is absent."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)  # 15 = PR_SET_NAME
    except (OSError, AttributeError):
        pass

"""Explicit torch thread counts: set them, read them back, fail on a mismatch.

Snakemake exports ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` equal to a rule's ``threads:`` (here
all cores); experiments never rely on that and set their intra-op (and inter-op) threads with
:func:`set_torch_threads`, as torch.utils.benchmark does with ``num_threads``. torch is imported
inside the functions: the gil experiment never needs it, and importing it costs about 2.5 s.
"""

from __future__ import annotations

import os


def torch_thread_info() -> dict:
    """What torch and the environment say about threads right now.

    Returns:
        ``{"torch_threads": torch.get_num_threads(), "interop_threads":
        torch.get_num_interop_threads(), "omp_num_threads_env": $OMP_NUM_THREADS or ""}``.
    """
    import torch

    return {
        "torch_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS", ""),
    }


def set_torch_threads(intra_op: int, inter_op: int | None = None) -> dict:
    """Set torch's intra-op (and optionally inter-op) thread counts and read them back.

    Inter-op threads can only be set before torch starts its inter-op pool; they are set only
    when they differ from what torch reports.

    Returns:
        :func:`torch_thread_info` after setting.

    Raises:
        RuntimeError: if torch reports a different number than was requested, naming both.
    """
    import torch

    torch.set_num_threads(intra_op)
    if inter_op is not None and torch.get_num_interop_threads() != inter_op:
        torch.set_num_interop_threads(inter_op)
    observed = torch_thread_info()
    if observed["torch_threads"] != intra_op:
        raise RuntimeError(
            f"requested {intra_op} intra-op threads but torch.get_num_threads() reports {observed['torch_threads']}"
        )
    if inter_op is not None and observed["interop_threads"] != inter_op:
        raise RuntimeError(
            f"requested {inter_op} inter-op threads but torch.get_num_interop_threads() "
            f"reports {observed['interop_threads']}"
        )
    return observed

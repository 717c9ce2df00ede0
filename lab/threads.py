"""Explicit torch thread counts: set them, read them back, fail on a mismatch.

Snakemake exports ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` equal to a rule's ``threads:`` (here
all cores); experiments never rely on that and set their intra-op (and inter-op) threads with
:func:`set_torch_threads`, as torch.utils.benchmark does with ``num_threads``. torch is imported
inside the functions: the gil experiment never needs it, and importing it costs about 2.5 s.

What the OpenMP runtime reads only when it loads (``OMP_WAIT_POLICY``, ...) cannot be set from
inside a job: :data:`LOAD_TIME_VARIABLES` and :func:`check_job_env`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Mapping


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


#: Environment variables a library reads once, when it loads (the OpenMP runtimes torch brings:
#: GNU libgomp's ``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT``, LLVM/Intel libomp's ``KMP_*``; the
#: dynamic loader's ``LD_PRELOAD``). A job forked from the server would run with the values the
#: server loaded with, whatever its own environment says; so a job whose values differ (a point that
#: sets ``OMP_WAIT_POLICY``, :attr:`lab.declare.Experiment.job_env`) is not forked: the server
#: answers ``{"fresh": [names]}``, and the client takes the job to the variant server started
#: with those values (:func:`lab.server.variant_socket`), or where there is none starts it as a
#: fresh process. Thread counts
#: (``OMP_NUM_THREADS``) are not among them: every job sets its own through torch.
LOAD_TIME_VARIABLES = (
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "OMP_PROC_BIND",
    "OMP_PLACES",
    "GOMP_CPU_AFFINITY",
    "OMP_DYNAMIC",
    "OMP_MAX_ACTIVE_LEVELS",
    "OMP_STACKSIZE",
    "GOMP_STACKSIZE",
    "KMP_BLOCKTIME",
    "KMP_AFFINITY",
    "LD_PRELOAD",
)


def load_time_settings(env: Mapping[str, str]) -> dict[str, str]:
    """The :data:`LOAD_TIME_VARIABLES` that ``env`` sets, ``{name: value}``: two environments with
    the same settings load torch's OpenMP runtime alike."""
    return {k: env[k] for k in LOAD_TIME_VARIABLES if k in env}


def load_time_key(env: Mapping[str, str]) -> str:
    """A digest of :func:`load_time_settings` (10 hex digits): equal for environments that load
    torch's OpenMP runtime alike."""
    return hashlib.sha1(json.dumps(load_time_settings(env), sort_keys=True).encode()).hexdigest()[:10]


def with_env(base: Mapping[str, str], wanted: Mapping[str, str | None]) -> dict[str, str]:
    """``base`` with ``wanted`` applied (``{name: value}``; ``None``: unset), as
    :func:`env_command`'s words would start a command from ``base``."""
    out = dict(base)
    for k, v in wanted.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def env_command(wanted: Mapping[str, str | None]) -> str:
    """The ``env`` words that start a command with ``wanted`` (``{name: value}``; ``None``:
    unset), shell-quoted: ``env -u OMP_WAIT_POLICY`` or ``env OMP_WAIT_POLICY=PASSIVE``; ""
    for nothing."""
    if not wanted:
        return ""
    unset = [f"-u {shlex.quote(k)}" for k, v in wanted.items() if v is None]
    assign = [shlex.quote(f"{k}={v}") for k, v in wanted.items() if v is not None]
    return " ".join(["env", *unset, *assign])


def check_job_env(wanted: Mapping[str, str | None], command: str) -> str | None:
    """Why this process cannot measure a point whose job must start with ``wanted``
    (:attr:`lab.declare.Experiment.job_env`: ``{name: value}``, ``None`` for unset), or None
    where its environment matches. The variables are read once, when a library loads (OpenMP's
    ``OMP_WAIT_POLICY`` when torch loads libgomp), so setting them now would change nothing;
    the message names the command line that would (``command``, the job's own)."""
    wrong = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
    if not wrong:
        return None
    have = ", ".join(f"{k}={os.environ[k]}" if k in os.environ else f"{k} unset" for k in wrong)
    need = ", ".join(f"{k}={v}" if v is not None else f"{k} unset" for k, v in wrong.items())
    prefix = env_command(wrong)
    return (
        f"this point needs {need} in the environment its process started with ({have} here): the library reads it"
        f" once, when it loads, so the job cannot set it itself. The workflow sets it; by hand: {prefix} {command} ..."
    )

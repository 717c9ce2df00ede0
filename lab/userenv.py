"""The thread settings of the user's shell, and what they do to a plain ``python train.py`` here.

Snakemake exports ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` into every job (equal to a rule's
threads), and the pipeline sets its own caches: a job never sees the user's own environment.
The Snakefile therefore captures it at parse time, in the user's process (:func:`capture`), and
this module's job writes ``results/<host>/user_env.json``: the variables as the user had them,
the affinity and CPU quota, and what torch does with them, measured in a fresh interpreter
started with exactly those variables (``torch.get_num_threads()``,
``torch.get_num_interop_threads()``): what the user's own program gets, not an estimate.

Usage (the ``user_env`` rule): ``python -m lab.userenv --env JSON --out user_env.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from lab.capacity import cgroup_quota
from lab.fileio import write_json
from lab.host import affinity, available_cpus

#: Variables that set thread counts or thread placement for torch, OpenMP, MKL and BLAS.
THREAD_VARIABLES = re.compile(
    r"^(OMP_.*|KMP_.*|GOMP_.*|MKL_NUM_THREADS|MKL_DYNAMIC|OPENBLAS_NUM_THREADS|NUMEXPR_NUM_THREADS|"
    r"VECLIB_MAXIMUM_THREADS|TORCH_NUM_THREADS)$"
)


#: Variables of the user's shell that the measured interpreters do not see: they start with
#: ``-I``, which ignores every ``PYTHON*`` variable (:mod:`lab.interpreters`), and the
#: GIL of each is set by config ``interpreters`` (``python_gil``). Recorded so that the report
#: can say so, rather than drop them without a word.
IGNORED_VARIABLES = ("PYTHON_GIL",)


def capture(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The thread variables of ``environ`` (default: this process's environment) and those of
    :data:`IGNORED_VARIABLES` it sets, sorted."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in sorted(environ) if THREAD_VARIABLES.match(k) or k in IGNORED_VARIABLES}


_PROBE = "import json, torch; print(json.dumps([torch.get_num_threads(), torch.get_num_interop_threads()]))"


def torch_defaults(variables: Mapping[str, str], timeout_s: float = 120) -> tuple[dict, str]:
    """What torch chooses with exactly these thread variables (the rest of this environment
    kept, every other thread variable removed), measured in a fresh interpreter.

    Returns:
        ``({"torch_threads": n, "torch_interop_threads": n}, "")``, or ``({}, reason)`` if the
        probe failed.
    """
    env = {k: v for k, v in os.environ.items() if not THREAD_VARIABLES.match(k)} | dict(variables)
    try:
        out = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=timeout_s, check=True
        )
        intra, inter = json.loads(out.stdout.strip().splitlines()[-1])
        return {"torch_threads": intra, "torch_interop_threads": inter}, ""
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
        return {}, f"{type(exc).__name__}: {exc}"


def collect(variables: Mapping[str, str]) -> dict:
    """The content of ``user_env.json`` (docs/csv-schema.md)."""
    measured, why = torch_defaults(variables)
    quota = cgroup_quota()
    return {
        "variables": dict(variables),
        "affinity": affinity(),
        "available_cpus": available_cpus(),
        "cgroup_quota_cpus": quota.cpus,
        "cgroup_quota_cgroup": quota.cgroup,
        **measured,
        "unreadable": {k: v for k, v in (("torch_threads", why), ("cgroup_quota_cpus", quota.reason)) if v},
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m lab.userenv --env JSON --out user_env.json``."""
    p = argparse.ArgumentParser(prog="python -m lab.userenv", description=__doc__.splitlines()[0])
    p.add_argument("--env", required=True, help="the user's thread variables as a JSON object (from capture())")
    p.add_argument("--out", required=True, help="path of user_env.json to write")
    args = p.parse_args(argv)
    variables = json.loads(args.env)
    if not isinstance(variables, dict):
        p.error(f"--env must be a JSON object, got {args.env!r}")
    write_json(Path(args.out), collect({str(k): str(v) for k, v in variables.items()}), sort_keys=True)
    return 0


if __name__ == "__main__":
    from lab.supervise import exit_quietly_on_interrupt

    exit_quietly_on_interrupt(main, "user_env")

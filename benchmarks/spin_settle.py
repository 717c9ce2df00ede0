"""After a window of torch work with 2 intra-op threads, how long do libgomp's waiting threads
take the CPUs from what the lab measures next? The capacity probe's delivered CPUs read at a
delay after a training loop, under the default wait policy and under ``OMP_WAIT_POLICY=PASSIVE``.

libgomp's threads that wait between parallel regions spin ``GOMP_SPINCOUNT`` times before they
sleep: 300,000 where ``OMP_WAIT_POLICY`` is unset, 0 where it is PASSIVE (libgomp manual,
``GOMP_SPINCOUNT``). On 2 CPUs a reading taken while they spin shares its CPUs with them. This
script measures it: for each delay in ``--delays-ms`` (0 included), ``--readings`` times, it
runs the lab's MLP training step (``lab.models``, the multiprocessing experiment's model) with 2
intra-op threads for ``--loop-s``, sleeps the delay, and takes one reading of the probe
(:class:`lab.probe.Probe`, ``probe_ms`` 5, all CPUs); once in a child process under each
wait policy (the policy must be set before torch loads libgomp). It reports the median
delivered CPUs per delay and policy: where the rest matters, the 0 ms column differs from the
others under the default policy and not under PASSIVE. :data:`lab.results.SPIN_SETTLE_S` is
the rest the lab takes (docs/benchmarks.md).

A benchmark, not a test; needs 2 or more CPUs. Usage (repository root, the project's venv)::

    python benchmarks/spin_settle.py [--readings 25] [--loop-s 0.1] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.fileio import emit, output_args_problem  # noqa: E402

POLICIES = ("default", "PASSIVE")


def child(delays_ms: list[float], readings: int, loop_s: float) -> dict:
    """In this process (its OMP_WAIT_POLICY already set): ``{delay_ms: [delivered CPUs, ...]}``."""
    import torch

    from lab.models import classification_batch, mlp, train_step_fn
    from lab.probe import Probe

    torch.set_num_threads(2)
    step = train_step_fn(mlp(64, 256))
    x, y = classification_batch(64, 64, seed=0)
    for _ in range(20):
        step(x, y)
    out: dict = {str(d): [] for d in delays_ms}
    with Probe(ncpu=2, probe_ms=5) as probe:
        for _ in range(readings):
            for d in delays_ms:  # each delay in turn, so that drift of the machine reaches all alike
                t = time.perf_counter()
                while time.perf_counter() - t < loop_s:
                    step(x, y)
                time.sleep(d / 1000)
                out[str(d)].append(probe.measure(levels=(2,))["delivered_cpus"])
    return out


def measure(delays_ms: list[float], readings: int, loop_s: float) -> dict:
    """``{policy: {delay_ms: median delivered CPUs}}``, each policy in a child process of its own."""
    found = {}
    for policy in POLICIES:
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if policy != "default":
            env["OMP_WAIT_POLICY"] = policy
        args = [sys.executable, __file__, "--child", json.dumps([delays_ms, readings, loop_s])]
        done = subprocess.run(args, env=env, capture_output=True, text=True, check=True, cwd=ROOT)
        values = json.loads(done.stdout.strip().splitlines()[-1])
        found[policy] = {d: statistics.median(v) for d, v in values.items()}
    return found


def markdown(found: dict, delays_ms: list[float], readings: int, loop_s: float) -> str:
    head = "| wait policy | " + " | ".join(f"{d:g} ms" for d in delays_ms) + " |"
    lines = [
        f"Delivered CPUs (median of {readings} probe readings) at a delay after {loop_s:g} s of a"
        " 2-thread training loop:",
        "",
        head,
        "|---" * (len(delays_ms) + 1) + "|",
    ]
    for policy, by in found.items():
        lines.append(f"| {policy} | " + " | ".join(f"{by[str(d)]:.2f}" for d in delays_ms) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--delays-ms", type=float, nargs="+", default=[0, 2, 5, 10, 20, 50])
    p.add_argument("--readings", type=int, default=25)
    p.add_argument("--loop-s", type=float, default=0.1)
    p.add_argument("--markdown", default=None, help="also write the table to this file")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(*json.loads(args.child))))
        return 0
    if problem := output_args_problem(args):
        p.error(problem)
    bad = [d for d in args.delays_ms if not (math.isfinite(d) and d >= 0)]
    if bad or args.readings < 3 or not (math.isfinite(args.loop_s) and args.loop_s > 0):
        p.error(
            f"--delays-ms {bad or args.delays_ms}, --readings {args.readings}, --loop-s {args.loop_s}:"
            " allowed: delays finite and >= 0 ms, at least 3 readings, a loop finite and > 0 s"
        )
    if len(os.sched_getaffinity(0)) < 2:
        p.error("needs 2 or more CPUs: the probe reads them all while the threads spin")
    emit(
        markdown(measure(args.delays_ms, args.readings, args.loop_s), args.delays_ms, args.readings, args.loop_s),
        args.markdown,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

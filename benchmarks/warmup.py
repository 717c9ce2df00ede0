"""How many untimed calls a window needs after its settings change.

Interleaved rounds switch the intra-op thread count before every window (the point and its
baseline use different counts), and the intraop experiment runs ``warmup`` untimed calls after
each switch so that a resized thread pool does not slow the first timed call. The workload
experiment's search alternates two configurations of the user's workload the same way and runs
``warmup`` untimed steps before each window. Every untimed call is time outside the measured
windows (issue 20: most of the run should be spent measuring), so the count should be the
smallest that removes the transient.

By default this script switches between 1 and 2 intra-op threads as the intraop rounds do and
times each of the first ``--calls`` calls after every switch on its own; the intraop
experiment's workloads and sizes (``experiments/intraop/measure.py``, ``make_workload``). With
``--search`` it alternates, as the workload search does, the built-in workload's PyTorch defaults
with three candidates (bfloat16 with channels_last, 2 DataLoader workers, 1 intra-op thread
instead of 2) and times each of the first ``--calls`` training steps after every switch
(``experiments/workload/bench.py``, no warm-up). It prints, per case, the median time of call
``k`` over the median of the settled calls (``k`` >= ``--settled-from``, 4 by default): a value
near 1 for call ``k`` means ``k`` untimed calls are enough. With ``--fresh`` it times each of the
first ``--calls`` SGD steps of a freshly forked process, as a multiprocessing experiment's
training process takes them before its ``warmup_steps`` end
(``experiments/multiprocessing/measure.py``: the same MLP, batch and thread counts 1 and 2),
``--switches`` processes each.

A benchmark, not a test. Usage (repository root, the project's venv)::

    python benchmarks/warmup.py [--switches 30] [--calls 8] [--settled-from 4]
        [--search [--prepared W] | --fresh] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.fileio import output_args_problem, write_text  # noqa: E402

#: Calls from this index on count as settled (the reference of each ratio).
SETTLED_FROM = 4


def measure(workload: str, switches: int, calls: int) -> dict[int, list[list[float]]]:
    """Per thread count (1, 2), per switch, the wall time (s) of each of the first ``calls``
    calls after the switch."""
    from experiments.intraop.measure import Params, make_workload
    from lab.threads import set_torch_threads

    fn, _, _ = make_workload(Params(workload=workload))
    for _ in range(5):
        fn()
    times: dict[int, list[list[float]]] = {1: [], 2: []}
    for _ in range(switches):
        for threads in (1, 2):
            set_torch_threads(threads, inter_op=1)
            run = []
            for _ in range(calls):
                t = time.perf_counter()
                fn()
                run.append(time.perf_counter() - t)
            times[threads].append(run)
    return times


def measure_search(candidate: str, switches: int, calls: int, warmup: int | None) -> dict[str, list[list[float]]]:
    """The workload search's alternation, timed step by step: the built-in workload's start
    (PyTorch's defaults) against ``candidate`` (a key of :data:`CANDIDATES`), ``switches`` times
    each. Per arm (``"start"``, ``candidate``), per switch, the wall time (s) of each of the
    first ``calls`` training steps (data wait and step) after the switch; with ``warmup`` not
    None, after what :meth:`~experiments.workload.bench.Bench.measure` does first (the workers'
    prefetched batches dropped, ``warmup`` untimed steps)."""
    from experiments.workload.bench import Bench, in_flight
    from experiments.workload.measure import Params, _open
    from lab.window import Meter

    params = Params()
    workload, start, _, _, _ = _open(params, {}, None)
    arms = {"start": start, candidate: {**start, **CANDIDATES[candidate]}}
    times: dict[str, list[list[float]]] = {arm: [] for arm in arms}
    with Meter(10) as meter:
        bench = Bench(workload, params.job, meter, calls, 0)
        try:
            for cfg in arms.values():
                bench.check(cfg)
            for _ in range(switches):
                for arm, cfg in arms.items():
                    pool, setup, _ = bench._ready(cfg)
                    if warmup is not None:
                        bench._run(pool, setup, warmup, False, in_flight(cfg))
                    marks = bench._run(pool, setup, calls, False)["marks"]
                    times[arm].append([end - start_s for start_s, _, end, _ in marks])
        finally:
            bench.close()
    return times


def _fresh_steps(threads: int, calls: int, conn) -> None:
    """In a forked process: the multiprocessing experiment's model and batch, then the wall
    time (s) of each of its first ``calls`` SGD steps, sent on ``conn``."""
    from experiments.multiprocessing.measure import Params
    from lab.models import classification_batch, mlp, train_step_fn
    from lab.threads import set_torch_threads

    p = Params(threads=threads)
    set_torch_threads(threads)
    step = train_step_fn(mlp(p.in_features, p.hidden))
    x, y = classification_batch(p.batch_size, p.in_features, seed=0)
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - t)
    conn.send(times)


def measure_fresh(threads: int, processes: int, calls: int) -> list[list[float]]:
    """``processes`` forked processes one after another (torch imported before the fork, as in
    the job server), each timing its first ``calls`` steps (s) at ``threads`` intra-op threads."""
    import multiprocessing

    import torch  # noqa: F401  (loaded before the fork, as the job server has it)

    ctx = multiprocessing.get_context("fork")
    runs = []
    for _ in range(processes):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_fresh_steps, args=(threads, calls, child))
        proc.start()
        runs.append(parent.recv())
        proc.join()
    return runs


#: The search candidates ``--search`` alternates with the start, as knob changes.
CANDIDATES = {
    "bfloat16, channels_last": {"precision": "bfloat16", "channels_last": True},
    "2 DataLoader workers": {"num_workers": 2, "persistent_workers": True},
    "1 intra-op thread": {"threads": 1},
}


def table(results: dict[str, dict], settled_from: int) -> str:
    """Markdown: per case and arm (thread count, or configuration), call ``k`` over the median
    of calls ``settled_from`` and later, for ``k < settled_from``."""
    head = "| case | arm | settled call (ms) | " + " | ".join(f"call {k}" for k in range(settled_from)) + " |"
    lines = [head, "|" + "---|" * (3 + settled_from)]
    for case, by_arm in results.items():
        for arm, runs in by_arm.items():
            settled = statistics.median(x for run in runs for x in run[settled_from:])
            ratios = [statistics.median(run[k] for run in runs) / settled for k in range(settled_from)]
            cells = " | ".join(f"{r:.3f}" for r in ratios)
            name = f"{arm} thread{'s' if arm != 1 else ''}" if isinstance(arm, int) else arm
            lines.append(f"| {case} | {name} | {settled * 1e3:.3f} | {cells} |")
    return "\n".join(lines) + "\n"


def _check(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what the options cannot mean together, naming the option and the allowed values."""
    if problem := output_args_problem(args):
        ap.error(problem)
    if args.switches < 1:
        ap.error(f"--switches must be an integer >= 1, got {args.switches}")
    if args.settled_from < 1:
        ap.error(f"--settled-from must be an integer >= 1, got {args.settled_from}")
    if args.calls <= args.settled_from:
        ap.error(f"--calls must be greater than --settled-from ({args.settled_from}), got {args.calls}")
    if args.prepared is not None and not args.search:
        ap.error("--prepared applies with --search only")
    if args.prepared is not None and args.prepared < 0:
        ap.error(f"--prepared must be an integer >= 0, got {args.prepared}")
    if args.workloads is not None and (args.search or args.fresh):
        ap.error("--workloads applies to the intraop workloads only, not with --search or --fresh")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--switches", type=int, default=30, help="switches (or fresh processes) per case and arm")
    ap.add_argument("--calls", type=int, default=8, help="calls timed after each switch (> --settled-from)")
    ap.add_argument(
        "--settled-from",
        type=int,
        default=SETTLED_FROM,
        metavar="K",
        help="calls K and later are the settled reference; the table shows calls 0 to K-1",
    )
    ap.add_argument(
        "--workloads",
        nargs="+",
        choices=["matmul", "matmul_bf16", "mlp", "tiny"],
        help="the intraop workloads to time (default: matmul mlp tiny)",
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--fresh", action="store_true", help="time a fresh training process's first steps (module doc)")
    mode.add_argument("--search", action="store_true", help="time the workload search's steps instead (module doc)")
    ap.add_argument(
        "--prepared",
        type=int,
        metavar="WARMUP",
        help="with --search: time the steps after the search's own preparation (prefetched batches dropped, WARMUP"
        " untimed steps); without it, right after the switch",
    )
    ap.add_argument("--markdown", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    _check(ap, args)
    if args.fresh:
        fresh = "multiprocessing, fresh process"
        cases = {fresh: lambda: {t: measure_fresh(t, args.switches, args.calls) for t in (1, 2)}}
    elif args.search:
        cases = {c: lambda c=c: measure_search(c, args.switches, args.calls, args.prepared) for c in CANDIDATES}
    else:
        workloads = args.workloads or ["matmul", "mlp", "tiny"]
        cases = {w: lambda w=w: measure(w, args.switches, args.calls) for w in workloads}
    results = {}
    for case, run in cases.items():
        print(f"timing {case} ...", file=sys.stderr, flush=True)
        results[case] = run()
    out = table(results, args.settled_from)
    print(out, end="")
    if args.markdown:
        write_text(args.markdown, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""pyperf's side of benchmarks/peers.py: one of its points, by name, as a pyperf benchmark.

    python benchmarks/peer_pyperf.py cpu_processes --fast -o out.json

The seed's CPU-bound counting loop run twice sequentially, in 2 threads and in 2 forked
processes; the sleep loop (10 sleeps of 10 ms) sequentially and in 2 threads.

Where the environment names a file in ``PEER_UNITS`` (benchmarks/peers.py sets it), every
counting loop also appends one line to it, the work's own units as the lab's spans record them:
``<call> <pid> <elapsed s> <thread CPU s>``, where ``<call>`` names the benchmark call the loop
ran in (its process id and a clock reading, inherited by the forked children) and ``<pid>`` the
process that ran the loop; and each call of the counting loop's benchmarks appends
``<call> call <elapsed s> 0`` when its loops are done. A few short appended writes per call of
50-120 ms, inside pyperf's timed call: about 0.05% of it.
"""

import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path

import pyperf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the lab, for its file helper
from lab.fileio import append_line  # noqa: E402

N, IO = 2_000_000, 10  # CPU_ITERATIONS and IO_ITERATIONS of peers.py


UNITS = os.environ.get("PEER_UNITS")
_call = ["-"]  # the call the loops run in, set by the parent before its threads or processes start


def _new_call():
    _call[0] = f"{os.getpid()}-{time.perf_counter_ns()}"
    return time.perf_counter()


def _end_call(fn, t):
    if UNITS and fn is count:
        append_line(UNITS, f"{_call[0]} call {time.perf_counter() - t:.6f} 0")


def count(n):
    t, c = time.perf_counter(), time.thread_time()
    for i in range(n):
        i = i + 1
    if UNITS:
        append_line(UNITS, f"{_call[0]} {os.getpid()} {time.perf_counter() - t:.6f} {time.thread_time() - c:.6f}")


def sleep_loop(n):
    for i in range(n):
        i = i + 1
        time.sleep(0.01)


def sequential(fn, n):
    t = _new_call()
    fn(n)
    fn(n)
    _end_call(fn, t)


def threads(fn, n):
    t0 = _new_call()
    ts = [threading.Thread(target=fn, args=(n,)) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    _end_call(fn, t0)


def processes(fn, n):
    t = _new_call()
    ctx = multiprocessing.get_context("fork")
    ps = [ctx.Process(target=fn, args=(n,)) for _ in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    _end_call(fn, t)


BENCHMARKS = {
    "cpu_sequential": (sequential, count, N),
    "cpu_threads": (threads, count, N),
    "cpu_processes": (processes, count, N),
    "io_sequential": (sequential, sleep_loop, IO),
    "io_threads": (threads, sleep_loop, IO),
}


def main():
    """Run the point named on the command line as a pyperf benchmark (pyperf's own options too)."""
    runner = pyperf.Runner(add_cmdline_args=lambda cmd, args: cmd.append(args.which))
    runner.argparser.add_argument("which", choices=sorted(BENCHMARKS), help="the point to run")
    name = runner.parse_args().which
    runner.bench_func(name, *BENCHMARKS[name])


if __name__ == "__main__":
    main()

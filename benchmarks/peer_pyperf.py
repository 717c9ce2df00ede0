"""pyperf's side of benchmarks/peers.py: one of its points, by name, as a pyperf benchmark.

    python benchmarks/peer_pyperf.py cpu_processes --fast -o out.json

The seed's CPU-bound counting loop run twice sequentially, in 2 threads and in 2 forked
processes; the sleep loop (10 sleeps of 10 ms) sequentially and in 2 threads.
"""

import multiprocessing
import threading
import time

import pyperf

N, IO = 2_000_000, 10  # CPU_ITERATIONS and IO_ITERATIONS of peers.py


def count(n):
    for i in range(n):
        i = i + 1


def sleep_loop(n):
    for i in range(n):
        i = i + 1
        time.sleep(0.01)


def sequential(fn, n):
    fn(n)
    fn(n)


def threads(fn, n):
    ts = [threading.Thread(target=fn, args=(n,)) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def processes(fn, n):
    ctx = multiprocessing.get_context("fork")
    ps = [ctx.Process(target=fn, args=(n,)) for _ in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()


BENCHMARKS = {
    "cpu_sequential": (sequential, count, N),
    "cpu_threads": (threads, count, N),
    "cpu_processes": (processes, count, N),
    "io_sequential": (sequential, sleep_loop, IO),
    "io_threads": (threads, sleep_loop, IO),
}
runner = pyperf.Runner(add_cmdline_args=lambda cmd, args: cmd.append(args.which))
runner.argparser.add_argument("which", choices=sorted(BENCHMARKS), help="the point to run")
name = runner.parse_args().which
runner.bench_func(name, *BENCHMARKS[name])

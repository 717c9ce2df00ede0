"""Convoy experiment, the threads it runs under the interpreter being measured.

Standard library only, and nothing from this repository: :mod:`lab.pytasks` loads this file by
path in the child it starts under each interpreter (``pytasks.py .../convoy/tasks.py``,
:func:`lab.pytasks.load_requests`) and answers ``{"convoy": {...}}`` requests with
:func:`convoy`. Times are ``time.perf_counter()`` values (CLOCK_MONOTONIC on Linux, shared by
every process of the machine) and thread CPU times, in s.
"""

import sys
import threading
import time


def count(n):
    """The seed's CPU-bound loop: ``for i in range(n): i = i + 1`` (pure bytecode)."""
    for i in range(n):
        i = i + 1  # noqa: PLW2901 - the seed's loop, kept verbatim


def convoy(spec):
    """The convoy effect (python/cpython#90204): one thread sleeps ``io_sleep_s`` per
    iteration, ``io_iterations`` times, next to a thread that counts in chunks of
    ``cpu_chunk`` iterations until the sleeper is done (``neighbour`` False: the sleeper
    alone). Under ``sys.setswitchinterval(switch_interval_s)``. Spans: every sleep iteration
    (kind ``io``, with ``latency_ms``: how much longer than the sleep it took) and every
    counting chunk (kind ``cpu``)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(spec["switch_interval_s"])
    done = threading.Event()
    cpu_spans, io_spans = [], []

    def counter():
        k = 0
        while not done.is_set():
            w0, c0 = time.perf_counter(), time.thread_time()
            count(spec["cpu_chunk"])
            w1, c1 = time.perf_counter(), time.thread_time()
            cpu_spans.append(
                {"actor": "cpu-thread", "kind": "cpu", "start_s": w0, "end_s": w1, "cpu_s": c1 - c0, "chunk": k}
            )
            k += 1

    def sleeper():
        for k in range(spec["io_iterations"]):
            w0, c0 = time.perf_counter(), time.thread_time()
            time.sleep(spec["io_sleep_s"])
            w1, c1 = time.perf_counter(), time.thread_time()
            late = 1000.0 * (w1 - w0 - spec["io_sleep_s"])
            io_spans.append(
                {
                    "actor": "io-thread",
                    "kind": "io",
                    "start_s": w0,
                    "end_s": w1,
                    "cpu_s": c1 - c0,
                    "chunk": k,
                    "latency_ms": late,
                }
            )
        done.set()

    threads = [threading.Thread(target=sleeper)] + ([threading.Thread(target=counter)] if spec["neighbour"] else [])
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    return io_spans + cpu_spans


#: The requests this file answers in the child (:func:`lab.pytasks.load_requests`).
REQUESTS = {"convoy": convoy}

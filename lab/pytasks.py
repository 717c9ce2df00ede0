"""Pure-Python tasks, run under the interpreter being measured (the gil and singlethread experiments).

Standard library only, and nothing from this repository: the file is started by path under any
CPython (``python3.13t -I -X gil=0 pytasks.py``, :class:`lab.interpreters.Child`), so
the interpreter that runs the tasks is the one the point names, while the CPU sampler, the
harness and the CSV writing stay in the pipeline's own Python. The two talk over the child's
stdin and stdout, one JSON object per line:

* on start the child prints ``{"hello": {...}}``: version, implementation, whether the build
  is free-threaded (``sysconfig.get_config_var("Py_GIL_DISABLED")``) and whether the GIL is on
  at run time (``sys._is_gil_enabled()``);
* for each ``{"run": {...}}`` (a task description), or ``{"<name>": {...}}`` answered by a task
  file of an experiment named on the command line (:func:`load_requests`), it runs the tasks
  once and prints
  ``{"spans": [...]}`` with ``start_s``/``end_s`` as ``time.perf_counter()`` values
  (CLOCK_MONOTONIC on Linux, the same clock in every process of the machine, so the harness
  places them in its own window), or ``{"error": "..."}``;
* on end of input it exits.

Workloads (a task description's ``load``; each task cut into ``chunks`` spans with the thread CPU time
spent inside):

* ``cpu``: the seed article's pure-Python counting loop (holds the GIL);
* ``io``: a loop that sleeps ``io_sleep_s`` per iteration (releases the GIL while asleep);
* ``release``: ``hashlib.sha256`` over a buffer of ``release_kb`` KiB, C code that releases the
  GIL for inputs of 2048 bytes and more (``HASHLIB_GIL_MINSIZE`` in CPython's ``Modules/hashlib.h``);
* ``shared``: every task appends to and pops from one shared list and updates one shared dict
  (threads contend on the same objects: per-object locks on a free-threaded build).
"""

import hashlib
import json
import sys
import sysconfig
import threading
import time

#: Shared objects of the ``shared`` workload (per process: threads share them, processes do not).
SHARED_LIST = []
SHARED_DICT = {}
_BUFFERS = {}


def hello():
    """What this interpreter is: version, implementation, build, GIL state at run time."""
    gil_check = getattr(sys, "_is_gil_enabled", None)
    return {
        "version": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "executable": sys.executable,
        "free_threaded": sysconfig.get_config_var("Py_GIL_DISABLED") == 1,
        "gil_enabled": bool(gil_check()) if gil_check is not None else True,
        "switch_interval_s": sys.getswitchinterval(),
    }


def count(n):
    """The seed's CPU-bound loop: ``for i in range(n): i = i + 1`` (pure bytecode)."""
    for i in range(n):
        i = i + 1  # noqa: PLW2901 - the seed's loop, kept verbatim


def sleep_loop(n, sleep_s):
    """The seed's I/O-bound loop: ``n`` iterations of a count step and ``time.sleep``."""
    for i in range(n):
        i = i + 1  # noqa: PLW2901
        time.sleep(sleep_s)


def hash_loop(n, kb):
    """``n`` SHA-256 digests of one ``kb`` KiB buffer (the GIL is released while hashing)."""
    buf = _BUFFERS.get(kb)
    if buf is None:
        buf = _BUFFERS[kb] = bytes(range(256)) * (kb * 4)
    for _ in range(n):
        hashlib.sha256(buf).digest()


def shared_loop(n):
    """``n`` rounds of an append to and a pop from the shared list and an update of the shared
    dict (its size stays bounded: 1024 keys, the list as long as the threads that share it)."""
    lst, d = SHARED_LIST, SHARED_DICT
    for i in range(n):
        lst.append(i)
        lst.pop()
        d[i & 1023] = i


def chunk_sizes(total, chunks):
    """Iterations per chunk; they add up to ``total``."""
    n = max(1, min(chunks, total))
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def work(spec, size):
    """Run ``size`` iterations of the spec's workload in the calling thread."""
    w = spec["load"]
    if w == "cpu":
        count(size)
    elif w == "io":
        sleep_loop(size, spec["io_sleep_s"])
    elif w == "release":
        hash_loop(size, spec["release_kb"])
    elif w == "shared":
        shared_loop(size)
    else:
        raise ValueError(f"unknown workload {w!r}; allowed: cpu, io, release, shared")


def task(spec, actor, index):
    """One task in the calling thread: its spans (perf_counter seconds, thread CPU seconds)."""
    spans = []
    for k, size in enumerate(chunk_sizes(spec["iterations"], spec["chunks"])):
        w0, c0 = time.perf_counter(), time.thread_time()
        work(spec, size)
        w1, c1 = time.perf_counter(), time.thread_time()
        spans.append(
            {
                "actor": actor,
                "kind": spec["load"],
                "start_s": w0,
                "end_s": w1,
                "cpu_s": c1 - c0,
                "chunk": k,
                "task": index,
            }
        )
    return spans


def _process_target(spec, index, queue):
    queue.put(task(spec, f"process-{index}", index))


def run_threads(spec):
    """``workers`` tasks, one ``threading.Thread`` each, started together and all joined."""
    results = [[] for _ in range(spec["workers"])]

    def target(i):
        results[i] = task(spec, f"thread-{i}", i)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(spec["workers"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [s for r in results for s in r]


def run_processes(spec):
    """``workers`` tasks, one forked ``multiprocessing.Process`` each, all joined."""
    import multiprocessing  # here, not at the top: 12 ms of every child's start, needed by this mode only

    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=_process_target, args=(spec, i, queue)) for i in range(spec["workers"])]
    for p in procs:
        p.start()
    collected = [queue.get() for _ in procs]  # drain before join: a full pipe blocks
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"worker process exited with code {p.exitcode}")
    return [s for r in collected for s in r]


def run_once(spec):
    """Run the spec's tasks once in its mode; return every span."""
    del SHARED_LIST[:]
    SHARED_DICT.clear()
    if spec["mode"] == "sequential":
        return [s for i in range(spec["workers"]) for s in task(spec, "main", i)]
    if spec["mode"] == "threads":
        return run_threads(spec)
    if spec["mode"] == "processes":
        return run_processes(spec)
    raise ValueError("unknown mode {!r}; allowed: sequential, threads, processes".format(spec["mode"]))


def load_requests(paths):
    """The request handlers of the task files at ``paths``: ``{request name: function(spec) -> spans}``.

    An experiment whose children run tasks of its own keeps them in its package, in a file that
    defines ``REQUESTS = {"<name>": function}`` (standard library only, like this one), and
    names it on the child's command line: ``pytasks.py PATH ...``. The child runs isolated
    (``-I``: neither the script's directory nor the repository is on ``sys.path``), so each file
    is loaded by path.

    Raises:
        ValueError: for a file without ``REQUESTS`` or a name this module already answers.
    """
    import importlib.util

    handlers = {}
    for i, path in enumerate(paths):
        spec = importlib.util.spec_from_file_location(f"_lab_tasks_{i}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found = getattr(module, "REQUESTS", None)
        if not isinstance(found, dict) or "run" in found or set(found) & set(handlers):
            raise ValueError(f"{path}: needs REQUESTS = {{name: function}}, names other than 'run' and unique")
        handlers.update(found)
    return handlers


def serve(stdin, stdout, handlers=None):
    """Answer ``{"run": spec}`` lines, and ``{name: spec}`` for each of ``handlers``
    (:func:`load_requests`), until end of input (the protocol in the module docstring)."""
    handlers = {"run": run_once, **(handlers or {})}
    stdout.write(json.dumps({"hello": hello()}) + "\n")
    stdout.flush()
    for line in stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            ((name, spec),) = request.items()
            if name not in handlers:
                raise ValueError(f"no task file answers {name!r}; loaded: {', '.join(handlers)}")
            reply = {"spans": handlers[name](spec)}
        except Exception as exc:  # noqa: BLE001 - reported to the harness, which fails the point
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout, load_requests(sys.argv[1:]))

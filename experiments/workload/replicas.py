"""Several processes of the workload at once: data-parallel replicas for training, independent
instances for inference.

``processes = P > 1`` starts P replica processes (start method ``spawn``: each imports torch and
the workload afresh from its entry point, so nothing of the job's own threads is inherited). For
training they form a ``torch.distributed`` process group over gloo on the loopback interface and
each trains the one model wrapped in ``DistributedDataParallel``: gradients are averaged across
replicas every step, and each replica reads its own shard of the data (``DistributedSampler``),
which is how one model trains on many cores. For inference each replica is an independent
instance pinned to its own share of the CPUs (``sched_setaffinity``; its DataLoader workers
inherit the share), the multi-instance layout of Intel's launcher
(``python -m torch.backends.xeon.run_cpu --ninstances P``).

The parent drives them through pipes: ``prepare`` a configuration, ``run`` a window (all replicas
start together after a barrier; the window ends when the last one is done), ``memory``,
``release``, ``close``. Throughput counts the samples of all replicas.
"""

from __future__ import annotations

import os
import socket
import time

from lab.host import affinity, die_with_parent

#: Seconds to wait for a replica's answer before giving up.
TIMEOUT_S = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(session, conn, barrier) -> None:
    """A replica's command loop (see the module docstring)."""
    from experiments.workload.session import CandidateError

    setups = {}
    while True:
        cmd, *args = conn.recv()
        try:
            if cmd == "prepare":
                key, cfg = args
                setups[key] = session.prepare(cfg)
                conn.send(("ok", {"setup_s": setups[key].setup_s, "first_call_s": setups[key].first_call_s}))
            elif cmd == "run":
                key, steps, epoch, drain = args
                barrier.wait(timeout=TIMEOUT_S)  # every replica starts the window together
                conn.send(("ok", session.run(setups[key], steps=steps, epoch=epoch, drain=drain)))
            elif cmd == "memory":
                conn.send(("ok", session.memory(setups[args[0]])))
            elif cmd == "release":
                session.release(setups.pop(args[0]))
                conn.send(("ok", None))
            else:  # close
                conn.send(("ok", None))
                return
        except CandidateError as exc:
            conn.send(("candidate", str(exc)))
        except Exception as exc:  # the user's code: report it, the parent decides
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _replica(rank: int, world: int, port: int, job: dict, cpus: list[int] | None, conn, barrier) -> None:
    die_with_parent()
    if cpus:
        os.sched_setaffinity(0, cpus)
    from experiments.workload.loader import load
    from experiments.workload.session import Session

    try:
        workload = load(job["entry"], job["task"], job["batch_size"])
        if job["task"] == "train":
            import torch.distributed as dist

            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            dist.init_process_group("gloo", rank=rank, world_size=world)
        session = Session(workload, job["task"], job["batch_size"], rank=rank, world=world)
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ok", None))
    _serve(session, conn, barrier)


class Replicas:
    """P replica processes of the workload (see the module docstring).

    Args:
        world: P, the number of processes.
        job: ``{"entry", "task", "batch_size"}`` to load the workload with.

    Raises:
        RuntimeError: if a replica fails to start, with its error.
    """

    def __init__(self, world: int, job: dict) -> None:
        import multiprocessing as mp

        self.world, self.job = world, job
        ctx = mp.get_context("spawn")
        self.barrier = ctx.Barrier(world)
        port, cpus = _free_port(), affinity()
        share = max(1, len(cpus) // world)
        self.conns, self.procs = [], []
        for rank in range(world):
            pinned = job["task"] == "infer" and share * world <= len(cpus)  # instances: a share of the CPUs each
            mine = cpus[rank * share : (rank + 1) * share] if pinned else None
            parent, child = ctx.Pipe()
            args = (rank, world, port, job, mine, child, self.barrier)
            # not daemonic: a replica starts DataLoader workers of its own; it dies with the job
            # all the same (die_with_parent) and close() reaps it
            proc = ctx.Process(target=_replica, args=args, daemon=False)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        self._gather()

    def _gather(self) -> list:
        from experiments.workload.session import CandidateError

        answers = []
        for rank, conn in enumerate(self.conns):
            if not conn.poll(TIMEOUT_S):
                raise RuntimeError(f"replica {rank} did not answer within {TIMEOUT_S:g} s")
            status, value = conn.recv()
            if status == "candidate":
                raise CandidateError(value)
            if status != "ok":
                raise RuntimeError(f"replica {rank} failed: {value}")
            answers.append(value)
        return answers

    def _all(self, *cmd) -> list:
        for conn in self.conns:
            conn.send(cmd)
        return self._gather()

    def prepare(self, key, cfg: dict) -> dict:
        """Make ``cfg`` ready in every replica; returns rank 0's ``setup_s``, ``first_call_s``."""
        return self._all("prepare", key, cfg)[0]

    def run(self, key, steps: int | None, epoch: bool = False, drain: int = 0) -> dict:
        """One window in every replica at once; ``batches`` summed, ``stall_s`` and ``marks`` of
        rank 0, ``epoch_memory`` of every rank (a list, or None); ``drain``: see
        :meth:`~experiments.workload.session.Session.run`."""
        answers = self._all("run", key, steps, epoch, drain)
        memory = [a["epoch_memory"] for a in answers] if epoch else None
        return {**answers[0], "batches": sum(a["batches"] for a in answers), "epoch_memory": memory}

    def memory(self, key) -> list[dict]:
        """Each replica's :meth:`~experiments.workload.session.Session.memory`."""
        return self._all("memory", key)

    def release(self, key) -> None:
        self._all("release", key)

    def close(self) -> None:
        """Stop the replicas (at most a few seconds)."""
        for conn in self.conns:
            try:
                conn.send(("close",))
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + 10
        for proc in self.procs:
            proc.join(timeout=max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()

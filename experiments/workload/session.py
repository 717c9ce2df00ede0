"""One process's share of measuring the workload: configurations made ready, windows run.

A :class:`Session` holds the workload (:mod:`experiments.workload.loader`) in one process: the
job's own for ``processes = 1``, each replica's otherwise (:mod:`experiments.workload.replicas`).
:meth:`Session.prepare` turns a configuration (knob -> value, :data:`experiments.workload.KNOBS`)
into a :class:`Setup`: its own DataLoader (started, with persistent workers where asked), its own
copy of the model from the same initial weights (channels_last where asked, DDP-wrapped over
gloo for training with several replicas), its optimizer (SGD, lr 0.01; the throughput, not the
model, is what is measured) or, for inference, the eager, scripted or compiled callable. Several
setups live at once, so a candidate and the current best are measured in alternation without
rebuilding either. :meth:`Session.run` runs one window of a setup: ``steps`` training steps
(or inference calls) on batches from its DataLoader, or a whole epoch, with the main loop's
marks for the timeline (:mod:`lab.fetch`).

torch is imported inside the functions (the module is imported by the job's CLI).
"""

from __future__ import annotations

import contextlib
import copy
import time
import warnings

import psutil

from experiments.workload.loader import Workload, split
from lab.capabilities import cxx_compiler
from lab.fetch import TimedFetch, timed_collate

#: Untimed steps after a setup is made (workers started, TorchScript profiled, inductor compiled).
SETUP_STEPS = 2


class CandidateError(ValueError):
    """A configuration this workload cannot run (TorchScript fails on the model, no C++
    compiler for torch.compile): the search drops it and records the reason."""


def label(cfg: dict) -> str:
    """``num_workers=2 threads=1 ...``: a configuration in one line, knobs in search order."""
    return " ".join(f"{k}={v}" for k, v in cfg.items())


class Setup:
    """A configuration made ready in one process (see the module docstring)."""

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.loader = self.iterator = self.model = self.opt = self.fn = None
        self.setup_s = self.first_call_s = float("nan")
        self.worker_warning = ""


def _len(loader) -> int | None:
    """Batches per epoch, or None for a dataset without ``len`` (an IterableDataset's may lack one)."""
    try:
        return len(loader)
    except TypeError:
        return None


class Session:
    """The workload in one process.

    Args:
        workload: the loaded workload.
        task: ``train`` or ``infer``.
        batch_size: samples per batch (per replica).
        rank, world: this replica and how many there are (world > 1: DDP over gloo for
            training, whose process group the caller has initialised; independent instances
            for inference).
    """

    def __init__(self, workload: Workload, task: str, batch_size: int, rank: int = 0, world: int = 1) -> None:
        self.workload, self.task, self.batch_size, self.rank, self.world = workload, task, batch_size, rank, world
        self.initial = copy.deepcopy(workload.model.state_dict())

    def _loader(self, cfg: dict):
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        workers = cfg["num_workers"]
        sampler = None
        if self.world > 1 and self.task == "train":  # each replica trains on its own shard
            sampler = DistributedSampler(self.workload.dataset, num_replicas=self.world, rank=self.rank, seed=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = DataLoader(
                TimedFetch(self.workload.dataset),
                batch_size=self.batch_size,
                shuffle=sampler is None and self.task == "train",
                sampler=sampler,
                drop_last=True,
                num_workers=workers,
                persistent_workers=bool(workers and cfg["persistent_workers"]),
                prefetch_factor=cfg["prefetch_factor"] if workers else None,
                multiprocessing_context="fork" if workers else None,
                collate_fn=timed_collate,
                generator=torch.Generator().manual_seed(0),
            )
        return loader, " | ".join(str(w.message) for w in caught if "worker" in str(w.message))

    def _model(self, cfg: dict, ddp: bool = True):
        import torch

        model = copy.deepcopy(self.workload.model)
        model.load_state_dict(self.initial)
        if cfg["channels_last"]:
            model = model.to(memory_format=torch.channels_last)
        if self.task == "train":
            model.train()
            if ddp and self.world > 1:  # DDP broadcasts rank 0's weights: every replica calls this
                model = torch.nn.parallel.DistributedDataParallel(model)
            return model, torch.optim.SGD(model.parameters(), lr=0.01)
        return model.eval(), None

    def _callable(self, setup: Setup, example):
        """The inference callable of ``mode``: the model, ``torch.jit.script`` (else ``trace``)
        or ``torch.compile``."""
        import torch

        mode = setup.cfg["mode"]
        if mode == "eager" or self.task == "train":
            return setup.model
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            if mode == "script":
                try:
                    return torch.jit.script(setup.model)
                except Exception:  # not scriptable: tracing records what one batch does
                    try:
                        return torch.jit.trace(setup.model, example)
                    except Exception as exc:
                        raise CandidateError(f"TorchScript cannot script or trace this model ({exc})") from None
            compiler, why = cxx_compiler()
            if compiler is None:
                raise CandidateError(f"torch.compile needs a working C++ compiler; inductor found none ({why})")
            return torch.compile(setup.model)

    def prepare(self, cfg: dict) -> Setup:
        """Make ``cfg`` ready: DataLoader, model, optimizer or callable; ``SETUP_STEPS`` untimed
        steps (the first one's time is ``first_call_s``, object creation ``setup_s``).

        Raises:
            CandidateError: if the configuration cannot run this workload.
        """
        setup = Setup(cfg)
        setup.loader, setup.worker_warning = self._loader(cfg)
        setup.model, setup.opt = self._model(cfg)
        self.threads(cfg)
        example, _ = split(self._next(setup, epoch=False)[0])  # the first batch of its first epoch
        t = time.perf_counter()
        setup.fn = self._callable(setup, self._memory_format(example, cfg))
        setup.setup_s = time.perf_counter() - t
        t = time.perf_counter()
        self.run(setup, steps=1)
        setup.first_call_s = time.perf_counter() - t
        self.run(setup, steps=SETUP_STEPS - 1)
        return setup

    @staticmethod
    def threads(cfg: dict) -> None:
        import torch

        torch.set_num_threads(cfg["threads"])

    @staticmethod
    def _memory_format(x, cfg: dict):
        import torch

        if cfg["channels_last"] and isinstance(x, torch.Tensor) and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def _next(self, setup: Setup, epoch: bool):
        if setup.iterator is None:
            setup.iterator = iter(setup.loader)
        try:
            return next(setup.iterator)
        except StopIteration:
            setup.iterator = None
            if epoch:
                return None
            setup.iterator = iter(setup.loader)  # a window may span two epochs
            return next(setup.iterator)

    def _step(self, setup: Setup, batch) -> None:
        import torch

        x, y = split(batch)
        x = self._memory_format(x, setup.cfg)
        bf16 = setup.cfg["precision"] == "bfloat16"
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        if self.task == "train":
            setup.opt.zero_grad(set_to_none=True)
            with autocast:
                loss = self.workload.loss(setup.model(x), y)
            loss.backward()
            setup.opt.step()
        else:
            with torch.inference_mode(), autocast:
                setup.fn(x)

    def run(self, setup: Setup, steps: int | None = None, epoch: bool = False, drain: int = 0) -> dict:
        """One window: ``steps`` steps, or (``epoch``) an epoch from a fresh iterator
        (non-persistent workers start inside it, as they do in a training script), cut after
        ``steps`` steps if given. ``drain``: batches taken from the iterator and dropped before
        the steps, untimed, without a step (:func:`experiments.workload.bench.in_flight`).

        Returns ``{"batches", "stall_s", "marks", "epoch_memory", "epoch_batches"}`` (marks: see
        :func:`lab.fetch.loop_spans`). ``epoch_memory`` is None for steps windows; for an
        epoch, ``[first, last]``: :meth:`memory` read after the first step and after the last
        one (the epoch's workers still run until the iterator ends), the two reads inside the
        window, between steps, that show a worker's growth across the epoch; ``last`` is None
        for a dataset without ``len``."""
        self.threads(setup.cfg)
        if epoch:
            setup.iterator = None
        n_batches = _len(setup.loader) if epoch else None
        for _ in range(0 if epoch else drain):
            self._next(setup, False)
        marks, stall, reads, probes = [], 0.0, [], []
        while (epoch and not steps) or len(marks) < steps:
            w0 = time.perf_counter()
            got = self._next(setup, epoch)
            if got is None:
                break
            batch, fetched = got
            w1 = time.perf_counter()
            self._step(setup, batch)
            marks.append((w0, w1, time.perf_counter(), fetched))
            stall += w1 - w0
            if epoch and (len(marks) == 1 or len(marks) in (n_batches, steps)):  # between two spans
                p0 = time.perf_counter()
                reads.append(self.memory(setup))
                probes.append((p0, time.perf_counter()))
        epoch_memory = None
        if epoch and reads:
            epoch_memory = [reads[0], reads[-1] if len(reads) > 1 else None]
        return {
            "batches": len(marks),
            "stall_s": stall,
            "marks": marks,
            "epoch_memory": epoch_memory,
            "epoch_batches": n_batches,
            "probes": probes,
        }

    def memory(self, setup: Setup) -> dict:
        """USS and PSS (MB) of this process and of each DataLoader worker of ``setup`` (psutil's
        ``memory_full_info``, which reads ``/proc/<pid>/smaps``): USS is memory no other process
        shares, PSS shares divided among the processes that map them. Returns
        ``{"main_uss_mb", "main_pss_mb", "workers": {pid: (uss_mb, pss_mb)}}``."""
        info = psutil.Process().memory_full_info()
        workers = {}
        for w in getattr(setup.iterator, "_workers", []):  # torch's worker processes of this iterator
            try:
                m = psutil.Process(w.pid).memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
                continue
            workers[w.pid] = (m.uss / 2**20, m.pss / 2**20)
        return {"main_uss_mb": info.uss / 2**20, "main_pss_mb": info.pss / 2**20, "workers": workers}

    def numerics(self, precision: str, steps: int) -> dict:
        """What ``precision`` does to the numbers: from the same initial weights and the same
        first ``steps`` batches (no workers, no shuffle), the loss after those steps (train) and
        the largest absolute difference of the model's output on the first batch, both against
        float32. Returns ``{"loss_after", "max_abs_diff"}`` (``loss_after`` NaN for inference)."""
        import torch
        from torch.utils.data import DataLoader

        loader = DataLoader(self.workload.dataset, batch_size=self.batch_size, shuffle=False)
        batches = [b for _, b in zip(range(max(1, steps)), loader)]
        outputs, losses = {}, {}
        for p in ("float32", precision):
            cfg = {"channels_last": False, "precision": p}
            model, opt = self._model(cfg, ddp=False)
            loss = float("nan")
            autocast = torch.autocast("cpu", dtype=torch.bfloat16) if p == "bfloat16" else contextlib.nullcontext()
            for b in batches if self.task == "train" else []:
                x, y = split(b)
                opt.zero_grad(set_to_none=True)
                with autocast:
                    value = self.workload.loss(model(x), y)
                value.backward()
                opt.step()
                loss = float(value.detach())
            with torch.inference_mode(), autocast:
                outputs[p] = _tensors(model(split(batches[0])[0]))
            losses[p] = loss
        pairs = list(zip(outputs[precision], outputs["float32"]))
        diff = max((float((a - b).abs().max()) for a, b in pairs if a.numel()), default=float("nan"))
        return {"loss_after": losses[precision], "loss_after_fp32": losses["float32"], "max_abs_diff": diff}

    def release(self, setup: Setup) -> None:
        """Stop the setup's DataLoader workers."""
        setup.iterator = None
        setup.loader = None


def _tensors(out) -> list:
    """The floating-point tensors of a model's output (a tensor, or dicts, lists and tuples of
    them, as Hugging Face models return), as float32, in a fixed order."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out.float()] if out.is_floating_point() else []
    if isinstance(out, dict):
        return [t for k in sorted(out, key=str) for t in _tensors(out[k])]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _tensors(v)]
    return []

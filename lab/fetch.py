"""Where a DataLoader's time goes: batches timed where they are made, and the training loop's
wait and step spans.

:class:`TimedFetch` wraps a map-style dataset so that every batch records when its fetch
started (in the worker that makes it, or in the main process with ``num_workers = 0``);
:func:`timed_collate` collates it like PyTorch's default and appends ``(worker id, fetch
start, fetch end)``. ``time.perf_counter`` is CLOCK_MONOTONIC, so worker and main-process times
share one axis. :func:`loop_spans` turns the main loop's marks into spans: ``wait`` (inside
``next(iterator)``: the loop is stalled on data), ``step`` (the training or inference step) and
``fetch`` (where the batch was made). Used by the dataloader and workload experiments.
"""

from __future__ import annotations

import time


class _Fetched(list):
    """The samples of one batch and the ``perf_counter`` time their fetch started."""

    t0: float = 0.0


class TimedFetch:
    """Map-style dataset wrapper whose ``__getitems__`` (the batched fetch DataLoader calls when
    it exists) records when fetching a batch started, for :func:`timed_collate`."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        return self.dataset[i]

    def __getitems__(self, indices: list[int]) -> _Fetched:
        t0 = time.perf_counter()
        batch = _Fetched(self.dataset[i] for i in indices)
        batch.t0 = t0
        return batch


def timed_collate(batch: _Fetched):
    """Collate like PyTorch's default and append ``(worker id, fetch start, fetch end)``.

    Returns:
        ``(collated, (worker, t0, t1))``: ``collated`` is ``default_collate`` of the samples
        (for ``(x, y)`` samples a list ``[x, y]``); ``worker`` is the DataLoader worker id, -1 in
        the main process; ``t0``, ``t1`` are ``time.perf_counter`` seconds. The times travel as a
        plain tuple (pickled), not as a tensor, so they add no shared-memory transfer.
    """
    from torch.utils.data import default_collate, get_worker_info

    collated = default_collate(list(batch))
    t1 = time.perf_counter()
    info = get_worker_info()
    return collated, (info.id if info is not None else -1, batch.t0, t1)


def loop_spans(marks: list[tuple], t0: float) -> list[dict]:
    """Spans of a measured window from the main loop's marks.

    Args:
        marks: per batch ``(wait_start, wait_end, step_end, (worker, fetch_start, fetch_end))``,
            ``time.perf_counter`` seconds.
        t0: the window's start (``Window.t0``); span times are seconds from it.

    Returns:
        Per batch a ``wait`` and a ``step`` span of actor ``main`` and a ``fetch`` span of actor
        ``worker-<i>`` (``main`` with ``num_workers = 0``), each with its ``batch`` index.
    """
    spans = []
    for b, (w0, w1, w2, (worker, f0, f1)) in enumerate(marks):
        spans.append({"actor": "main", "kind": "wait", "start_s": w0 - t0, "end_s": w1 - t0, "batch": b})
        spans.append({"actor": "main", "kind": "step", "start_s": w1 - t0, "end_s": w2 - t0, "batch": b})
        actor = f"worker-{worker}" if worker >= 0 else "main"
        spans.append({"actor": actor, "kind": "fetch", "start_s": f0 - t0, "end_s": f1 - t0, "batch": b})
    return spans

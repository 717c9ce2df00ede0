"""The built-in workload: a small CNN trained on synthetic images whose ``__getitem__`` costs what
decoding and augmenting a real image costs (numpy), so DataLoader workers, threads and
precision all have something to change.

Images are 40 x 40 x 3 uint8 arrays drawn once from a seeded generator (the "files"); an item
is "decoded" (to float32, normalised per channel), randomly cropped to 32 x 32, flipped,
blurred with a 5 x 5 box filter and jittered in brightness, all in numpy in the calling process
(a DataLoader worker, or the training loop with ``num_workers = 0``). Measured on one core of the
development VM's Xeon: about 0.25 ms per item, 8 ms per batch of 32, against 13 ms for a float32
training step of :func:`lab.models.cnn` on one thread: the regime where num_workers,
threads and precision each change the throughput.
"""

from __future__ import annotations

import numpy as np

#: Items (images) in the built-in dataset; an epoch at batch 32 is 32 steps.
ITEMS = 1024
SIZE, PAD, CLASSES = 32, 4, 10


class SyntheticImages:
    """``ITEMS`` synthetic images; ``dataset[i]`` returns ``(float32 tensor [3, 32, 32], label)``.

    Deterministic per index and epoch-independent (the crop and flip come from a generator
    seeded with ``i``), so every configuration sees the same data.
    """

    def __init__(self, items: int = ITEMS, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        side = SIZE + 2 * PAD
        self.raw = rng.integers(0, 256, size=(items, side, side, 3), dtype=np.uint8)
        self.labels = rng.integers(0, CLASSES, size=items)
        self.mean = np.array([125.3, 123.0, 113.9], dtype=np.float32)
        self.std = np.array([63.0, 62.1, 66.7], dtype=np.float32)

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, i: int):
        import torch

        rng = np.random.default_rng(i)
        img = (self.raw[i].astype(np.float32) - self.mean) / self.std  # "decode" and normalise
        y0, x0 = rng.integers(0, 2 * PAD + 1, size=2)
        img = img[y0 : y0 + SIZE, x0 : x0 + SIZE]  # random crop
        if rng.random() < 0.5:
            img = img[:, ::-1]  # horizontal flip
        padded = np.pad(img, ((2, 2), (2, 2), (0, 0)), mode="edge")  # 5 x 5 box blur
        img = sum(padded[dy : dy + SIZE, dx : dx + SIZE] for dy in range(5) for dx in range(5)) / 25.0
        img = img * (1.0 + 0.2 * (rng.random() - 0.5))  # brightness jitter
        chw = np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32)
        return torch.from_numpy(chw), int(self.labels[i])


def build() -> dict:
    """The built-in workload: ``{"model", "dataset", "loss"}`` (no current settings: the
    lab compares with PyTorch's defaults)."""
    import torch

    from lab.models import cnn

    torch.manual_seed(0)
    model = cnn(channels=3, classes=CLASSES)
    return {"model": model, "dataset": SyntheticImages(), "loss": torch.nn.CrossEntropyLoss()}

"""An example workload: a bag-of-words text classifier, the kind of model many people train on
CPUs, with the tokenisation done in ``__getitem__`` as real pipelines do.

The lab calls :func:`build` (config ``workload.entry: "examples.textcls.bench:build"``) and gets
the model, the dataset, the loss and the settings this training script uses today (``current``),
which the lab verifies its recommendation against. Copy this file into your own package and
replace the three parts with yours.
"""

from __future__ import annotations

import zlib

import numpy as np

VOCAB, LENGTH, CLASSES, DOCUMENTS = 20_000, 128, 4, 2048
WORDS = [f"w{i}" for i in range(5000)]


class Documents:
    """Synthetic documents: ``dataset[i]`` is ``(token ids int64[128], label)``.

    Every item builds its document's text (about 200 words drawn from a seeded generator) and
    tokenises it: lower-case, split, hash each word into the vocabulary (crc32), truncate or pad
    to 128 tokens: string work in Python, the cost DataLoader workers take off the training loop.
    """

    def __len__(self) -> int:
        return DOCUMENTS

    def __getitem__(self, i: int):
        import torch

        rng = np.random.default_rng(i)
        label = int(rng.integers(CLASSES))
        words = rng.choice(WORDS[label * 1000 : label * 1000 + 2000], size=200)
        text = " ".join(words).upper()
        ids = [zlib.crc32(w.lower().encode()) % VOCAB for w in text.split()][:LENGTH]
        ids += [0] * (LENGTH - len(ids))
        return torch.tensor(ids, dtype=torch.int64), label


def build() -> dict:
    """The workload: an EmbeddingBag classifier, its data, its loss, today's settings."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.EmbeddingBag(VOCAB, 64, mode="mean"),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, CLASSES),
    )
    current = {"num_workers": 2, "threads": 1}  # what this script runs with today
    return {"model": model, "dataset": Documents(), "loss": torch.nn.CrossEntropyLoss(), "current": current}

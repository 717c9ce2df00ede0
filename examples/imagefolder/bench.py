"""An example workload the way most CPU training jobs look: an image folder of JPEG files,
decoded and augmented with PIL in ``__getitem__``, and a ResNet-18 trained on it.

The lab calls :func:`build` (config ``workload.entry: "examples.imagefolder.bench:build"``). On
the first call it writes the image folder (``IMAGES`` JPEGs of 320 x 240, ``CLASSES`` class
directories, deterministic) under ``$XDG_CACHE_HOME/cpu-lab/imagefolder`` (a directory the
pipeline owns: ``.snakemake/lab/xdg-cache``), or ``$LAB_IMAGEFOLDER`` where set; later calls
reuse it. An item is what torchvision's standard ImageNet training transforms do, written with
Pillow and numpy (the PyPI torchvision wheel does not load beside the CPU torch here):
``RandomResizedCrop(CROP)`` (scale 0.08-1, ratio 3/4-4/3), a horizontal flip, ``ToTensor`` and
``Normalize`` with ImageNet's mean and standard deviation. The model is ResNet-18 (He et al.,
2016: basic blocks of two 3x3 convolutions, [2, 2, 2, 2] blocks, 64-512 channels), without
pretrained weights; with ``WIDTH`` below 64 a narrower one of the same shape (the tests use one
that steps in about 0.1 s).

Measured on an AMD EPYC VM with 2 vCPUs and avx512_bf16 (issue 21, by hand, 3 interleaved
rounds of 4 steps): a float32 training step of batch 32 at 112 x 112 about 655 ms, bfloat16
autocast 366 ms, bfloat16 with channels_last 316 ms; ``__getitem__`` about 1.5 ms per item.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

IMAGES, CLASSES, SIZE = 256, 4, (320, 240)
CROP = int(os.environ.get("LAB_IMAGEFOLDER_CROP", "112"))
WIDTH = int(os.environ.get("LAB_IMAGEFOLDER_WIDTH", "64"))
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def folder() -> Path:
    """Where the images live: ``$LAB_IMAGEFOLDER``, else under the XDG cache (see the module docstring)."""
    if os.environ.get("LAB_IMAGEFOLDER"):
        return Path(os.environ["LAB_IMAGEFOLDER"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "cpu-lab" / "imagefolder"


def make_images(root: Path, images: int = IMAGES) -> list[tuple[Path, int]]:
    """Write the image folder once (a smooth colour field per class with noise, as JPEG); return
    ``(path, label)`` of every image, sorted. An existing complete folder is reused."""
    from PIL import Image

    files = [(root / f"class{i % CLASSES}" / f"img{i:04d}.jpg", i % CLASSES) for i in range(images)]
    if all(p.exists() for p, _ in files):
        return files
    rng = np.random.default_rng(0)
    w, h = SIZE
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    for path, label in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        phase = rng.random(3) * 6.28
        base = np.stack([np.sin(xx / (20 + 10 * label) + phase[c]) + np.cos(yy / 30 + phase[c]) for c in range(3)], -1)
        pixels = np.clip(127 + 60 * base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
        tmp = path.with_suffix(".tmp")
        Image.fromarray(pixels).save(tmp, format="JPEG", quality=90)
        tmp.replace(path)  # complete files only: a half-written image is never reused
    return files


class ImageFolder:
    """``dataset[i]`` is ``(float32 tensor [3, CROP, CROP], label)``: the JPEG decoded and augmented
    (the module docstring), with a generator seeded per item so every configuration sees the
    same data."""

    def __init__(self, files: list[tuple[Path, int]]) -> None:
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        import torch
        from PIL import Image

        path, label = self.files[i]
        rng = np.random.default_rng(i)
        with Image.open(path) as im:
            img = im.convert("RGB")
        img = random_resized_crop(img, CROP, rng)
        if rng.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        x = (np.asarray(img, dtype=np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1))), label


def random_resized_crop(img, size: int, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's ``RandomResizedCrop``: a crop of a random area share and aspect ratio
    (ten tries, else the centre crop), resized to ``size`` x ``size`` bilinearly."""
    from PIL import Image

    w, h = img.size
    for _ in range(10):
        area = w * h * rng.uniform(*scale)
        aspect = float(np.exp(rng.uniform(np.log(ratio[0]), np.log(ratio[1]))))
        cw, ch = int(round((area * aspect) ** 0.5)), int(round((area / aspect) ** 0.5))
        if 0 < cw <= w and 0 < ch <= h:
            x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            return img.resize((size, size), Image.Resampling.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
    side = min(w, h)
    box = ((w - side) // 2, (h - side) // 2, (w + side) // 2, (h + side) // 2)
    return img.resize((size, size), Image.Resampling.BILINEAR, box=box)


def resnet18(classes: int = CLASSES, width: int = WIDTH):
    """ResNet-18 (the module docstring) of base width ``width`` (64: the paper's)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + (x if self.down is None else self.down(x)))

    layers, cin = [], width
    for i, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
        layers += [Block(cin, cout, 1 if i == 0 else 2), Block(cout, cout, 1)]
        cin = cout
    stem = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    return nn.Sequential(*stem, *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def build() -> dict:
    """The workload: ResNet-18 on the image folder, cross-entropy, today's settings (no workers)."""
    import torch

    torch.manual_seed(0)
    files = make_images(folder())
    current = {"num_workers": 0}  # what this training script runs with today
    return {"model": resnet18(), "dataset": ImageFolder(files), "loss": torch.nn.CrossEntropyLoss(), "current": current}

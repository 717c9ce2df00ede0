"""Small models and synthetic data shared by the torch experiments.

Sizes are chosen so one step takes around a millisecond on one core of a 2.5 GHz x86 CPU:
big enough that torch's per-op overhead does not dominate, small enough that a sweep point
finishes in seconds.
"""

from __future__ import annotations


def mlp(in_features: int = 64, hidden: int = 256, out_features: int = 10, layers: int = 2):
    """A ReLU multi-layer perceptron: ``layers`` hidden Linear layers of width ``hidden``.

    Input shape ``(batch, in_features)``, output ``(batch, out_features)``.
    """
    import torch.nn as nn

    mods: list[nn.Module] = []
    width = in_features
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    mods.append(nn.Linear(width, out_features))
    return nn.Sequential(*mods)


def cnn(channels: int = 3, classes: int = 10):
    """A small convolutional network for ``(batch, channels, 32, 32)`` images -> ``(batch, classes)``."""
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, classes),
    )


def classification_batch(batch_size: int, in_features: int, classes: int = 10, seed: int = 0):
    """A fixed synthetic batch: ``x`` of shape ``(batch_size, in_features)``, integer labels ``y``."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, in_features, generator=g)
    y = torch.randint(0, classes, (batch_size,), generator=g)
    return x, y


def train_step_fn(model, lr: float = 0.01):
    """Return ``step(x, y) -> loss`` doing one SGD step with cross-entropy loss."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step

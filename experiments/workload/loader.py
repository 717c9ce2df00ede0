"""The user's workload: imported from its entry point and checked before anything is measured.

An entry point is ``"package.module:function"`` (config ``workload.entry``; empty: the built-in
workload, :mod:`experiments.workload.builtin`). Called with no arguments, it returns

* a mapping ``{"model": nn.Module, "dataset": map-style dataset, "loss": callable or None,
  "current": {knob: value}}`` (``loss`` and ``current`` optional), or
* a tuple ``(model, dataset, loss)`` or ``(model, dataset, loss, current)``.

``dataset[i]`` returns ``(input, target)`` (train; any input the model takes, typically a
tensor) or ``input`` / ``(input, ...)`` (infer). ``current`` states the settings the user runs
today, with the knob names of :data:`experiments.workload.KNOBS`; the verification compares the
recommendation with them (PyTorch's defaults when absent).

:func:`load` raises :class:`WorkloadError`, one line naming the config key and the cause, for an
entry that does not import, one that returns the wrong things, a dataset whose ``__getitem__``
raises, a model whose forward fails on a batch, a loss that fails, is not a scalar or is not
finite (NaN, inf), and current settings with an unknown knob or value.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.workload import KNOB_TYPES

#: The entry of the built-in workload (config ``workload.entry: ""``).
BUILTIN = "experiments.workload.builtin:build"


class WorkloadError(ValueError):
    """A workload that cannot be measured; ``str()`` is one line naming the config key."""


@dataclasses.dataclass
class Workload:
    """A loaded, checked workload.

    Attributes:
        entry: the entry point it came from.
        model: the ``torch.nn.Module``.
        dataset: a map-style dataset (``__len__``, ``__getitem__``).
        loss: ``loss(output, target) -> scalar tensor`` (train), None (infer).
        current: the user's current settings (knob -> value), possibly empty.
        input_dims: dimensions of one batch's input tensor (4 for images: channels_last applies).
        layout: the memory format of that input: ``channels_last`` or ``contiguous``.
    """

    entry: str
    model: Any
    dataset: Any
    loss: Any
    current: dict
    input_dims: int
    layout: str = "contiguous"


def split(batch) -> tuple[Any, Any]:
    """``(input, target)`` of a collated batch; target None when the samples have none."""
    if isinstance(batch, (list, tuple)):
        return batch[0], (batch[1] if len(batch) > 1 else None)
    return batch, None


def _module_file(module_name: str, path: list[str]) -> Path | None:
    """The source file of ``module_name`` on ``path`` (``a/b/c.py`` or ``a/b/c/__init__.py``;
    a directory for a namespace package), found without importing anything; None if absent."""
    parts = module_name.split(".")
    for base in path:
        where = Path(base or ".").joinpath(*parts)
        for candidate in (where.with_suffix(".py"), where / "__init__.py"):
            if candidate.is_file():
                return candidate
        if where.is_dir() and len(parts) > 1:
            return where
    return None


def _near(name: str, names) -> str:
    """`` (did you mean build?)`` where ``names`` hold one close to ``name``, else ``""``."""
    close = difflib.get_close_matches(name, sorted(set(names)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _siblings(module_name: str, path: list[str]) -> list[str]:
    """Module names beside the last part of ``module_name`` (its would-be package's contents)."""
    parent, _, _ = module_name.rpartition(".")
    found: set[str] = set()
    for base in path:
        d = Path(base or ".").joinpath(*parent.split(".")) if parent else Path(base or ".")
        if d.is_dir():
            found |= {m.name for m in pkgutil.iter_modules([str(d)])}
    return sorted(found)


def _defined(source: Path) -> set[str] | None:
    """Names a module's source defines at module level (functions, classes, assignments,
    imports), those inside its top-level ``if``, ``try``, ``with`` and loop blocks included (an
    ``except ImportError`` fallback defines its name too); None where they cannot be known
    without running it (``__getattr__``, ``import *``, a syntax error, a module that is not a
    Python file)."""
    if source.suffix != ".py":
        return None
    try:
        tree = ast.parse(source.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return None
    names: set[str] = set()
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue  # their bodies are another scope
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            targets = [*getattr(node, "targets", []), getattr(node, "target", None)]
            targets += [i.optional_vars for i in getattr(node, "items", [])]
            names |= {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}
        for field in ("body", "orelse", "finalbody", "handlers"):
            todo.extend(x for x in getattr(node, field, []) if isinstance(x, ast.AST))
        names |= {node.name} if isinstance(node, ast.ExceptHandler) and node.name else set()
    return None if "__getattr__" in names else names


def _found_by_import(module_name: str) -> Path | None:
    """Where the import system finds a module the path search missed (a module an import hook
    or a package's own code provides, such as ``os.path``): its origin, importing only its
    parent packages; None if it finds none."""
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return Path(spec.origin) if spec.origin and spec.has_location else Path(module_name)


def resolve_entry(entry: str, where: str, path: list[str] | None = None) -> Path | None:
    """Find a workload entry ``package.module:function`` without importing it: the module's
    file on ``path`` (default: the working directory, where jobs run, then ``sys.path``) and the
    function's name among the names its source defines at top level. The Snakefile calls it at
    parse time, so a typo is reported before anything is measured.

    Returns:
        The module's source file, or None for a module that exists but is no Python source
        (a compiled extension), which only importing can check.

    Raises:
        WorkloadError: ``<where>: expected 'package.module:function'``, ``cannot find module
            X``, or ``X (path) defines no F``, each with ``(did you mean ...?)`` where a name
            close to the one given exists.
    """
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise WorkloadError(f"{where}: expected 'package.module:function'")
    path = [os.getcwd(), *sys.path] if path is None else path
    source = _module_file(module_name, path)
    if source is None:
        source = _found_by_import(module_name)
        if source is not None and source.suffix != ".py":
            return None  # a built-in or compiled module: importing it is the only check
    if source is None:
        near = _near(module_name.rpartition(".")[2], _siblings(module_name, path))
        raise WorkloadError(f"{where}: cannot find module {module_name} in {path[0]} or on the Python path{near}")
    names = _defined(source if source.is_file() else source / "__init__.py")
    if names is not None and attr not in names:
        near = _near(attr, [n for n in names if not n.startswith("_")])
        raise WorkloadError(f"{where}: {module_name} ({source}) defines no {attr}{near}")
    return source


def _function(entry: str, where: str):
    resolve_entry(entry, where)
    module_name, _, attr = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: anything can go wrong on import
        raise WorkloadError(f"{where}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise WorkloadError(f"{where}: {module_name} has no function {attr}")
    return fn


def _unpack(out, where: str, task: str) -> tuple:
    shape = "a dict with model, dataset, loss (current optional) or a tuple (model, dataset, loss[, current])"
    if isinstance(out, Mapping):
        if "model" not in out or "dataset" not in out:
            raise WorkloadError(f"{where}: returned a dict with keys {sorted(out)}; expected {shape}")
        parts = (out["model"], out["dataset"], out.get("loss"), out.get("current") or {})
    elif isinstance(out, tuple) and len(out) in (3, 4):
        parts = (*out, {}) if len(out) == 3 else out
    else:
        raise WorkloadError(f"{where}: returned {type(out).__name__}; expected {shape}")
    import torch

    model, dataset, loss, current = parts
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(f"{where}: the model is a {type(model).__name__}, not a torch.nn.Module")
    missing = [m for m in ("__getitem__", "__len__") if not hasattr(dataset, m)]
    if missing:
        raise WorkloadError(
            f"{where}: the dataset ({type(dataset).__name__}) has no {' and no '.join(missing)}; allowed: a map-style"
            " dataset (torch.utils.data.Dataset) with both, since the search sizes epochs and windows from its"
            " length (an IterableDataset is not supported)"
        )
    if task == "train" and not callable(loss):
        raise WorkloadError(f"{where}: task train needs a loss, got {type(loss).__name__}")
    if not isinstance(current, Mapping):
        raise WorkloadError(f"{where}: current settings must be a dict, got {type(current).__name__}")
    return model, dataset, loss, dict(current)


def check_current(current: Mapping, where: str) -> dict:
    """The user's current settings with their knob names and types checked.

    Raises:
        WorkloadError: for an unknown knob or a value of the wrong type.
    """
    out = {}
    for knob, value in current.items():
        if knob not in KNOB_TYPES:
            raise WorkloadError(f"{where}: current settings: unknown knob {knob!r}; allowed: {', '.join(KNOB_TYPES)}")
        tp, choices = KNOB_TYPES[knob]
        ok = isinstance(value, tp) and not (tp is int and isinstance(value, bool))
        low = CURRENT_MINIMUM.get(knob)
        if not ok or (choices and value not in choices) or (low is not None and value < low):
            allowed = f"one of {list(choices)}" if choices else tp.__name__
            allowed += f" >= {low}" if low is not None else ""
            raise WorkloadError(f"{where}: current settings: {knob}={value!r}; allowed: {allowed}")
        out[knob] = value
    if out.get("num_workers") == 0 and ("prefetch_factor" in out or out.get("persistent_workers")):
        # DataLoader itself raises for these with num_workers 0: they would fail the start
        raise WorkloadError(
            f"{where}: current settings: prefetch_factor and persistent_workers apply with num_workers > 0;"
            " allowed with num_workers 0: neither"
        )
    return out


#: The smallest value of each integer knob in the current settings (DataLoader's and torch's own).
CURRENT_MINIMUM = {"num_workers": 0, "prefetch_factor": 1, "threads": 1, "processes": 1}


def _first_batch(dataset, batch_size: int, where: str):
    from torch.utils.data import default_collate

    n = len(dataset)
    if n < 1:
        raise WorkloadError(f"{where}: the dataset is empty")
    if n < batch_size:
        raise WorkloadError(
            f"{where}: the dataset has {n} items, fewer than workload.batch_size {batch_size}: no full batch"
            " (the lab drops an epoch's last, incomplete batch); allowed: a batch_size of at most the dataset's length"
        )
    samples = []
    for i in range(min(batch_size, n)):
        try:
            samples.append(dataset[i])
        except Exception as exc:  # the user's __getitem__
            raise WorkloadError(f"{where}: dataset[{i}] raised {type(exc).__name__}: {exc}") from None
    try:
        return default_collate(samples)
    except Exception as exc:
        cause = f"{type(exc).__name__}: {exc}"
        raise WorkloadError(f"{where}: a batch of {len(samples)} items does not collate ({cause})") from None


def _check_forward(model, loss, batch, task: str, where: str) -> int:
    """Run the model (and loss) once on a batch; return the input's dimensions."""
    import torch

    x, y = split(batch)
    if task == "train" and y is None:
        raise WorkloadError(f"{where}: task train needs (input, target) samples; dataset[0] has no target")
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as exc:  # the user's forward
        raise WorkloadError(f"{where}: the model's forward failed on a batch ({type(exc).__name__}: {exc})") from None
    if task == "train":
        try:
            value = loss(out, y)
        except Exception as exc:
            cause = f"{type(exc).__name__}: {exc}"
            raise WorkloadError(f"{where}: the loss failed on the model's output ({cause})") from None
        if not (isinstance(value, torch.Tensor) and value.numel() == 1):
            raise WorkloadError(f"{where}: the loss must return a scalar tensor, got {type(value).__name__}")
        if not torch.isfinite(value.detach()).all():  # NaN or inf: every later step trains on it
            raise WorkloadError(
                f"{where}: the loss on the first batch is {value.item()}, not a finite number: a training step on it"
                " is not the step a real run takes (check the data and the loss for NaN, inf or log(0))"
            )
        _check_backward(model, loss, x, y, where)
    return x.dim() if isinstance(x, torch.Tensor) else 0


def _check_backward(model, loss, x, y, where: str) -> None:
    """A training step needs parameters to train and a loss that backpropagates to them; the
    gradients of this check are dropped, the model is left as it was."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise WorkloadError(f"{where}: task train needs a model with trainable parameters; this one has none")
    try:
        loss(model(x), y).backward()
    except Exception as exc:  # the user's model or loss
        raise WorkloadError(f"{where}: the backward pass failed ({type(exc).__name__}: {exc})") from None
    finally:
        model.zero_grad(set_to_none=True)


def load(entry: str, task: str, batch_size: int) -> Workload:
    """Import, call and check the workload (see the module docstring).

    Args:
        entry: ``"package.module:function"``; empty for the built-in workload.
        task: ``train`` or ``infer``.
        batch_size: the batch the check runs the model on.

    Raises:
        WorkloadError: one line, ``config key workload.entry: '<entry>': <cause>``.
    """
    where = f"config key workload.entry: {entry!r}" if entry else "the built-in workload"
    fn = _function(entry or BUILTIN, where)
    try:
        out = fn()
    except Exception as exc:  # the user's function
        raise WorkloadError(f"{where}: calling it raised {type(exc).__name__}: {exc}") from None
    model, dataset, loss, current = _unpack(out, where, task)
    current = check_current(current, where)
    if task == "train" and current.get("mode", "eager") != "eager":
        mode = current["mode"]
        raise WorkloadError(f"{where}: current settings: mode={mode!r} applies to task infer; allowed: eager")
    batch = _first_batch(dataset, batch_size, where)
    dims = _check_forward(model, loss, batch, task, where)
    layout = _layout(split(batch)[0])
    return Workload(entry or BUILTIN, model, dataset, loss if task == "train" else None, current, dims, layout)


def _layout(x) -> str:
    """``channels_last`` for a 4-D tensor stored that way, else ``contiguous``."""
    import torch

    nhwc = isinstance(x, torch.Tensor) and x.dim() == 4 and not x.is_contiguous()
    return "channels_last" if nhwc and x.is_contiguous(memory_format=torch.channels_last) else "contiguous"


def user_code(entry: str) -> Path:
    """Where the workload's own code lives: the directory of the entry's top-level package, or
    the built-in workload's file (the lab's own modules are not the user's)."""
    module_name = (entry or BUILTIN).partition(":")[0]
    top = module_name.split(".")[0]
    if top == "experiments":
        return Path(importlib.import_module(module_name).__file__)
    spec = importlib.util.find_spec(top)
    origin = Path(spec.origin) if spec and spec.origin else Path(top)
    return origin.parent if origin.name == "__init__.py" else origin


def raised_by_user(exc: BaseException, entry: str) -> bool:
    """Whether ``exc`` came from the workload's own code: a frame of its traceback lies in
    :func:`user_code`, or its message quotes such a frame (DataLoader re-raises a worker's
    exception with the worker's traceback as text)."""
    root = str(user_code(entry))
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(root):
            return True
        tb = tb.tb_next
    return root in str(exc)

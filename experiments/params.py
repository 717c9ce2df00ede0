"""Parameters of a configuration point: range checks, field types, text to typed values.

Every experiment describes one configuration point with a frozen dataclass ``Params`` whose
fields are annotated ``int``, ``float``, ``str``, ``bool`` or ``Literal[...]``, or
``tuple[X, ...]`` of one of these for a set of values one job uses (the workload experiment's
search space; written ``0,1,2`` on the command line, a list in config). The same annotations
type the command line (:mod:`experiments.cli`), the ``--baseline`` overrides and the columns
read back from CSV (:mod:`analysis.tables`), so a value means the same thing wherever it
travels.
"""

from __future__ import annotations

import dataclasses
import math
import typing

#: Text forms of booleans accepted on the command line and in CSV files.
TRUE, FALSE = ("1", "true", "yes"), ("0", "false", "no")


def check_choice(name: str, value, allowed) -> None:
    """Raise ``ValueError`` naming ``name``, the bad ``value`` and the ``allowed`` values."""
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {sorted(allowed)}")


def check_min(name: str, value, minimum) -> None:
    """Raise ``ValueError`` if ``value`` is not a finite number ``>= minimum``, naming the
    parameter and the bound."""
    if not math.isfinite(value) or value < minimum:
        raise ValueError(f"{name}={value!r} is out of range; it must be >= {minimum}")


def _element(tp):
    """``(python type, choices)`` of a scalar annotation."""
    if typing.get_origin(tp) is typing.Literal:
        args = typing.get_args(tp)
        return type(args[0]), args
    return tp, None


def is_tuple(params_cls, name: str) -> bool:
    """Whether field ``name`` is a ``tuple[X, ...]`` (a set of values for one job).

    Raises:
        KeyError: if ``params_cls`` has no field ``name``.
    """
    return typing.get_origin(typing.get_type_hints(params_cls)[name]) is tuple


def field_type(params_cls, name: str) -> tuple[type, tuple | None]:
    """``(python type, choices)`` of field ``name``: ``Literal["a", "b"]`` gives ``(str, ("a", "b"))``,
    other annotations ``(type, None)``; for ``tuple[X, ...]`` those of ``X``.

    Raises:
        KeyError: if ``params_cls`` has no field ``name``.
    """
    tp = typing.get_type_hints(params_cls)[name]
    if typing.get_origin(tp) is tuple:
        tp = typing.get_args(tp)[0]
    return _element(tp)


def field_types(params_cls) -> dict[str, type]:
    """Every field of ``params_cls`` and its python type (``Literal`` fields: the type of their
    values; tuple fields: the type of their elements)."""
    return {f.name: field_type(params_cls, f.name)[0] for f in dataclasses.fields(params_cls)}


def parse_bool(text: str) -> bool:
    """``True`` for 1/true/yes, ``False`` for 0/false/no (any case).

    Raises:
        ValueError: for anything else.
    """
    low = str(text).strip().lower()
    if low in TRUE:
        return True
    if low in FALSE:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_value(params_cls, name: str, text: str):
    """The typed value of field ``name`` written as ``text`` (from a path, the command line or CSV).

    Raises:
        ValueError: naming the field, for text of the wrong type or a value outside its
            ``Literal`` choices.
        KeyError: if ``params_cls`` has no field ``name``.
    """
    if is_tuple(params_cls, name):  # "0,1,2": every element typed
        return tuple(_parse_one(params_cls, name, part.strip()) for part in str(text).split(",") if part.strip())
    return _parse_one(params_cls, name, text)


def _parse_one(params_cls, name: str, text: str):
    tp, choices = field_type(params_cls, name)
    try:
        value = parse_bool(text) if tp is bool else tp(text)
    except ValueError:
        raise ValueError(f"{name} must be of type {tp.__name__}, got {text!r}") from None
    if choices is not None and value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {text!r}")
    return value


def parse_overrides(params_cls, items: list[str]) -> dict:
    """Turn ``["mode=sequential", ...]`` into typed field values of ``params_cls``.

    Raises:
        ValueError: for an item without ``=``, an unknown field or a value of the wrong type.
    """
    fields = {f.name for f in dataclasses.fields(params_cls)}
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in fields:
            raise ValueError(f"--baseline {item!r}: expected KEY=VALUE with KEY one of {sorted(fields)}")
        try:
            out[key] = parse_value(params_cls, key, text)
        except ValueError as exc:
            raise ValueError(f"--baseline {item!r}: {exc}") from None
    return out


def oversubscription_skip(params, limit: float | None, ncpu: int) -> str | None:
    """Why a point is skipped for asking for too many CPUs, or None to measure it.

    ``params.cpus_requested()`` (threads, processes or workers running at once) above
    ``limit`` x the available CPUs is skipped: such a point measures mostly the scheduler
    and can take many times longer than the rest of its sweep. Up to the limit a point is
    measured and flagged ``oversubscribed`` where it asks for more than the available CPUs,
    because the cost of oversubscription is itself a finding.

    Args:
        params: a Params object, with a ``cpus_requested()`` method (CPUs, int) if it can
            ask for more than one.
        limit: the factor (config ``max_oversubscription``), or None for no limit.
        ncpu: available CPUs.
    """
    if limit is None or not hasattr(params, "cpus_requested"):
        return None
    asked = params.cpus_requested()
    if asked <= limit * ncpu:
        return None
    return (
        f"asks for {asked} CPUs at once but this host has {ncpu} available; max_oversubscription "
        f"{limit:g} allows up to {math.floor(limit * ncpu)}"
    )

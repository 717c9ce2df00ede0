"""Parameters of a configuration point, declared once: type, default, bounds, help, unit.

Every experiment describes one configuration point with a frozen dataclass ``Params``
(subclass of :class:`Declared`) whose fields are annotated ``int``, ``float``, ``str``, ``bool``
or ``Literal[...]``, or ``tuple[X, ...]`` of one of these for a set of values one job uses (the
workload experiment's search space; written ``0,1,2`` on the command line, a list in config).
Each field is declared with :func:`param`: its default for one point, its bounds, its help and
unit, and what its config section holds by default where that differs (the values a swept key
sweeps, one value per dataset). From that one declaration come:

* the range checks of a point (:meth:`Declared.__post_init__`);
* the command line (:mod:`lab.cli`) and the ``--baseline`` overrides;
* the config section's JSON Schema (:func:`lab.schema.section_schema`), which Snakemake's
  ``validate`` checks and which fills in the section's defaults;
* the columns' types read back from CSV (:mod:`analysis.tables`);
* the parameter tables of docs/parameters.md (``python -m lab.schema --docs``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from typing import Any

#: Text forms of booleans accepted on the command line and in CSV files.
TRUE, FALSE = ("1", "true", "yes"), ("0", "false", "no")


def check_choice(name: str, value, allowed) -> None:
    """Raise ``ValueError`` naming ``name``, the bad ``value`` and the ``allowed`` values."""
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {sorted(allowed)}")


def check_min(name: str, value, minimum) -> None:
    """Raise ``ValueError`` if ``value`` is not a finite number ``>= minimum``, naming the
    parameter and the bound."""
    finite = "" if math.isfinite(value) else "a finite number "
    if finite or value < minimum:
        raise ValueError(f"{name}={value!r} is out of range; it must be {finite}>= {minimum}")


#: No config default of its own: the section's default is the point's (:attr:`Param.config`).
SAME = object()


@dataclasses.dataclass(frozen=True)
class Param:
    """What the lab knows about one ``Params`` field beyond its type and its default for a point.

    Attributes:
        help: one line for ``--help``, the schema's description and the docs.
        unit: the value's unit (``s``, ``ms``, ``KiB``, ``samples``); shown beside the help.
        min: the least value allowed (inclusive), or None; for a tuple, of every element.
        above: the value must be greater than this (exclusive), or None.
        max: the greatest value allowed (inclusive), or None.
        config: the config section's default where it differs from the point's: the values a
            swept key sweeps (a list), a mapping by the section's first swept key, or a symbol.
        per_key: the config value may be a mapping from each value of the section's first
            swept key (``items: {tensor: 5000, cpu: 1000}``) as well as one value for all.
        symbols: symbolic config values resolved at parse time (``auto``: the experiment's
            :attr:`lab.declare.Experiment.resolve`), or for a text field the words it accepts.
        element: a JSON Schema fragment for one value where the type cannot say it (a pattern,
            a number written as text); replaces the generated one.
        in_config: False for a field that no config section sets (the global ``sample_hz``, a
            value only a job or a test passes).
        quick: the value of the quick config (config.quick.yaml, generated from these
            declarations by ``python -m lab.schema --quick``) where it differs from the section's
            default; a list for a swept key, a mapping for a ``per_key`` field.
        quick_why: why the quick value is what it is, a comment beside it in config.quick.yaml.
    """

    help: str = ""
    unit: str = ""
    min: float | None = None
    above: float | None = None
    max: float | None = None
    config: Any = SAME
    per_key: bool = False
    symbols: tuple[str, ...] = ()
    element: dict | None = None
    in_config: bool = True
    quick: Any = SAME
    quick_why: str = ""

    def describe(self) -> str:
        """The help text with the unit, e.g. ``sleep per item (s)``."""
        return f"{self.help} ({self.unit})" if self.unit and self.help else self.help or self.unit

    def check(self, name: str, value) -> None:
        """Raise ``ValueError`` naming the field if a number is outside its bounds."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        if self.min is not None:
            check_min(name, value, self.min)
        if self.above is not None and not (math.isfinite(value) and value > self.above):
            finite = "" if math.isfinite(value) else "a finite number "
            raise ValueError(f"{name}={value!r} is out of range; it must be {finite}> {self.above}")
        if self.max is not None and not value <= self.max:
            raise ValueError(f"{name}={value!r} is out of range; it must be <= {self.max}")


def param(default, *, help: str = "", unit: str = "", **declared) -> Any:
    """A ``Params`` field with its declaration (:class:`Param`): ``param(0, min=0, help="...")``.

    Raises:
        TypeError: for a keyword :class:`Param` does not have.
    """
    return dataclasses.field(default=default, metadata={"lab": Param(help=help, unit=unit, **declared)})


def declaration(field: dataclasses.Field) -> Param:
    """A field's :class:`Param` (an empty one for a field declared without :func:`param`)."""
    found = field.metadata.get("lab") if field.metadata else None
    return found if found is not None else Param(help=(field.metadata or {}).get("help", ""))


class Declared:
    """Base of every experiment's frozen ``Params`` dataclass: checks each field against its
    declaration on creation. A subclass with checks across fields calls
    ``super().__post_init__()`` first.

    Raises:
        ValueError: naming the field, for a value outside its bounds or its ``Literal`` choices.
    """

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, decl = getattr(self, f.name), declaration(f)
            _, choices = field_type(type(self), f.name)
            for v in value if isinstance(value, tuple) else (value,):
                if choices is not None:
                    check_choice(f.name, v, choices)
                decl.check(f.name, v)


def _element(tp):
    """``(python type, choices)`` of a scalar annotation."""
    if typing.get_origin(tp) is typing.Literal:
        args = typing.get_args(tp)
        return type(args[0]), args
    return tp, None


@functools.cache
def type_hints(params_cls) -> dict[str, Any]:
    """``typing.get_type_hints(params_cls)``, evaluated once per class (read, never changed): with
    ``from __future__ import annotations`` every call evaluates each annotation's text again, and
    the schemas, written at every Snakemake start, asked 737 times (0.25 s of a 3 s dry run)."""
    return typing.get_type_hints(params_cls)


def is_tuple(params_cls, name: str) -> bool:
    """Whether field ``name`` is a ``tuple[X, ...]`` (a set of values for one job).

    Raises:
        KeyError: if ``params_cls`` has no field ``name``.
    """
    return typing.get_origin(type_hints(params_cls)[name]) is tuple


def field_type(params_cls, name: str) -> tuple[type, tuple | None]:
    """``(python type, choices)`` of field ``name``: ``Literal["a", "b"]`` gives ``(str, ("a", "b"))``,
    other annotations ``(type, None)``; for ``tuple[X, ...]`` those of ``X``.

    Raises:
        KeyError: if ``params_cls`` has no field ``name``.
    """
    tp = type_hints(params_cls)[name]
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
        ValueError: for an item without ``=``, an unknown field, a field given twice or a value
            of the wrong type.
    """
    fields = {f.name for f in dataclasses.fields(params_cls)}
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in fields:
            raise ValueError(f"--baseline {item!r}: expected KEY=VALUE with KEY one of {sorted(fields)}")
        if key in out:
            raise ValueError(f"--baseline {item!r}: {key} is given twice; give each key once")
        try:
            out[key] = parse_value(params_cls, key, text)
        except ValueError as exc:
            raise ValueError(f"--baseline {item!r}: {exc}") from None
    return out


def oversubscription_problem(limit: float | None) -> str | None:
    """Why ``limit`` cannot be a ``--max-oversubscription`` (it is not > 0), or None if it can
    (None itself: no limit)."""
    if limit is None or limit > 0:
        return None
    return f"--max-oversubscription must be > 0 (a factor of the available CPUs), got {limit}"


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


def repeats_field(
    default: int, help: str = "interleaved rounds a point measures at least (95% intervals need 6)", **declared
) -> Any:
    """The ``repeats`` field every ``Params`` has: rounds measured at least (``>= 1``);
    ``declared``: more of its :class:`Param` (``config=``, ``quick=``)."""
    return param(default, min=1, help=help, **declared)


def sample_hz_field() -> Any:
    """The ``sample_hz`` field every ``Params`` has: the CPU sampler's rate, set by the global
    config key ``sample_hz`` (not by a section)."""
    return param(
        10.0, min=0.1, max=1000, unit="samples/s", help="CPU sampler rate in measured windows", in_config=False
    )

"""Each experiment's config section schema and parameter table, generated from its ``Params``.

An experiment declares its parameters once, in its ``Params`` dataclass (:mod:`lab.params`).
This module turns that declaration into:

* the JSON Schema (Draft 2020-12) of its config section (:func:`section_schema`), written
  where the workflow owns files (:func:`write_schemas`) for Snakemake's ``validate``, which
  checks a config and fills in its defaults (:mod:`lab.configcheck`);
* the Markdown table of its parameters in docs/parameters.md (:func:`docs`), kept current by
  ``python -m lab.schema --docs docs/parameters.md`` and checked by a test.

A config section's keys are the fields declared ``in_config``. A swept key (in the
experiment's ``keys``) or a tuple field takes a list (one job per value, or the set one job
searches); a field declared ``per_key`` takes one value or a mapping from each value of the
section's first swept key; declared ``symbols`` (``auto``) are accepted beside the values.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from pathlib import Path

from lab.declare import RegistryError
from lab.fileio import write_text
from lab.params import SAME, Param, declaration, field_type, is_tuple
from lab.results import COMMON_COLUMNS


def _element(params_cls, name: str, decl: Param) -> dict:
    """The JSON Schema of one value of field ``name``."""
    if decl.element is not None:
        return dict(decl.element)
    tp, choices = field_type(params_cls, name)
    if choices is not None:
        return {"enum": list(choices)}
    out = {bool: {"type": "boolean"}, int: {"type": "integer"}, float: {"type": "number"}}.get(tp, {"type": "string"})
    for key, bound in (("minimum", decl.min), ("exclusiveMinimum", decl.above), ("maximum", decl.max)):
        if bound is not None:
            out[key] = bound
    return out


def _jsonable(value):
    return list(value) if isinstance(value, tuple) else value


def field_schema(exp, f: dataclasses.Field) -> dict:
    """The schema of one config key: field ``f`` of experiment ``exp``'s ``Params``."""
    params_cls, decl = exp.params_cls, declaration(f)
    one = _element(params_cls, f.name, decl)
    if f.name in exp.spec.keys or is_tuple(params_cls, f.name):
        shape = {"type": "array", "minItems": 1, "uniqueItems": True, "items": one}
    elif decl.per_key:
        first = exp.spec.keys[0]
        _, choices = field_type(params_cls, first)
        per = {"type": "object", "additionalProperties": one}
        if choices is not None:
            per = {
                "type": "object",
                "additionalProperties": False,
                "properties": dict.fromkeys(choices, one),
                "required": list(choices),
            }
        shape = {"oneOf": [one, per]}
    else:
        shape = one
    if decl.symbols:
        shape = {"oneOf": [*({"const": s} for s in decl.symbols), shape]}
    default = f.default if decl.config is SAME else decl.config
    if f.name in exp.spec.keys and decl.config is SAME:
        default = [default]
    shape["default"] = _jsonable(default)
    if decl.describe():
        shape["description"] = decl.describe()
    return shape


def config_fields(exp) -> list[dataclasses.Field]:
    """The fields of ``exp``'s ``Params`` its config section sets."""
    return [f for f in dataclasses.fields(exp.params_cls) if declaration(f).in_config]


def section_schema(exp) -> dict:
    """The JSON Schema of experiment ``exp``'s config section (a :class:`lab.registry.Registered`)."""
    doc = (typing.cast(str, exp.params_cls.__doc__) or "").strip().splitlines()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "description": f"{exp.name}: {exp.prose['title']} (config section {exp.name}; generated from its Params)",
        "type": "object",
        "additionalProperties": False,
        "properties": {f.name: field_schema(exp, f) for f in config_fields(exp)},
        **({"$comment": doc[0]} if doc else {}),
    }


#: Names a ``Params`` field cannot take: the command line's common options (:func:`lab.cli.build_parser`)
#: and the columns every metrics row carries (:data:`lab.results.COMMON_COLUMNS`).
RESERVED = frozenset(
    {"out", "host", "lock", "max_oversubscription", "baseline", "host_file", "after", "help"}
    | {"rounds_target_ci_pct", "rounds_budget_s", "rounds_max", "rounds_workers", "rounds_probe_ms"}
    | set(COMMON_COLUMNS)
)


def declaration_errors(exp) -> list[str]:
    """What is wrong with experiment ``exp``'s ``Params`` declaration itself, each naming the
    field: a field not declared with :func:`lab.params.param`, a number without bounds, point
    defaults that fail their own checks, a config default its own schema refuses (a swept key's
    values, a mapping by the first key). Empty when the declaration is sound."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    errors = []
    for f in dataclasses.fields(exp.params_cls):
        if "lab" not in (f.metadata or {}):
            errors.append(f"field {f.name!r} is not declared with param(default, min=..., help=...)")
            continue
        decl, (tp, choices) = declaration(f), field_type(exp.params_cls, f.name)
        if f.name in RESERVED:
            errors.append(f"field {f.name!r} is a name the lab uses (a common option or metrics column); rename it")
            continue
        if tp not in (int, float, str, bool):
            allowed = "int, float, str, bool, Literal[...] or a tuple of one"
            errors.append(f"field {f.name!r} is of type {tp}: allowed are {allowed}")
            continue
        if decl.symbols and tp is not str and f.name not in getattr(exp.spec, "resolve", {}):
            words = list(decl.symbols)
            errors.append(f"field {f.name!r} accepts {words} but EXPERIMENT.resolve has no {f.name!r} to resolve them")
        bounded = any(b is not None for b in (decl.min, decl.above, decl.max)) or decl.element is not None
        if tp in (int, float) and choices is None and not bounded:
            errors.append(f"field {f.name!r} ({tp.__name__}) declares no bounds: param(..., min=...) or above=, max=")
    if errors:
        return errors
    try:
        exp.params_cls()
    except (ValueError, TypeError) as exc:
        return [f"the point defaults fail their own declaration: {exc}"]
    validator = Draft202012Validator(section_schema(exp))
    for f in config_fields(exp):
        default = field_schema(exp, f)["default"]
        err = best_match(validator.iter_errors({f.name: default}))
        if err is not None:
            errors.append(f"field {f.name!r}: its config default {default!r} fails its own declaration ({err.message})")
    return errors


def write_schemas(directory: str | Path, experiments) -> dict[str, Path]:
    """Write every experiment's section schema as ``<directory>/<name>.schema.json``; returns
    name -> path. A file whose content is unchanged is not rewritten.

    Raises:
        RegistryError: naming the package's measure.py, for a declaration that is not sound
            (:func:`declaration_errors`): the package's fault, not the config's.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, exp in experiments.items():
        errors = declaration_errors(exp)
        if errors:
            raise RegistryError(f"{exp.path / 'measure.py'}: Params: {errors[0]}")
        path = directory / f"{name}.schema.json"
        text = json.dumps(section_schema(exp), indent=1) + "\n"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            write_text(path, text)
        out[name] = path
    return out


def _allowed(one: dict) -> str:
    """A value's schema in words, for the docs."""
    if "oneOf" in one:
        return " or ".join(_allowed(o) for o in one["oneOf"])
    if "const" in one:
        return f"`{one['const']}`"
    if "enum" in one:
        return ", ".join(f"`{v}`" for v in one["enum"])
    if one.get("type") == "array":
        return f"list of {_allowed(one['items'])}"
    if one.get("type") == "object":
        return "mapping by " + ("/".join(one["properties"]) if "properties" in one else "key")
    words = [one.get("type", "text")]
    for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<=")):
        if key in one:
            words.append(f"{sign} {one[key]:g}")
    if "pattern" in one:
        words.append("matching `" + one["pattern"] + "`")
    return " ".join(words)


def docs(experiments) -> str:
    """docs/parameters.md: one table per experiment, every ``Params`` field as declared: its
    config key (or why it has none), default, allowed values and meaning. The same fields are
    the parameter columns of its ``metrics.csv`` (docs/csv-schema.md)."""
    lines = [
        "# Parameters of the experiments",
        "",
        "Generated from each experiment's `Params` declaration (lab/params.py, lab/schema.py) by",
        "`python -m lab.schema --docs docs/parameters.md`; a test fails when this file is stale.",
        "Each row is a key of the experiment's config section, an `--option` of",
        "`python -m lab.point <experiment>` and a parameter column of its `metrics.csv`, in this",
        "order (docs/csv-schema.md). A swept key (in **bold**) takes a list: one job per value.",
        "A field marked *not in config* keeps its default in a pipeline run (gil's `interpreter`",
        "sweeps the labels of the config's `interpreters`).",
    ]
    for name, exp in experiments.items():
        lines += ["", f"## {name}", "", "| key | default | allowed | meaning |", "|---|---|---|---|"]
        for f in dataclasses.fields(exp.params_cls):
            s = field_schema(exp, f)
            key = f"**{f.name}**" if f.name in exp.spec.keys else f.name
            meaning = s.get("description", "")
            if not declaration(f).in_config:
                where = "the top-level `sample_hz`" if f.name == "sample_hz" else "*not in config*"
                meaning = f"{meaning}; {where}" if meaning else where
            allowed = _allowed({k: v for k, v in s.items() if k not in ("default", "description")})
            cells = (json.dumps(s["default"]), allowed, meaning)
            default, allowed, meaning = (c.replace("|", "\\|") for c in cells)
            lines.append(f"| {key} | `{default}` | {allowed} | {meaning} |")
        lines += _declared_columns(exp)
    return "\n".join(lines) + "\n"


def _declared_columns(exp) -> list[str]:
    """The metrics columns an experiment declares (:class:`lab.declare.Experiment`): its
    throughput metric(s), the columns summarised per point and the flags, with their units."""
    rows = [(m, "metric: throughput, higher is better; speedups compare it", u) for m, u in exp.spec.metrics.items()]
    rows += [(c.name, f"summarised per point (median, 95% CI): {c.label}", c.unit) for c in exp.spec.extra_columns]
    rows += [(f.column, f"flags a point in the report: {f.label} ({f.aggregate})", "") for f in exp.spec.flags]
    out = ["", "Declared columns of its `metrics.csv` (more in docs/csv-schema.md):", ""]
    out += ["| column | what | unit |", "|---|---|---|"]
    return out + [f"| {name} | {what} | {unit or '-'} |" for name, what, unit in rows]


def main(argv: list[str] | None = None) -> int:
    """``python -m lab.schema --docs PATH`` writes the parameter tables; ``--print NAME`` the
    schema of one section."""
    from lab import registry

    p = argparse.ArgumentParser(prog="python -m lab.schema", description=main.__doc__.splitlines()[0])
    p.add_argument("--docs", metavar="PATH", help="write the parameter tables (docs/parameters.md)")
    p.add_argument("--print", metavar="NAME", dest="name", help="print one experiment's section schema")
    args = p.parse_args(argv)
    try:
        found = registry.experiments()
        for exp in found.values():
            errors = declaration_errors(exp)
            if errors:
                raise RegistryError(f"{exp.path / 'measure.py'}: Params: {errors[0]}")
        if args.docs:
            write_text(Path(args.docs), docs(found))
        if args.name:
            print(json.dumps(section_schema(registry.get(args.name)), indent=1))
    except ValueError as exc:  # RegistryError, or an unknown name (with the known ones)
        p.exit(2, f"python -m lab.schema: {exc}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

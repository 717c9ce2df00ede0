"""Each experiment's config section schema, its tables and the quick config, generated from its
declarations.

An experiment declares its parameters once, in its ``Params`` dataclass (:mod:`lab.params`).
This module turns that declaration into:

* the JSON Schema (Draft 2020-12) of its config section (:func:`section_schema`), written
  where the workflow owns files (:func:`write_schemas`) for Snakemake's ``validate``, which
  checks a config and fills in its defaults (:mod:`lab.configcheck`);
* the Markdown tables of its parameters and of its declared columns (``EXPERIMENT.columns``)
  in docs/parameters.md (:func:`docs`), kept current by ``python -m lab.schema --docs
  docs/parameters.md`` and checked by a test;
* the quick config, config.quick.yaml (:func:`quick_config`): each field's declared ``quick``
  value and the ``quick`` annotations of schemas/config.schema.yaml, written by ``python -m
  lab.schema --quick config.quick.yaml`` and checked by a test.

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

from lab.declare import RegistryError, Section
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


def lab_sections() -> dict[str, Section]:
    """The lab's own sections declared with a ``Params``: ``selfcheck`` (:mod:`lab.selfcheck`)."""
    from lab.selfcheck import SECTION

    return {SECTION.name: SECTION}


def declared_in(exp) -> str:
    """The file a declaration error names: a package's measure.py, or a section's source."""
    return str(getattr(exp, "source", None) or exp.path / "measure.py")


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
    | {"rounds_lead_target_ci_pct", "rounds_lead_budget_s"}
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
    for f in dataclasses.fields(exp.params_cls):
        if not declaration(f).in_config and declaration(f).quick is not SAME:
            errors.append(f"field {f.name!r} has a quick value but no config key (in_config=False): drop quick")
    for f in config_fields(exp):
        default = field_schema(exp, f)["default"]
        err = best_match(validator.iter_errors({f.name: default}))
        if err is not None:
            errors.append(f"field {f.name!r}: its config default {default!r} fails its own declaration ({err.message})")
        quick = declaration(f).quick
        if "\n" in declaration(f).quick_why:
            errors.append(f"field {f.name!r}: quick_why must be one line (it is a comment in config.quick.yaml)")
        err = None if quick is SAME else best_match(validator.iter_errors({f.name: quick}))
        if err is not None:
            errors.append(f"field {f.name!r}: its quick value {quick!r} fails its own declaration ({err.message})")
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
            raise RegistryError(f"{declared_in(exp)}: Params: {errors[0]}")
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
    limits = (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="))
    if bounds := [f"{sign} {one[key]:g}" for key, sign in limits if key in one]:
        words.append(" and ".join(bounds))
    if "pattern" in one:
        words.append(f"({one['title']}: `{one['pattern']}`)" if "title" in one else f"matching `{one['pattern']}`")
    return " ".join(words)


def docs(experiments) -> str:
    """docs/parameters.md: two tables per experiment. Every ``Params`` field as declared: its
    config key (or why it has none), default, allowed values and meaning (the same fields are
    the parameter columns of its ``metrics.csv``); then its declared columns (``Col``)."""
    lines = [
        "# Parameters and columns of the experiments",
        "",
        "Generated from each experiment's declarations, its `Params` (lab/params.py) and its",
        "`EXPERIMENT.columns` (lab/declare.py), by `python -m lab.schema --docs docs/parameters.md`;",
        "a test fails when this file is stale. In the first table of each experiment, each row is a",
        "key of its config section, an `--option` of `python -m lab.point <experiment>` and a",
        "parameter column of its `metrics.csv`, in this order (docs/csv-schema.md). A swept key (in",
        "**bold**) takes a list: one job per value; *quick* is its value in config.quick.yaml (generated",
        "by `python -m lab.schema --quick config.quick.yaml`). A field marked *not in config* keeps its default",
        "in a pipeline run (gil's `interpreter` sweeps the labels of the config's `interpreters`).",
        "The second table lists the columns its rows hold besides the parameters and the lab's own",
        "(docs/csv-schema.md, section 2.1): a job whose rows hold any other column fails before it",
        "writes a file.",
    ]
    for name, exp in experiments.items():
        lines += ["", f"## {name}", *_param_table(exp), *_declared_columns(exp)]
    own = lab_sections()["selfcheck"]
    lines += ["", f"## selfcheck (the sampler's self-check, lab/{Path(own.source).name})", *_param_table(own)]
    lines += _column_table(
        "Its own columns of `metrics.csv`, declared in `COLUMNS`:",
        own.columns,
        {},
        lambda n: own.columns[n].unit or "-",
    )
    return "\n".join(lines) + "\n"


def _param_table(exp) -> list[str]:
    """The Markdown table of ``exp``'s ``Params`` fields: key, default (and quick value),
    allowed values, meaning."""
    lines = ["", "| key | default | allowed | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(exp.params_cls):
        s = field_schema(exp, f)
        key = f"**{f.name}**" if f.name in exp.spec.keys else f.name
        meaning = s.get("description", "")
        if not declaration(f).in_config:
            where = "the top-level `sample_hz`" if f.name == "sample_hz" else "*not in config*"
            meaning = f"{meaning}; {where}" if meaning else where
        allowed = _allowed({k: v for k, v in s.items() if k not in ("default", "description")})
        quick = declaration(f).quick
        cells = (json.dumps(s["default"]), allowed, meaning)
        default, allowed, meaning = (c.replace("|", "\\|") for c in cells)
        default = f"`{default}`" + ("" if quick is SAME else f" (quick: `{json.dumps(quick)}`)")
        lines.append(f"| {key} | {default} | {allowed} | {meaning} |")
    return lines


def _column_table(title: str, columns, role: dict, unit) -> list[str]:
    """A Markdown table of declared columns (:class:`lab.declare.Col`): name, type, ``unit(name)``
    and meaning, followed by ``role[name]`` in italics where given."""
    out = ["", title, "", "| column | type | unit | meaning |", "|---|---|---|---|"]
    for name, col in columns.items():
        meaning = f"{col.meaning}. *{role[name]}*" if name in role else col.meaning
        cells = (name, col.type, unit(name), meaning)
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return out


def _declared_columns(exp) -> list[str]:
    """The columns an experiment's rows hold besides its parameters and the lab's own
    (``EXPERIMENT.columns``): type, unit, meaning, and what the lab does with each (the
    metric, the columns summarised per point, the flags)."""
    spec = exp.spec
    role = dict.fromkeys(spec.metrics, "metric (throughput, higher is better; speedups compare it)")
    role |= {c.name: f"summarised per point (median, 95% CI): {c.label}" for c in spec.extra_columns}
    role |= {f.column: f"flags a point in the report: {f.label} ({f.aggregate})" for f in spec.flags}
    title = "Its other columns of `metrics.csv`, declared in `EXPERIMENT.columns`:"
    return _column_table(title, spec.columns, role, spec.column_unit)


#: The top-level config schema, whose ``quick`` annotations give the quick config's values of
#: the keys that belong to no section with a ``Params`` (``sample_hz``, ``rounds``).
#: What the quick run takes on a 2-CPU machine, in minutes (docs/benchmarks.md), for its header.
QUICK_MINUTES = 4  # 167-187 s on an Intel Xeon VM with AMX, 262-325 s on a slower one (2026-12-04)

CONFIG_SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "config.schema.yaml"

QUICK_HEADER = """\
# Reduced settings: the whole pipeline in about {minutes} minutes on a 2-CPU machine.
#   snakemake --cores 4 --configfile config.quick.yaml
# Values here override config.yaml key by key; anything not named keeps its default.
# Generated from the declarations (the `quick` of each Params field and of
# schemas/config.schema.yaml) by `python -m lab.schema --quick config.quick.yaml`: edit those,
# not this file; a test fails when it is stale. To change a value for yourself, pass one more
# --configfile after this one.
"""


def _flow(value) -> str:
    """``value`` as one line of YAML (a list or mapping in flow style, keys in their order)."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6).splitlines()[0]


def _quick_lines(key: str, node: dict, indent: str) -> list[str]:
    """The quick config's lines for one key of the top-level schema (nested for an object)."""
    if "quick" in node:
        why = f"  # {node['quick_why']}" if node.get("quick_why") else ""
        return [f"{indent}{key}: {_flow(node['quick'])}{why}"]
    inner = [ln for k, sub in node.get("properties", {}).items() for ln in _quick_lines(k, sub, indent + "  ")]
    return [f"{indent}{key}:", *inner] if inner else []


def quick_config(experiments, minutes: int) -> str:
    """config.quick.yaml: the quick value of every top-level key that declares one (``quick:``
    in schemas/config.schema.yaml) and of every ``Params`` field (``param(quick=...)``) of the
    lab's own sections (:func:`lab_sections`) and the experiments, by section in report order,
    each with its ``quick_why`` as a comment."""
    from lab.configcheck import read_schema

    top = read_schema(CONFIG_SCHEMA)
    lines = [QUICK_HEADER.format(minutes=minutes).rstrip("\n")]
    for key, node in top["properties"].items():
        found = _quick_lines(key, node, "")
        lines += ["", *found] if found else []
    lines.append("")
    for name, exp in {**lab_sections(), **experiments}.items():
        section = []
        for f in config_fields(exp):
            decl = declaration(f)
            if decl.quick is not SAME:
                why = f"  # {decl.quick_why}" if decl.quick_why else ""
                section.append(f"  {f.name}: {_flow(decl.quick)}{why}")
        if section:
            lines += [f"{name}:", *section]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m lab.schema --docs PATH`` writes the parameter tables; ``--print NAME`` the
    schema of one section."""
    from lab import registry

    p = argparse.ArgumentParser(prog="python -m lab.schema", description=main.__doc__.splitlines()[0])
    p.add_argument("--docs", metavar="PATH", help="write the parameter tables (docs/parameters.md)")
    p.add_argument("--print", metavar="NAME", dest="name", help="print one experiment's section schema")
    p.add_argument("--quick", metavar="PATH", help="write the quick config (config.quick.yaml)")
    args = p.parse_args(argv)
    try:
        found = registry.experiments()
        for exp in [*found.values(), *lab_sections().values()]:
            errors = declaration_errors(exp)
            if errors:
                raise RegistryError(f"{declared_in(exp)}: Params: {errors[0]}")
        if args.docs:
            write_text(Path(args.docs), docs(found))
        if args.quick:
            write_text(Path(args.quick), quick_config(found, QUICK_MINUTES))
        if args.name:
            print(json.dumps(section_schema(registry.get(args.name)), indent=1))
    except ValueError as exc:  # RegistryError, or an unknown name (with the known ones)
        p.exit(2, f"python -m lab.schema: {exc}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

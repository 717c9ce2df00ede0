"""Validate the workflow's configuration with Snakemake's ``validate`` and explain a failure in
one line: the key path, the bad value and what is allowed.

The configuration has two kinds of keys. Those that belong to no experiment (``host``,
``experiments``, ``sample_hz`` ...) are described by ``schemas/config.schema.yaml``; every other
top-level key is an experiment's section, described by the JSON Schema generated from that
experiment's ``Params`` declaration (:mod:`lab.schema`; the Snakefile writes it under
``.snakemake/lab/schemas/``). :func:`validate_config` validates the base and then every section
with ``snakemake.utils.validate`` (which also fills in each schema's defaults), so adding an
experiment adds its schema without an edit elsewhere.

Snakemake's own message prints the whole schema fragment over several lines; users need to know
which key to fix. The one-line explanation comes from the same JSON Schema (``best_match``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml


class ConfigError(ValueError):
    """An invalid configuration: ``str()`` is one line naming key path, value and what is allowed."""


def _allowed(schema: dict, resolve) -> str:
    """What a schema fragment allows, in words (``resolve(ref)`` returns a referenced fragment)."""
    if "$ref" in schema:
        schema = {**resolve(schema["$ref"]), **{k: v for k, v in schema.items() if k != "$ref"}}
    if "oneOf" in schema:
        return " or ".join(_allowed(o, resolve) for o in schema["oneOf"])
    if "enum" in schema:
        return "one of " + ", ".join(dict.fromkeys(map(str, schema["enum"])))  # "0" and 0 read alike
    if "const" in schema:
        return repr(schema["const"])
    kind = schema.get("type")
    parts = [" or ".join(kind) if isinstance(kind, list) else str(kind)] if kind else []
    limits = (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="))
    if bounds := [f"{w} {schema[k]}" for k, w in limits if k in schema]:
        parts.append(" and ".join(bounds))  # "integer >= 1 and <= 8"
    if "minItems" in schema:
        parts.append(f"with at least {schema['minItems']} item{'s' if schema['minItems'] > 1 else ''}")
    if schema.get("uniqueItems"):
        parts.append("without duplicates")
    if isinstance(schema.get("items"), dict):
        parts.append(f"of items: {_allowed(schema['items'], resolve)}")
    if "pattern" in schema:  # its ``title``, where the schema gives one, says it in words
        parts.append(f"({schema['title']})" if "title" in schema else f"matching {schema['pattern']}")
    if "not" in schema and "const" in schema["not"]:
        parts.append(f"except {schema['not']['const']!r}")
    if "not" in schema and "enum" in schema["not"]:
        parts.append("except " + ", ".join(map(repr, schema["not"]["enum"])))
    if "properties" in schema and schema.get("additionalProperties") is False:
        parts.append("with keys " + ", ".join(schema["properties"]))
    return " ".join(parts) or "see the schema"


def read_schema(path: str | Path) -> dict:
    """A schema file, JSON (``.json``: the sections') or YAML (with libyaml where PyYAML has it): read as
    YAML in pure Python, they took 0.4 s of the 0.54 s a validation cost at every Snakemake start
    (AVX2 EPYC VM, 2026-12-06). Raises OSError, ValueError or ``yaml.YAMLError``."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _load_schema(path: Path) -> dict:  # relative $refs resolve against the file, as in Snakemake
    return read_schema(path) | {"$id": path.resolve().as_uri()}


def _validator(schema: dict):
    """A Draft 2020-12 validator that resolves ``$ref`` to other local YAML files, and a
    function that looks a ``$ref`` up relative to ``schema``."""
    from urllib.parse import unquote, urlparse

    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    def retrieve(uri: str):
        target = _load_schema(Path(unquote(urlparse(uri).path)))
        return Resource.from_contents(target)

    registry = Registry(retrieve=retrieve).with_resource(schema["$id"], Resource.from_contents(schema))
    resolver = registry.resolver(base_uri=schema["$id"])
    return Draft202012Validator(schema, registry=registry), lambda ref: resolver.lookup(ref).contents


def explain(config, schema_path: str | Path, prefix: str = "") -> str | None:
    """One line for the most relevant violation of the schema at ``schema_path`` by ``config``,
    or None if it is valid; key paths start with ``prefix`` (an experiment's section name)."""
    from jsonschema.exceptions import best_match

    validator, resolve = _validator(_load_schema(Path(schema_path)))
    err = best_match(validator.iter_errors(config))
    if err is None:
        return None
    path = ".".join([*([prefix] if prefix else []), *(str(p) for p in err.absolute_path)]) or "(top level)"
    sub = err.schema if isinstance(err.schema, dict) else {}
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(sub.get("properties", {})))
        glued = next((str(k) for k in extra if ":" in str(k)), None)  # YAML's key:value without a space
        hint = f" (YAML reads {glued} as one key: write {glued.replace(':', ': ', 1)})" if glued else ""
        return (
            f"config key {path}: unknown key{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))};"
            f" allowed: {', '.join(sub.get('properties', {}))}{hint}"
        )
    value = repr(err.instance) if len(repr(err.instance)) <= 80 else repr(err.instance)[:77] + "..."
    why = {"not": " (a reserved name)", "pattern": ""}.get(err.validator, f" ({err.message})")  # the form: allowed
    line = f"config key {path}: {value} is not allowed{why}; allowed: {_allowed(sub, resolve)}"
    return _text_hint(line, err.instance)


def _walk(node, keys: tuple = ()):
    """``(key path, keys, value)`` of every mapping entry and list item under ``node``: the path
    as text (``rounds.budget_s``) and as the list of keys and indices that lead there."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        sub = (*keys, key)
        yield ".".join(map(str, sub)), list(sub), value
        yield from _walk(value, sub)


def check_values(config: dict, allowed: Callable[[list], str] | None = None) -> None:
    """What JSON Schema cannot see in a YAML configuration: a number that is not finite
    (``.nan``, ``.inf`` pass ``minimum``; every count, time and share here must be finite) and a
    mapping key that is not text (YAML reads ``9654:`` as an integer; labels name paths).

    Args:
        allowed: key path (a list of keys and indices) -> what the schema allows there, in
            words (:func:`_allowed_at`); without it, "a finite number".

    Raises:
        ConfigError: naming the key path and what is allowed.
    """
    for path, keys, value in [("(top level)", [], config), *_walk(config)]:
        if isinstance(value, float) and not math.isfinite(value):
            words = (allowed(keys) if allowed else None) or "number"
            raise ConfigError(
                f"config key {path}: {value} is not allowed (not a finite number); allowed: {words}, finite"
            )
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    raise ConfigError(
                        f"config key {path}: {key!r} is not allowed as a key (YAML read it as a {type(key).__name__});"
                        f" allowed: text, e.g. '{key}' in quotes"
                    )


def _allowed_at(schema_path: Path, keys: list) -> str | None:
    """What the schema at ``schema_path`` allows at the key path ``keys``, in words (None where
    it says nothing there): properties, ``additionalProperties`` and ``items`` are followed,
    ``$ref`` resolved."""
    validator, resolve = _validator(_load_schema(schema_path))
    sub = validator.schema
    for key in keys:
        if "$ref" in sub:
            sub = {**resolve(sub["$ref"]), **sub}
        if isinstance(key, int):
            sub = sub.get("items")
        else:
            extra = sub.get("additionalProperties")
            sub = sub.get("properties", {}).get(key, extra)
        if not isinstance(sub, dict):
            return None
    return _allowed(sub, resolve)


def _allowed_in(schema_path: Path, sections: Mapping[str, str | Path]) -> Callable[[list], str | None]:
    """Key path -> what is allowed there (:func:`_allowed_at`): in a section's own schema where
    the path starts with a section's name, else in the base schema at ``schema_path``."""

    def allowed(keys: list) -> str | None:
        if keys and keys[0] in sections:
            return _allowed_at(Path(sections[keys[0]]), keys[1:])
        return _allowed_at(schema_path, keys)

    return allowed


def _text_hint(message: str, value) -> str:
    """How to pass what the message refuses, where the lab knows: a swept parameter's single
    value (a list is asked for; of numbers, not ``[two]``), ``--config KEY=null`` (the text null),
    and a top-level ``--config`` value read as a number or a boolean (``host=007`` arrives as 7)
    where text is asked for (a nested one is read as YAML before this: :func:`read_text_values`)."""
    if not isinstance(value, (list, dict)) and "is not of type 'array'" in message:
        numbers = isinstance(value, str) and re.search(r"of items: (integer|number)", message)
        return f"{message} (a list{' of numbers, even of one: [2]' if numbers else f', even of one value: [{value}]'})"
    if value == "null" and "(a reserved name)" in message:
        return f"{message} (--config KEY=null arrives as the text null: leave the key out for its default)"
    if isinstance(value, (int, float)) and "is not of type 'string'" in message:
        return (
            f"{message} (--config reads KEY=VALUE as a number or a boolean where it can, quotes or not: for"
            " text such as 007 or True, put it in quotes in a YAML file passed with --configfile)"
        )
    return message


def read_text_values(data: dict, schema_path: Path) -> None:
    """Read, in place, each text value that the schema at ``schema_path`` refuses and whose YAML
    reading is a number, a boolean or a list (``'7'`` -> 7): Snakemake reads a nested
    ``--config`` override as text (YAML's BaseLoader: ``--config 'gil={repeats: 7}'`` gives
    ``'7'``), as YAML does a quoted number. A text the schema accepts (a host label ``007``) or
    that reads as text (``five``) is left as it is, for the schema to judge."""
    validator, _ = _validator(_load_schema(schema_path))

    def errors(errs):  # with those inside oneOf/anyOf branches (a list of counts, or "auto")
        for err in errs:
            yield err
            yield from errors(err.context or ())

    while True:  # a value read is no longer text, so each pass fixes fewer until none is left
        fixes = {}
        for err in errors(validator.iter_errors(data)):
            if isinstance(err.instance, str) and err.absolute_path:
                try:
                    parsed = yaml.safe_load(err.instance)
                except yaml.YAMLError:
                    continue
                if parsed is not None and not isinstance(parsed, str):
                    fixes[tuple(err.absolute_path)] = parsed
        if not fixes:
            return
        for (*parents, last), parsed in fixes.items():
            node = data
            for key in parents:
                node = node[key]
            node[last] = parsed


def _snakemake_validate(data: dict, schema_path: Path, prefix: str = "") -> None:
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    try:
        validate(data, str(schema_path))
    except WorkflowError:
        raise ConfigError(explain(data, schema_path, prefix) or f"config does not match {schema_path}") from None


def whole_numbers(data, schema: dict):
    """Turn floats that JSON Schema accepted as integers (``32.0``: a whole number) into ints, in
    place, where ``schema`` asks for an integer: a job's command line, its path (``workers~2``)
    and its ``Params`` then read ``32``, not ``32.0``. Returns ``data``."""

    def fix(value, sub: dict):
        for branch in sub.get("oneOf", []):
            value = fix(value, branch)
        if sub.get("type") == "integer" and isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, list) and isinstance(sub.get("items"), dict):
            return [fix(v, sub["items"]) for v in value]
        if isinstance(value, dict):
            props, extra = sub.get("properties", {}), sub.get("additionalProperties")
            for k, v in value.items():
                inner = props.get(k, extra if isinstance(extra, dict) else None)
                if inner is not None:
                    value[k] = fix(v, inner)
        return value

    return fix(data, schema)


def _check_labels(entries: list) -> None:
    """Interpreter labels name paths: each must be unique."""
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        label = str(entry["label"])
        if label in seen:
            raise ConfigError(
                f"config key interpreters.{i}.label: {label!r} is not allowed (used twice);"
                " allowed: a label no other interpreter has"
            )
        seen.add(label)


def _check_compare_baseline(compare: dict) -> None:
    """``compare.baseline`` names one of the hosts ``compare.hosts`` and ``compare.dirs`` list,
    where they list any (empty: the hosts are found under results/ when compare runs, which then
    checks it): a misspelt baseline is refused before the run measures anything."""
    baseline, hosts = compare.get("baseline"), list(compare.get("hosts") or [])
    names = hosts + [Path(d).name for d in compare.get("dirs") or []]
    if baseline is not None and hosts and baseline not in names:
        raise ConfigError(
            f"config key compare.baseline: {baseline!r} is not allowed (not one of the compared hosts);"
            f" allowed: one of {', '.join(names)}, or null"
        )


def check_rounds(config: dict, users: list[str]) -> None:
    """The ``rounds`` section against the ``repeats`` of the experiments that measure in
    rounds (``users``: those whose ``run`` takes a rounds policy): every worker process gets at
    least 2 rounds (its spread is what the worker scale factor reads), ``max_rounds`` is at
    least each one's ``repeats``, and a CI target has a time budget.

    Raises:
        ConfigError: naming the key, the value and what is allowed.
    """
    rounds = config.get("rounds") or {}
    target, budget, lead = rounds.get("target_ci_pct", 0), rounds.get("budget_s", 0), rounds.get("lead_budget_s")
    workers, most = rounds.get("workers", 1), rounds.get("max_rounds", 1)
    for key, value in (("budget_s", budget), ("lead_budget_s", budget if lead is None else lead)):
        if target > 0 and value <= 0:
            raise ConfigError(
                f"config key rounds.{key}: {value!r} is not allowed (rounds.target_ci_pct {target} needs time to"
                " reach it); allowed: number > 0, or rounds.target_ci_pct: 0 for exactly `repeats` rounds"
            )
    for name in users:
        if name not in config.get("experiments", []):
            continue
        repeats = (config.get(name) or {}).get("repeats", 1)
        if workers > 1 and repeats // workers < 2:  # the smallest share (lab.rounds.Rounds.for_worker)
            raise ConfigError(
                f"config key rounds.workers: {workers} is not allowed ({name}.repeats {repeats} would give a worker"
                f" process fewer than 2 rounds); allowed: at most {max(1, repeats // 2)}, or raise {name}.repeats"
            )
        if target > 0 and most < repeats:
            raise ConfigError(
                f"config key rounds.max_rounds: {most} is not allowed (less than {name}.repeats {repeats});"
                f" allowed: integer >= {repeats}"
            )


def _check_top_level(config: Mapping, allowed: list[str]) -> None:
    """Every top-level key is one of ``allowed``. Raises ConfigError naming the unknown keys and the allowed ones."""
    unknown = sorted(k for k in config if k not in allowed)
    if unknown:
        raise ConfigError(
            f"config key (top level): unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)};"
            f" allowed: {', '.join(allowed)}"
        )


def validate_config(
    config: dict,
    schema_path: str | Path,
    sections: Mapping[str, str | Path],
    rounds_users: list[str] = (),
    checks: Mapping[str, Callable[[Mapping], None]] | None = None,
    lab_sections: Mapping[str, str | Path] | None = None,
) -> None:
    """Validate ``config`` in place and fill in the schemas' defaults.

    Args:
        rounds_users: experiments that measure in rounds (:func:`check_rounds`).
        checks: experiment name -> its parse-time check of its section (``Experiment.check_config``),
            run for the experiments of this run after their schemas.
        config: the workflow's configuration.
        schema_path: ``schemas/config.schema.yaml``, the keys that belong to no experiment.
        sections: experiment name -> its section's schema; every one is validated (an absent
            section becomes ``{}`` with its defaults), and ``experiments`` defaults to all of them.
        lab_sections: the lab's own sections generated from a ``Params`` (``selfcheck``) -> their
            schemas, validated alike but never experiments.

    Raises:
        ConfigError: ``config key <path>: <value> is not allowed (<why>); allowed: <what>``, or
            ``config key (top level): unknown key <key>; allowed: ...``.
    """
    schema_path = Path(schema_path)
    own = dict(lab_sections or {})
    for part, part_schema in [(config, schema_path), *((config.get(n), p) for n, p in {**own, **sections}.items())]:
        if isinstance(part, dict):  # first: a nested --config '.inf' is then checked as the number it is
            read_text_values(part, Path(part_schema))
    check_values(config, _allowed_in(schema_path, {**own, **sections}))
    base = read_schema(schema_path)["properties"]
    _check_top_level(config, [*base, *own, *sections])
    for name, section_schema in {**own, **sections}.items():
        if name in config and not isinstance(config[name], dict):
            keys = read_schema(section_schema).get("properties", {})
            raise ConfigError(
                f"config key {name}: {config[name]!r} is not allowed (a section is a mapping);"
                f" allowed: object with keys {', '.join(keys)}"
            )
    _snakemake_validate(config, schema_path)
    _check_labels(config.get("interpreters") or [])
    _check_compare_baseline(config.get("compare") or {})
    config.setdefault("experiments", list(sections))
    for i, name in enumerate(config["experiments"]):
        if name not in sections:
            raise ConfigError(
                f"config key experiments.{i}: {name!r} is not allowed (no package experiments/{name}/);"
                f" allowed: one of {', '.join(sections)}"
            )
    for name, section_schema in {**own, **sections}.items():
        _snakemake_validate(config.setdefault(name, {}), Path(section_schema), prefix=name)
        whole_numbers(config[name], _load_schema(Path(section_schema)))
    check_rounds(config, rounds_users)
    for name, check in (checks or {}).items():
        if name in config["experiments"]:
            try:
                check(config[name])
            except ValueError as exc:
                raise ConfigError(str(exc)) from None

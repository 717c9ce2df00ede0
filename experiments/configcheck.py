"""Validate the workflow's configuration with Snakemake's ``validate`` and explain a failure in
one line: the key path, the bad value and what is allowed.

Snakemake's own message prints the whole schema fragment over several lines; users need to know
which key to fix. The schema (``schemas/config.schema.yaml``) stays the single source of truth:
the one-line explanation is derived from the same JSON Schema (jsonschema's ``best_match``).
"""

from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """An invalid configuration: ``str()`` is one line naming key path, value and what is allowed."""


def _allowed(schema: dict) -> str:
    """What a schema fragment allows, in words."""
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    if "const" in schema:
        return repr(schema["const"])
    parts = []
    kind = schema.get("type")
    if kind:
        parts.append(" or ".join(kind) if isinstance(kind, list) else str(kind))
    if "minimum" in schema:
        parts.append(f">= {schema['minimum']}")
    if "exclusiveMinimum" in schema:
        parts.append(f"> {schema['exclusiveMinimum']}")
    if "maximum" in schema:
        parts.append(f"<= {schema['maximum']}")
    if "minItems" in schema:
        parts.append(f"with at least {schema['minItems']} item{'s' if schema['minItems'] > 1 else ''}")
    if schema.get("uniqueItems"):
        parts.append("without duplicates")
    if "items" in schema and isinstance(schema["items"], dict):
        parts.append(f"of items: {_allowed(schema['items'])}")
    if "pattern" in schema:
        parts.append(f"matching {schema['pattern']}")
    if "not" in schema and "const" in schema["not"]:
        parts.append(f"except {schema['not']['const']!r}")
    if "properties" in schema and schema.get("additionalProperties") is False:
        parts.append("with keys " + ", ".join(schema["properties"]))
    if "$ref" in schema:
        parts.append(f"as defined by {schema['$ref']}")
    return " ".join(parts) or "see the schema"


def explain(config: dict, schema: dict) -> str | None:
    """One line for the most relevant violation of ``schema`` by ``config``, or None if valid."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    validator = Draft202012Validator(schema)
    err = best_match(validator.iter_errors(config))
    if err is None:
        return None
    path = ".".join(str(p) for p in err.absolute_path) or "(top level)"
    sub = err.schema if isinstance(err.schema, dict) else {}
    if "$ref" in sub:  # resolve local refs like #/$defs/repeats for the description
        ref = sub["$ref"].lstrip("#/").split("/")
        target = schema
        for part in ref:
            target = target.get(part, {})
        sub = {**target, **{k: v for k, v in sub.items() if k != "$ref"}}
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(sub.get("properties", {})))
        return (
            f"config key {path}: unknown key{'s' if len(extra) > 1 else ''} {', '.join(extra)};"
            f" allowed: {', '.join(sub.get('properties', {}))}"
        )
    value = repr(err.instance)
    if len(value) > 80:
        value = value[:77] + "..."
    return f"config key {path}: {value} is not allowed ({err.message}); allowed: {_allowed(sub)}"


def validate_config(config: dict, schema_path: str | Path) -> None:
    """Validate ``config`` with ``snakemake.utils.validate`` (which also fills in the schema's
    defaults) and turn a failure into a :class:`ConfigError` with one line.

    Raises:
        ConfigError: ``config key <path>: <value> is not allowed (<why>); allowed: <what>``.
    """
    import yaml
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    try:
        validate(config, str(schema_path))
    except WorkflowError:
        schema = yaml.safe_load(Path(schema_path).read_text())
        raise ConfigError(explain(config, schema) or "config does not match the schema") from None

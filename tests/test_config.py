"""config.yaml and config.quick.yaml against the JSON Schema; bad configs are refused."""

from __future__ import annotations

import copy

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from analysis.spec import SPECS


@pytest.fixture
def default_config(root):
    return yaml.safe_load((root / "config.yaml").read_text())


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def test_shipped_configs_are_valid(root, default_config):
    schema = str(root / "schemas" / "config.schema.yaml")
    validate(copy.deepcopy(default_config), schema)
    quick = _merge(default_config, yaml.safe_load((root / "config.quick.yaml").read_text()))
    validate(quick, schema)
    assert set(default_config["experiments"]) == set(SPECS)


def test_schema_defaults_match_config_yaml(root, default_config):
    schema = yaml.safe_load((root / "schemas" / "config.schema.yaml").read_text())
    for section, props in schema["properties"].items():
        if "properties" in props:
            for key, sub in props["properties"].items():
                assert sub.get("default") == default_config[section][key], f"{section}.{key}"
        else:
            assert props.get("default") == default_config[section], section


def test_sweep_keys_match_experiment_params(default_config):
    import importlib

    for name, spec in SPECS.items():
        params = importlib.import_module(f"experiments.{name}").Params
        fields = set(params.__dataclass_fields__)
        assert set(spec.keys) <= fields, name
        assert set(default_config[name]) <= fields, f"config keys of {name} that Params lacks"


@pytest.mark.parametrize(
    "patch, key",
    [
        ({"experiments": ["gil", "nosuch"]}, "nosuch"),
        ({"gil": {"repeats": 0}}, "repeats"),
        ({"gil": {"workers": []}}, "workers"),
        ({"dataloader": {"num_workers": [-1]}}, "num_workers"),
        ({"multiprocessing": {"threads": [0]}}, "threads"),
        ({"dataloader": {"dataset": ["parquet"]}}, "parquet"),
        ({"gil": {"wrokers": [2]}}, "wrokers"),
        ({"jit": {"repeats": "five"}}, "five"),
        ({"host": "bad/host"}, "bad/host"),
        ({"host": "compare"}, "compare"),
        ({"compare": {"hosts": ["compare"]}}, "compare"),
        ({"compare": {"dirs": "results/x"}}, "results/x"),
        ({"compare": {"basline": "x"}}, "basline"),
    ],
)
def test_bad_config_is_refused(root, default_config, patch, key):
    cfg = _merge(default_config, patch)
    with pytest.raises(WorkflowError) as err:
        validate(cfg, str(root / "schemas" / "config.schema.yaml"))
    assert key in str(err.value)

"""config.yaml and config.quick.yaml against the JSON Schemas (the base schema and each
experiment package's section schema); bad configs are refused in one line."""

from __future__ import annotations

import copy
import functools
import tempfile
from pathlib import Path

import pytest
import yaml

from lab import registry
from lab.configcheck import ConfigError, validate_config
from lab.params import param as param_field
from lab.schema import lab_sections, write_schemas


@functools.cache
def tmp_schemas() -> Path:
    """Where this module writes the generated section schemas (once per process)."""
    return Path(tempfile.mkdtemp(prefix="lab-schemas-"))


def _validate(root, cfg: dict) -> dict:
    base = root / "schemas" / "config.schema.yaml"
    validate_config(
        cfg,
        base,
        write_schemas(tmp_schemas(), registry.experiments()),
        registry.rounds_users(),
        registry.config_checks(),
        write_schemas(tmp_schemas(), lab_sections()),
    )
    return cfg


@pytest.fixture
def default_config(root):
    return yaml.safe_load((root / "config.yaml").read_text())


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def test_shipped_configs_are_valid(root, default_config):
    _validate(root, copy.deepcopy(default_config))
    quick = _merge(default_config, yaml.safe_load((root / "config.quick.yaml").read_text()))
    _validate(root, quick)
    # config.yaml runs packages of this checkout, in report order (a package added without a
    # section in config.yaml runs from a config file of its own: its schema's defaults apply)
    names = list(registry.experiments())
    assert default_config["experiments"] == [n for n in names if n in default_config["experiments"]]


def _defaults_match(schema: dict, config: dict, where: str) -> None:
    """Every key config.yaml states holds the declared default (config.yaml names only what a
    user would change; the rest keeps its default)."""
    for key, sub in schema["properties"].items():
        if key not in config:
            continue
        if "properties" in sub and "default" not in sub:
            _defaults_match(sub, config[key], f"{where}{key}.")
        elif "default" in sub:
            assert sub["default"] == config[key], f"{where}{key}"


def test_schema_defaults_match_config_yaml(root, default_config):
    from lab.schema import config_fields

    base = yaml.safe_load((root / "schemas" / "config.schema.yaml").read_text())
    _defaults_match(base, default_config, "")
    for name, path in write_schemas(tmp_schemas(), registry.experiments()).items():
        if name in default_config:  # config.yaml's section states the schema's defaults
            _defaults_match(yaml.safe_load(path.read_text()), default_config[name], f"{name}.")
    # a missing section is filled with its schema's defaults
    cfg = _validate(root, {k: v for k, v in copy.deepcopy(default_config).items() if k != "jit"})
    assert {k: cfg["jit"][k] for k in default_config["jit"]} == default_config["jit"]
    assert set(cfg["jit"]) == {f.name for f in config_fields(registry.get("jit"))}


def test_sweep_keys_match_experiment_params(default_config):
    for name, exp in registry.experiments().items():
        fields = set(exp.params_cls.__dataclass_fields__)
        assert set(exp.spec.keys) <= fields, name
        assert set(default_config.get(name, {})) <= fields, f"config keys of {name} that Params lacks"


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
        # a label that sanitising would change would share results/x/ with host x: refused instead
        ({"host": "-x"}, "-x"),
        ({"host": "x."}, "x."),
        ({"host": "x" * 65}, "x" * 65),  # longer than a file name should be
        ({"cluster": {"hosts": {"x-": {"cpus": 2}}}}, "x-"),
        ({"compare": {"hosts": ["compare"]}}, "compare"),
        ({"compare": {"dirs": "results/x"}}, "results/x"),
        ({"compare": {"basline": "x"}}, "basline"),
    ],
)
def test_bad_config_is_refused(root, default_config, patch, key):
    with pytest.raises(ConfigError) as err:
        _validate(root, _merge(default_config, patch))
    assert key in str(err.value)


@pytest.mark.parametrize(
    "patch, line",
    [
        ({"experiments": ["gil", "nosuch"]}, "config key experiments.1: 'nosuch' is not allowed"),
        (
            {"gil": {"repeats": 0}},
            "config key gil.repeats: 0 is not allowed (0 is less than the minimum of 1); allowed: integer >= 1",
        ),
        ({"gil": {"workers": []}}, "config key gil.workers: [] is not allowed"),
        ({"dataloader": {"num_workers": [-1]}}, "config key dataloader.num_workers.0: -1 is not allowed"),
        ({"multiprocessing": {"threads": [0]}}, "config key multiprocessing.threads.0: 0 is not allowed"),
        ({"dataloader": {"dataset": ["parquet"]}}, "allowed: one of tensor, cpu, io"),
        ({"gil": {"wrokers": [2]}}, "config key gil: unknown key wrokers; allowed: workload, mode, workers"),
        ({"jit": {"repeats": "five"}}, "config key jit.repeats: 'five' is not allowed ('five' is not of type"),
        ({"host": "compare"}, "config key host: 'compare' is not allowed (a reserved name); allowed: string or null"),
        ({"host": "null"}, "'null' is not allowed (a reserved name); allowed: string or null (a label of 1 to 64"),
        (
            {"dataloader": {"num_workers": 2}},
            "items: integer >= 0 (a list, even of one value: [2])",
        ),
        # a word where a list of numbers is asked for: no hint of [two], which is refused too
        ({"gil": {"workers": "two"}}, "of items: integer >= 1 (a list of numbers, even of one: [2])"),
        ({"rounds": {"workers": 20}}, "allowed: integer >= 1 and <= 8"),
        (
            {"compare": {"hosts": ["a", "b"], "dirs": ["/x/c"], "baseline": "B"}},
            "config key compare.baseline: 'B' is not allowed (not one of the compared hosts); allowed: one of a, b, c,",
        ),
        ({"host": "null"}, "except 'compare', 'null' (--config KEY=null arrives as the text null: leave the key out"),
        ({"intraop": {"bf16": "maybe"}}, "config key intraop.bf16: 'maybe' is not allowed"),
        ({"max_oversubscription": 0.5}, "config key max_oversubscription: 0.5 is not allowed"),
        ({"gill": {"repeats": 2}}, "config key (top level): unknown key gill; allowed: host, experiments,"),
        ({"gil": 5}, "config key gil: 5 is not allowed (a section is a mapping); allowed: object with keys workload,"),
        (
            {"experiments": ["gil", "nosuch"]},
            "(no package experiments/nosuch/); allowed: one of " + ", ".join(registry.experiments()),
        ),
        (
            {"rounds": {"max_rounds": 3}},
            "config key rounds.max_rounds: 3 is not allowed (less than gil.repeats 6); allowed: integer >= 6",
        ),
        (
            {"rounds": {"workers": 3}, "gil": {"repeats": 6}, "jit": {"repeats": 3}},
            "config key rounds.workers: 3 is not allowed (jit.repeats 3 would give a worker process fewer than 2",
        ),
        (
            {"workload": {"repeats": 3}},
            "config key workload.repeats: 3 is not allowed (workload.verify_processes 2 would give a worker process"
            " fewer than 2 verification rounds); allowed: integer >= 4, or fewer verify_processes",
        ),
        (  # 5 rounds over 3 workers are 2, 2 and 1
            {"rounds": {"workers": 3}, "gil": {"repeats": 5}},
            "rounds.workers: 3 is not allowed (gil.repeats 5 would give a worker process fewer than 2 rounds);"
            " allowed: at most 2",
        ),
        ({"rounds": {"budget_s": 0}}, "config key rounds.budget_s: 0 is not allowed (rounds.target_ci_pct 5 needs"),
        (
            {"rounds": {"lead_budget_s": 0}},
            "config key rounds.lead_budget_s: 0 is not allowed (rounds.target_ci_pct 5 needs time to reach it)",
        ),
        ({"rounds": {"lead_target_ci_pct": "tight"}}, "config key rounds.lead_target_ci_pct: 'tight' is not"),
        ({"cluster": {"hosts": {"big": {"partition": "amd"}}}}, "config key cluster.hosts.big: "),
        ({"cluster": {"hosts": {"compare": {"cpus": 2}}}}, "config key cluster.hosts"),
        ({"cluster": {"hosts": {"big": {"cpus": 0}}}}, "config key cluster.hosts.big.cpus: 0 is not allowed"),
        (
            {"rounds": {"budget_s": float("inf")}},
            "config key rounds.budget_s: inf is not allowed (not a finite number); allowed: number >= 0, finite",
        ),
        (
            {"rounds": {"target_ci_pct": float("nan")}},
            "config key rounds.target_ci_pct: nan is not allowed (not a finite",
        ),
        (
            {"multiprocessing": {"max_window_s": float("inf")}},
            "config key multiprocessing.max_window_s: inf is not allowed (not a finite number); allowed: number >= 0,",
        ),
        (
            {"cluster": {"hosts": {9654: {"cpus": 2}}}},
            "config key cluster.hosts: 9654 is not allowed as a key (YAML read it as a int); allowed: text",
        ),
        (  # text that reads as text stays text, and says how numbers are written
            {"gil": {"repeats": "seven"}},
            "'seven' is not of type 'integer'); allowed: integer >= 1",
        ),
        (
            {"workload": {"entry": "examples.textcls.bench:buidl"}},
            "config key workload.entry: 'examples.textcls.bench:buidl': examples.textcls.bench (",
        ),
        ({"workload": {"entry": "examples.textcls.bench:buidl"}}, "bench.py) defines no buidl (did you mean build?)"),
        (
            {"workload": {"entry": "examples.textcls.bnech:build"}},
            "'examples.textcls.bnech:build': cannot find module examples.textcls.bnech in ",
        ),
        ({"workload": {"entry": "examples.textcls.bnech:build"}}, "on the Python path (did you mean bench?)"),
        ({"workload": {"entry": "examples.textcls.bench"}}, "allowed: string (empty, or package.module:function)"),
        ({"host": "my laptop"}, "allowed: string or null (a label of 1 to 64 ASCII letters, digits and _, with ."),
        ({"host": "my laptop"}, "config key host: 'my laptop' is not allowed; allowed:"),
        (
            {"host": "café"},
            "host: 'café' is not allowed; allowed: string or null (a label of 1 to 64 ASCII",
        ),
        ({"rounds": {"budget_s:fast": None}}, "unknown key budget_s:fast; allowed: target_ci_pct, budget_s,"),
        ({"rounds": {"budget_s:fast": None}}, "(YAML reads budget_s:fast as one key: write budget_s: fast)"),
        ({"host": 7}, "(--config reads KEY=VALUE as a number or a boolean where it can, quotes or not: for text"),
        ({"experiments": ["Gil"]}, "allowed: string (a package name: lower-case ASCII letters, digits and _)"),
    ],
)
def test_bad_config_is_explained_in_one_line(root, default_config, patch, line):
    with pytest.raises(ConfigError) as err:
        _validate(root, _merge(default_config, patch))
    msg = str(err.value)
    assert "\n" not in msg and line in msg


def test_bad_config_stops_snakemake_before_any_job(root, tmp_path):
    import shutil
    import subprocess
    import sys

    from conftest import IGNORE

    work = tmp_path / "repo"
    shutil.copytree(root, work, ignore=IGNORE)
    bad = {
        "dataloader:\n  num_workers: [0, -2]\n": "config key dataloader.num_workers.1: -2 is not allowed "
        "(-2 is less than the minimum of 0); allowed: integer >= 0",
        # a typo in the entry point: found before host_info, without importing the user's code
        "workload:\n  entry: 'examples.textcls.bench:buidl'\n": "config key workload.entry: "
        f"'examples.textcls.bench:buidl': examples.textcls.bench ({work}/examples/textcls/bench.py) defines no"
        " buidl (did you mean build?)",
        # the schema refuses "compare"; in another case it is the same directory where case does not count
        "host: Compare\n": "host label 'Compare' would be results/compare/, the comparison's directory, where case"
        " does not count: set another with --config host=NAME",
    }
    for text, line in bad.items():
        (work / "bad.yaml").write_text(text)
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", "bad.yaml"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode != 0
        reason = [line for line in proc.stderr.splitlines() if line.startswith("Invalid configuration:")]
        assert reason == [f"Invalid configuration: {line}"]
        assert not (work / "results").exists() and not (work / "logs").exists()


@pytest.mark.parametrize(
    "ncpu, ladder",
    [
        (1, [1]),
        (2, [1, 2]),
        (3, [1, 2, 3]),
        (8, [1, 2, 4, 8]),
        (12, [1, 2, 4, 8, 12]),
        (192, [*(2**i for i in range(8)), 192]),
    ],
)
def test_auto_sweeps_double_up_to_the_available_cpus(ncpu, ladder):
    from experiments.intraop import resolve_threads as intraop_threads
    from experiments.workload import resolve_threads as workload_threads
    from lab.declare import thread_ladder

    assert thread_ladder(ncpu) == ladder
    assert intraop_threads("auto", ncpu) == [*ladder, 2 * ncpu] and workload_threads("auto", ncpu) == ladder
    assert intraop_threads([3, 5], ncpu) == [3, 5]


def test_a_point_command_line_says_which_values_only_the_config_takes():
    """``python -m lab.point intraop --help`` offered ``auto`` for --threads, which only the config
    resolves (into a sweep); a point's command line takes one number. --out, required, shows no
    default."""
    import argparse

    from lab.cli import build_parser

    parser = build_parser(registry.get("intraop").params_cls, "intraop")
    help_of = {a.dest: a.help for a in parser._actions}
    assert "(a value here; auto: in the config file only)" in help_of["threads"]
    assert "config file only" not in help_of["workload"]
    assert "(default: None)" not in parser.format_help().split("\n  --out OUT", 1)[1].split("--host", 1)[0]
    assert parser._option_string_actions["--out"].default is argparse.SUPPRESS
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", "x", "--threads", "auto"])


def test_a_thread_ladder_needs_a_cpu():
    from lab.declare import thread_ladder

    with pytest.raises(ValueError, match="available CPUs must be at least 1, got 0"):
        thread_ladder(0)


def test_max_rounds_equal_to_repeats_passes_the_check_and_the_job(root, default_config):
    """The config check allows max_rounds == repeats; the job's command line must too."""
    import argparse

    from experiments.gil.measure import Params
    from lab.cli import rounds_policy

    _validate(root, _merge(default_config, {"rounds": {"max_rounds": 6}, "gil": {"repeats": 6}}))
    args = argparse.Namespace(rounds_target_ci_pct=5.0, rounds_budget_s=10.0, rounds_max=6, rounds_workers=2)
    assert rounds_policy(args, "gil", Params(repeats=6), argparse.ArgumentParser()).max_rounds == 6


def test_the_quick_runs_duration_is_stated_alike_everywhere(root):
    """config.quick.yaml's header, the Snakefile's header and the README state one duration for
    the quick run (a new user read 5 minutes in one and 10 in the other); docs/benchmarks.md
    gives the measured runs behind it."""
    import re

    said = {
        "config.quick.yaml": (root / "config.quick.yaml").read_text().splitlines()[0],
        "Snakefile": next(ln for ln in (root / "Snakefile").read_text().splitlines() if "config.quick.yaml" in ln),
        "README.md": next(ln for ln in (root / "README.md").read_text().splitlines() if ln.startswith("A small run")),
    }
    minutes = {name: re.findall(r"about (\d+(?:\.\d+)?) minutes", line) for name, line in said.items()}
    assert all(len(m) == 1 for m in minutes.values()), said
    assert len({m[0] for m in minutes.values()}) == 1, minutes


def test_parameter_docs_are_generated_from_the_declarations(root):
    """docs/parameters.md is what ``python -m lab.schema --docs`` writes from the Params."""
    from lab.schema import docs

    stale = "docs/parameters.md is stale: python -m lab.schema --docs docs/parameters.md"
    assert (root / "docs" / "parameters.md").read_text() == docs(registry.experiments()), stale


def _below(decl, value):
    """A value just outside a declared lower bound (None where there is none)."""
    if decl.min is not None:
        return decl.min - 1 if isinstance(value, int) else decl.min - 0.5
    if decl.above is not None:
        return decl.above
    return None


def test_each_declared_bound_reaches_params_schema_and_command_line(tmp_path):
    """One declaration, three readers: a value below a field's declared bound is refused by
    ``Params``, by the generated section schema and by the command line, each naming the field;
    the declared default passes all three."""
    import subprocess
    import sys

    from jsonschema import Draft202012Validator

    from lab.params import declaration
    from lab.schema import config_fields, section_schema

    checked = 0
    for name, exp in registry.experiments().items():
        schema = section_schema(exp)
        validator = Draft202012Validator(schema)
        assert list(validator.iter_errors({})) == [], name  # every key has a default
        for f in config_fields(exp):
            decl, default = declaration(f), f.default
            bad = _below(decl, default[0] if isinstance(default, tuple) else default)
            if bad is None or isinstance(default, bool) or decl.element is not None:
                continue
            value = (bad,) if isinstance(default, tuple) else bad
            with pytest.raises(ValueError, match=f"{f.name}="):
                exp.params_cls(**{f.name: value})
            as_config = [bad] if isinstance(default, tuple) or f.name in exp.spec.keys else bad
            assert list(validator.iter_errors({f.name: as_config})), f"{name}.{f.name}={bad} passes the schema"
            checked += 1
    assert checked >= 2 * len(registry.experiments())
    # the command line, once: the option is generated from the same field
    exp = next(iter(registry.experiments().values()))
    f = next(f for f in config_fields(exp) if _below(declaration(f), 1) is not None and f.type in ("int", int))
    option = "--" + f.name.replace("_", "-")
    proc = subprocess.run(
        [sys.executable, "-m", "lab.point", exp.name, option, str(_below(declaration(f), 1)), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and f"{f.name}=" in proc.stderr, proc.stderr


def _declared(**fields):
    """An experiment-like object (what lab.schema reads) whose Params has ``fields``, each
    ``name=(type, field)``, plus repeats and sample_hz; swept key: the first field."""
    from dataclasses import make_dataclass
    from types import SimpleNamespace

    from lab.params import Declared, repeats_field, sample_hz_field

    cls = make_dataclass(
        "Params",
        [(n, t, f) for n, (t, f) in fields.items()]
        + [("repeats", int, repeats_field(6)), ("sample_hz", float, sample_hz_field())],
        bases=(Declared,),
        frozen=True,
    )
    spec = SimpleNamespace(keys=(next(iter(fields)),))
    return SimpleNamespace(name="x", params_cls=cls, spec=spec, prose={"title": "x"}, path=Path("experiments/x"))


@pytest.mark.parametrize(
    "fields, said",
    [
        (
            {"n": (int, param_field(1, min=1, config=[1])), "k": (int, param_field(2))},
            "field 'k' (int) declares no bounds",
        ),
        ({"n": (int, param_field(0, min=1, config=[1]))}, "the point defaults fail their own declaration: n=0"),
        (
            {"n": (int, param_field(1, min=1, config=[1])), "k": (int, param_field(2, min=1, config=[1, 2]))},
            "field 'k': its config default [1, 2] fails its own declaration",
        ),
        ({"n": (int, param_field(1, min=1, config=[0, 1]))}, "field 'n': its config default [0, 1] fails"),
        ({"n": (int, param_field(1, min=1, config=[1], quick=[0]))}, "field 'n': its quick value [0] fails"),
    ],
)
def test_a_declaration_at_fault_is_blamed_on_the_package_not_the_config(tmp_path, fields, said):
    """A Params declaration that contradicts itself stops the run naming measure.py, before
    the config is read against it."""
    from lab.declare import RegistryError
    from lab.schema import declaration_errors

    exp = _declared(**fields)
    assert said in declaration_errors(exp)[0]
    with pytest.raises(RegistryError, match=r"experiments/x/measure.py: Params: "):
        write_schemas(tmp_path, {"x": exp})


def test_whole_number_floats_become_ints_for_integer_keys(root, default_config):
    """JSON Schema counts 32.0 as an integer; the job's command line and path must read 32."""
    cfg = copy.deepcopy(default_config)
    cfg["dataloader"] = {
        **cfg["dataloader"],
        "batch_size": 32.0,
        "num_workers": [0, 1.0],
        "items": {"tensor": 5e3, "cpu": 1000, "io": 500},
    }
    _validate(root, cfg)
    d = cfg["dataloader"]
    assert (d["batch_size"], d["num_workers"], d["items"]["tensor"]) == (32, [0, 1], 5000)
    assert all(type(v) is int for v in (d["batch_size"], *d["num_workers"], d["items"]["tensor"]))
    assert type(d["io_latency_s"]) is float  # a number key keeps its float


def test_a_nested_override_given_as_text_is_read_as_yaml_where_the_schema_asks(root, default_config):
    """Snakemake reads ``--config 'gil={repeats: 7, workers: [2, 4]}'`` as text ('7', ['2', '4']):
    where the schema refuses the text and its YAML reading is a number, a boolean or a list, the
    reading is taken; text the schema accepts (a host label) or that reads as text is left."""
    cfg = _merge(default_config, {"gil": {"repeats": "7", "workers": ["2", "4"]}, "intraop": {"threads": ["1", "2"]}})
    cfg = _merge(cfg, {"rounds": {"workers": "3", "budget_s": "4.5"}, "host": "007", "intraop": {"bf16": "any"}})
    _validate(root, cfg)
    assert (cfg["gil"]["repeats"], cfg["gil"]["workers"], cfg["intraop"]["threads"]) == (7, [2, 4], [1, 2])
    assert (cfg["rounds"]["workers"], cfg["rounds"]["budget_s"]) == (3, 4.5)
    assert (cfg["host"], cfg["intraop"]["bf16"]) == ("007", "any")
    auto = _merge(default_config, {"intraop": {"threads": "auto"}})
    _validate(root, auto)
    assert auto["intraop"]["threads"] == "auto"
    with pytest.raises(ConfigError, match=r"config key rounds.workers: 0 is not allowed \(0 is less than the minimum"):
        _validate(root, _merge(default_config, {"rounds": {"workers": "0"}}))  # read, then judged by its range
    for key, text in (("rounds", {"budget_s": ".inf"}), ("multiprocessing", {"max_window_s": ".nan"})):
        with pytest.raises(ConfigError, match="is not allowed \\(not a finite number\\)"):  # read, then checked
            _validate(root, _merge(default_config, {key: text}))


def test_a_field_name_the_lab_uses_or_an_odd_type_is_refused():
    from lab.schema import declaration_errors

    said = declaration_errors(_declared(n=(int, param_field(1, min=1, config=[1])), role=(str, param_field("a"))))
    assert said == ["field 'role' is a name the lab uses (a common option or metrics column); rename it"]
    said = declaration_errors(_declared(n=(int, param_field(1, min=1, config=[1])), k=(int | None, param_field(None))))
    assert said[0].startswith("field 'k' is of type")


def test_every_column_an_experiment_writes_is_declared_once_with_its_type():
    """``EXPERIMENT.columns`` must name the metrics, summarised columns and flags, each of a
    type the CSV loader knows; a unit given twice must agree. The loader types a declared column
    as declared (text stays text even where its cells look like numbers)."""
    from analysis.tables import experiment_types
    from lab.declare import Col, Column, Experiment, Flag

    base = dict(name="x", keys=("n",), metrics={"mb_per_s": "MB/s"}, group=(), baseline={"n": 1})
    cols = {"mb_per_s": Col("float", "throughput"), "note": Col("str", "what it saw", "-")}
    exp = Experiment(**base, flags=(Flag("note", "noted"),), columns=cols)
    assert exp.column_unit("mb_per_s") == "MB/s" and exp.column_unit("note") == "-"
    with pytest.raises(ValueError, match=r"columns lacks mb_per_s \(metrics\), note \(flags\)"):
        Experiment(**base, flags=(Flag("note", "noted"),))
    with pytest.raises(ValueError, match="column 'lag_ms' has unit 's' but is declared 'ms'"):
        Experiment(
            **base, extra_columns=(Column("lag_ms", "lag", "ms"),), columns=cols | {"lag_ms": Col("float", "lag", "s")}
        )
    with pytest.raises(ValueError, match=r"column 'note' has type 'text'; allowed: \('float', 'int', 'bool', 'str'\)"):
        Experiment(**base, columns=cols | {"note": Col("text", "x")})
    # each as its role needs: a number for a metric, text for a text flag, a meaning, a Col
    for bad, said in [
        (
            {"mb_per_s": Col("str", "x")},
            r"'mb_per_s' has type 'str'; allowed: \('float', 'int'\) \(it is one of metrics\)",
        ),
        ({"note": Col("bool", "x", "-")}, r"'note' has type 'bool'; allowed: \('str',\) \(it is one of flags\)"),
        ({"note": Col("str", " ")}, "column 'note' needs a meaning"),
        ({"note": "str"}, r"column 'note' must be Col\(type, meaning, unit\), got 'str'"),
    ]:
        with pytest.raises(ValueError, match=said):
            Experiment(**base, flags=(Flag("note", "noted"),), columns=cols | bad)
    # a real experiment: its declared text column stays text, a declared int an integer
    types = experiment_types("dataloader")
    assert types["omp_num_threads_env"] == "str" and types["torch_threads"] == "int"
    assert types["worker_warning"] == "str" and types["data_stall_pct_ci_low"] == "float"
    for name, exp in registry.experiments().items():
        assert set(exp.spec.metrics) <= set(exp.spec.columns), name


def test_the_quick_config_is_generated_from_the_declarations(root):
    """config.quick.yaml is what ``python -m lab.schema --quick`` writes from the quick values
    declared in each Params (``param(quick=...)``) and in schemas/config.schema.yaml; each value
    passes its section's schema, and the file holds overrides only (no value equals its default)."""
    from lab.schema import QUICK_MINUTES, quick_config, section_schema

    text = (root / "config.quick.yaml").read_text()
    assert text == quick_config(registry.experiments(), QUICK_MINUTES), (
        "config.quick.yaml is stale: python -m lab.schema --quick config.quick.yaml"
    )
    quick = yaml.safe_load(text)
    defaults = yaml.safe_load((root / "config.yaml").read_text())
    for name, exp in registry.experiments().items():
        declared = section_schema(exp)["properties"]
        for key, value in quick.get(name, {}).items():
            assert value != defaults.get(name, {}).get(key, declared[key]["default"]), (name, key)
    assert quick["rounds"]["budget_s"] < defaults.get("rounds", {}).get("budget_s", 6)


def test_the_selfcheck_section_is_generated_from_its_params(root, default_config):
    """The self-check is no experiment, but its parameters are declared once too: its section's
    schema comes from lab.selfcheck.Params, which fills in the defaults and refuses a value
    below its declared bound, naming the key; it never joins the experiments."""
    from lab.selfcheck import Params

    cfg = _validate(root, copy.deepcopy(default_config))
    assert cfg["selfcheck"] == {"duration_s": Params().duration_s, "repeats": Params().repeats}
    assert "selfcheck" not in cfg["experiments"]
    with pytest.raises(ConfigError, match=r"config key selfcheck.duration_s: 0.1 is not allowed.*number >= 0.2"):
        _validate(root, _merge(default_config, {"selfcheck": {"duration_s": 0.1}}))
    with pytest.raises(ConfigError, match=r"config key selfcheck: unknown key load; allowed: duration_s, repeats"):
        _validate(root, _merge(default_config, {"selfcheck": {"load": "idle"}}))  # the job measures both


def test_a_column_named_like_a_parameter_or_a_lab_column_is_refused(root):
    """A declared column may not take the name of a Params field or of a column the lab writes:
    the loader would type it as declared and a baseline point would no longer match its group."""
    import dataclasses as dc

    from lab.declare import Col, RegistryError
    from lab.registry import Registered, _check_params

    real = registry.get("multiprocessing")

    class Clashing(Registered):
        def measurement(self):
            return real.measurement()

    for name in ("processes", "wall_s", "delivered_cpus"):
        spec = dc.replace(real.spec, columns={**real.spec.columns, name: Col("float", "x", "-")})
        with pytest.raises(RegistryError, match=rf"__init__.py: columns {name} already are a parameter"):
            _check_params(Clashing(spec, real.path))
    _check_params(Clashing(real.spec, real.path))


def test_a_quick_value_without_a_config_key_or_a_multiline_why_is_refused():
    from lab.schema import declaration_errors

    said = declaration_errors(
        _declared(n=(int, param_field(1, min=1, config=[1])), k=(int, param_field(2, min=1, in_config=False, quick=1)))
    )
    assert said == ["field 'k' has a quick value but no config key (in_config=False): drop quick"]
    said = declaration_errors(_declared(n=(int, param_field(1, min=1, config=[1], quick=[2], quick_why="a\nb: 1"))))
    assert said == ["field 'n': quick_why must be one line (it is a comment in config.quick.yaml)"]

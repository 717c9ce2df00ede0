"""The house rules of docs/architecture.md, checked on the code itself.

* The core (``analysis/``, ``report/``, ``common.smk``, the Snakefile and the rule files) names no
  experiment and imports none: it loops over the registry.
* An experiment's measurement module imports no analysis, report, pandas, matplotlib or jinja2.
* One atomic writer (``lab/fileio.py``) writes every file.
* No function is over 60 lines and no module over 400 (tests excluded).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lab import registry

ROOT = Path(__file__).resolve().parent.parent
NAMES = list(registry.experiments())
#: The files of the core: everything outside the experiment packages but the harness.
CORE = sorted([*(ROOT / "lab").rglob("*"), *(ROOT / "analysis").rglob("*"), *(ROOT / "report").rglob("*")]) + [
    ROOT / "common.smk",
    ROOT / "Snakefile",
]
SOURCES = [
    p
    for p in ROOT.rglob("*.py")
    if not ({".venv", "tests", "__pycache__", "results", ".snakemake"} & set(p.relative_to(ROOT).parts))
]


def test_experiments_holds_only_experiment_packages():
    """``experiments/`` is the plugins' folder: its packages and its own ``__init__.py``, nothing
    of the shared core (which is ``lab/``)."""
    stray = [
        p.name
        for p in (ROOT / "experiments").iterdir()
        if p.name not in {"__init__.py", "__pycache__"} and not (p.is_dir() and (p / "__init__.py").exists())
    ]
    assert stray == []


def _core_files() -> list[Path]:
    return [
        p
        for p in CORE
        if p.is_file() and p.suffix in {".py", ".smk", ".j2", ".yaml", ""} and "__pycache__" not in p.parts
    ]


def test_the_core_names_no_experiment():
    """The issue's own check: grep -rnE "[\"'](gil|multiprocessing|...)[\"']" prints nothing."""
    quoted = re.compile(r"[\"'](" + "|".join(map(re.escape, NAMES)) + r")[\"']")
    hits = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in _core_files()
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1)
        if quoted.search(line)
    ]
    assert hits == []


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_the_core_imports_no_experiment():
    python = [p for p in _core_files() if p.suffix == ".py"]
    specific = {f"experiments.{n}" for n in NAMES}
    bad = {
        str(p.relative_to(ROOT)): sorted(m for m in _imports(p) if m in specific or m.rsplit(".", 1)[0] in specific)
        for p in python
    }
    assert {p: m for p, m in bad.items() if m} == {}
    # the workflow files reach experiments through the registry only
    for smk in (ROOT / "Snakefile", ROOT / "common.smk"):
        text = smk.read_text()
        assert not re.search(r"from experiments\.(" + "|".join(NAMES) + r")\b", text), smk


@pytest.mark.parametrize("name", NAMES)
def test_measurement_modules_import_no_analysis_report_pandas_or_matplotlib(name):
    forbidden = ("analysis", "report", "pandas", "matplotlib", "jinja2")
    static = {m for m in _imports(ROOT / "experiments" / name / "measure.py") if m.split(".")[0] in forbidden}
    assert static == set()
    # and nothing it imports pulls them in
    code = f"import sys, experiments.{name}.measure; print(sorted({{m.split('.')[0] for m in sys.modules}}))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert not set(forbidden) & set(ast.literal_eval(loaded.stdout)), loaded.stdout


def test_every_package_is_complete_and_consistent():
    from lab.contract import Analysis

    for name, exp in registry.experiments().items():
        hooks = exp.hooks()
        assert isinstance(hooks, Analysis) and callable(hooks.findings), name
        assert set(hooks.figures) == set(exp.spec.figures), name
        assert set(hooks.artefacts) == set(exp.spec.artefacts), name
        if exp.spec.timeline:
            assert callable(hooks.timeline_points), name
        # at most 4 files of its own are required; the rest is generated from Params
        assert set(registry.PACKAGE_FILES) == {"__init__.py", "measure.py", "analysis.py", "report.yaml"}


def test_one_atomic_writer():
    """Only lab/fileio.py renames temporary files or opens files for writing (``os.fdopen``
    wraps a descriptor already open, such as a pipe to the sampler, and creates no file)."""
    writers = re.compile(
        r"os\.replace|\.rename\(|\.to_csv\(|\.savefig\(|\.write_text\(|(?<!fd)open\([^)]*[\"'][wa]b?[\"']"
    )
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in SOURCES
        if p.name != "fileio.py"
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1)
        # the measurement lock is opened for appending to flock it, never written
        if writers.search(line) and "open(lock_path" not in line
    ]
    assert hits == []


def test_no_function_over_60_lines_and_no_module_over_400():
    long_functions, long_modules = [], []
    for p in SOURCES:
        text = p.read_text(encoding="utf-8")
        if len(text.splitlines()) > 400:
            long_modules.append((str(p.relative_to(ROOT)), len(text.splitlines())))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long_functions.append((str(p.relative_to(ROOT)), node.name, node.end_lineno - node.lineno + 1))
    assert long_functions == [] and long_modules == []


def _broken(tmp_path, monkeypatch, name: str, edit) -> str:
    """The nap fixture as package ``experiments.<name>`` under ``tmp_path``, changed by ``edit``;
    returns what discovering it says."""
    import shutil

    import experiments

    pkg = tmp_path / name
    shutil.copytree(ROOT / "tests" / "fixtures" / "nap", pkg)
    for f in pkg.glob("*.py"):  # the copy is its own package
        f.write_text(
            f.read_text().replace("experiments.nap", f"experiments.{name}").replace('name="nap"', f'name="{name}"')
        )
    edit(pkg)
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, str(tmp_path)])
    with pytest.raises(registry.RegistryError) as err:
        registry.discover(tmp_path)
    return str(err.value)


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize(
    "name, edit, message",
    [
        ("nap_a", lambda p: (p / "report.yaml").unlink(), "nap_a: missing report.yaml (report.yaml: title, question"),
        (
            "nap_b",
            lambda p: _replace(p / "report.yaml", "    alt: >-", "    alt_text: >-"),
            "figure 'nap_speedup' needs a caption and an alt text",
        ),
        (
            "nap_c",
            lambda p: _replace(p / "analysis.py", '{"nap_speedup": nap_speedup}', '{"speedup": nap_speedup}'),
            "figures has ['speedup'] but",
        ),
        (
            "nap_d",
            lambda p: _replace(p / "analysis.py", "findings=findings", "finding=findings"),
            "analysis.py: Analysis(...) has no hook 'finding'",
        ),
        (
            "nap_e",
            lambda p: _replace(p / "measure.py", "    sleepers: int", "    threads: int"),
            "Params has no fields ['sleepers']",
        ),
        (
            "nap_f",
            lambda p: _replace(p / "__init__.py", 'name="nap_f"', 'name="nap"'),
            "EXPERIMENT.name is 'nap', not 'nap_f'",
        ),
        (
            "nap_g",
            lambda p: _replace(p / "__init__.py", 'keys=("sleepers",)', 'keys=("sleeper",)'),
            "group and baseline keys",
        ),
        (
            "nap_h",
            lambda p: _replace(p / "__init__.py", "from lab.declare", "import pandas\nfrom lab.declare"),
            "imports pandas",
        ),
        (
            "nap_i",
            lambda p: _replace(p / "measure.py", "import time\n", "import time\n\nimport torch\n"),
            "imports torch",
        ),
        (
            "nap_j",
            lambda p: _replace(p / "measure.py", "class Params(Declared):", "class Params:"),
            "needs a frozen dataclass Params(Declared)",
        ),
        (
            "nap_k",
            lambda p: _replace(p / "__init__.py", "order=90,", 'order=90,\n    host_files=("user_env.json",),'),
            "run(...) lacks the keyword arguments host_files",
        ),
        (
            "nap_l",
            lambda p: _replace(p / "analysis.py", "ANALYSIS = Analysis(", "HOOKS = Analysis("),
            "needs one ANALYSIS = Analysis(findings=...",
        ),
        (
            "nap_p",
            lambda p: _replace(p / "analysis.py", "findings=findings", 'findings="findings"'),
            "Analysis(..., findings=...): 'findings' is not a function of the module",
        ),
        (
            "nap_q",
            lambda p: _replace(
                p / "analysis.py",
                "ANALYSIS = Analysis(",
                "ANALYSIS = Analysis(findings=findings)\nANALYSIS = Analysis(",
            ),
            "(assigned 2 times)",
        ),
        (
            "nap_m",
            lambda p: _replace(p / "analysis.py", "def findings(", "def findings(:"),
            "analysis.py, line",
        ),
        (
            "nap_n",
            lambda p: _replace(p / "measure.py", "@dataclass(frozen=True)", "@dataclass"),
            "Params must be a frozen dataclass",
        ),
        (
            "nap_o",
            lambda p: _replace(p / "measure.py", ", rounds: Rounds | None = None) -> RunResult", ") -> RunResult"),
            "lacks the keyword arguments rounds (Experiment adaptive_rounds)",
        ),
    ],
)
def test_an_incomplete_package_is_refused_naming_the_file(tmp_path, monkeypatch, name, edit, message):
    said = _broken(tmp_path, monkeypatch, name, edit)
    assert message in said and str(tmp_path / name) in said


def test_every_switch_that_lets_a_test_change_the_system_is_in_the_readme_list():
    """The README's list of what the suite writes outside the checkout names every variable a
    test reads to allow a change of the system (``LAB_ALLOW_*``, ``LAB_REQUIRE_*``,
    ``LAB_CGROUP_PARENT``), and every path the SLURM script writes outside its directory."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### What the tests write outside the checkout")[1].split("\n## ")[0]
    used = set()
    for p in (ROOT / "tests").glob("*.py"):
        used |= set(re.findall(r"LAB_(?:ALLOW|REQUIRE)_[A-Z]+|LAB_CGROUP_PARENT", p.read_text(encoding="utf-8")))
    assert {"LAB_ALLOW_SLURM", "LAB_ALLOW_CGROUP", "LAB_CGROUP_PARENT"} <= used
    # the browser and the free-threaded build are read, never installed or built, by the tests
    assert [v for v in sorted(used) if v not in section and v not in {"LAB_REQUIRE_BROWSER", "LAB_REQUIRE_FT"}] == []
    script = (ROOT / "scripts" / "slurm-test-cluster.sh").read_text(encoding="utf-8")
    assert "/etc/slurm/slurm.conf" in script and "/etc/slurm/slurm.conf" in section
    assert "pkill" not in script and "killall" not in script  # stopped by the pids it started


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the first-party modules it imports (at any level, in functions too), plus the
    run-time imports through the registry: a module that calls ``.hooks()`` or ``.analysis()``
    reaches every package's ``analysis``, one that calls ``.measurement()`` every ``measure``,
    and the registry every package's declaration."""
    paths = [p for top in ("lab", "analysis", "report", "experiments") for p in (ROOT / top).rglob("*.py")]
    modules = {_module_name(p): p for p in paths if "__pycache__" not in p.parts}
    graph = {}
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8")
        found = set()
        for m in _imports(path):
            while m and m not in modules:
                m = m.rpartition(".")[0]
            if m and m != name and not name.startswith(m + "."):  # a module's own package: implicit
                found.add(m)
        if (".hooks()" in text or ".analysis()" in text) and name != "lab.registry":  # the registry: lazily
            found |= {f"experiments.{n}.analysis" for n in NAMES}
        if ".measurement()" in text:
            found |= {f"experiments.{n}.measure" for n in NAMES}
        if name == "lab.registry":
            found |= {f"experiments.{n}" for n in NAMES}
        graph[name] = found
    return graph


def test_the_import_graph_has_no_cycle_the_registry_included():
    """Issue 22: the core and the packages import in one direction. A cycle (the findings
    helpers calling back into a package that imports them) is listed with its modules."""
    graph = _import_graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []
    # the floors: lab imports neither analysis nor report, analysis no report
    assert not [
        m
        for m, deps in graph.items()
        if m.startswith("lab") and any(d.split(".")[0] in ("analysis", "report") for d in deps)
    ]
    assert not [
        m for m, deps in graph.items() if m.startswith("analysis") and any(d.startswith("report") for d in deps)
    ]


#: The session fixtures that run the whole pipeline (minutes each): a test that asks for one is
#: an end-to-end test, and ``python -m pytest -m "not slow"`` (the README's fast tests) must not
#: start it.
END_TO_END_FIXTURES = {"quick_run", "side_runs", "interpreters_run"}


def test_every_test_of_an_end_to_end_run_is_marked_slow():
    unmarked = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            runs = {a.arg for a in node.args.args} & END_TO_END_FIXTURES
            if runs and not any("slow" in ast.unparse(d) for d in node.decorator_list):
                unmarked.append(f"{path.name}::{node.name} ({', '.join(sorted(runs))})")
    assert not unmarked, f"mark these @pytest.mark.slow: {unmarked}"
